//! OpenSSL (the system's OpenSSL 3 through the `openssl` crate), through the EVP API a
//! TLS stack uses: provider-native keys (`EVP_PKEY_Q_keygen` for EC), `EVP_DigestSign`,
//! `EVP_PKEY_derive`.

use std::hint::black_box;

use openssl::derive::Deriver;
use openssl::hash::MessageDigest;
use openssl::pkey::{Id, PKey, Private, Public};
use openssl::rsa::{Padding, Rsa};
use openssl::sign::{RsaPssSaltlen, Signer, Verifier};

use super::algs::{Alg, Curve, Op, Prep, Prepared, MSG};
use super::Keys;

fn err(e: openssl::error::ErrorStack) -> String {
    format!("OpenSSL: {e}")
}

/// The OpenSSL group name of a curve.
pub fn group_name(c: Curve) -> &'static str {
    match c {
        Curve::P192 => "prime192v1",
        Curve::P224 => "secp224r1",
        Curve::P256 => "prime256v1",
        Curve::P384 => "secp384r1",
        Curve::P521 => "secp521r1",
        Curve::K256 => "secp256k1",
        Curve::Bp256 => "brainpoolP256r1",
        Curve::Bp384 => "brainpoolP384r1",
        Curve::Bp512 => "brainpoolP512r1",
        Curve::X25519 => "X25519",
        Curve::X448 => "X448",
    }
}

fn digest(bits: u32) -> MessageDigest {
    match bits {
        384 => MessageDigest::sha384(),
        512 => MessageDigest::sha512(),
        _ => MessageDigest::sha256(),
    }
}

/// A fresh key pair for a signature algorithm or a curve.
pub fn keygen(alg: Alg) -> Result<PKey<Private>, String> {
    match alg {
        Alg::Rsa(bits) => PKey::from_rsa(Rsa::generate(bits).map_err(err)?).map_err(err),
        Alg::Ecdsa(c) | Alg::Kex(c) => match c {
            Curve::X25519 => PKey::generate_x25519().map_err(err),
            Curve::X448 => PKey::generate_x448().map_err(err),
            _ => PKey::ec_gen(group_name(c)).map_err(err),
        },
        Alg::Ed25519 => PKey::generate_ed25519().map_err(err),
        Alg::Ed448 => PKey::generate_ed448().map_err(err),
    }
}

fn public(key: &PKey<Private>) -> Result<PKey<Public>, String> {
    PKey::public_key_from_der(&key.public_key_to_der().map_err(err)?).map_err(err)
}

/// Signs `MSG` the way this study does for `alg` (`pss`: RSA-PSS).
pub fn sign(alg: Alg, key: &PKey<Private>, pss: bool) -> Result<Vec<u8>, String> {
    let mut s = match alg {
        Alg::Ed25519 | Alg::Ed448 => Signer::new_without_digest(key),
        Alg::Ecdsa(c) => Signer::new(digest(c.hash_bits()), key),
        _ => Signer::new(MessageDigest::sha256(), key),
    }
    .map_err(err)?;
    if pss {
        s.set_rsa_padding(Padding::PKCS1_PSS).map_err(err)?;
        s.set_rsa_pss_saltlen(RsaPssSaltlen::DIGEST_LENGTH)
            .map_err(err)?;
        s.set_rsa_mgf1_md(MessageDigest::sha256()).map_err(err)?;
    }
    s.sign_oneshot_to_vec(MSG).map_err(err)
}

fn verify(alg: Alg, key: &PKey<Public>, sig: &[u8], pss: bool) -> Result<bool, String> {
    let mut v = match alg {
        Alg::Ed25519 | Alg::Ed448 => Verifier::new_without_digest(key),
        Alg::Ecdsa(c) => Verifier::new(digest(c.hash_bits()), key),
        _ => Verifier::new(MessageDigest::sha256(), key),
    }
    .map_err(err)?;
    if pss {
        v.set_rsa_padding(Padding::PKCS1_PSS).map_err(err)?;
        v.set_rsa_pss_saltlen(RsaPssSaltlen::DIGEST_LENGTH)
            .map_err(err)?;
        v.set_rsa_mgf1_md(MessageDigest::sha256()).map_err(err)?;
    }
    v.verify_oneshot(sig, MSG).map_err(err)
}

/// The encoded public key a peer would be sent.
fn public_bytes(key: &PKey<Private>) -> Result<Vec<u8>, String> {
    match key.id() {
        Id::X25519 | Id::X448 => key.raw_public_key().map_err(err),
        _ => key.public_key_to_der().map_err(err),
    }
}

fn derive(key: &PKey<Private>, peer: &PKey<Public>) -> Result<Vec<u8>, String> {
    let mut d = Deriver::new(key).map_err(err)?;
    d.set_peer(peer).map_err(err)?;
    d.derive_to_vec().map_err(err)
}

/// The key a signing row uses: RSA keys are the study's shared ones (made once), others fresh.
fn signing_key(alg: Alg, keys: &Keys) -> Result<PKey<Private>, String> {
    match alg {
        Alg::Rsa(bits) => PKey::private_key_from_pkcs8(&keys.rsa_pkcs8(bits)?).map_err(err),
        _ => keygen(alg),
    }
}

/// Prepares one operation.
pub fn prepare(alg: Alg, op: Op, keys: &Keys) -> Prep {
    match op {
        Op::Keygen => {
            keygen(alg)?;
            Ok(Prepared::new(move || {
                black_box(keygen(alg).expect("worked in the dry run"));
            }))
        }
        Op::Sign | Op::SignPss => {
            let pss = op == Op::SignPss;
            let key = signing_key(alg, keys)?;
            let a = sign(alg, &key, pss)?;
            let b = sign(alg, &key, pss)?;
            if !verify(alg, &public(&key)?, &a, pss)? {
                return Err("OpenSSL rejected its own signature".into());
            }
            Ok(Prepared::signing(
                move || {
                    black_box(sign(alg, &key, pss).expect("worked in the dry run"));
                },
                a == b,
            ))
        }
        Op::Verify | Op::VerifyPss => {
            let pss = op == Op::VerifyPss;
            let key = signing_key(alg, keys)?;
            let sig = sign(alg, &key, pss)?;
            let pubkey = public(&key)?;
            if !verify(alg, &pubkey, &sig, pss)? {
                return Err("OpenSSL rejected its own signature".into());
            }
            Ok(Prepared::new(move || {
                assert!(black_box(
                    verify(alg, &pubkey, &sig, pss).expect("worked in the dry run")
                ));
            }))
        }
        Op::Ecdhe | Op::Ecdh => {
            let peer = keygen(alg)?;
            let peer_pub = public(&peer)?;
            let ours = keygen(alg)?;
            if derive(&ours, &peer_pub)? != derive(&peer, &public(&ours)?)? {
                return Err("OpenSSL: the two sides derived different secrets".into());
            }
            if op == Op::Ecdhe {
                Ok(Prepared::new(move || {
                    let eph = keygen(alg).expect("worked in the dry run");
                    black_box(public_bytes(&eph).expect("worked in the dry run"));
                    black_box(derive(&eph, &peer_pub).expect("worked in the dry run"));
                }))
            } else {
                Ok(Prepared::new(move || {
                    black_box(derive(&ours, &peer_pub).expect("worked in the dry run"));
                }))
            }
        }
    }
}
