//! RustCrypto: `p192`, `p224`, `p256`, `p384`, `p521`, `k256`, `bp256`, `bp384` through
//! `ecdsa` and `elliptic_curve::ecdh`, `rsa`, and `ed25519-dalek`, `x25519-dalek`,
//! `ed448-goldilocks`.

use std::hint::black_box;

use ecdsa::elliptic_curve::ecdh::{diffie_hellman, EphemeralSecret};
use ecdsa::elliptic_curve::{CurveArithmetic, Generate, SecretKey};
use ecdsa::signature::hazmat::{PrehashSigner, PrehashVerifier};
use rand_core_06::OsRng;
use rsa::pkcs8::DecodePrivateKey as _;
use sha2_010::{Digest as _, Sha256, Sha384, Sha512};

use super::algs::{Alg, Curve, Op, Prep, Prepared, MSG};
use super::Keys;

macro_rules! ecdsa_prepare {
    ($curve:ty, $hash:ty, $op:expr) => {{
        type Sk = ecdsa::SigningKey<$curve>;
        type DerSig = ecdsa::der::Signature<$curve>;
        fn sign(sk: &Sk) -> Result<DerSig, String> {
            let prehash = <$hash>::digest(MSG);
            PrehashSigner::<DerSig>::sign_prehash(sk, &prehash)
                .map_err(|e| format!("RustCrypto ECDSA sign: {e}"))
        }
        fn verify(vk: &ecdsa::VerifyingKey<$curve>, der: &[u8]) -> Result<(), String> {
            let prehash = <$hash>::digest(MSG);
            let sig =
                DerSig::try_from(der).map_err(|e| format!("RustCrypto DER signature: {e}"))?;
            vk.verify_prehash(&prehash, &sig)
                .map_err(|e| format!("RustCrypto ECDSA verify: {e}"))
        }
        match $op {
            Op::Keygen => Ok(Prepared::new(|| {
                let sk = <Sk as Generate>::generate();
                black_box(sk.verifying_key());
            })),
            Op::Sign => {
                let sk = <Sk as Generate>::generate();
                let (a, b) = (sign(&sk)?, sign(&sk)?);
                verify(sk.verifying_key(), a.as_bytes())?;
                Ok(Prepared::signing(
                    move || {
                        black_box(sign(&sk).expect("worked in the dry run"));
                    },
                    a.as_bytes() == b.as_bytes(),
                ))
            }
            _ => {
                let sk = <Sk as Generate>::generate();
                let der = sign(&sk)?.as_bytes().to_vec();
                let vk = *sk.verifying_key();
                verify(&vk, &der)?;
                Ok(Prepared::new(move || {
                    verify(&vk, black_box(&der)).expect("worked in the dry run")
                }))
            }
        }
    }};
}

/// P-192 in RustCrypto verifies only: a signature and a key made by OpenSSL.
fn p192_verify() -> Prep {
    let key = super::ossl::keygen(Alg::Ecdsa(Curve::P192))?;
    let der = super::ossl::sign(Alg::Ecdsa(Curve::P192), &key, false)?;
    let point = {
        let ec = key.ec_key().map_err(|e| e.to_string())?;
        let mut ctx = openssl::bn::BigNumContext::new().map_err(|e| e.to_string())?;
        ec.public_key()
            .to_bytes(
                ec.group(),
                openssl::ec::PointConversionForm::UNCOMPRESSED,
                &mut ctx,
            )
            .map_err(|e| e.to_string())?
    };
    let vk = ecdsa::VerifyingKey::<p192::NistP192>::from_sec1_bytes(&point)
        .map_err(|e| format!("p192: public key: {e}"))?;
    let verify =
        move |vk: &ecdsa::VerifyingKey<p192::NistP192>, der: &[u8]| -> Result<(), String> {
            let prehash = Sha256::digest(MSG);
            let sig = ecdsa::der::Signature::<p192::NistP192>::try_from(der)
                .map_err(|e| format!("p192: DER signature: {e}"))?;
            vk.verify_prehash(&prehash, &sig)
                .map_err(|e| format!("p192 rejects OpenSSL's signature: {e}"))
        };
    verify(&vk, &der)?;
    Ok(Prepared::new(move || {
        verify(&vk, black_box(&der)).expect("worked in the dry run")
    }))
}

fn ecdh_prepare<C: CurveArithmetic>(op: Op) -> Prep {
    let peer = SecretKey::<C>::generate();
    let peer_pub = peer.public_key();
    let ours = SecretKey::<C>::generate();
    let s1 = diffie_hellman(ours.to_nonzero_scalar(), peer_pub.as_affine());
    let s2 = diffie_hellman(peer.to_nonzero_scalar(), ours.public_key().as_affine());
    if s1.raw_secret_bytes() != s2.raw_secret_bytes() {
        return Err("RustCrypto: the two sides derived different secrets".into());
    }
    if op == Op::Ecdhe {
        Ok(Prepared::new(move || {
            let eph = EphemeralSecret::<C>::generate();
            black_box(eph.public_key());
            black_box(eph.diffie_hellman(&peer_pub));
        }))
    } else {
        let scalar = ours.to_nonzero_scalar();
        Ok(Prepared::new(move || {
            black_box(diffie_hellman(scalar, peer_pub.as_affine()));
        }))
    }
}

fn x25519_prepare(op: Op) -> Prep {
    use x25519_dalek::{EphemeralSecret, PublicKey, StaticSecret};
    let peer = StaticSecret::random();
    let peer_pub = PublicKey::from(&peer);
    let ours = StaticSecret::random();
    if ours.diffie_hellman(&peer_pub).as_bytes()
        != peer.diffie_hellman(&PublicKey::from(&ours)).as_bytes()
    {
        return Err("x25519-dalek: the two sides derived different secrets".into());
    }
    if op == Op::Ecdhe {
        Ok(Prepared::new(move || {
            let eph = EphemeralSecret::random();
            black_box(PublicKey::from(&eph));
            black_box(eph.diffie_hellman(&peer_pub));
        }))
    } else {
        Ok(Prepared::new(move || {
            black_box(ours.diffie_hellman(&peer_pub));
        }))
    }
}

fn ed25519_prepare(op: Op) -> Prep {
    use ed25519_dalek::{Signer as _, SigningKey, Verifier as _};
    let mut rng = ecdsa::elliptic_curve::rand_core::UnwrapErr(getrandom_04::SysRng);
    let sk = SigningKey::generate(&mut rng);
    let vk = sk.verifying_key();
    let sig = sk.sign(MSG);
    vk.verify(MSG, &sig)
        .map_err(|e| format!("ed25519-dalek rejects its own signature: {e}"))?;
    match op {
        Op::Keygen => Ok(Prepared::new(move || {
            let sk = SigningKey::generate(&mut rng);
            black_box(sk.verifying_key());
        })),
        Op::Sign => {
            let det = sk.sign(MSG) == sig;
            Ok(Prepared::signing(
                move || {
                    black_box(sk.sign(MSG));
                },
                det,
            ))
        }
        _ => Ok(Prepared::new(move || {
            vk.verify(MSG, black_box(&sig))
                .expect("worked in the dry run")
        })),
    }
}

fn ed448_prepare(op: Op) -> Prep {
    use ecdsa::signature::{Signer as _, Verifier as _};
    use ed448_goldilocks::SigningKey;
    let sk = <SigningKey as Generate>::generate();
    let vk = sk.verifying_key();
    let sig: ed448_goldilocks::Signature = sk.sign(MSG);
    vk.verify(MSG, &sig)
        .map_err(|e| format!("ed448-goldilocks rejects its own signature: {e}"))?;
    match op {
        Op::Keygen => Ok(Prepared::new(|| {
            let sk = <SigningKey as Generate>::generate();
            black_box(sk.verifying_key());
        })),
        Op::Sign => {
            let again: ed448_goldilocks::Signature = sk.sign(MSG);
            Ok(Prepared::signing(
                move || {
                    black_box::<ed448_goldilocks::Signature>(sk.sign(MSG));
                },
                again == sig,
            ))
        }
        _ => Ok(Prepared::new(move || {
            vk.verify(MSG, black_box(&sig))
                .expect("worked in the dry run")
        })),
    }
}

fn rsa_prepare(bits: u32, op: Op, keys: &Keys) -> Prep {
    if op == Op::Keygen {
        return Ok(Prepared::new(move || {
            black_box(
                rsa::RsaPrivateKey::new(&mut OsRng, bits as usize).expect("rsa key generation"),
            );
        }));
    }
    // The key made once for every library (rsa key generation takes seconds).
    let key = rsa::RsaPrivateKey::from_pkcs8_der(&keys.rsa_pkcs8(bits)?)
        .map_err(|e| format!("rsa: importing the key: {e}"))?;
    let public = key.to_public_key();
    match op {
        Op::Sign | Op::Verify => rsa_prepared(
            rsa::pkcs1v15::SigningKey::<Sha256>::new(key),
            rsa::pkcs1v15::VerifyingKey::<Sha256>::new(public),
            op == Op::Sign,
            "",
        ),
        _ => rsa_prepared(
            rsa::pss::BlindedSigningKey::<Sha256>::new(key),
            rsa::pss::VerifyingKey::<Sha256>::new(public),
            op == Op::SignPss,
            " PSS",
        ),
    }
}

/// Prepares one operation.
pub fn prepare(alg: Alg, op: Op, keys: &Keys) -> Prep {
    match alg {
        Alg::Rsa(bits) => rsa_prepare(bits, op, keys),
        Alg::Ecdsa(c) => match c {
            Curve::P192 if op == Op::Verify => p192_verify(),
            Curve::P192 => Err(
                "p192 0.14 (pre-release) implements ECDSA verification only: no P-192 signing keys"
                    .into(),
            ),
            Curve::P224 => ecdsa_prepare!(p224::NistP224, Sha256, op),
            Curve::P256 => ecdsa_prepare!(p256::NistP256, Sha256, op),
            Curve::P384 => ecdsa_prepare!(p384::NistP384, Sha384, op),
            Curve::P521 => ecdsa_prepare!(p521::NistP521, Sha512, op),
            Curve::K256 => ecdsa_prepare!(k256::Secp256k1, Sha256, op),
            Curve::Bp256 => ecdsa_prepare!(bp256::BrainpoolP256r1, Sha256, op),
            Curve::Bp384 => ecdsa_prepare!(bp384::BrainpoolP384r1, Sha384, op),
            Curve::Bp512 => Err(no_bp512()),
            Curve::X25519 | Curve::X448 => Err("not an ECDSA curve".into()),
        },
        Alg::Ed25519 => ed25519_prepare(op),
        Alg::Ed448 => ed448_prepare(op),
        Alg::Kex(c) => match c {
            Curve::P192 => ecdh_prepare::<p192::NistP192>(op),
            Curve::P224 => ecdh_prepare::<p224::NistP224>(op),
            Curve::P256 => ecdh_prepare::<p256::NistP256>(op),
            Curve::P384 => ecdh_prepare::<p384::NistP384>(op),
            Curve::P521 => ecdh_prepare::<p521::NistP521>(op),
            Curve::K256 => ecdh_prepare::<k256::Secp256k1>(op),
            Curve::Bp256 => ecdh_prepare::<bp256::BrainpoolP256r1>(op),
            Curve::Bp384 => ecdh_prepare::<bp384::BrainpoolP384r1>(op),
            Curve::Bp512 => Err(no_bp512()),
            Curve::X25519 => x25519_prepare(op),
            Curve::X448 => Err(
                "RustCrypto's X448 is the separate x448 crate (pre-release), not included here"
                    .into(),
            ),
        },
    }
}

fn no_bp512() -> String {
    "RustCrypto has no brainpoolP512r1 crate (bp256 and bp384 only; no bp512 on crates.io)".into()
}

/// Dry-runs an RSA signer and verifier (sign twice: is the scheme deterministic? verify its
/// own signature), then prepares the timed sign or verify.
fn rsa_prepared<S, V, Sig>(
    signer: S,
    verifier: V,
    sign: bool,
    scheme: &str,
) -> Result<Prepared, String>
where
    S: rsa::signature::RandomizedSigner<Sig> + 'static,
    V: rsa::signature::Verifier<Sig> + 'static,
    Sig: rsa::signature::SignatureEncoding + 'static,
{
    let a = signer
        .try_sign_with_rng(&mut OsRng, MSG)
        .map_err(|e| format!("rsa{scheme} sign: {e}"))?;
    let b = signer
        .try_sign_with_rng(&mut OsRng, MSG)
        .map_err(|e| format!("rsa{scheme} sign: {e}"))?;
    verifier
        .verify(MSG, &a)
        .map_err(|e| format!("rsa rejects its own{scheme} signature: {e}"))?;
    if sign {
        Ok(Prepared::signing(
            move || {
                black_box(signer.sign_with_rng(&mut OsRng, MSG));
            },
            a.to_bytes().as_ref() == b.to_bytes().as_ref(),
        ))
    } else {
        Ok(Prepared::new(move || {
            verifier
                .verify(MSG, black_box(&a))
                .expect("worked in the dry run")
        }))
    }
}
