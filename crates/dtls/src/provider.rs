//! secrelay's pieces of dimpl's crypto provider: aws-lc's provider with three parts replaced
//! where dimpl's own cost more than the cryptography they wrap (`docs/benchmarks.md`, the
//! handshake lab, measured per part inside the handshake).
//!
//! - **Keys** (`key_cache`): the certificate's private key parsed once, not per association.
//! - **The peer's signature** ([`FastVerifier`]). Every handshake verifies one signature from
//!   the peer (its ServerKeyExchange, or its CertificateVerify) against the public key in the
//!   peer's certificate. dimpl's aws-lc verifier decodes the certificate in full with
//!   `x509-cert` (every field and extension, into owned structures) to reach that key, ~3 µs of
//!   the ~45 µs verification on both sides of every handshake; [`FastVerifier`] reads the key
//!   with `rustls-webpki`'s parser (borrowed slices, ~0.2 µs) and verifies with the same aws-lc
//!   algorithms, for ECDSA with SHA-256 or SHA-384 on a P-256 or P-384 key (the four pairings of
//!   dimpl's allow-list). Whatever that path does not verify (a certificate webpki refuses to
//!   parse, a key on neither curve, any other algorithm, a signature that does not verify) goes
//!   to dimpl's verifier, whose answer stands: nothing dimpl's verifier accepted is refused now,
//!   and every failure carries its error. The one difference, found by the differential fuzz
//!   target (`fuzz/fuzz_targets/dtls_verifier.rs`): a certificate that webpki decodes and
//!   `x509-cert` does not (a GeneralizedTime year before 1970, say) now has its signature
//!   checked against the key it carries, where dimpl's verifier stopped at decoding. The
//!   certificate itself is authenticated by its fingerprint over the exact bytes (or the CA
//!   check, which is webpki's), as before.
//! - **RSA peers** ([`RsaSuite`], and [`FastVerifier`] for RSA signatures). Our certificate
//!   is ECDSA and dimpl only ever signs with ECDSA, but a peer's certificate may be RSA-2048
//!   (GStreamer's webrtcbin, many SIP stacks). The provider lists TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256
//!   and TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384 after aws-lc's ECDHE-ECDSA suites, and
//!   [`FastVerifier`] verifies RSASSA-PKCS1-v1_5 with SHA-256 or SHA-384 on 2048–8192-bit keys
//!   (webpki's aws-lc algorithms). The patched dimpl (`vendor/dimpl/SECRELAY-PATCH.md`) reads
//!   an ECDHE-RSA suite in the configuration as "RSA signatures are verified": a client then
//!   offers those suites and RSA signature algorithms, and a server's CertificateRequest asks
//!   for RSA client certificates as well. The record protection of an ECDHE-RSA suite is the
//!   ECDHE-ECDSA suite's with the same AEAD and PRF hash: [`RsaSuite`] is that suite under
//!   the ECDHE-RSA identifier. dimpl checks the verifier on RSA signatures with known answers
//!   when a configuration is built, as it does for ECDSA.
//! - **HMAC** ([`RustCryptoHmac`]). DTLS 1.2's PRF (master secret, key block, both Finished
//!   messages, the SRTP exporter) and the cookie run ~20 one-shot HMACs per side. aws-lc-rs
//!   builds a keyed context, copies it and cleans both up for each one: ~390 ns for a 48-byte
//!   key and 77 bytes of data, where RustCrypto's `hmac` over `sha2` (SHA-NI where the CPU has
//!   it) takes ~230 ns for the same five SHA-256 blocks. Its state is zeroized on drop (the
//!   crates' `zeroize` feature), as aws-lc cleanses its own.
//!
//!   It also carries the one hook the stateless cookie responder needs ([`pin_cookie`]): dimpl's
//!   DTLS 1.2 server computes its cookie as HMAC-SHA256(a per-object secret, client random)
//!   through this provider; while a [`CookiePin`] is alive on a thread, the HMAC of exactly
//!   the pinned client random (32 bytes, with a 32-byte key, SHA-256) answers the pinned cookie
//!   instead, so the engine accepts the cookie the responder issued and verified
//!   (`cookie.rs`, "The hand-off").

use dimpl::crypto::{
    Cipher, CryptoProvider, Dtls12CipherSuite, HashAlgorithm, HmacProvider, NamedGroup,
    SignatureAlgorithm, SignatureVerifier, SupportedDtls12CipherSuite,
};
use dimpl::{CryptoError, CryptoOperation};
use hmac::{Hmac, KeyInit, Mac};
use rustls_pki_types::{CertificateDer, SignatureVerificationAlgorithm};
use std::cell::Cell;
use std::sync::OnceLock;

use crate::key_cache::CachingKeyProvider;

/// aws-lc's provider (dimpl's default) with secrelay's key cache, verifier and HMAC, and the
/// ECDHE-RSA suites after aws-lc's own.
pub(crate) fn crypto_provider() -> CryptoProvider {
    static KEYS: OnceLock<CachingKeyProvider> = OnceLock::new();
    static VERIFIER: OnceLock<FastVerifier> = OnceLock::new();
    static HMAC: RustCryptoHmac = RustCryptoHmac;
    static RSA: OnceLock<Vec<RsaSuite>> = OnceLock::new();
    static SUITES: OnceLock<Vec<&'static dyn SupportedDtls12CipherSuite>> = OnceLock::new();
    let aws_lc = dimpl::crypto::aws_lc_rs::default_provider();
    let suites = SUITES.get_or_init(|| {
        let rsa = RSA.get_or_init(|| rsa_suites(aws_lc.cipher_suites));
        let mut all: Vec<&'static dyn SupportedDtls12CipherSuite> = aws_lc.cipher_suites.to_vec();
        all.extend(
            rsa.iter()
                .map(|s| s as &'static dyn SupportedDtls12CipherSuite),
        );
        all
    });
    CryptoProvider {
        cipher_suites: suites.as_slice(),
        key_provider: KEYS.get_or_init(|| CachingKeyProvider {
            fallback: aws_lc.key_provider,
        }),
        signature_verification: VERIFIER.get_or_init(|| FastVerifier {
            fallback: aws_lc.signature_verification,
        }),
        hmac_provider: &HMAC,
        ..aws_lc
    }
}

/// An ECDHE-RSA suite: an ECDHE-ECDSA suite of the same AEAD and PRF hash under the ECDHE-RSA
/// identifier (the suites differ only in the certificate that signs the key exchange).
#[derive(Debug)]
pub(crate) struct RsaSuite {
    id: Dtls12CipherSuite,
    same_protection: &'static dyn SupportedDtls12CipherSuite,
}

/// The ECDHE-RSA suites whose ECDHE-ECDSA twin is among `suites`, AES-256-GCM first (dimpl's
/// own order for the ECDSA pair).
fn rsa_suites(suites: &'static [&'static dyn SupportedDtls12CipherSuite]) -> Vec<RsaSuite> {
    use Dtls12CipherSuite as D;
    [
        (
            D::ECDHE_RSA_AES256_GCM_SHA384,
            D::ECDHE_ECDSA_AES256_GCM_SHA384,
        ),
        (
            D::ECDHE_RSA_AES128_GCM_SHA256,
            D::ECDHE_ECDSA_AES128_GCM_SHA256,
        ),
    ]
    .into_iter()
    .filter_map(|(id, twin)| {
        suites.iter().find(|s| s.suite() == twin).map(|s| RsaSuite {
            id,
            same_protection: *s,
        })
    })
    .collect()
}

impl SupportedDtls12CipherSuite for RsaSuite {
    fn suite(&self) -> Dtls12CipherSuite {
        self.id
    }
    fn hash_algorithm(&self) -> HashAlgorithm {
        self.same_protection.hash_algorithm()
    }
    fn key_lengths(&self) -> (usize, usize, usize) {
        self.same_protection.key_lengths()
    }
    fn explicit_nonce_len(&self) -> usize {
        self.same_protection.explicit_nonce_len()
    }
    fn tag_len(&self) -> usize {
        self.same_protection.tag_len()
    }
    fn min_protected_fragment_len(&self) -> usize {
        self.same_protection.min_protected_fragment_len()
    }
    fn create_cipher(&self, key: &[u8]) -> Result<Box<dyn Cipher>, CryptoError> {
        self.same_protection.create_cipher(key)
    }
}

/// dimpl's `HmacProvider` on RustCrypto's `hmac` and `sha2`.
#[derive(Debug)]
pub(crate) struct RustCryptoHmac;

thread_local! {
    /// The pinned (client random, cookie), while a [`CookiePin`] lives on this thread.
    static COOKIE_PIN: Cell<Option<([u8; 32], [u8; 32])>> = const { Cell::new(None) };
}

/// While alive, dimpl's cookie for the ClientHello with this random is the pinned one, on this
/// thread (see the module docs). Dropped (unwinding included), the pin is gone.
#[must_use = "the pin holds only while the guard lives"]
pub(crate) struct CookiePin(());

/// Pins `cookie` as the cookie of the ClientHello with `client_random`, on this thread, until
/// the guard drops. For [`crate::endpoint::Endpoint::new_admitted`] only.
pub(crate) fn pin_cookie(client_random: &[u8; 32], cookie: &[u8; 32]) -> CookiePin {
    COOKIE_PIN.with(|p| p.set(Some((*client_random, *cookie))));
    CookiePin(())
}

impl Drop for CookiePin {
    fn drop(&mut self) {
        COOKIE_PIN.with(|p| p.set(None));
    }
}

/// The pinned cookie, if `key`/`data` is dimpl's cookie HMAC of the pinned client random.
/// Only that shape is looked at (SHA-256, a 32-byte key and 32 bytes of data), so the PRF's
/// other HMACs never read the thread-local; one whose data equalled a client random would need
/// a 256-bit collision.
fn pinned_cookie(hash: HashAlgorithm, key: &[u8], data: &[u8]) -> Option<[u8; 32]> {
    if hash != HashAlgorithm::SHA256 || key.len() != 32 || data.len() != 32 {
        return None;
    }
    COOKIE_PIN
        .with(Cell::get)
        .filter(|(random, _)| random[..] == *data)
        .map(|(_, cookie)| cookie)
}

/// One HMAC into `out`; an `out` too short for the tag is an error, not a panic.
fn hmac_into<M: Mac + KeyInit>(
    key: &[u8],
    data: &[u8],
    out: &mut [u8],
) -> Result<usize, CryptoError> {
    let failed = CryptoError::OperationFailed(CryptoOperation::ComputeHmac);
    // HMAC takes keys of any length (longer ones are hashed first): this cannot fail.
    let mut mac = <M as KeyInit>::new_from_slice(key).map_err(|_| failed.clone())?;
    mac.update(data);
    let tag = mac.finalize().into_bytes();
    let n = tag.len();
    out.get_mut(..n).ok_or(failed)?.copy_from_slice(&tag);
    Ok(n)
}

impl HmacProvider for RustCryptoHmac {
    fn hmac(
        &self,
        hash: HashAlgorithm,
        key: &[u8],
        data: &[u8],
        out: &mut [u8],
    ) -> Result<usize, CryptoError> {
        if let Some(cookie) = pinned_cookie(hash, key, data) {
            let failed = CryptoError::OperationFailed(CryptoOperation::ComputeHmac);
            out.get_mut(..32).ok_or(failed)?.copy_from_slice(&cookie);
            return Ok(32);
        }
        match hash {
            HashAlgorithm::SHA256 => hmac_into::<Hmac<sha2::Sha256>>(key, data, out),
            HashAlgorithm::SHA384 => hmac_into::<Hmac<sha2::Sha384>>(key, data, out),
            _ => Err(CryptoError::UnsupportedHmacHash(hash)),
        }
    }
}

/// dimpl's `SignatureVerifier` with the certificate read by webpki's parser.
#[derive(Debug)]
pub(crate) struct FastVerifier {
    /// dimpl's aws-lc verifier, for what this one does not take.
    pub(crate) fallback: &'static dyn SignatureVerifier,
}

/// The webpki (aws-lc) algorithm for an ECDSA key on `group` signing with `hash`, for the four
/// pairings dimpl allows.
fn ecdsa(
    group: NamedGroup,
    hash: HashAlgorithm,
) -> Option<&'static dyn SignatureVerificationAlgorithm> {
    use webpki::aws_lc_rs::{
        ECDSA_P256_SHA256, ECDSA_P256_SHA384, ECDSA_P384_SHA256, ECDSA_P384_SHA384,
    };
    Some(match (group, hash) {
        (NamedGroup::Secp256r1, HashAlgorithm::SHA256) => ECDSA_P256_SHA256,
        (NamedGroup::Secp256r1, HashAlgorithm::SHA384) => ECDSA_P256_SHA384,
        (NamedGroup::Secp384r1, HashAlgorithm::SHA256) => ECDSA_P384_SHA256,
        (NamedGroup::Secp384r1, HashAlgorithm::SHA384) => ECDSA_P384_SHA384,
        _ => return None,
    })
}

impl SignatureVerifier for FastVerifier {
    fn verify_signature(
        &self,
        cert_der: &[u8],
        data: &[u8],
        signature: &[u8],
        hash_alg: HashAlgorithm,
        sig_alg: SignatureAlgorithm,
    ) -> Result<(), CryptoError> {
        let fallback = || {
            self.fallback
                .verify_signature(cert_der, data, signature, hash_alg, sig_alg)
        };
        if sig_alg == SignatureAlgorithm::RSA {
            return verify_rsa(cert_der, data, signature, hash_alg);
        }
        if sig_alg != SignatureAlgorithm::ECDSA {
            return fallback();
        }
        let der = CertificateDer::from(cert_der);
        let Ok(cert) = webpki::EndEntityCert::try_from(&der) else {
            return fallback();
        };
        // The key's curve is not known without decoding its parameters: webpki refuses an
        // algorithm whose key identifier differs, before any arithmetic.
        for group in [NamedGroup::Secp256r1, NamedGroup::Secp384r1] {
            let Some(alg) = ecdsa(group, hash_alg) else {
                break;
            };
            if cert.verify_signature(alg, data, signature).is_ok() {
                return Ok(());
            }
        }
        // Anything else gets dimpl's verdict: a bad signature (verified a second time, on the
        // failure path only) and keys webpki refuses that aws-lc takes (the X9.62 hybrid point
        // form, which RFC 5480 forbids).
        fallback()
    }
}

/// RSASSA-PKCS1-v1_5 with SHA-256 or SHA-384 by the RSA key (2048 to 8192 bits) of `cert_der`,
/// through webpki's aws-lc algorithms (which refuse a key that is not RSA, or is smaller).
fn verify_rsa(
    cert_der: &[u8],
    data: &[u8],
    signature: &[u8],
    hash: HashAlgorithm,
) -> Result<(), CryptoError> {
    use webpki::aws_lc_rs::{RSA_PKCS1_2048_8192_SHA256, RSA_PKCS1_2048_8192_SHA384};
    let rsa = SignatureAlgorithm::RSA;
    let alg: &dyn SignatureVerificationAlgorithm = match hash {
        HashAlgorithm::SHA256 => RSA_PKCS1_2048_8192_SHA256,
        HashAlgorithm::SHA384 => RSA_PKCS1_2048_8192_SHA384,
        _ => {
            return Err(CryptoError::UnsupportedSignaturePair {
                signature: rsa,
                hash,
            })
        }
    };
    let der = CertificateDer::from(cert_der);
    let cert =
        webpki::EndEntityCert::try_from(&der).map_err(|_| CryptoError::CertificateParseFailed)?;
    cert.verify_signature(alg, data, signature)
        .map_err(|e| match e {
            webpki::Error::InvalidSignatureForPublicKey => {
                CryptoError::SignatureVerificationFailed {
                    signature: rsa,
                    hash,
                    group: NamedGroup::from_u16(0),
                }
            }
            // Not an RSA key, or one outside 2048–8192 bits.
            _ => CryptoError::UnsupportedPublicKeyAlgorithm,
        })
}

/// For the differential fuzz target (`fuzz/fuzz_targets/dtls_verifier.rs`); built only under
/// cargo-fuzz's `--cfg fuzzing`.
#[cfg(fuzzing)]
pub mod fuzzing {
    use super::*;

    /// [`FastVerifier`]'s answer and dimpl's own verifier's, for one ECDSA signature.
    pub fn verify_both(
        cert_der: &[u8],
        data: &[u8],
        signature: &[u8],
        sha384: bool,
    ) -> (Result<(), CryptoError>, Result<(), CryptoError>) {
        let dimpls = dimpl::crypto::aws_lc_rs::default_provider().signature_verification;
        let ours = FastVerifier { fallback: dimpls };
        let hash = if sha384 {
            HashAlgorithm::SHA384
        } else {
            HashAlgorithm::SHA256
        };
        let ecdsa = SignatureAlgorithm::ECDSA;
        (
            ours.verify_signature(cert_der, data, signature, hash, ecdsa),
            dimpls.verify_signature(cert_der, data, signature, hash, ecdsa),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cert::{Certificate, KeyType};
    use aws_lc_rs::rand::SystemRandom;
    use aws_lc_rs::signature::{
        EcdsaKeyPair, ECDSA_P256_SHA256_ASN1_SIGNING, ECDSA_P384_SHA384_ASN1_SIGNING,
    };

    fn ours() -> FastVerifier {
        FastVerifier {
            fallback: dimpl::crypto::aws_lc_rs::default_provider().signature_verification,
        }
    }

    fn dimpls() -> &'static dyn SignatureVerifier {
        dimpl::crypto::aws_lc_rs::default_provider().signature_verification
    }

    /// A signature by the certificate's key over `data` with `hash`: aws-lc for the curve's own
    /// hash, OpenSSL for the two crossed pairings aws-lc does not sign with (`None` without it).
    fn sign(cert: &Certificate, hash: HashAlgorithm, data: &[u8]) -> Option<Vec<u8>> {
        let der = cert.private_key_der();
        let native = match (cert.key_type(), hash) {
            (KeyType::EcdsaP256, HashAlgorithm::SHA256) => Some(&ECDSA_P256_SHA256_ASN1_SIGNING),
            (KeyType::EcdsaP384, HashAlgorithm::SHA384) => Some(&ECDSA_P384_SHA384_ASN1_SIGNING),
            _ => None,
        };
        if let Some(alg) = native {
            let key = EcdsaKeyPair::from_pkcs8(alg, der).expect("key");
            let sig = key.sign(&SystemRandom::new(), data).expect("sign");
            return Some(sig.as_ref().to_vec());
        }
        #[cfg(feature = "openssl")]
        {
            use openssl::hash::MessageDigest;
            let key = openssl::pkey::PKey::private_key_from_pkcs8(der).expect("key");
            let md = match hash {
                HashAlgorithm::SHA256 => MessageDigest::sha256(),
                _ => MessageDigest::sha384(),
            };
            let mut signer = openssl::sign::Signer::new(md, &key).expect("signer");
            Some(signer.sign_oneshot_to_vec(data).expect("sign"))
        }
        #[cfg(not(feature = "openssl"))]
        None
    }

    /// Both verifiers' answers, compared as text (dimpl's error has no `PartialEq`).
    fn both(
        cert: &[u8],
        data: &[u8],
        sig: &[u8],
        hash: HashAlgorithm,
        alg: SignatureAlgorithm,
    ) -> String {
        let a = format!("{:?}", ours().verify_signature(cert, data, sig, hash, alg));
        let b = format!(
            "{:?}",
            dimpls().verify_signature(cert, data, sig, hash, alg)
        );
        assert_eq!(a, b, "FastVerifier and dimpl's verifier disagree");
        a
    }

    #[test]
    fn answers_as_dimpls_verifier_does_for_every_allowed_pairing() {
        let data = vec![0x5a_u8; 1500];
        let cases = [
            (KeyType::EcdsaP256, HashAlgorithm::SHA256),
            (KeyType::EcdsaP256, HashAlgorithm::SHA384),
            (KeyType::EcdsaP384, HashAlgorithm::SHA256),
            (KeyType::EcdsaP384, HashAlgorithm::SHA384),
        ];
        for (kt, hash) in cases {
            let cert = Certificate::self_signed(kt, "verifier").expect("cert");
            let Some(sig) = sign(&cert, hash, &data) else {
                continue;
            };
            let ecdsa = SignatureAlgorithm::ECDSA;
            assert_eq!(
                both(cert.der(), &data, &sig, hash, ecdsa),
                "Ok(())",
                "{kt:?} {hash:?}"
            );
            // Tampered data, tampered signature, the other hash: the same errors as dimpl's.
            let mut bad = data.clone();
            bad[100] ^= 1;
            assert!(
                both(cert.der(), &bad, &sig, hash, ecdsa).contains("SignatureVerificationFailed")
            );
            let mut bad_sig = sig.clone();
            let last = bad_sig.len() - 1;
            bad_sig[last] ^= 1;
            assert!(both(cert.der(), &data, &bad_sig, hash, ecdsa).starts_with("Err"));
            let other = if hash == HashAlgorithm::SHA256 {
                HashAlgorithm::SHA384
            } else {
                HashAlgorithm::SHA256
            };
            assert!(both(cert.der(), &data, &sig, other, ecdsa).starts_with("Err"));
            // An empty signature, garbage for a signature.
            assert!(both(cert.der(), &data, &[], hash, ecdsa).starts_with("Err"));
            assert!(
                both(cert.der(), &data, &[0x30, 0x03, 0x02, 0x01], hash, ecdsa).starts_with("Err")
            );
        }
    }

    #[test]
    fn what_it_does_not_take_gets_dimpls_answer() {
        let data = b"signed";
        let p256 = Certificate::self_signed(KeyType::EcdsaP256, "verifier").expect("cert");
        let sig = sign(&p256, HashAlgorithm::SHA256, data).expect("aws-lc signs P-256/SHA-256");
        // Not a certificate; a truncated one; a certificate with a byte changed in its body.
        assert!(both(
            b"not a certificate",
            data,
            &sig,
            HashAlgorithm::SHA256,
            SignatureAlgorithm::ECDSA
        )
        .starts_with("Err"));
        let der = p256.der();
        assert!(both(
            &der[..der.len() / 2],
            data,
            &sig,
            HashAlgorithm::SHA256,
            SignatureAlgorithm::ECDSA
        )
        .starts_with("Err"));
        // Another hash, an RSA or Ed25519 key. (RSA signatures are ours: see below.)
        assert!(both(
            der,
            data,
            &sig,
            HashAlgorithm::SHA512,
            SignatureAlgorithm::ECDSA
        )
        .starts_with("Err"));
        for kt in [KeyType::Rsa2048, KeyType::Ed25519] {
            let cert = Certificate::self_signed(kt, "verifier").expect("cert");
            assert!(both(
                cert.der(),
                data,
                &sig,
                HashAlgorithm::SHA256,
                SignatureAlgorithm::ECDSA
            )
            .starts_with("Err"));
        }
    }

    /// RSASSA-PKCS1-v1_5 by an RSA key of 2048, 3072 or 4096 bits, with SHA-256 and SHA-384:
    /// verified (dimpl's own verifier refuses every RSA signature); a changed byte of the data
    /// or the signature, the other hash, an ECDSA key, or garbage fail with dimpl's errors.
    #[test]
    fn verifies_rsa_pkcs1_signatures_for_the_ecdhe_rsa_suites() {
        use aws_lc_rs::signature::{RsaKeyPair, RSA_PKCS1_SHA256, RSA_PKCS1_SHA384};
        let data = vec![0xa5_u8; 700];
        let v = ours();
        let rsa = SignatureAlgorithm::RSA;
        for kt in [KeyType::Rsa2048, KeyType::Rsa3072, KeyType::Rsa4096] {
            let cert = Certificate::self_signed(kt, "rsa-verifier").expect("cert");
            let key = RsaKeyPair::from_pkcs8(cert.private_key_der()).expect("RSA key");
            for (hash, alg) in [
                (HashAlgorithm::SHA256, &RSA_PKCS1_SHA256),
                (HashAlgorithm::SHA384, &RSA_PKCS1_SHA384),
            ] {
                let mut sig = vec![0u8; key.public_modulus_len()];
                key.sign(alg, &SystemRandom::new(), &data, &mut sig)
                    .expect("sign");
                let what = format!("{kt:?} {hash:?}");
                assert_eq!(
                    v.verify_signature(cert.der(), &data, &sig, hash, rsa),
                    Ok(()),
                    "{what}"
                );
                assert!(
                    dimpls()
                        .verify_signature(cert.der(), &data, &sig, hash, rsa)
                        .is_err(),
                    "{what}: dimpl's verifier took RSA"
                );
                let mut bad = data.clone();
                bad[7] ^= 1;
                assert!(
                    matches!(
                        v.verify_signature(cert.der(), &bad, &sig, hash, rsa),
                        Err(CryptoError::SignatureVerificationFailed { .. })
                    ),
                    "{what}"
                );
                let mut bad_sig = sig.clone();
                bad_sig[0] ^= 0x40;
                assert!(v
                    .verify_signature(cert.der(), &data, &bad_sig, hash, rsa)
                    .is_err());
                let other = if hash == HashAlgorithm::SHA256 {
                    HashAlgorithm::SHA384
                } else {
                    HashAlgorithm::SHA256
                };
                assert!(v
                    .verify_signature(cert.der(), &data, &sig, other, rsa)
                    .is_err());
                assert_eq!(
                    v.verify_signature(cert.der(), &data, &sig, HashAlgorithm::SHA512, rsa),
                    Err(CryptoError::UnsupportedSignaturePair {
                        signature: rsa,
                        hash: HashAlgorithm::SHA512
                    })
                );
                assert!(v
                    .verify_signature(cert.der(), &data, &[], hash, rsa)
                    .is_err());
            }
        }
        // An ECDSA certificate claimed to sign with RSA; not a certificate at all.
        let p256 = Certificate::self_signed(KeyType::EcdsaP256, "not-rsa").expect("cert");
        assert_eq!(
            v.verify_signature(p256.der(), &data, &[1; 256], HashAlgorithm::SHA256, rsa),
            Err(CryptoError::UnsupportedPublicKeyAlgorithm)
        );
        assert_eq!(
            v.verify_signature(b"junk", &data, &[1; 256], HashAlgorithm::SHA256, rsa),
            Err(CryptoError::CertificateParseFailed)
        );
    }

    /// The provider lists the ECDHE-RSA suites after aws-lc's own, with the record protection of
    /// the ECDHE-ECDSA suite of the same AEAD and hash; dimpl validates it (RSA signatures
    /// included) when a configuration is built.
    #[test]
    fn the_provider_lists_the_ecdhe_rsa_suites_after_the_ecdsa_ones() {
        use dimpl::crypto::Dtls12CipherSuite as D;
        let p = crypto_provider();
        let ids: Vec<D> = p.cipher_suites.iter().map(|s| s.suite()).collect();
        let aws_lc = dimpl::crypto::aws_lc_rs::default_provider();
        let n = aws_lc.cipher_suites.len();
        assert_eq!(
            ids[..n],
            aws_lc
                .cipher_suites
                .iter()
                .map(|s| s.suite())
                .collect::<Vec<_>>()[..]
        );
        assert_eq!(
            ids[n..],
            [
                D::ECDHE_RSA_AES256_GCM_SHA384,
                D::ECDHE_RSA_AES128_GCM_SHA256
            ]
        );
        for s in &p.cipher_suites[n..] {
            let twin = p
                .cipher_suites
                .iter()
                .find(|t| {
                    t.suite().signature_algorithm() == Some(SignatureAlgorithm::ECDSA)
                        && t.hash_algorithm() == s.hash_algorithm()
                        && t.key_lengths() == s.key_lengths()
                })
                .expect("an ECDSA twin");
            assert_eq!(s.tag_len(), twin.tag_len());
            assert_eq!(s.explicit_nonce_len(), twin.explicit_nonce_len());
        }
        dimpl::Config::builder()
            .with_crypto_provider(p)
            .build()
            .expect("dimpl validates the provider, RSA vectors included");
    }

    /// Found by the fuzz target: the key's point in X9.62 hybrid form (0x06/0x07 instead of
    /// 0x04). aws-lc takes it, webpki does not (RFC 5480 forbids it); dimpl's verdict stands.
    #[test]
    fn a_hybrid_form_key_gets_dimpls_answer() {
        let data = b"signed";
        let cert = Certificate::self_signed(KeyType::EcdsaP256, "verifier").expect("cert");
        let sig = sign(&cert, HashAlgorithm::SHA256, data).expect("aws-lc signs P-256/SHA-256");
        let mut der = cert.der().to_vec();
        // The SPKI's BIT STRING: 66 bytes, no unused bits, then the point.
        let at = der
            .windows(4)
            .position(|w| w == [0x03, 0x42, 0x00, 0x04])
            .expect("an uncompressed P-256 point")
            + 3;
        let odd_y = cert.der()[at + 64] & 1;
        der[at] = 0x06 | odd_y;
        let ecdsa = SignatureAlgorithm::ECDSA;
        assert_eq!(
            both(&der, data, &sig, HashAlgorithm::SHA256, ecdsa),
            "Ok(())",
            "aws-lc takes a hybrid point with Y's parity right"
        );
        der[at] = 0x06 | (odd_y ^ 1);
        assert!(both(&der, data, &sig, HashAlgorithm::SHA256, ecdsa).starts_with("Err"));
    }

    fn aws_lc_hmac() -> &'static dyn HmacProvider {
        dimpl::crypto::aws_lc_rs::default_provider().hmac_provider
    }

    #[test]
    fn hmac_matches_aws_lc_for_every_key_and_data_length_the_prf_can_pass() {
        // Keys: empty, short, a 48-byte master secret, a block, longer than a block (hashed
        // first); data around SHA-256's and SHA-384's block boundaries.
        let mut x = 0x9e37_79b9_u32;
        let mut bytes = |n: usize| -> Vec<u8> {
            (0..n)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    x as u8
                })
                .collect()
        };
        for hash in [HashAlgorithm::SHA256, HashAlgorithm::SHA384] {
            for key_len in [0, 1, 32, 48, 64, 65, 128, 129, 200] {
                for data_len in [0, 1, 55, 56, 63, 64, 77, 111, 112, 128, 300] {
                    let (key, data) = (bytes(key_len), bytes(data_len));
                    let (mut a, mut b) = ([0u8; 64], [0u8; 64]);
                    let na = RustCryptoHmac
                        .hmac(hash, &key, &data, &mut a)
                        .expect("ours");
                    let nb = aws_lc_hmac()
                        .hmac(hash, &key, &data, &mut b)
                        .expect("aws-lc");
                    assert_eq!(na, nb);
                    assert_eq!(a[..na], b[..nb], "{hash:?} key {key_len} data {data_len}");
                }
            }
        }
        // RFC 4231 test case 2, HMAC-SHA-256.
        let mut out = [0u8; 32];
        RustCryptoHmac
            .hmac(
                HashAlgorithm::SHA256,
                b"Jefe",
                b"what do ya want for nothing?",
                &mut out,
            )
            .expect("hmac");
        let hex: String = out.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex,
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn hmac_refuses_what_it_cannot_do_without_panicking() {
        let mut short = [0u8; 16];
        assert_eq!(
            RustCryptoHmac.hmac(HashAlgorithm::SHA256, b"k", b"d", &mut short),
            Err(CryptoError::OperationFailed(CryptoOperation::ComputeHmac))
        );
        let mut out = [0u8; 64];
        assert_eq!(
            RustCryptoHmac.hmac(HashAlgorithm::SHA512, b"k", b"d", &mut out),
            aws_lc_hmac().hmac(HashAlgorithm::SHA512, b"k", b"d", &mut out)
        );
    }
}
