//! aws-lc-rs: `signature::{EcdsaKeyPair, Ed25519KeyPair, ParsedPublicKey}`, `rsa::KeyPair`,
//! `agreement::{EphemeralPrivateKey, PrivateKey}`.

use std::hint::black_box;

use aws_lc_rs::agreement::{self, EphemeralPrivateKey, PrivateKey, UnparsedPublicKey};
use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::rsa::{KeyPair as RsaKeyPair, KeySize};
use aws_lc_rs::signature::{
    self as sig, EcdsaKeyPair, Ed25519KeyPair, KeyPair as _, ParsedPublicKey,
};

use super::algs::{Alg, Curve, Op, Prep, Prepared, MSG};
use super::Keys;

fn ecdsa_algs(
    c: Curve,
) -> Option<(
    &'static sig::EcdsaSigningAlgorithm,
    &'static sig::EcdsaVerificationAlgorithm,
)> {
    match c {
        Curve::P256 => Some((
            &sig::ECDSA_P256_SHA256_ASN1_SIGNING,
            &sig::ECDSA_P256_SHA256_ASN1,
        )),
        Curve::P384 => Some((
            &sig::ECDSA_P384_SHA384_ASN1_SIGNING,
            &sig::ECDSA_P384_SHA384_ASN1,
        )),
        Curve::P521 => Some((
            &sig::ECDSA_P521_SHA512_ASN1_SIGNING,
            &sig::ECDSA_P521_SHA512_ASN1,
        )),
        Curve::K256 => Some((
            &sig::ECDSA_P256K1_SHA256_ASN1_SIGNING,
            &sig::ECDSA_P256K1_SHA256_ASN1,
        )),
        _ => None,
    }
}

fn kex_alg(c: Curve) -> Option<&'static agreement::Algorithm> {
    match c {
        Curve::P256 => Some(&agreement::ECDH_P256),
        Curve::P384 => Some(&agreement::ECDH_P384),
        Curve::P521 => Some(&agreement::ECDH_P521),
        Curve::X25519 => Some(&agreement::X25519),
        _ => None,
    }
}

fn key_size(bits: u32) -> Option<KeySize> {
    match bits {
        2048 => Some(KeySize::Rsa2048),
        3072 => Some(KeySize::Rsa3072),
        4096 => Some(KeySize::Rsa4096),
        _ => None,
    }
}

fn unspecified(what: &str) -> impl Fn(aws_lc_rs::error::Unspecified) -> String + '_ {
    move |_| format!("aws-lc-rs: {what} failed")
}

/// The study's shared RSA key of `bits`, or why aws-lc-rs will not take it.
fn rsa_key(bits: u32, keys: &Keys) -> Result<RsaKeyPair, String> {
    RsaKeyPair::from_pkcs8(&keys.rsa_pkcs8(bits)?)
        .map_err(|e| format!("aws-lc-rs rsa::KeyPair::from_pkcs8 rejects a {bits}-bit key: {e}"))
}

fn rsa_verify_alg(bits: u32, pss: bool) -> Result<&'static sig::RsaParameters, String> {
    match (pss, bits >= 2048) {
        (false, true) => Ok(&sig::RSA_PKCS1_2048_8192_SHA256),
        (false, false) => Ok(&sig::RSA_PKCS1_1024_8192_SHA256_FOR_LEGACY_USE_ONLY),
        (true, true) => Ok(&sig::RSA_PSS_2048_8192_SHA256),
        (true, false) => Err(format!("aws-lc-rs's PSS verification starts at 2048-bit moduli (RSA_PSS_2048_8192_*), not {bits}")),
    }
}

fn rsa_sign(key: &RsaKeyPair, pss: bool, rng: &SystemRandom) -> Result<Vec<u8>, String> {
    let mut out = vec![0u8; key.public_modulus_len()];
    let enc: &'static dyn sig::RsaEncoding = if pss {
        &sig::RSA_PSS_SHA256
    } else {
        &sig::RSA_PKCS1_SHA256
    };
    key.sign(enc, rng, MSG, &mut out)
        .map_err(unspecified("RSA sign"))?;
    Ok(out)
}

fn keygen_once(alg: Alg) -> Result<(), String> {
    match alg {
        Alg::Rsa(bits) => {
            let size = key_size(bits).ok_or_else(|| {
                format!("aws-lc-rs rsa::KeySize offers 2048, 3072, 4096 and 8192 bits, not {bits}")
            })?;
            black_box(RsaKeyPair::generate(size).map_err(unspecified("RSA key generation"))?);
        }
        Alg::Ecdsa(c) => {
            let (s, _) = ecdsa_algs(c).ok_or_else(|| no_ecdsa(c))?;
            let kp = EcdsaKeyPair::generate(s).map_err(unspecified("ECDSA key generation"))?;
            black_box(kp.public_key());
        }
        Alg::Ed25519 => {
            let kp = Ed25519KeyPair::generate().map_err(unspecified("Ed25519 key generation"))?;
            black_box(kp.public_key());
        }
        Alg::Ed448 => return Err(no_ed448()),
        Alg::Kex(_) => unreachable!("key exchange rows have no keygen"),
    }
    Ok(())
}

fn no_ecdsa(c: Curve) -> String {
    format!(
        "aws-lc-rs 1.19 offers ECDSA on P-256, P-384, P-521 and secp256k1 only, not {}",
        c.name()
    )
}
fn no_ed448() -> String {
    "aws-lc-rs 1.19 offers Ed25519 only, no Ed448".into()
}

/// An RSA verification (PKCS#1 v1.5, or PSS): aws-lc-rs's own signature where it takes the
/// key, else OpenSSL's (RSA-1024).
fn prepare_rsa_verify(alg: Alg, bits: u32, pss: bool, keys: &Keys, rng: &SystemRandom) -> Prep {
    let params = rsa_verify_alg(bits, pss)?;
    // aws-lc-rs's own signature where it takes the key, else OpenSSL's (RSA-1024).
    let (public_der, signature) = match rsa_key(bits, keys) {
        Ok(key) => (
            key.public_key().as_ref().to_vec(),
            rsa_sign(&key, pss, rng)?,
        ),
        Err(_) => {
            let k = openssl::pkey::PKey::private_key_from_pkcs8(&keys.rsa_pkcs8(bits)?)
                .map_err(|e| e.to_string())?;
            let der = k
                .rsa()
                .and_then(|r| r.public_key_to_der_pkcs1())
                .map_err(|e| e.to_string())?;
            (der, super::ossl::sign(alg, &k, pss)?)
        }
    };
    verifier(params, &public_der, signature)
}

/// A verification of `signature` by the `public` key, checked once before it is timed.
fn verifier(
    params: &'static dyn sig::VerificationAlgorithm,
    public: &[u8],
    signature: Vec<u8>,
) -> Prep {
    let pk = ParsedPublicKey::new(params, public).map_err(|e| format!("aws-lc-rs: {e}"))?;
    pk.verify_sig(MSG, &signature)
        .map_err(unspecified("verifying its own signature"))?;
    Ok(Prepared::new(move || {
        pk.verify_sig(MSG, black_box(&signature))
            .expect("worked in the dry run")
    }))
}

/// An ECDH agreement on `c` with a key made once (or, `ephemeral`, a fresh key pair each
/// time), the two sides checked to derive the same secret first.
fn prepare_kex(c: Curve, ephemeral: bool, rng: SystemRandom) -> Prep {
    let a = kex_alg(c).ok_or_else(|| {
        format!(
            "aws-lc-rs 1.19 agreement offers ECDH on P-256, P-384, P-521 and X25519 only, not {}",
            c.name()
        )
    })?;
    let peer = PrivateKey::generate(a).map_err(unspecified("key generation"))?;
    let peer_pub = peer
        .compute_public_key()
        .map_err(unspecified("public key"))?
        .as_ref()
        .to_vec();
    let ours = PrivateKey::generate(a).map_err(unspecified("key generation"))?;
    let ours_pub = ours
        .compute_public_key()
        .map_err(unspecified("public key"))?
        .as_ref()
        .to_vec();
    let s1 = agreement::agree(&ours, UnparsedPublicKey::new(a, &peer_pub), "agree", |k| {
        Ok(k.to_vec())
    })
    .map_err(|e| format!("aws-lc-rs: {e}"))?;
    let s2 = agreement::agree(&peer, UnparsedPublicKey::new(a, &ours_pub), "agree", |k| {
        Ok(k.to_vec())
    })
    .map_err(|e| format!("aws-lc-rs: {e}"))?;
    if s1 != s2 {
        return Err("aws-lc-rs: the two sides derived different secrets".into());
    }
    if ephemeral {
        Ok(Prepared::new(move || {
            let eph = EphemeralPrivateKey::generate(a, &rng).expect("worked in the dry run");
            black_box(eph.compute_public_key().expect("worked in the dry run"));
            agreement::agree_ephemeral(eph, UnparsedPublicKey::new(a, &peer_pub), (), |k| {
                black_box(k);
                Ok(())
            })
            .expect("worked in the dry run");
        }))
    } else {
        Ok(Prepared::new(move || {
            agreement::agree(&ours, UnparsedPublicKey::new(a, &peer_pub), (), |k| {
                black_box(k);
                Ok(())
            })
            .expect("worked in the dry run");
        }))
    }
}

/// Prepares one operation.
pub fn prepare(alg: Alg, op: Op, keys: &Keys) -> Prep {
    let rng = SystemRandom::new();
    match (alg, op) {
        (_, Op::Keygen) => {
            keygen_once(alg)?;
            Ok(Prepared::new(move || {
                keygen_once(alg).expect("worked in the dry run")
            }))
        }
        (Alg::Rsa(bits), Op::Sign | Op::SignPss) => {
            let pss = op == Op::SignPss;
            let key = rsa_key(bits, keys)?;
            let a = rsa_sign(&key, pss, &rng)?;
            let b = rsa_sign(&key, pss, &rng)?;
            Ok(Prepared::signing(
                move || {
                    black_box(rsa_sign(&key, pss, &rng).expect("worked in the dry run"));
                },
                a == b,
            ))
        }
        (Alg::Rsa(bits), Op::Verify | Op::VerifyPss) => {
            prepare_rsa_verify(alg, bits, op == Op::VerifyPss, keys, &rng)
        }
        (Alg::Ecdsa(c), Op::Sign) => {
            let (s, _) = ecdsa_algs(c).ok_or_else(|| no_ecdsa(c))?;
            let kp = EcdsaKeyPair::generate(s).map_err(unspecified("ECDSA key generation"))?;
            let a = kp.sign(&rng, MSG).map_err(unspecified("ECDSA sign"))?;
            let b = kp.sign(&rng, MSG).map_err(unspecified("ECDSA sign"))?;
            Ok(Prepared::signing(
                move || {
                    black_box(kp.sign(&rng, MSG).expect("worked in the dry run"));
                },
                a.as_ref() == b.as_ref(),
            ))
        }
        (Alg::Ecdsa(c), Op::Verify) => {
            let (s, v) = ecdsa_algs(c).ok_or_else(|| no_ecdsa(c))?;
            let kp = EcdsaKeyPair::generate(s).map_err(unspecified("ECDSA key generation"))?;
            let signature = kp
                .sign(&rng, MSG)
                .map_err(unspecified("ECDSA sign"))?
                .as_ref()
                .to_vec();
            verifier(v, kp.public_key().as_ref(), signature)
        }
        (Alg::Ed25519, Op::Sign) => {
            let kp = Ed25519KeyPair::generate().map_err(unspecified("Ed25519 key generation"))?;
            let det = kp.sign(MSG).as_ref() == kp.sign(MSG).as_ref();
            Ok(Prepared::signing(
                move || {
                    black_box(kp.sign(MSG));
                },
                det,
            ))
        }
        (Alg::Ed25519, Op::Verify) => {
            let kp = Ed25519KeyPair::generate().map_err(unspecified("Ed25519 key generation"))?;
            let signature = kp.sign(MSG).as_ref().to_vec();
            verifier(&sig::ED25519, kp.public_key().as_ref(), signature)
        }
        (Alg::Ed448, _) => Err(no_ed448()),
        (Alg::Kex(c), Op::Ecdhe | Op::Ecdh) => prepare_kex(c, op == Op::Ecdhe, rng),
        (alg, op) => Err(format!("{op:?} does not apply to {alg:?}")),
    }
}
