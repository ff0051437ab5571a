//! `lab biterror` (`002_…` b): what one flipped bit in transit does, per cipher and mode, to
//! raw and to compressed voice, and that SRTP's authentication drops the packet instead.
//!
//! Ten seconds of a deterministic voice-like signal (8 kHz, 16-bit) is kept three ways: raw
//! PCM, G.711 μ-law and narrowband Opus. Each stream is encrypted whole, as the seed
//! encrypted its files, with every cipher and mode; the second bit (mask `0x02`) of the
//! 10,000th byte (offset 9,999) of the ciphertext is flipped; the result is decrypted and
//! compared with the plaintext (bytes changed), then decoded and compared with the decoded
//! clean stream (samples changed). Every case runs through RustCrypto and again through
//! OpenSSL, which must agree byte for byte. Authenticated modes refuse to decrypt.
//!
//! For SRTP the streams are packetized into 20 ms RTP packets and protected with every
//! profile; the same bit of the same stream byte is flipped inside the packet that carries
//! it, and the receiver rejects that packet (`AuthFailed`). What the packet would have
//! decrypted to without the tag check is shown too: SRTP's ciphers (AES-CM, AES-GCM) are
//! counter-mode keystreams, so re-applying the keystream of that packet index (a second
//! sender with the same key protecting the tampered ciphertext) decrypts it untagged.

use aes::cipher::block_padding::Pkcs7;
use aes::cipher::{BlockModeDecrypt, BlockModeEncrypt, KeyInit, KeyIvInit, StreamCipher};
use aes::{Aes128, Aes256};
use aes_gcm::{AeadInOut, Aes128Gcm, Aes256Gcm};
use chacha20poly1305::ChaCha20Poly1305;
use des::TdesEde3;
use openssl::symm::Cipher as OsslCipher;
use secrelay_media::g711::{ulaw_decode, Pcmu};
use secrelay_media::opus::Opus;
use secrelay_media::{le_bytes_to_pcm, pcm_to_le_bytes, Codec};
use secrelay_srtp::{Context, Error as SrtpError, MasterKey, Policy, Profile};

use crate::frame::{Cell, Plot, PlotKind, Series, StudyReport, Table};
use crate::{Ctx, Study};

/// Offset of the byte whose bit is flipped: the 10,000th byte of the stream, as in the seed.
pub const FLIP_OFFSET: usize = 9_999;
/// The bit flipped: the second bit (mask `0x02`), as in the seed.
pub const FLIP_MASK: u8 = 0x02;
/// PCM rate of the voice signal, Hz.
pub const RATE: u32 = 8000;
/// Samples per 20 ms frame (and per RTP packet).
pub const FRAME: usize = 160;
/// Opus bitrate: constant, so every 20 ms frame is 40 bytes and the stream needs no framing.
pub const OPUS_BITRATE: i32 = 16_000;

const KEY32: [u8; 32] = [
    0x60, 0x3d, 0xeb, 0x10, 0x15, 0xca, 0x71, 0xbe, 0x2b, 0x73, 0xae, 0xf0, 0x85, 0x7d, 0x77, 0x81,
    0x1f, 0x35, 0x2c, 0x07, 0x3b, 0x61, 0x08, 0xd7, 0x2d, 0x98, 0x10, 0xa3, 0x09, 0x14, 0xdf, 0xf4,
];
const IV16: [u8; 16] = [
    0xf0, 0xf1, 0xf2, 0xf3, 0xf4, 0xf5, 0xf6, 0xf7, 0xf8, 0xf9, 0xfa, 0xfb, 0xfc, 0xfd, 0xfe, 0xff,
];
const NONCE12: [u8; 12] = [
    0xca, 0xfe, 0xba, 0xbe, 0xfa, 0xce, 0xdb, 0xad, 0xde, 0xca, 0xf8, 0x88,
];
const SSRC: u32 = 0x0B17_E770;

// ---------------------------------------------------------------------------------------
// The voice signal and its three encodings.

/// A deterministic voice-like signal: a glottal pulse train (pitch gliding around 100-160
/// Hz) shaped by three formants that move from vowel to vowel, in syllables of about 200 ms
/// with short pauses, plus a little seeded noise. 8 kHz, 16-bit, peak about -8 dBFS.
pub fn voice(seconds: f64) -> Vec<i16> {
    // (F1, F2, F3) of five vowels, Hz.
    const VOWELS: [[f64; 3]; 5] = [
        [730.0, 1090.0, 2440.0],
        [270.0, 2290.0, 3010.0],
        [530.0, 1840.0, 2480.0],
        [570.0, 840.0, 2410.0],
        [300.0, 870.0, 2240.0],
    ];
    const BANDWIDTH: [f64; 3] = [90.0, 110.0, 170.0];
    let n = (seconds * RATE as f64) as usize;
    let mut out = Vec::with_capacity(n);
    let mut phase = 0.0f64;
    let mut noise_state = 0x2545_F491_4F6C_DD1Du64;
    let mut raw = Vec::with_capacity(n);
    for i in 0..n {
        let t = i as f64 / RATE as f64;
        // Syllables: 230 ms each, the last 50 ms of each a pause; a breath every 2.3 s.
        let syl = (t / 0.23) as usize;
        let within = t / 0.23 - syl as f64;
        let voiced = within < 0.78 && syl % 10 != 9;
        let env = if voiced {
            (std::f64::consts::PI * within / 0.78).sin().powf(0.6)
        } else {
            0.0
        };
        let f0 = 130.0
            + 25.0 * (2.0 * std::f64::consts::PI * 0.7 * t).sin()
            + 8.0 * ((syl % 3) as f64 - 1.0);
        phase += f0 / RATE as f64;
        let formants = VOWELS[syl % VOWELS.len()];
        let mut s = 0.0;
        let mut k = 1.0;
        while k * f0 < 3800.0 {
            let h = k * f0;
            let gain: f64 = formants
                .iter()
                .zip(BANDWIDTH)
                .map(|(&f, bw)| 1.0 / (1.0 + ((h - f) / bw).powi(2)))
                .sum();
            // Glottal spectrum falls about 12 dB per octave.
            s += gain / k * (2.0 * std::f64::consts::PI * k * phase).sin();
            k += 1.0;
        }
        // xorshift64: small noise everywhere (breath, room).
        noise_state ^= noise_state << 13;
        noise_state ^= noise_state >> 7;
        noise_state ^= noise_state << 17;
        let noise = (noise_state >> 11) as f64 / (1u64 << 53) as f64 - 0.5;
        raw.push(env * s + 0.004 * noise);
    }
    let peak = raw.iter().fold(0.0f64, |m, v| m.max(v.abs())).max(1e-9);
    out.extend(raw.iter().map(|v| (v / peak * 13_000.0).round() as i16));
    out
}

/// A stream kind: how the voice is stored, packetized and decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// 16-bit little-endian PCM (320 bytes per 20 ms).
    Raw,
    /// G.711 μ-law (160 bytes per 20 ms).
    Ulaw,
    /// Narrowband Opus at a constant 16 kbit/s (40 bytes per 20 ms).
    Opus,
}

impl Stream {
    /// Every stream, in column order.
    pub const ALL: [Stream; 3] = [Stream::Raw, Stream::Ulaw, Stream::Opus];

    /// Column key prefix.
    pub fn key(self) -> &'static str {
        match self {
            Stream::Raw => "raw",
            Stream::Ulaw => "ulaw",
            Stream::Opus => "opus",
        }
    }

    /// Human name.
    pub fn label(self) -> &'static str {
        match self {
            Stream::Raw => "raw PCM",
            Stream::Ulaw => "G.711 μ-law",
            Stream::Opus => "Opus 16 kbit/s",
        }
    }

    /// Bytes per 20 ms frame (one RTP payload).
    pub fn frame_bytes(self) -> usize {
        match self {
            Stream::Raw => 2 * FRAME,
            Stream::Ulaw => FRAME,
            Stream::Opus => OPUS_BITRATE as usize / 8 / 50,
        }
    }

    fn payload_type(self) -> u8 {
        match self {
            Stream::Raw => 96,
            Stream::Ulaw => 0,
            Stream::Opus => Opus::DEFAULT_PAYLOAD_TYPE,
        }
    }

    /// RTP timestamp step per packet.
    fn ts_step(self) -> u32 {
        match self {
            Stream::Opus => 960,
            _ => FRAME as u32,
        }
    }

    /// Encodes the voice.
    pub fn encode(self, pcm: &[i16]) -> anyhow::Result<Vec<u8>> {
        Ok(match self {
            Stream::Raw => pcm_to_le_bytes(pcm),
            Stream::Ulaw => {
                let mut out = Vec::with_capacity(pcm.len());
                for f in pcm.chunks(FRAME) {
                    Pcmu.from_pcm(f, &mut out)?;
                }
                out
            }
            Stream::Opus => {
                let mut enc = Opus::new(RATE, OPUS_BITRATE)?;
                enc.set_cbr(true)?;
                let mut out = Vec::with_capacity(pcm.len() / 4);
                for f in pcm.chunks_exact(FRAME) {
                    let n = enc.from_pcm(f, &mut out)?;
                    anyhow::ensure!(
                        n == self.frame_bytes(),
                        "Opus CBR frame of {n} bytes, expected {}",
                        self.frame_bytes()
                    );
                }
                out
            }
        })
    }

    /// Decodes a stream of whole frames; `lost` frames (by index) are concealed as a
    /// receiver would (silence for PCM and G.711, libopus's concealment for Opus). An Opus
    /// frame that does not decode to exactly 20 ms is concealed too.
    pub fn decode(self, bytes: &[u8], lost: Option<usize>) -> anyhow::Result<Vec<i16>> {
        let fb = self.frame_bytes();
        let mut pcm = Vec::with_capacity(bytes.len() / fb * FRAME);
        let mut opus = match self {
            Stream::Opus => Some(Opus::new(RATE, OPUS_BITRATE)?),
            _ => None,
        };
        let mut frame = Vec::with_capacity(6 * FRAME);
        for (i, f) in bytes.chunks(fb).enumerate() {
            let is_lost = lost == Some(i);
            match (self, opus.as_mut()) {
                (Stream::Opus, Some(o)) => {
                    // The receiver expects 20 ms per packet (its ptime): a packet that does
                    // not decode to exactly that (a garbled TOC byte can claim 60 ms) is
                    // concealed like a lost one, so the timeline stays aligned.
                    frame.clear();
                    if is_lost || o.to_pcm(f, &mut frame).is_err() || frame.len() != FRAME {
                        frame.clear();
                        o.conceal(FRAME, &mut frame)?;
                    }
                    pcm.extend_from_slice(&frame);
                }
                (Stream::Raw, _) if is_lost => pcm.resize(pcm.len() + f.len() / 2, 0),
                (Stream::Raw, _) => pcm.extend(le_bytes_to_pcm(f)),
                (_, _) if is_lost => pcm.resize(pcm.len() + f.len(), ulaw_decode(0xFF)),
                (_, _) => pcm.extend(f.iter().map(|&c| ulaw_decode(c))),
            }
        }
        Ok(pcm)
    }
}

/// Bytes that differ (a length difference counts as changed bytes).
pub fn bytes_changed(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).filter(|(x, y)| x != y).count() + a.len().abs_diff(b.len())
}

/// Decoded samples that differ, and the span from the first to the last, in samples.
pub fn samples_changed(a: &[i16], b: &[i16]) -> (usize, usize) {
    let diff: Vec<usize> = a
        .iter()
        .zip(b)
        .enumerate()
        .filter(|(_, (x, y))| x != y)
        .map(|(i, _)| i)
        .collect();
    let extra = a.len().abs_diff(b.len());
    let span = match (diff.first(), diff.last()) {
        (Some(f), Some(l)) => l - f + 1,
        _ => 0,
    };
    (diff.len() + extra, span)
}

// ---------------------------------------------------------------------------------------
// Ciphers: one stream encrypted whole, through RustCrypto and through OpenSSL.

/// A cipher and mode of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Case {
    /// Cipher name, e.g. `AES-128`.
    pub cipher: &'static str,
    /// Mode name, e.g. `CBC`.
    pub mode: &'static str,
    /// Whether decryption checks a tag (and so refuses a flipped bit).
    pub authenticated: bool,
}

/// Every file-level case, in table order.
pub fn cases() -> Vec<Case> {
    let mut v = Vec::new();
    for cipher in ["AES-128", "AES-256"] {
        for mode in ["ECB", "CBC", "CFB-128", "CFB-8", "OFB", "CTR"] {
            v.push(Case {
                cipher,
                mode,
                authenticated: false,
            });
        }
        v.push(Case {
            cipher,
            mode: "GCM",
            authenticated: true,
        });
    }
    for mode in ["ECB", "CBC", "CFB-64", "OFB"] {
        v.push(Case {
            cipher: "3DES (EDE3)",
            mode,
            authenticated: false,
        });
    }
    v.push(Case {
        cipher: "RC4-128",
        mode: "stream",
        authenticated: false,
    });
    v.push(Case {
        cipher: "ChaCha20",
        mode: "stream",
        authenticated: false,
    });
    v.push(Case {
        cipher: "ChaCha20-Poly1305",
        mode: "AEAD",
        authenticated: true,
    });
    v
}

/// Why a decryption gave no plaintext.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The tag did not verify: the whole message is rejected.
    Rejected(String),
    /// The library does not offer this cipher or mode.
    NotOffered(String),
}

fn key_for(case: &Case) -> &'static [u8] {
    match case.cipher {
        "AES-128" | "RC4-128" => &KEY32[..16],
        "3DES (EDE3)" => &KEY32[..24],
        _ => &KEY32[..],
    }
}

fn iv_for(case: &Case) -> &'static [u8] {
    if case.cipher.starts_with("3DES") {
        &IV16[..8]
    } else {
        &IV16[..]
    }
}

macro_rules! block_modes {
    ($c:ty, $mode:expr, $key:expr, $iv:expr, $data:expr, $enc:expr) => {{
        let (key, iv, data, enc): (&[u8], &[u8], &[u8], bool) = ($key, $iv, $data, $enc);
        const LENGTHS: &str = "key and IV lengths are fixed per cipher";
        match $mode {
            "ECB" if enc => Some(Ok(ecb::Encryptor::<$c>::new_from_slice(key)
                .expect(LENGTHS)
                .encrypt_padded_vec::<Pkcs7>(data))),
            "ECB" => Some(
                ecb::Decryptor::<$c>::new_from_slice(key)
                    .expect(LENGTHS)
                    .decrypt_padded_vec::<Pkcs7>(data)
                    .map_err(|e| Refusal::Rejected(format!("bad padding: {e}"))),
            ),
            "CBC" if enc => Some(Ok(cbc::Encryptor::<$c>::new_from_slices(key, iv)
                .expect(LENGTHS)
                .encrypt_padded_vec::<Pkcs7>(data))),
            "CBC" => Some(
                cbc::Decryptor::<$c>::new_from_slices(key, iv)
                    .expect(LENGTHS)
                    .decrypt_padded_vec::<Pkcs7>(data)
                    .map_err(|e| Refusal::Rejected(format!("bad padding: {e}"))),
            ),
            "CFB-128" | "CFB-64" => {
                let mut buf = data.to_vec();
                if enc {
                    cfb_mode::Encryptor::<$c>::new_from_slices(key, iv)
                        .expect(LENGTHS)
                        .encrypt(&mut buf);
                } else {
                    cfb_mode::Decryptor::<$c>::new_from_slices(key, iv)
                        .expect(LENGTHS)
                        .decrypt(&mut buf);
                }
                Some(Ok(buf))
            }
            "CFB-8" => {
                let mut buf = data.to_vec();
                if enc {
                    cfb8::Encryptor::<$c>::new_from_slices(key, iv)
                        .expect(LENGTHS)
                        .encrypt(&mut buf);
                } else {
                    cfb8::Decryptor::<$c>::new_from_slices(key, iv)
                        .expect(LENGTHS)
                        .decrypt(&mut buf);
                }
                Some(Ok(buf))
            }
            "OFB" => {
                let mut buf = data.to_vec();
                ofb::Ofb::<$c>::new_from_slices(key, iv)
                    .expect(LENGTHS)
                    .apply_keystream(&mut buf);
                Some(Ok(buf))
            }
            _ => None,
        }
    }};
}

fn aead_rust<A: KeyInit + AeadInOut>(
    key: &[u8],
    data: &[u8],
    enc: bool,
) -> Result<Vec<u8>, Refusal> {
    let a = A::new_from_slice(key).expect("key lengths are fixed per cipher");
    let nonce =
        aes_gcm::aead::Nonce::<A>::try_from(&NONCE12[..]).expect("both AEADs take 96-bit nonces");
    let mut buf = data.to_vec();
    if enc {
        let tag = a
            .encrypt_inout_detached(&nonce, b"", buf.as_mut_slice().into())
            .expect("message within the AEAD's limits");
        buf.extend_from_slice(&tag);
        Ok(buf)
    } else {
        let tag_len = 16;
        if buf.len() < tag_len {
            return Err(Refusal::Rejected("shorter than its tag".into()));
        }
        let tag =
            aes_gcm::aead::Tag::<A>::try_from(&buf[buf.len() - tag_len..]).expect("16-byte tag");
        buf.truncate(buf.len() - tag_len);
        a.decrypt_inout_detached(&nonce, b"", buf.as_mut_slice().into(), &tag)
            .map_err(|_| Refusal::Rejected("tag check failed".into()))?;
        Ok(buf)
    }
}

/// Encrypts (`enc`) or decrypts a whole stream with RustCrypto.
pub fn rustcrypto(case: &Case, data: &[u8], enc: bool) -> Result<Vec<u8>, Refusal> {
    let (key, iv) = (key_for(case), iv_for(case));
    let r = match (case.cipher, case.mode) {
        ("AES-128", "CTR") | ("AES-256", "CTR") => {
            let mut buf = data.to_vec();
            if case.cipher == "AES-128" {
                ctr::Ctr128BE::<Aes128>::new_from_slices(key, iv)
                    .expect("fixed lengths")
                    .apply_keystream(&mut buf);
            } else {
                ctr::Ctr128BE::<Aes256>::new_from_slices(key, iv)
                    .expect("fixed lengths")
                    .apply_keystream(&mut buf);
            }
            Some(Ok(buf))
        }
        ("AES-128", "GCM") => Some(aead_rust::<Aes128Gcm>(key, data, enc)),
        ("AES-256", "GCM") => Some(aead_rust::<Aes256Gcm>(key, data, enc)),
        ("ChaCha20-Poly1305", _) => Some(aead_rust::<ChaCha20Poly1305>(key, data, enc)),
        ("ChaCha20", _) => {
            let mut buf = data.to_vec();
            chacha20::ChaCha20::new_from_slices(key, &NONCE12)
                .expect("fixed lengths")
                .apply_keystream(&mut buf);
            Some(Ok(buf))
        }
        ("RC4-128", _) => {
            let mut buf = data.to_vec();
            rc4::Rc4::new_from_slice(key)
                .expect("RC4 takes 1..=256-byte keys")
                .apply_keystream(&mut buf);
            Some(Ok(buf))
        }
        ("AES-128", m) => block_modes!(Aes128, m, key, iv, data, enc),
        ("AES-256", m) => block_modes!(Aes256, m, key, iv, data, enc),
        ("3DES (EDE3)", m) => block_modes!(TdesEde3, m, key, iv, data, enc),
        _ => None,
    };
    r.unwrap_or_else(|| {
        Err(Refusal::NotOffered(format!(
            "{} {} is not wired for RustCrypto",
            case.cipher, case.mode
        )))
    })
}

fn openssl_cipher(case: &Case) -> Option<OsslCipher> {
    Some(match (case.cipher, case.mode) {
        ("AES-128", "ECB") => OsslCipher::aes_128_ecb(),
        ("AES-128", "CBC") => OsslCipher::aes_128_cbc(),
        ("AES-128", "CFB-128") => OsslCipher::aes_128_cfb128(),
        ("AES-128", "CFB-8") => OsslCipher::aes_128_cfb8(),
        ("AES-128", "OFB") => OsslCipher::aes_128_ofb(),
        ("AES-128", "CTR") => OsslCipher::aes_128_ctr(),
        ("AES-128", "GCM") => OsslCipher::aes_128_gcm(),
        ("AES-256", "ECB") => OsslCipher::aes_256_ecb(),
        ("AES-256", "CBC") => OsslCipher::aes_256_cbc(),
        ("AES-256", "CFB-128") => OsslCipher::aes_256_cfb128(),
        ("AES-256", "CFB-8") => OsslCipher::aes_256_cfb8(),
        ("AES-256", "OFB") => OsslCipher::aes_256_ofb(),
        ("AES-256", "CTR") => OsslCipher::aes_256_ctr(),
        ("AES-256", "GCM") => OsslCipher::aes_256_gcm(),
        ("3DES (EDE3)", "ECB") => OsslCipher::des_ede3_ecb(),
        ("3DES (EDE3)", "CBC") => OsslCipher::des_ede3_cbc(),
        ("3DES (EDE3)", "CFB-64") => OsslCipher::des_ede3_cfb64(),
        ("3DES (EDE3)", "OFB") => OsslCipher::des_ede3_ofb(),
        ("RC4-128", _) => OsslCipher::rc4(),
        ("ChaCha20", _) => OsslCipher::chacha20(),
        ("ChaCha20-Poly1305", _) => OsslCipher::chacha20_poly1305(),
        _ => return None,
    })
}

fn openssl_error(e: openssl::error::ErrorStack) -> String {
    let s = e.to_string();
    if s.is_empty() {
        "OpenSSL gave no reason".into()
    } else {
        s
    }
}

/// Encrypts (`enc`) or decrypts a whole stream with OpenSSL (`openssl::symm`).
pub fn openssl(case: &Case, data: &[u8], enc: bool) -> Result<Vec<u8>, Refusal> {
    let Some(c) = openssl_cipher(case) else {
        return Err(Refusal::NotOffered(format!(
            "{} {} has no OpenSSL cipher here",
            case.cipher, case.mode
        )));
    };
    let key = key_for(case);
    // Drop errors other callers left in this thread's OpenSSL queue: they are not ours.
    drop(openssl::error::ErrorStack::get());
    if case.authenticated {
        if enc {
            let mut tag = [0u8; 16];
            let mut ct = openssl::symm::encrypt_aead(c, key, Some(&NONCE12), b"", data, &mut tag)
                .map_err(|e| Refusal::NotOffered(openssl_error(e)))?;
            ct.extend_from_slice(&tag);
            return Ok(ct);
        }
        if data.len() < 16 {
            return Err(Refusal::Rejected("shorter than its tag".into()));
        }
        let (ct, tag) = data.split_at(data.len() - 16);
        return openssl::symm::decrypt_aead(c, key, Some(&NONCE12), b"", ct, tag)
            .map_err(|_| Refusal::Rejected("tag check failed".into()));
    }
    // OpenSSL's ChaCha20 IV is the 32-bit little-endian block counter, then the nonce.
    let chacha_iv: Vec<u8> = [0u8; 4].iter().chain(NONCE12.iter()).copied().collect();
    let iv = match case.cipher {
        "ChaCha20" => Some(&chacha_iv[..]),
        "RC4-128" => None,
        _ if case.mode == "ECB" => None,
        _ => Some(iv_for(case)),
    };
    let r = if enc {
        openssl::symm::encrypt(c, key, iv, data)
    } else {
        openssl::symm::decrypt(c, key, iv, data)
    };
    r.map_err(|e| {
        if enc || case.cipher == "RC4-128" {
            Refusal::NotOffered(openssl_error(e))
        } else {
            Refusal::Rejected(format!("bad padding: {}", openssl_error(e)))
        }
    })
}

/// What flipping the bit did to one stream under one cipher and library.
#[derive(Debug, Clone, PartialEq)]
pub enum Damage {
    /// Decrypted: bytes changed in the stream, decoded samples changed and their span.
    Decrypted {
        /// Stream bytes that differ from the plaintext.
        bytes: usize,
        /// Bytes the mode's structure puts at risk (see [`predicted_region`]).
        predicted: usize,
        /// Bytes that differ outside that region (0 unless something is wrong).
        outside: usize,
        /// Decoded samples that differ from the decoded clean stream.
        samples: usize,
        /// Samples from the first to the last that differ.
        span: usize,
        /// The ciphertext (before the flip), to compare libraries.
        ciphertext_digest: u64,
    },
    /// The decryption refused the message.
    Refused(Refusal),
}

fn digest(b: &[u8]) -> u64 {
    // FNV-1a: only to compare two libraries' ciphertexts in a table cell.
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &x| {
        (h ^ x as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The stream offsets a flipped bit at [`FLIP_OFFSET`] can change under this mode: the
/// block holding it (ECB, CBC), the bit's own byte (every mode but ECB), the next block (CBC:
/// only the byte under the bit; CFB: all of it; CFB-8: the 16 bytes the shift register
/// holds). Each garbled byte equals the plaintext by chance with probability 1/256, so the
/// count of changed bytes may fall short of the region's size; it may never fall outside.
pub fn predicted_region(case: &Case) -> Vec<usize> {
    let b = if case.cipher.starts_with("3DES") {
        8
    } else {
        16
    };
    let start = FLIP_OFFSET - FLIP_OFFSET % b;
    let mut v: Vec<usize> = match case.mode {
        "ECB" => (start..start + b).collect(),
        "CBC" => (start..start + b).chain([FLIP_OFFSET + b]).collect(),
        "CFB-128" | "CFB-64" => std::iter::once(FLIP_OFFSET)
            .chain(start + b..start + 2 * b)
            .collect(),
        "CFB-8" => (FLIP_OFFSET..FLIP_OFFSET + 1 + b).collect(),
        _ => vec![FLIP_OFFSET],
    };
    v.sort_unstable();
    v.dedup();
    v
}

/// A library's whole-stream encryption (`true`) or decryption ([`rustcrypto`], [`openssl()`]).
pub type CipherFn = fn(&Case, &[u8], bool) -> Result<Vec<u8>, Refusal>;

/// Encrypts `plain`, flips the bit, decrypts, and counts the damage.
pub fn flip_and_count(
    lib: CipherFn,
    case: &Case,
    stream: Stream,
    plain: &[u8],
    clean_pcm: &[i16],
) -> anyhow::Result<Damage> {
    let mut ct = match lib(case, plain, true) {
        Ok(ct) => ct,
        Err(r) => return Ok(Damage::Refused(r)),
    };
    let ciphertext_digest = digest(&ct);
    anyhow::ensure!(
        ct.len() > FLIP_OFFSET,
        "{} {} ciphertext of {} bytes",
        case.cipher,
        case.mode,
        ct.len()
    );
    ct[FLIP_OFFSET] ^= FLIP_MASK;
    let pt = match lib(case, &ct, false) {
        Ok(pt) => pt,
        Err(r) => return Ok(Damage::Refused(r)),
    };
    let bytes = bytes_changed(plain, &pt);
    let region = predicted_region(case);
    let inside = region
        .iter()
        .filter(|&&i| plain.get(i) != pt.get(i))
        .count();
    let pcm = stream.decode(&pt[..plain.len().min(pt.len())], None)?;
    let (samples, span) = samples_changed(clean_pcm, &pcm);
    Ok(Damage::Decrypted {
        bytes,
        predicted: region.len(),
        outside: bytes - inside,
        samples,
        span,
        ciphertext_digest,
    })
}

// ---------------------------------------------------------------------------------------
// SRTP: packetize, protect, flip, unprotect.

/// What happened to one stream under one SRTP profile.
#[derive(Debug, Clone, PartialEq)]
pub struct SrtpOutcome {
    /// RTP packets sent.
    pub packets: usize,
    /// Packets the receiver rejected.
    pub rejected: usize,
    /// The error of the tampered packet (None if it was accepted).
    pub error: Option<SrtpError>,
    /// Whether every other packet came out as sent.
    pub others_intact: bool,
    /// Payload bytes changed had the tag not been checked.
    pub untagged_bytes: usize,
    /// Decoded samples changed had the tag not been checked.
    pub untagged_samples: usize,
    /// Decoded samples changed with the packet dropped and concealed.
    pub dropped_samples: usize,
}

fn rtp_packet(stream: Stream, seq: u16, payload: &[u8]) -> Vec<u8> {
    let mut p = Vec::with_capacity(12 + payload.len() + 32);
    p.push(0x80);
    p.push(stream.payload_type() & 0x7F);
    p.extend_from_slice(&seq.to_be_bytes());
    p.extend_from_slice(&(seq as u32).wrapping_mul(stream.ts_step()).to_be_bytes());
    p.extend_from_slice(&SSRC.to_be_bytes());
    p.extend_from_slice(payload);
    p
}

fn srtp_contexts(profile: Profile) -> anyhow::Result<(Context, Context, Context)> {
    let mk = MasterKey::new(
        profile,
        &KEY32[..profile.key_len()],
        &IV16[..profile.salt_len()],
    )
    .map_err(|e| anyhow::anyhow!("master key for {}: {e}", profile.sdp_name()))?;
    let make = |p: Policy| {
        Context::new(p).map_err(|e| anyhow::anyhow!("SRTP context for {}: {e}", profile.sdp_name()))
    };
    Ok((
        make(Policy::new(mk.clone()).any_outbound())?,
        make(Policy::new(mk.clone()).any_inbound())?,
        make(Policy::new(mk).any_outbound())?,
    ))
}

/// Sends `plain` as RTP over SRTP with `profile`, flips the bit in the packet carrying
/// stream byte [`FLIP_OFFSET`], and reports what the receiver did.
pub fn srtp_flip(
    profile: Profile,
    stream: Stream,
    plain: &[u8],
    clean_pcm: &[i16],
) -> anyhow::Result<SrtpOutcome> {
    let fb = stream.frame_bytes();
    let (mut tx, mut rx, mut rekey) = srtp_contexts(profile)?;
    let target = FLIP_OFFSET / fb;
    let at = 12 + FLIP_OFFSET % fb;
    let mut packets = 0;
    let mut rejected = 0;
    let mut error = None;
    let mut others_intact = true;
    let mut untagged_payload = None;
    for (i, payload) in plain.chunks(fb).enumerate() {
        packets += 1;
        let seq = u16::try_from(i).map_err(|_| anyhow::anyhow!("more than 65,536 packets"))?;
        let sent = rtp_packet(stream, seq, payload);
        let mut buf = sent.clone();
        buf.resize(sent.len() + profile.rtp_overhead() + 16, 0);
        let len = tx
            .protect_rtp(&mut buf, sent.len())
            .map_err(|e| anyhow::anyhow!("protect: {e}"))?;
        if i == target {
            buf[at] ^= FLIP_MASK;
            // Untagged decryption: the tampered ciphertext, tag stripped, run through the
            // same keystream (a fresh sender with the same key at the same index).
            let body = len - profile.rtp_tag_len();
            let mut again = buf[..body].to_vec();
            again.resize(body + profile.rtp_overhead() + 16, 0);
            rekey
                .protect_rtp(&mut again, body)
                .map_err(|e| anyhow::anyhow!("re-keystream: {e}"))?;
            untagged_payload = Some(again[12..12 + payload.len()].to_vec());
        }
        match rx.unprotect_rtp(&mut buf, len) {
            Ok(n) => {
                if buf[..n] != sent[..] {
                    others_intact = false;
                }
            }
            Err(e) => {
                rejected += 1;
                if i == target {
                    error = Some(e);
                } else {
                    others_intact = false;
                }
            }
        }
    }
    let untagged = untagged_payload
        .ok_or_else(|| anyhow::anyhow!("stream shorter than byte {FLIP_OFFSET}"))?;
    let original = &plain[target * fb..target * fb + untagged.len()];
    let untagged_bytes = bytes_changed(original, &untagged);
    let mut patched = plain.to_vec();
    patched[target * fb..target * fb + untagged.len()].copy_from_slice(&untagged);
    let (untagged_samples, _) = samples_changed(clean_pcm, &stream.decode(&patched, None)?);
    let (dropped_samples, _) = samples_changed(clean_pcm, &stream.decode(plain, Some(target))?);
    Ok(SrtpOutcome {
        packets,
        rejected,
        error,
        others_intact,
        untagged_bytes,
        untagged_samples,
        dropped_samples,
    })
}

// ---------------------------------------------------------------------------------------
// The study.

/// The `lab biterror` study.
pub struct BiterrorStudy;

/// The main table's columns: per cipher and mode, the damage in each stream and the verdict.
fn empty_main_table() -> Table {
    Table::new(
        "biterror",
        "Bit 0x02 of byte 10,000 flipped in the ciphertext: what decrypts (and decodes)",
    )
    .col("cipher", "cipher")
    .col("mode", "mode")
    .col_unit("predicted", "mode puts at risk", "B")
    .col_unit("raw_bytes", "raw: bytes changed", "B")
    .col_unit("raw_samples", "raw: samples changed", "samples")
    .col_unit("ulaw_bytes", "G.711: bytes changed", "B")
    .col_unit("ulaw_samples", "G.711: samples changed", "samples")
    .col_unit("opus_bytes", "Opus: bytes changed", "B")
    .col_unit("opus_samples", "Opus: samples changed", "samples")
    .col_unit("opus_span_ms", "Opus: audio affected", "ms")
    .col("openssl_agrees", "OpenSSL agrees")
    .col("verdict", "verdict")
}

/// The SRTP table's columns: per profile and stream, the packets the flip touched.
fn empty_srtp_table() -> Table {
    Table::new(
        "biterror_srtp",
        "SRTP: the same bit flipped inside the RTP packet that carries byte 10,000",
    )
    .col("profile", "profile")
    .col("stream", "stream")
    .col_unit("packets", "packets", "")
    .col_unit("rejected", "rejected", "")
    .col("error", "tampered packet")
    .col("others_intact", "others intact")
    .col_unit("untagged_bytes", "bytes changed without the tag check", "B")
    .col_unit(
        "untagged_samples",
        "samples changed without the tag check",
        "samples",
    )
    .col_unit(
        "dropped_samples",
        "samples changed, packet dropped",
        "samples",
    )
}

/// One encoded stream: what it is, its bytes, and its decoded clean audio.
type Encoded = (Stream, Vec<u8>, Vec<i16>);
/// A row of the main table.
type Row = Vec<(String, Cell)>;
/// A case's bytes changed in the three streams, for the plot.
type PlotPoint = (String, [f64; 3]);

/// A cipher and mode's row: the damage one flipped bit does to each stream (RustCrypto's
/// figures, OpenSSL's compared), the verdict; and its plot point when every stream decrypted.
fn cipher_row(case: &Case, streams: &[Encoded]) -> anyhow::Result<(Row, Option<PlotPoint>)> {
    let mut point = None;
    let mut rust = Vec::new();
    let mut ossl = Vec::new();
    for (s, bytes, clean) in streams {
        rust.push(flip_and_count(rustcrypto, case, *s, bytes, clean)?);
        ossl.push(flip_and_count(openssl, case, *s, bytes, clean)?);
    }
    let mut row: Vec<(String, Cell)> = vec![
        ("cipher".into(), Cell::text(case.cipher)),
        ("mode".into(), Cell::text(case.mode)),
    ];
    if !case.authenticated {
        row.push((
            "predicted".into(),
            Cell::num(predicted_region(case).len() as f64),
        ));
    }
    for (i, (s, _, _)) in streams.iter().enumerate() {
        damage_cells(&mut row, *s, &rust[i]);
    }
    row.push(("openssl_agrees".into(), agreement(&rust, &ossl)));
    row.push(("verdict".into(), Cell::text(verdict(case, &rust[1]))));
    if let [Damage::Decrypted { bytes: a, .. }, Damage::Decrypted { bytes: b, .. }, Damage::Decrypted { bytes: c, .. }] =
        &rust[..]
    {
        point = Some((
            format!("{} {}", case.cipher, case.mode),
            [*a as f64, *b as f64, *c as f64],
        ));
    }
    Ok((row, point))
}

/// An SRTP profile's rows: per stream, the packets the flip touched, rejected or not (in
/// `srtp_table`); and its row in the main table.
fn srtp_rows(
    profile: Profile,
    streams: &[Encoded],
    srtp_table: &mut Table,
) -> anyhow::Result<Vec<(String, Cell)>> {
    let mut verdicts = Vec::new();
    for (s, bytes, clean) in streams {
        let o = srtp_flip(profile, *s, bytes, clean)?;
        let err = match &o.error {
            Some(e) => format!("rejected ({e:?})"),
            None => "accepted".into(),
        };
        verdicts.push(err.clone());
        srtp_table.push([
            ("profile", Cell::text(profile.sdp_name())),
            ("stream", Cell::text(s.label())),
            ("packets", Cell::num(o.packets as f64)),
            ("rejected", Cell::num(o.rejected as f64)),
            ("error", Cell::text(err)),
            (
                "others_intact",
                Cell::text(if o.others_intact { "yes" } else { "NO" }),
            ),
            ("untagged_bytes", Cell::num(o.untagged_bytes as f64)),
            ("untagged_samples", Cell::num(o.untagged_samples as f64)),
            ("dropped_samples", Cell::num(o.dropped_samples as f64)),
        ]);
    }
    let mut row: Vec<(String, Cell)> = vec![
        (
            "cipher".into(),
            Cell::text(format!("SRTP {}", profile.sdp_name())),
        ),
        (
            "mode".into(),
            Cell::text(if profile.is_aead() {
                "AEAD (RTP packets)"
            } else {
                "HMAC-SHA1 (RTP packets)"
            }),
        ),
    ];
    let all_rejected = verdicts.iter().all(|v| v.starts_with("rejected"));
    for (i, (s, _, _)) in streams.iter().enumerate() {
        let cell = if verdicts[i].starts_with("rejected") {
            "rejected"
        } else {
            "accepted"
        };
        row.push((format!("{}_bytes", s.key()), Cell::text(cell)));
        row.push((format!("{}_samples", s.key()), Cell::text(cell)));
    }
    row.push((
        "verdict".into(),
        Cell::text(if all_rejected {
            format!("packet {}", verdicts[0])
        } else {
            format!("NOT rejected: {}", verdicts.join(", "))
        }),
    ));
    Ok(row)
}

fn damage_cells(row: &mut Vec<(String, Cell)>, stream: Stream, d: &Damage) {
    let k = stream.key();
    match d {
        Damage::Decrypted {
            bytes,
            samples,
            span,
            ..
        } => {
            row.push((format!("{k}_bytes"), Cell::num(*bytes as f64)));
            row.push((format!("{k}_samples"), Cell::num(*samples as f64)));
            if stream == Stream::Opus {
                row.push((
                    "opus_span_ms".into(),
                    Cell::num(*span as f64 * 1000.0 / RATE as f64),
                ));
            }
        }
        Damage::Refused(Refusal::Rejected(_)) => {
            row.push((format!("{k}_bytes"), Cell::text("rejected")));
            row.push((format!("{k}_samples"), Cell::text("rejected")));
        }
        Damage::Refused(Refusal::NotOffered(why)) => {
            row.push((format!("{k}_bytes"), Cell::not_offered(why.clone())));
            row.push((format!("{k}_samples"), Cell::not_offered(why.clone())));
        }
    }
}

fn verdict(case: &Case, d: &Damage) -> String {
    match d {
        Damage::Refused(Refusal::Rejected(why)) => format!("rejected: {why}"),
        Damage::Refused(Refusal::NotOffered(why)) => format!("not offered: {why}"),
        Damage::Decrypted {
            bytes,
            predicted,
            outside,
            ..
        } => {
            let shape = match case.mode {
                "ECB" => "the block",
                "CBC" => "the block + the bit in the next",
                "CFB-128" | "CFB-64" => "the byte + the next block",
                "CFB-8" => "the byte + the next 16",
                _ => "the byte only",
            };
            if *outside > 0 {
                format!("UNEXPECTED: {outside} bytes changed outside {shape}")
            } else if bytes == predicted {
                format!("decrypts; {shape} ({bytes} B)")
            } else {
                format!(
                    "decrypts; {shape} ({predicted} B at risk, {} garbled byte(s) equal the plaintext by chance)",
                    predicted - bytes
                )
            }
        }
    }
}

fn agreement(rust: &[Damage], ossl: &[Damage]) -> Cell {
    if let Some(Damage::Refused(Refusal::NotOffered(why))) = ossl.first() {
        return Cell::not_offered(format!("OpenSSL: {why}"));
    }
    let same = rust.iter().zip(ossl).all(|(a, b)| match (a, b) {
        (Damage::Refused(Refusal::Rejected(_)), Damage::Refused(Refusal::Rejected(_))) => true,
        _ => a == b,
    });
    Cell::text(if same { "yes" } else { "NO" })
}

// ---------------------------------------------------------------------------------------
// Conclusions, read from the tables.

/// What seed 002 printed for bytes changed per flipped bit: (cipher prefix, mode, bytes).
/// `"*"` is any mode; a cipher prefix matches the start of the row's cipher name. Compared
/// with this run's rows in [`conclusions`], never printed as a finding of its own.
const SEED_002_BYTES: [(&str, &str, usize); 8] = [
    ("AES-", "ECB", 16),
    ("AES-", "CBC", 17),
    ("AES-", "CFB-128", 17),
    ("AES-", "OFB", 1),
    ("AES-", "CTR", 1),
    ("RC4", "*", 1),
    ("ChaCha20", "stream", 1),
    ("3DES", "*", 9),
];

/// A row of the main table named by (cipher, mode).
type RowName = (String, String);

/// Rows grouped by the (fewest, most) bytes changed across the streams.
type DamageGroups = Vec<((usize, usize), Vec<RowName>)>;

/// The stream columns of the main table, by key prefix.
const STREAM_KEYS: [&str; 3] = ["raw", "ulaw", "opus"];

/// One cipher-and-mode row of the main table, as measured.
enum RowOutcome {
    /// Decrypted on every stream: bytes changed per stream (raw, G.711, Opus).
    Decrypted(Vec<usize>),
    /// Refused on every stream; the reason from the verdict.
    Refused(String),
    /// Anything else (not offered by the library, or refused on some streams only).
    Other,
}

fn text_of<'a>(row: &'a std::collections::BTreeMap<String, Cell>, key: &str) -> &'a str {
    match row.get(key) {
        Some(Cell::Text(t)) => t,
        _ => "",
    }
}

fn row_outcome(row: &std::collections::BTreeMap<String, Cell>) -> RowOutcome {
    let cells: Vec<Option<&Cell>> = STREAM_KEYS
        .iter()
        .map(|k| row.get(&format!("{k}_bytes")))
        .collect();
    let counts: Vec<usize> = cells
        .iter()
        .filter_map(|c| c.and_then(Cell::as_f64))
        .map(|v| v as usize)
        .collect();
    if counts.len() == STREAM_KEYS.len() {
        return RowOutcome::Decrypted(counts);
    }
    let refused = cells
        .iter()
        .all(|c| matches!(c, Some(Cell::Text(t)) if t == "rejected"));
    if refused {
        let v = text_of(row, "verdict");
        let why = v.strip_prefix("rejected: ").unwrap_or(v);
        return RowOutcome::Refused(why.to_string());
    }
    RowOutcome::Other
}

/// "AES-128/AES-256 OFB, 3DES (EDE3) OFB": (cipher, mode) pairs with the ciphers of one mode
/// joined, modes in first-seen order.
fn name_rows(rows: &[RowName]) -> String {
    let mut modes: Vec<(&str, Vec<&str>)> = Vec::new();
    for (cipher, mode) in rows {
        match modes.iter_mut().find(|(m, _)| *m == mode.as_str()) {
            Some((_, ciphers)) => ciphers.push(cipher),
            None => modes.push((mode, vec![cipher])),
        }
    }
    modes
        .iter()
        .map(|(m, c)| format!("{} {m}", c.join("/")))
        .collect::<Vec<_>>()
        .join(", ")
}

/// "1" or "16–17": the range of a row's counts.
fn count_label(lo: usize, hi: usize) -> String {
    if lo == hi {
        lo.to_string()
    } else {
        format!("{lo}–{hi}")
    }
}

/// The study's findings, computed from its two tables (`biterror` and `biterror_srtp`): the
/// cipher-and-mode rows grouped by the measured number of plaintext bytes one flipped
/// ciphertext bit changed, how those counts compare with what each mode puts at risk and with
/// seed 002's figures, which rows refused the stream and why, and what SRTP's receiver did.
/// Nothing here is a fixed sentence about a mode: change a row and the text follows.
pub fn conclusions(table: &Table, srtp: &Table) -> Vec<String> {
    let mut notes = Vec::new();
    // (min, max) bytes changed → rows.
    let mut groups: DamageGroups = Vec::new();
    let mut refused: Vec<(String, Vec<RowName>)> = Vec::new();
    let mut exact = 0;
    let mut short = Vec::new();
    let mut unexpected = Vec::new();
    let mut unpredicted = Vec::new();
    let mut seed_same = Vec::new();
    let mut seed_differs = Vec::new();
    let mut srtp_rows = Vec::new();
    for row in &table.rows {
        let cipher = text_of(row, "cipher").to_string();
        let mode = text_of(row, "mode").to_string();
        if cipher.starts_with("SRTP ") {
            srtp_rows.push(row);
            continue;
        }
        let name = (cipher.clone(), mode.clone());
        match row_outcome(row) {
            RowOutcome::Decrypted(counts) => {
                let lo = *counts.iter().min().expect("three streams");
                let hi = *counts.iter().max().expect("three streams");
                match groups.iter_mut().find(|(k, _)| *k == (lo, hi)) {
                    Some((_, v)) => v.push(name.clone()),
                    None => groups.push(((lo, hi), vec![name.clone()])),
                }
                match row
                    .get("predicted")
                    .and_then(Cell::as_f64)
                    .map(|p| p as usize)
                {
                    Some(p) if hi > p || text_of(row, "verdict").starts_with("UNEXPECTED") => {
                        unexpected.push(format!("{cipher} {mode} {} of {p}", count_label(lo, hi)));
                    }
                    Some(p) if lo == p => exact += 1,
                    Some(p) => short.push(format!("{cipher} {mode} {lo} of {p}")),
                    None => unpredicted.push(name.clone()),
                }
                let seed = SEED_002_BYTES
                    .iter()
                    .find(|(c, m, _)| cipher.starts_with(c) && (*m == "*" || *m == mode));
                if let Some(&(_, _, n)) = seed {
                    if (lo..=hi).contains(&n) {
                        seed_same.push(name);
                    } else {
                        seed_differs.push(format!(
                            "{cipher} {mode} {} here, {n} in the seed",
                            count_label(lo, hi)
                        ));
                    }
                }
            }
            RowOutcome::Refused(why) => match refused.iter_mut().find(|(w, _)| *w == why) {
                Some((_, v)) => v.push(name),
                None => refused.push((why, vec![name])),
            },
            RowOutcome::Other => {}
        }
    }
    groups.sort_by_key(|(k, _)| *k);

    if !groups.is_empty() {
        let parts: Vec<String> = groups
            .iter()
            .map(|((lo, hi), rows)| {
                let unit = if *hi == 1 { "byte" } else { "bytes" };
                format!("{} {unit}: {}", count_label(*lo, *hi), name_rows(rows))
            })
            .collect();
        notes.push(format!(
            "Plaintext bytes changed by one flipped ciphertext bit (measured; a range when the three streams differ): {}.",
            parts.join("; ")
        ));
        let mut s = format!(
            "Against each mode's structure: {exact} of {} decrypting rows changed exactly the bytes the mode puts at risk",
            groups.iter().map(|(_, r)| r.len()).sum::<usize>()
        );
        if !short.is_empty() {
            s.push_str(&format!(
                "; fewer on some stream (a garbled byte equal to the plaintext by chance): {}",
                short.join(", ")
            ));
        }
        if !unpredicted.is_empty() {
            s.push_str(&format!(
                "; an authenticated mode that decrypted (no region to compare with): {}",
                name_rows(&unpredicted)
            ));
        }
        if unexpected.is_empty() {
            s.push_str("; none changed a byte outside that region.");
        } else {
            s.push_str(&format!(
                "; UNEXPECTED, bytes changed outside the region: {}.",
                unexpected.join(", ")
            ));
        }
        notes.push(s);
        if !seed_same.is_empty() || !seed_differs.is_empty() {
            let mut s = String::from("Against seed 002's figures:");
            if !seed_same.is_empty() {
                s.push_str(&format!(" the same for {}", name_rows(&seed_same)));
            }
            if !seed_differs.is_empty() {
                if !seed_same.is_empty() {
                    s.push(';');
                }
                s.push_str(&format!(" different for {}", seed_differs.join(", ")));
            }
            s.push('.');
            notes.push(s);
        }
    }

    let (decrypted_rows, refused_rows): (usize, usize) = (
        groups.iter().map(|(_, r)| r.len()).sum(),
        refused.iter().map(|(_, r)| r.len()).sum(),
    );
    if refused.is_empty() {
        notes.push(format!(
            "No cipher and mode refused the tampered stream: all {decrypted_rows} measured rows decrypted it."
        ));
    } else {
        let parts: Vec<String> = refused
            .iter()
            .map(|(why, rows)| format!("{} ({why})", name_rows(rows)))
            .collect();
        notes.push(format!(
            "Refused the whole tampered stream, on every stream kind, so nothing of it decrypts: {}; {refused_rows} of {} rows.",
            parts.join("; "),
            refused_rows + decrypted_rows
        ));
    }

    if let Some(s) = srtp_conclusion(srtp, &srtp_rows, &groups) {
        notes.push(s);
    }
    notes
}

/// What the SRTP receiver did, from the `biterror_srtp` table (and the main table's SRTP rows
/// for the profiles' names), set beside the unauthenticated rows with the same damage.
fn srtp_conclusion(
    srtp: &Table,
    main_rows: &[&std::collections::BTreeMap<String, Cell>],
    groups: &DamageGroups,
) -> Option<String> {
    if srtp.rows.is_empty() {
        return None;
    }
    let num = |r: &std::collections::BTreeMap<String, Cell>, k: &str| {
        r.get(k).and_then(Cell::as_f64).map(|v| v as usize)
    };
    let mut profiles: Vec<&str> = Vec::new();
    let mut only_it = Vec::new();
    let mut not_only = Vec::new();
    let (mut untagged, mut dropped) = (Vec::new(), Vec::new());
    for r in &srtp.rows {
        let profile = text_of(r, "profile");
        if !profiles.contains(&profile) {
            profiles.push(profile);
        }
        let stream = text_of(r, "stream");
        let rejected = num(r, "rejected");
        let tampered_refused = text_of(r, "error").starts_with("rejected");
        let others = text_of(r, "others_intact") == "yes";
        if rejected == Some(1) && tampered_refused && others {
            only_it.push(r);
        } else {
            not_only.push(format!(
                "{profile} {stream}: {} packet(s) rejected, tampered one {}, others intact {}",
                rejected
                    .map(|v| v.to_string())
                    .unwrap_or_else(|| "?".into()),
                text_of(r, "error"),
                text_of(r, "others_intact")
            ));
        }
        untagged.extend(num(r, "untagged_bytes"));
        dropped.extend(num(r, "dropped_samples"));
    }
    let packets: Vec<usize> = srtp.rows.iter().filter_map(|r| num(r, "packets")).collect();
    let mut s = if not_only.is_empty() {
        format!(
            "SRTP: all {} profiles rejected exactly the tampered packet on every stream (1 of {} packets), every other packet intact",
            profiles.len(),
            count_label(
                packets.iter().min().copied().unwrap_or(0),
                packets.iter().max().copied().unwrap_or(0)
            )
        )
    } else {
        format!(
            "SRTP: {} of {} profile-and-stream runs rejected exactly the tampered packet; NOT so: {}",
            only_it.len(),
            srtp.rows.len(),
            not_only.join("; ")
        )
    };
    let accepted: Vec<&str> = main_rows
        .iter()
        .filter(|r| !text_of(r, "verdict").starts_with("packet rejected"))
        .map(|r| text_of(r, "cipher"))
        .collect();
    if !accepted.is_empty() {
        s.push_str(&format!(
            "; accepted the tampered packet: {}",
            accepted.join(", ")
        ));
    }
    if let (Some(lo), Some(hi)) = (dropped.iter().min(), dropped.iter().max()) {
        s.push_str(&format!(
            "; the receiver conceals the dropped packet: {} decoded samples changed",
            count_label(*lo, *hi)
        ));
    }
    if let (Some(lo), Some(hi)) = (untagged.iter().min(), untagged.iter().max()) {
        s.push_str(&format!(
            "; without the tag check the tampered packet would have decrypted with {} {} changed",
            count_label(*lo, *hi),
            if *hi == 1 { "byte" } else { "bytes" }
        ));
        let like: Vec<RowName> = groups
            .iter()
            .filter(|((a, b), _)| a == lo && b == hi)
            .flat_map(|(_, r)| r.iter().cloned())
            .collect();
        if !like.is_empty() {
            s.push_str(&format!(", as with {}", name_rows(&like)));
        }
    }
    s.push('.');
    Some(s)
}

impl Study for BiterrorStudy {
    fn name(&self) -> &'static str {
        "biterror"
    }
    fn title(&self) -> &'static str {
        "One flipped bit per cipher and mode, raw and compressed voice; SRTP rejects the packet (002 b)"
    }

    fn run(&self, ctx: &mut Ctx) -> anyhow::Result<StudyReport> {
        let all = cases();
        ctx.steps(2 + all.len() as u64 + super::SWEPT_PROFILES.len() as u64);
        ctx.step("voice signal and its encodings");
        let pcm = voice(10.0);
        let mut streams = Vec::new();
        for s in Stream::ALL {
            let bytes = s.encode(&pcm)?;
            let clean = s.decode(&bytes, None)?;
            streams.push((s, bytes, clean));
        }
        ctx.done();

        let mut table = empty_main_table();
        let mut plot_points: Vec<(String, [f64; 3])> = Vec::new();
        for case in &all {
            ctx.step(format!("{} {}", case.cipher, case.mode));
            let (row, point) = cipher_row(case, &streams)?;
            plot_points.extend(point);
            table.push(row);
            ctx.done();
        }

        let mut srtp_table = empty_srtp_table();
        let mut notes = Vec::new();
        for profile in super::SWEPT_PROFILES {
            ctx.step(format!("SRTP {}", profile.sdp_name()));
            let row = srtp_rows(profile, &streams, &mut srtp_table)?;
            table.push(row);
            ctx.done();
        }

        ctx.step("summary");
        notes.extend(conclusions(&table, &srtp_table));
        notes.push(format!(
            "Opus runs narrowband at 8 kHz (no resampler) at a constant {} kbit/s, so each 20 ms frame is {} bytes and the stream needs no framing; a damaged frame that does not decode is concealed; the decoder's state carries damage past the frame (audio affected, ms).",
            OPUS_BITRATE / 1000,
            Stream::Opus.frame_bytes()
        ));
        notes.push(format!(
            "libopus: {}; OpenSSL: {}",
            Opus::library_version(),
            openssl::version::version()
        ));
        ctx.done();

        let plots = vec![Plot {
            id: "biterror_bytes_changed".into(),
            title: "Bytes changed by one flipped ciphertext bit".into(),
            kind: PlotKind::Bars,
            x_label: "cipher and mode".into(),
            y_label: "bytes changed".into(),
            log_y: false,
            categories: plot_points.iter().map(|(n, _)| n.clone()).collect(),
            series: Stream::ALL
                .iter()
                .enumerate()
                .map(|(j, s)| Series {
                    name: s.label().into(),
                    points: plot_points
                        .iter()
                        .enumerate()
                        .map(|(i, (_, v))| (i as f64, v[j]))
                        .collect(),
                })
                .collect(),
        }];
        let method = ctx.method(
            format!(
                "nothing is timed: a 10 s voice-like signal (8 kHz, 16-bit; {} raw bytes, {} G.711, {} Opus) is encrypted whole per cipher and mode \
                 (fixed key, IV and nonce; PKCS#7 padding for ECB/CBC), bit 0x02 of byte offset {FLIP_OFFSET} (the 10,000th byte) of the ciphertext is flipped, \
                 the result decrypted and compared with the plaintext, then decoded and compared with the decoded clean stream; \
                 RustCrypto figures shown, OpenSSL run on the same input must give the same ciphertext and damage; \
                 SRTP: one 20 ms frame per RTP packet, protected per profile, the same stream byte flipped inside its packet, every packet unprotected",
                streams[0].1.len(),
                streams[1].1.len(),
                streams[2].1.len()
            ),
            "not counted: nothing is timed",
        );
        Ok(StudyReport {
            study: self.name().into(),
            title: self.title().into(),
            seeds: vec!["002".into()],
            method,
            tables: vec![table, srtp_table],
            plots,
            notes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn streams() -> Vec<(Stream, Vec<u8>, Vec<i16>)> {
        let pcm = voice(6.0);
        Stream::ALL
            .iter()
            .map(|&s| {
                let b = s.encode(&pcm).unwrap();
                let c = s.decode(&b, None).unwrap();
                (s, b, c)
            })
            .collect()
    }

    #[test]
    fn voice_is_deterministic_and_speech_like() {
        let a = voice(2.0);
        assert_eq!(a, voice(2.0));
        assert_eq!(a.len(), 16_000);
        let peak = a.iter().map(|s| s.unsigned_abs()).max().unwrap();
        assert!((12_000..=13_000).contains(&peak), "peak {peak}");
        // Pauses between syllables: some 10 ms windows are near-silent, most are not.
        let quiet = a
            .chunks(80)
            .filter(|w| w.iter().all(|s| s.unsigned_abs() < 200))
            .count();
        assert!(quiet > 10 && quiet < 100, "{quiet} quiet windows of 200");
    }

    #[test]
    fn rustcrypto_and_openssl_agree_on_every_case() {
        let data: Vec<u8> = (0..20_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
        for case in cases() {
            let r = rustcrypto(&case, &data, true).unwrap();
            match openssl(&case, &data, true) {
                Ok(o) => assert_eq!(r, o, "{case:?}"),
                // OpenSSL 3 keeps RC4 in the legacy provider only.
                Err(Refusal::NotOffered(_)) if case.cipher == "RC4-128" => continue,
                Err(e) => panic!("{case:?}: {e:?}"),
            }
            assert_eq!(
                rustcrypto(&case, &r, false).unwrap(),
                data,
                "{case:?} round trip"
            );
            assert_eq!(
                openssl(&case, &r, false).unwrap(),
                data,
                "{case:?} OpenSSL round trip"
            );
        }
    }

    #[test]
    fn damage_has_the_shape_of_the_mode() {
        let st = streams();
        let (s, bytes, clean) = &st[0];
        let count = |cipher: &'static str, mode: &'static str| {
            let case = cases()
                .into_iter()
                .find(|c| c.cipher == cipher && c.mode == mode)
                .unwrap();
            let r = flip_and_count(rustcrypto, &case, *s, bytes, clean).unwrap();
            let o = flip_and_count(openssl, &case, *s, bytes, clean).unwrap();
            if cipher != "RC4-128" {
                assert_eq!(r, o, "{cipher} {mode}: libraries differ");
            }
            r
        };
        // Nothing outside the predicted region, and the count is the region's size (a
        // garbled byte equal to the plaintext by chance is allowed for, once).
        let bytes_of = |d: Damage| match d {
            Damage::Decrypted {
                bytes,
                predicted,
                outside,
                ..
            } => {
                assert_eq!(outside, 0);
                assert!(
                    bytes == predicted || bytes + 1 == predicted,
                    "{bytes} of {predicted}"
                );
                predicted
            }
            other => panic!("{other:?}"),
        };
        for aes in ["AES-128", "AES-256"] {
            assert_eq!(bytes_of(count(aes, "ECB")), 16);
            assert_eq!(bytes_of(count(aes, "CBC")), 17);
            assert_eq!(bytes_of(count(aes, "CFB-128")), 17);
            assert_eq!(bytes_of(count(aes, "CFB-8")), 17);
            assert_eq!(bytes_of(count(aes, "OFB")), 1);
            assert_eq!(bytes_of(count(aes, "CTR")), 1);
            assert!(matches!(
                count(aes, "GCM"),
                Damage::Refused(Refusal::Rejected(_))
            ));
        }
        assert_eq!(bytes_of(count("3DES (EDE3)", "ECB")), 8);
        assert_eq!(bytes_of(count("3DES (EDE3)", "CBC")), 9);
        assert_eq!(bytes_of(count("ChaCha20", "stream")), 1);
        assert_eq!(bytes_of(count("RC4-128", "stream")), 1);
        assert!(matches!(
            count("ChaCha20-Poly1305", "AEAD"),
            Damage::Refused(Refusal::Rejected(_))
        ));
    }

    #[test]
    fn srtp_rejects_the_packet_and_only_it() {
        let st = streams();
        for profile in [
            Profile::AesCm128HmacSha1_80,
            Profile::AeadAes256Gcm,
            Profile::NullHmacSha1_80,
        ] {
            for (s, bytes, clean) in &st {
                let o = srtp_flip(profile, *s, bytes, clean).unwrap();
                assert_eq!(o.packets, bytes.len() / s.frame_bytes());
                assert_eq!(
                    (o.rejected, o.error),
                    (1, Some(SrtpError::AuthFailed)),
                    "{profile:?} {s:?}"
                );
                assert!(o.others_intact);
                // Counter-mode keystreams (and NULL) pass the bit through untouched.
                assert_eq!(o.untagged_bytes, 1, "{profile:?} {s:?}");
                assert!(o.untagged_samples >= 1 && o.dropped_samples >= 1);
            }
        }
    }

    #[test]
    fn decoded_damage_of_one_ulaw_byte_is_one_sample() {
        let st = streams();
        let (s, bytes, clean) = &st[1];
        let case = Case {
            cipher: "AES-128",
            mode: "CTR",
            authenticated: false,
        };
        match flip_and_count(rustcrypto, &case, *s, bytes, clean).unwrap() {
            Damage::Decrypted {
                bytes,
                outside,
                samples,
                span,
                ..
            } => {
                assert_eq!((bytes, outside, samples, span), (1, 0, 1, 1))
            }
            other => panic!("{other:?}"),
        }
    }

    // -----------------------------------------------------------------------------------
    // Conclusions follow the tables.

    /// A main-table row: three stream cells (bytes) and a verdict.
    fn row(t: &mut Table, cipher: &str, mode: &str, predicted: Option<f64>, cells: [Cell; 3]) {
        let verdict = match &cells[0] {
            Cell::Text(_) => "rejected: tag check failed".to_string(),
            _ => "decrypts".to_string(),
        };
        let mut r: Vec<(String, Cell)> = vec![
            ("cipher".into(), Cell::text(cipher)),
            ("mode".into(), Cell::text(mode)),
            ("verdict".into(), Cell::text(verdict)),
        ];
        if let Some(p) = predicted {
            r.push(("predicted".into(), Cell::num(p)));
        }
        for (k, c) in STREAM_KEYS.iter().zip(cells) {
            r.push((format!("{k}_bytes"), c));
        }
        t.push(r);
    }

    fn n(v: f64) -> [Cell; 3] {
        [Cell::num(v), Cell::num(v), Cell::num(v)]
    }

    fn rejected() -> [Cell; 3] {
        [
            Cell::text("rejected"),
            Cell::text("rejected"),
            Cell::text("rejected"),
        ]
    }

    /// Rows shaped like a real run (the cases of [`cases`], each decrypting one with the bytes
    /// its mode puts at risk), with `edit` applied to each (cipher, mode) before it goes in;
    /// an SRTP table of two profiles.
    fn tables(edit: impl Fn(&str, &str, [Cell; 3]) -> [Cell; 3]) -> (Table, Table) {
        let mut t = Table::new("biterror", "t");
        for c in cases() {
            let (pred, cells) = if c.authenticated {
                (None, rejected())
            } else {
                let p = predicted_region(&c).len() as f64;
                (Some(p), n(p))
            };
            let cells = edit(c.cipher, c.mode, cells);
            row(&mut t, c.cipher, c.mode, pred, cells);
        }
        let mut srtp = Table::new("biterror_srtp", "s");
        for p in ["AES_CM_128_HMAC_SHA1_80", "AEAD_AES_128_GCM"] {
            t.push([
                ("cipher", Cell::text(format!("SRTP {p}"))),
                ("mode", Cell::text("x")),
                ("verdict", Cell::text("packet rejected (AuthFailed)")),
            ]);
            for s in ["raw PCM", "G.711 μ-law", "Opus 16 kbit/s"] {
                srtp.push([
                    ("profile", Cell::text(p)),
                    ("stream", Cell::text(s)),
                    ("packets", Cell::num(500.0)),
                    ("rejected", Cell::num(1.0)),
                    ("error", Cell::text("rejected (AuthFailed)")),
                    ("others_intact", Cell::text("yes")),
                    ("untagged_bytes", Cell::num(1.0)),
                    ("dropped_samples", Cell::num(160.0)),
                ]);
            }
        }
        (t, srtp)
    }

    fn note<'a>(notes: &'a [String], starts: &str) -> &'a str {
        notes
            .iter()
            .find(|n| n.starts_with(starts))
            .unwrap_or_else(|| panic!("no note starting {starts:?} in {notes:#?}"))
    }

    /// The part of the grouping note for `label` bytes ("1 byte", "16 bytes").
    fn group<'a>(notes: &'a [String], label: &str) -> &'a str {
        let n = note(notes, "Plaintext bytes changed");
        let at = n
            .find(&format!("; {label}: "))
            .map(|i| i + 2)
            .or_else(|| n.find(&format!("): {label}: ")).map(|i| i + 3))
            .unwrap_or_else(|| panic!("no group {label:?} in {n}"));
        let rest = &n[at..];
        &rest[..rest.find(';').unwrap_or(rest.len() - 1)]
    }

    #[test]
    fn conclusions_group_modes_by_their_measured_damage() {
        let (t, s) = tables(|_, _, c| c);
        let notes = conclusions(&t, &s);
        assert_eq!(
            group(&notes, "1 byte"),
            "1 byte: AES-128/AES-256/3DES (EDE3) OFB, AES-128/AES-256 CTR, RC4-128/ChaCha20 stream"
        );
        assert_eq!(group(&notes, "8 bytes"), "8 bytes: 3DES (EDE3) ECB");
        assert_eq!(
            group(&notes, "9 bytes"),
            "9 bytes: 3DES (EDE3) CBC, 3DES (EDE3) CFB-64"
        );
        assert_eq!(group(&notes, "16 bytes"), "16 bytes: AES-128/AES-256 ECB");
        assert_eq!(
            group(&notes, "17 bytes"),
            "17 bytes: AES-128/AES-256 CBC, AES-128/AES-256 CFB-128, AES-128/AES-256 CFB-8"
        );
        assert!(note(
            &notes,
            "Against each mode's structure: 18 of 18 decrypting rows"
        )
        .ends_with("none changed a byte outside that region."));
        let seed = note(&notes, "Against seed 002's figures:");
        assert!(
            seed.contains(
                "different for 3DES (EDE3) ECB 8 here, 9 in the seed, 3DES (EDE3) OFB 1 here, 9 in the seed"
            ),
            "{seed}"
        );
        assert_eq!(
            note(&notes, "Refused"),
            "Refused the whole tampered stream, on every stream kind, so nothing of it decrypts: AES-128/AES-256 GCM, ChaCha20-Poly1305 AEAD (tag check failed); 3 of 21 rows."
        );
        assert_eq!(
            note(&notes, "SRTP"),
            "SRTP: all 2 profiles rejected exactly the tampered packet on every stream (1 of 500 packets), every other packet intact; the receiver conceals the dropped packet: 160 decoded samples changed; without the tag check the tampered packet would have decrypted with 1 byte changed, as with AES-128/AES-256/3DES (EDE3) OFB, AES-128/AES-256 CTR, RC4-128/ChaCha20 stream."
        );
    }

    #[test]
    fn conclusions_change_when_the_rows_change() {
        // CTR garbles a whole block, GCM decrypts with one byte changed, and one stream of
        // AES-128 OFB lost its byte to chance.
        let (t, s) = tables(|cipher, mode, c| match (cipher, mode) {
            (_, "CTR") => n(16.0),
            ("AES-128", "GCM") => n(1.0),
            ("AES-128", "OFB") => [Cell::num(1.0), Cell::num(0.0), Cell::num(1.0)],
            _ => c,
        });
        let notes = conclusions(&t, &s);
        assert_eq!(group(&notes, "0–1 byte"), "0–1 byte: AES-128 OFB");
        assert_eq!(
            group(&notes, "1 byte"),
            "1 byte: AES-128 GCM, AES-256/3DES (EDE3) OFB, RC4-128/ChaCha20 stream"
        );
        assert_eq!(
            group(&notes, "16 bytes"),
            "16 bytes: AES-128/AES-256 ECB, AES-128/AES-256 CTR"
        );
        let structure = note(&notes, "Against each mode's structure:");
        assert!(
            structure.starts_with("Against each mode's structure: 15 of 19 decrypting rows")
                && structure.contains("by chance): AES-128 OFB 0 of 1;")
                && structure.contains("no region to compare with): AES-128 GCM;")
                && structure.ends_with(
                    "UNEXPECTED, bytes changed outside the region: AES-128 CTR 16 of 1, AES-256 CTR 16 of 1."
                ),
            "{structure}"
        );
        assert!(note(&notes, "Against seed 002's figures:")
            .contains("AES-128 CTR 16 here, 1 in the seed"));
        assert_eq!(
            note(&notes, "Refused"),
            "Refused the whole tampered stream, on every stream kind, so nothing of it decrypts: AES-256 GCM, ChaCha20-Poly1305 AEAD (tag check failed); 2 of 21 rows."
        );

        // Nothing refuses; one SRTP profile lets the packet through, another loses a packet
        // more on one stream.
        let (mut t, mut s) = tables(|_, _, c| match c[0] {
            Cell::Text(_) => n(1.0),
            _ => c,
        });
        let last = t.rows.len() - 1;
        t.rows[last].insert("verdict".into(), Cell::text("NOT rejected: accepted"));
        s.rows[0].insert("rejected".into(), Cell::num(2.0));
        s.rows[0].insert("untagged_bytes".into(), Cell::num(3.0));
        let notes = conclusions(&t, &s);
        assert_eq!(
            note(&notes, "No cipher"),
            "No cipher and mode refused the tampered stream: all 21 measured rows decrypted it."
        );
        let srtp = note(&notes, "SRTP");
        assert!(
            srtp.starts_with(
                "SRTP: 5 of 6 profile-and-stream runs rejected exactly the tampered packet; NOT so: AES_CM_128_HMAC_SHA1_80 raw PCM: 2 packet(s) rejected"
            ) && srtp.contains("accepted the tampered packet: SRTP AEAD_AES_128_GCM")
                && srtp.contains("decrypted with 1–3 bytes changed.")
                && !srtp.contains("as with"),
            "{srtp}"
        );
    }
}
