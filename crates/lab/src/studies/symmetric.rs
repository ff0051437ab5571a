//! Raw symmetric cipher cost per packet (`002_…` a, the cipher half): AES-128/256 in CTR,
//! CBC and GCM, ChaCha20-Poly1305, 3DES and RC4, at the lab's SRTP packet sizes, in
//! aws-lc-rs, OpenSSL and RustCrypto, side by side.
//!
//! One operation encrypts one packet of `size` bytes in place with a fresh IV or nonce (a
//! counter), the key schedule set up once beforehand, as a media relay keeps one key per
//! stream. CBC pads with PKCS#7 (the padding is part of the cost); the AEADs compute their
//! tag over the packet with no associated data; RC4 has no IV and runs one keystream across
//! packets, as TLS used it. Nothing is loaded to enable what a library leaves out: a cipher
//! a library does not offer in this build is shown as "not offered" with the reason.

use std::hint::black_box;

use aes::cipher::block_padding::Pkcs7;
use aes::cipher::{BlockCipherEncrypt, BlockModeEncrypt, InnerIvInit, KeyInit, StreamCipher};
use aes::{Aes128Enc, Aes256Enc};
use aes_gcm::{AeadInOut, Aes128Gcm, Aes256Gcm};
use aws_lc_rs::aead::{
    Aad, LessSafeKey, Nonce, UnboundKey, AES_128_GCM, AES_256_GCM, CHACHA20_POLY1305,
};
use aws_lc_rs::cipher::{
    EncryptingKey, EncryptionContext, PaddedBlockEncryptingKey, UnboundCipherKey, AES_128, AES_256,
};
use aws_lc_rs::iv::FixedLength;
use chacha20poly1305::ChaCha20Poly1305;
use des::TdesEde3;
use openssl::cipher::{Cipher, CipherRef};
use openssl::cipher_ctx::CipherCtx;

use crate::frame::{Cell, Plot, PlotKind, Series, Table};
use crate::Ctx;

/// The ciphers measured: (cipher, mode).
pub const CIPHERS: [(&str, &str); 9] = [
    ("AES-128", "CTR"),
    ("AES-128", "CBC"),
    ("AES-128", "GCM"),
    ("AES-256", "CTR"),
    ("AES-256", "CBC"),
    ("AES-256", "GCM"),
    ("ChaCha20-Poly1305", "AEAD"),
    ("3DES (EDE3)", "CBC"),
    ("RC4-128", "stream"),
];

/// The libraries measured.
pub const LIBRARIES: [&str; 3] = ["aws-lc-rs", "OpenSSL", "RustCrypto"];

const KEY: [u8; 32] = [0x5a; 32];

/// Encrypts one packet in place (`buf[..len]`; `buf` has room for padding and a tag).
trait PacketCipher {
    fn encrypt(&mut self, buf: &mut Vec<u8>, len: usize, counter: u64) -> Result<(), String>;
}

fn iv16(counter: u64) -> [u8; 16] {
    let mut iv = [0u8; 16];
    iv[..8].copy_from_slice(&counter.to_be_bytes());
    iv
}

fn nonce12(counter: u64) -> [u8; 12] {
    let mut n = [0u8; 12];
    n[4..].copy_from_slice(&counter.to_be_bytes());
    n
}

fn key_len(cipher: &str) -> usize {
    match cipher {
        "AES-128" | "RC4-128" => 16,
        "3DES (EDE3)" => 24,
        _ => 32,
    }
}

// --- aws-lc-rs -------------------------------------------------------------------------

struct AwsCtr(EncryptingKey);
struct AwsCbc(PaddedBlockEncryptingKey);
struct AwsAead(LessSafeKey);

impl PacketCipher for AwsCtr {
    fn encrypt(&mut self, buf: &mut Vec<u8>, len: usize, counter: u64) -> Result<(), String> {
        self.0
            .less_safe_encrypt(
                &mut buf[..len],
                EncryptionContext::Iv128(FixedLength::from(iv16(counter))),
            )
            .map(|_| ())
            .map_err(|e| format!("aws-lc-rs CTR: {e}"))
    }
}

impl PacketCipher for AwsCbc {
    fn encrypt(&mut self, buf: &mut Vec<u8>, len: usize, counter: u64) -> Result<(), String> {
        buf.truncate(len);
        self.0
            .less_safe_encrypt(
                buf,
                EncryptionContext::Iv128(FixedLength::from(iv16(counter))),
            )
            .map(|_| ())
            .map_err(|e| format!("aws-lc-rs CBC: {e}"))
    }
}

impl PacketCipher for AwsAead {
    fn encrypt(&mut self, buf: &mut Vec<u8>, len: usize, counter: u64) -> Result<(), String> {
        let tag = self
            .0
            .seal_in_place_separate_tag(
                Nonce::assume_unique_for_key(nonce12(counter)),
                Aad::empty(),
                &mut buf[..len],
            )
            .map_err(|e| format!("aws-lc-rs AEAD: {e}"))?;
        let _ = black_box(tag);
        Ok(())
    }
}

fn aws(cipher: &str, mode: &str) -> Result<Box<dyn PacketCipher>, String> {
    let key = &KEY[..key_len(cipher)];
    let bad = |e: aws_lc_rs::error::Unspecified| format!("aws-lc-rs refused the key: {e}");
    let aes = || match cipher {
        "AES-128" => UnboundCipherKey::new(&AES_128, key).map_err(bad),
        _ => UnboundCipherKey::new(&AES_256, key).map_err(bad),
    };
    Ok(match (cipher, mode) {
        ("AES-128" | "AES-256", "CTR") => Box::new(AwsCtr(EncryptingKey::ctr(aes()?).map_err(bad)?)),
        ("AES-128" | "AES-256", "CBC") => Box::new(AwsCbc(PaddedBlockEncryptingKey::cbc_pkcs7(aes()?).map_err(bad)?)),
        ("AES-128", "GCM") => Box::new(AwsAead(LessSafeKey::new(UnboundKey::new(&AES_128_GCM, key).map_err(bad)?))),
        ("AES-256", "GCM") => Box::new(AwsAead(LessSafeKey::new(UnboundKey::new(&AES_256_GCM, key).map_err(bad)?))),
        ("ChaCha20-Poly1305", _) => Box::new(AwsAead(LessSafeKey::new(UnboundKey::new(&CHACHA20_POLY1305, key).map_err(bad)?))),
        ("3DES (EDE3)", _) => {
            return Err("aws-lc-rs offers 3DES only behind its deprecated `legacy-des` cargo feature, not enabled in this build".into())
        }
        ("RC4-128", _) => return Err("aws-lc-rs has no RC4".into()),
        _ => return Err(format!("{cipher} {mode} is not wired for aws-lc-rs")),
    })
}

// --- OpenSSL ---------------------------------------------------------------------------

struct Ossl {
    ctx: CipherCtx,
    iv_len: usize,
    aead: bool,
}

impl PacketCipher for Ossl {
    fn encrypt(&mut self, buf: &mut Vec<u8>, len: usize, counter: u64) -> Result<(), String> {
        let err = |e: openssl::error::ErrorStack| format!("OpenSSL: {e}");
        if self.iv_len > 0 {
            let iv = if self.iv_len == 12 {
                nonce12(counter).to_vec()
            } else {
                iv16(counter)[..self.iv_len].to_vec()
            };
            // Only the IV changes: the key schedule set up once is kept.
            self.ctx.encrypt_init(None, None, Some(&iv)).map_err(err)?;
        }
        // In place, with a spare block for CBC's padding.
        if buf.len() < len + 16 {
            buf.resize(len + 16, 0);
        }
        let n = self.ctx.cipher_update_inplace(buf, len).map_err(err)?;
        let n = n + self.ctx.cipher_final(&mut buf[n..]).map_err(err)?;
        buf.truncate(n);
        if self.aead {
            let mut tag = [0u8; 16];
            self.ctx.tag(&mut tag).map_err(err)?;
            black_box(tag);
        }
        Ok(())
    }
}

fn openssl_cipher(cipher: &str, mode: &str) -> Option<&'static CipherRef> {
    Some(match (cipher, mode) {
        ("AES-128", "CTR") => Cipher::aes_128_ctr(),
        ("AES-128", "CBC") => Cipher::aes_128_cbc(),
        ("AES-128", "GCM") => Cipher::aes_128_gcm(),
        ("AES-256", "CTR") => Cipher::aes_256_ctr(),
        ("AES-256", "CBC") => Cipher::aes_256_cbc(),
        ("AES-256", "GCM") => Cipher::aes_256_gcm(),
        ("ChaCha20-Poly1305", _) => Cipher::chacha20_poly1305(),
        ("3DES (EDE3)", _) => Cipher::des_ede3_cbc(),
        ("RC4-128", _) => Cipher::rc4(),
        _ => return None,
    })
}

fn ossl(cipher: &str, mode: &str) -> Result<Box<dyn PacketCipher>, String> {
    let c = openssl_cipher(cipher, mode)
        .ok_or_else(|| format!("{cipher} {mode} is not wired for OpenSSL"))?;
    // Errors other callers left in this thread's OpenSSL queue would otherwise be reported
    // as ours (libsrtp leaves some behind on GCM contexts).
    drop(openssl::error::ErrorStack::get());
    let mut ctx = CipherCtx::new().map_err(|e| format!("OpenSSL: {e}"))?;
    let init = ctx.encrypt_init(Some(c), Some(&KEY[..key_len(cipher)]), None);
    if let Err(e) = init {
        return Err(if cipher == "RC4-128" {
            format!(
                "{} refuses RC4 without the legacy provider, which the lab does not load ({e})",
                openssl::version::version()
            )
        } else {
            format!("OpenSSL refused {cipher} {mode}: {e}")
        });
    }
    let iv_len = match (cipher, mode) {
        ("RC4-128", _) => 0,
        ("3DES (EDE3)", _) => 8,
        (_, "GCM" | "AEAD") => 12,
        _ => 16,
    };
    if iv_len == 0 {
        // RC4 takes no IV: the keystream runs on across packets.
        ctx.encrypt_init(None, None, None)
            .map_err(|e| format!("OpenSSL: {e}"))?;
    }
    Ok(Box::new(Ossl {
        ctx,
        iv_len,
        aead: matches!(mode, "GCM" | "AEAD"),
    }))
}

// --- RustCrypto ------------------------------------------------------------------------

enum Rc {
    Ctr128(Aes128Enc),
    Ctr256(Aes256Enc),
    Cbc128(Aes128Enc),
    Cbc256(Aes256Enc),
    CbcTdes(TdesEde3),
    Gcm128(Box<Aes128Gcm>),
    Gcm256(Box<Aes256Gcm>),
    ChaPoly(Box<ChaCha20Poly1305>),
    Rc4(Box<rc4::Rc4>),
}

fn cbc_padded<C>(cipher: C, iv: &[u8], buf: &mut Vec<u8>, len: usize) -> Result<(), String>
where
    C: BlockCipherEncrypt,
    cbc::Encryptor<C>: InnerIvInit<Inner = C> + BlockModeEncrypt,
{
    buf.resize(len + 16, 0);
    let enc = cbc::Encryptor::<C>::inner_iv_slice_init(cipher, iv)
        .map_err(|e| format!("RustCrypto CBC IV: {e}"))?;
    let n = enc
        .encrypt_padded::<Pkcs7>(buf, len)
        .map_err(|e| format!("RustCrypto CBC: {e}"))?
        .len();
    buf.truncate(n);
    Ok(())
}

fn aead_detached<A: AeadInOut>(a: &A, buf: &mut [u8], counter: u64) -> Result<(), String> {
    let n = nonce12(counter);
    let nonce =
        aes_gcm::aead::Nonce::<A>::try_from(&n[..]).map_err(|_| "96-bit nonce".to_string())?;
    let tag = a
        .encrypt_inout_detached(&nonce, b"", buf.into())
        .map_err(|e| format!("RustCrypto AEAD: {e}"))?;
    black_box(tag);
    Ok(())
}

impl PacketCipher for Rc {
    fn encrypt(&mut self, buf: &mut Vec<u8>, len: usize, counter: u64) -> Result<(), String> {
        let iv = iv16(counter);
        match self {
            // The (encryption-only) key schedule is copied, not recomputed: the modes own
            // their cipher.
            Rc::Ctr128(k) => ctr::Ctr128BE::<Aes128Enc>::from_core(ctr::CtrCore::inner_iv_init(
                k.clone(),
                &iv.into(),
            ))
            .apply_keystream(&mut buf[..len]),
            Rc::Ctr256(k) => ctr::Ctr128BE::<Aes256Enc>::from_core(ctr::CtrCore::inner_iv_init(
                k.clone(),
                &iv.into(),
            ))
            .apply_keystream(&mut buf[..len]),
            Rc::Cbc128(k) => cbc_padded(k.clone(), &iv, buf, len)?,
            Rc::Cbc256(k) => cbc_padded(k.clone(), &iv, buf, len)?,
            Rc::CbcTdes(k) => cbc_padded(k.clone(), &iv[..8], buf, len)?,
            Rc::Gcm128(a) => aead_detached(a.as_ref(), &mut buf[..len], counter)?,
            Rc::Gcm256(a) => aead_detached(a.as_ref(), &mut buf[..len], counter)?,
            Rc::ChaPoly(a) => aead_detached(a.as_ref(), &mut buf[..len], counter)?,
            Rc::Rc4(r) => r.apply_keystream(&mut buf[..len]),
        }
        Ok(())
    }
}

fn rustcrypto(cipher: &str, mode: &str) -> Result<Box<dyn PacketCipher>, String> {
    let key = &KEY[..key_len(cipher)];
    let bad = |e: aes::cipher::InvalidLength| format!("RustCrypto refused the key: {e}");
    Ok(Box::new(match (cipher, mode) {
        ("AES-128", "CTR") => Rc::Ctr128(Aes128Enc::new_from_slice(key).map_err(bad)?),
        ("AES-256", "CTR") => Rc::Ctr256(Aes256Enc::new_from_slice(key).map_err(bad)?),
        ("AES-128", "CBC") => Rc::Cbc128(Aes128Enc::new_from_slice(key).map_err(bad)?),
        ("AES-256", "CBC") => Rc::Cbc256(Aes256Enc::new_from_slice(key).map_err(bad)?),
        ("AES-128", "GCM") => Rc::Gcm128(Box::new(Aes128Gcm::new_from_slice(key).map_err(bad)?)),
        ("AES-256", "GCM") => Rc::Gcm256(Box::new(Aes256Gcm::new_from_slice(key).map_err(bad)?)),
        ("ChaCha20-Poly1305", _) => Rc::ChaPoly(Box::new(
            ChaCha20Poly1305::new_from_slice(key).map_err(bad)?,
        )),
        ("3DES (EDE3)", _) => Rc::CbcTdes(TdesEde3::new_from_slice(key).map_err(bad)?),
        ("RC4-128", _) => Rc::Rc4(Box::new(rc4::Rc4::new_from_slice(key).map_err(bad)?)),
        _ => return Err(format!("{cipher} {mode} is not wired for RustCrypto")),
    }))
}

type Factory = fn(&str, &str) -> Result<Box<dyn PacketCipher>, String>;

fn factory(library: &str) -> Factory {
    match library {
        "aws-lc-rs" => aws,
        "OpenSSL" => ossl,
        _ => rustcrypto,
    }
}

/// Median ns to encrypt one `size`-byte packet, or why it cannot be measured.
fn measure(
    ctx: &Ctx,
    library: &str,
    cipher: &str,
    mode: &str,
    size: usize,
) -> Result<crate::Timing, String> {
    let mut c = factory(library)(cipher, mode)?;
    let mut buf: Vec<u8> = (0..size + 64).map(|i| i as u8).collect();
    // A dry run proves the cipher works before it is timed.
    c.encrypt(&mut buf, size, 0)?;
    let mut counter = 1u64;
    Ok(ctx.bench.time(|| {
        buf.resize(size + 64, 0);
        c.encrypt(&mut buf, size, counter)
            .expect("worked in the dry run");
        counter += 1;
        black_box(&buf);
    }))
}

/// Encrypt cost per packet at the lab's SRTP sizes ([`super::srtp::SIZES`]) for every
/// cipher of [`CIPHERS`] in every library of [`LIBRARIES`]: columns cipher, mode, packet
/// size, library, ns/packet, MB/s, spread and the ratio to OpenSSL.
pub fn cipher_table(ctx: &Ctx) -> Table {
    let mut table = Table::new(
        "symmetric_per_packet",
        "Symmetric encryption cost per packet, one core (ns per packet, median)",
    )
    .col("cipher", "cipher")
    .col("mode", "mode")
    .col_unit("size", "packet", "B")
    .col("library", "library")
    .col_unit("ns_per_packet", "encrypt", "ns")
    .col_unit("mb_per_s", "throughput", "MB/s")
    .col_unit("spread_pct", "spread", "%")
    .col_unit("vs_openssl", "vs OpenSSL", "×");
    for (cipher, mode) in CIPHERS {
        ctx.step(format!("{cipher} {mode}"));
        for (_, size) in super::srtp::SIZES {
            let results: Vec<(&str, Result<crate::Timing, String>)> = LIBRARIES
                .iter()
                .map(|&lib| (lib, measure(ctx, lib, cipher, mode, size)))
                .collect();
            let openssl_ns = results
                .iter()
                .find(|(l, _)| *l == "OpenSSL")
                .and_then(|(_, r)| r.as_ref().ok())
                .map(|t| t.ns);
            for (lib, r) in results {
                let mut row: Vec<(&str, Cell)> = vec![
                    ("cipher", Cell::text(cipher)),
                    ("mode", Cell::text(mode)),
                    ("size", Cell::num(size as f64)),
                    ("library", Cell::text(lib)),
                ];
                match r {
                    Ok(t) => {
                        row.push(("ns_per_packet", Cell::num(t.ns)));
                        // bytes per ns = GB/s; ×1000 for MB/s.
                        row.push(("mb_per_s", Cell::num(size as f64 / t.ns * 1e3)));
                        row.push(("spread_pct", Cell::num(t.spread_pct)));
                        if let Some(o) = openssl_ns {
                            row.push(("vs_openssl", Cell::num(t.ns / o)));
                        }
                    }
                    Err(why) => {
                        row.push(("ns_per_packet", Cell::not_offered(why.clone())));
                        row.push(("mb_per_s", Cell::not_offered(why)));
                    }
                }
                table.push(row);
            }
        }
    }
    table
}

/// Bars of [`cipher_table`] at one packet size: one group per cipher and mode, one bar per
/// library (ns per packet; ciphers a library lacks are left out of its series).
pub fn cipher_plot(table: &Table, size: usize) -> Plot {
    let categories: Vec<String> = CIPHERS.iter().map(|(c, m)| format!("{c} {m}")).collect();
    let series = LIBRARIES
        .iter()
        .map(|&lib| Series {
            name: lib.into(),
            points: CIPHERS
                .iter()
                .enumerate()
                .filter_map(|(i, (c, m))| {
                    table
                        .rows_where("library", lib)
                        .find(|r| {
                            r.get("cipher") == Some(&Cell::text(*c))
                                && r.get("mode") == Some(&Cell::text(*m))
                                && r.get("size").and_then(Cell::as_f64) == Some(size as f64)
                        })
                        .and_then(|r| r.get("ns_per_packet")?.as_f64())
                        .map(|ns| (i as f64, ns))
                })
                .collect(),
        })
        .collect();
    Plot {
        id: format!("symmetric_cost_{size}"),
        title: format!("Symmetric encryption of one {size}-byte packet"),
        kind: PlotKind::Bars,
        x_label: "cipher and mode".into(),
        y_label: "ns per packet".into(),
        log_y: true,
        categories,
        series,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every library's ciphertext for AES-128-CTR, AES-256-GCM and 3DES-CBC is the same (so
    /// they are timed doing the same work).
    #[test]
    fn libraries_encrypt_alike() {
        for (cipher, mode) in [
            ("AES-128", "CTR"),
            ("AES-256", "GCM"),
            ("AES-128", "CBC"),
            ("ChaCha20-Poly1305", "AEAD"),
            ("3DES (EDE3)", "CBC"),
        ] {
            let mut outs = Vec::new();
            for lib in LIBRARIES {
                let Ok(mut c) = factory(lib)(cipher, mode) else {
                    continue;
                };
                let mut buf: Vec<u8> = (0..172 + 64).map(|i| i as u8).collect();
                drop(openssl::error::ErrorStack::get());
                c.encrypt(&mut buf, 172, 7).unwrap();
                c.encrypt(&mut buf, 172, 8).unwrap();
                c.encrypt(&mut buf, 172, 7).unwrap();
                // Used as OpenSSL means it to be: nothing left in its error queue.
                let left = openssl::error::ErrorStack::get();
                assert!(left.errors().is_empty(), "{lib} {cipher} {mode}: {left}");
                let n = if mode == "CBC" {
                    buf.len().min(172)
                } else {
                    172
                };
                outs.push((lib, buf[..n].to_vec()));
            }
            assert!(outs.len() >= 2, "{cipher} {mode}");
            for w in outs.windows(2) {
                assert_eq!(w[0].1, w[1].1, "{cipher} {mode}: {} vs {}", w[0].0, w[1].0);
            }
        }
    }

    #[test]
    fn table_has_every_cipher_size_and_library() {
        let opts = crate::Options {
            quick: true,
            no_progress: true,
            ..Default::default()
        };
        let ctx = crate::Ctx::new(&opts, "srtp");
        let t = cipher_table(&ctx);
        eprintln!("{}", t.render_text());
        assert_eq!(
            t.rows.len(),
            CIPHERS.len() * super::super::srtp::SIZES.len() * LIBRARIES.len()
        );
        for r in &t.rows {
            let lib = match r.get("library") {
                Some(Cell::Text(l)) => l.as_str(),
                other => panic!("{other:?}"),
            };
            let cipher = match r.get("cipher") {
                Some(Cell::Text(c)) => c.as_str(),
                other => panic!("{other:?}"),
            };
            match r.get("ns_per_packet") {
                Some(Cell::Num(ns)) => {
                    assert!(ns.is_finite() && *ns > 0.0);
                    let mb = r.get("mb_per_s").and_then(Cell::as_f64).unwrap();
                    assert!(mb.is_finite() && mb > 0.0);
                }
                Some(Cell::NotOffered { not_offered }) => {
                    // Only the legacy ciphers may be missing, and never in RustCrypto.
                    assert!(
                        cipher == "RC4-128" || cipher == "3DES (EDE3)",
                        "{cipher} {lib}: {not_offered}"
                    );
                    assert_ne!(lib, "RustCrypto");
                    assert!(!not_offered.is_empty());
                }
                other => panic!("{other:?}"),
            }
        }
        let plot = cipher_plot(&t, 172);
        assert_eq!(plot.series.len(), 3);
        assert_eq!(
            plot.series
                .iter()
                .find(|s| s.name == "RustCrypto")
                .unwrap()
                .points
                .len(),
            CIPHERS.len()
        );
    }
}
