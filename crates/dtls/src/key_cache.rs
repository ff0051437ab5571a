//! Parsed signing keys shared by every association made from one certificate.
//!
//! dimpl takes the private key as DER in each `Dtls::new_*` and parses it there through its
//! crypto provider's `KeyProvider`. aws-lc validates a parsed EC key by recomputing its public
//! point (a scalar multiplication), so a server that makes one association per peer paid
//! ~12–16 µs of every handshake for parsing the same key again (`docs/benchmarks.md`, the
//! handshake lab).
//!
//! [`LocalCertificate`] now parses its ECDSA key once ([`SharedKey::parse`]) and registers it
//! here; [`CachingKeyProvider`], installed in every dimpl `Config` the engine builds, answers
//! dimpl's `load_private_key` for registered DER with a handle on the parsed key, and hands
//! any other key to aws-lc's own provider as before. The registry holds only weak references:
//! a key lives as long as a certificate or an association holds it, and no longer.
//!
//! [`LocalCertificate`]: crate::endpoint::LocalCertificate

use std::fmt;
use std::sync::{Arc, Mutex, OnceLock, Weak};

use aws_lc_rs::rand::SystemRandom;
#[cfg(test)]
use aws_lc_rs::signature::KeyPair;
use aws_lc_rs::signature::{
    EcdsaKeyPair, EcdsaSigningAlgorithm, ECDSA_P256_SHA256_ASN1_SIGNING,
    ECDSA_P384_SHA384_ASN1_SIGNING,
};
use dimpl::crypto::{Buf, HashAlgorithm, KeyProvider, SignatureAlgorithm, SigningKey};
use dimpl::{CryptoError, CryptoOperation};
use zeroize::Zeroizing;

/// An ECDSA private key parsed once: its PKCS#8 DER (to recognise it) and the key pair.
pub(crate) struct SharedKey {
    der: Zeroizing<Vec<u8>>,
    pair: EcdsaKeyPair,
    hash: HashAlgorithm,
}

impl fmt::Debug for SharedKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedKey")
            .field("hash", &self.hash)
            .field("private_key", &"<redacted>")
            .finish()
    }
}

impl SharedKey {
    /// Parses a PKCS#8 ECDSA P-256 or P-384 key (the curves dimpl signs with) and registers it
    /// for [`CachingKeyProvider`]. `None` for any other key: dimpl's own provider then parses
    /// it per association, as it always did.
    pub(crate) fn parse(der: &[u8]) -> Option<Arc<SharedKey>> {
        let (alg, hash): (&'static EcdsaSigningAlgorithm, _) = [
            (&ECDSA_P256_SHA256_ASN1_SIGNING, HashAlgorithm::SHA256),
            (&ECDSA_P384_SHA384_ASN1_SIGNING, HashAlgorithm::SHA384),
        ]
        .into_iter()
        .find(|(alg, _)| EcdsaKeyPair::from_pkcs8(alg, der).is_ok())?;
        let pair = EcdsaKeyPair::from_pkcs8(alg, der).ok()?;
        let key = Arc::new(SharedKey {
            der: Zeroizing::new(der.to_vec()),
            pair,
            hash,
        });
        let mut list = registry().lock().unwrap_or_else(|e| e.into_inner());
        list.retain(|w| w.strong_count() > 0);
        list.push(Arc::downgrade(&key));
        Some(key)
    }
}

/// The keys of the live certificates. A poisoned lock only means a thread panicked while
/// holding it; the list of weak references stays valid.
fn registry() -> &'static Mutex<Vec<Weak<SharedKey>>> {
    static KEYS: OnceLock<Mutex<Vec<Weak<SharedKey>>>> = OnceLock::new();
    KEYS.get_or_init(|| Mutex::new(Vec::new()))
}

/// The registered key whose DER is `der`, if one is alive.
fn lookup(der: &[u8]) -> Option<Arc<SharedKey>> {
    let list = registry().lock().unwrap_or_else(|e| e.into_inner());
    list.iter()
        .filter_map(Weak::upgrade)
        .find(|k| k.der.as_slice() == der)
}

/// dimpl's `KeyProvider` with the registered keys answered from the cache.
#[derive(Debug)]
pub(crate) struct CachingKeyProvider {
    /// aws-lc's provider, for keys that are not registered.
    pub(crate) fallback: &'static dyn KeyProvider,
}

impl KeyProvider for CachingKeyProvider {
    fn load_private_key(&self, key_der: &[u8]) -> Result<Box<dyn SigningKey>, CryptoError> {
        match lookup(key_der) {
            Some(key) => Ok(Box::new(Handle(key))),
            None => self.fallback.load_private_key(key_der),
        }
    }
}

/// One association's use of a shared key.
#[derive(Debug)]
struct Handle(Arc<SharedKey>);

impl SigningKey for Handle {
    fn sign(
        &mut self,
        data: &[u8],
        hash_alg: HashAlgorithm,
        out: &mut Buf,
    ) -> Result<(), CryptoError> {
        // aws-lc fixes the hash with the key, as dimpl's own aws-lc key does.
        if hash_alg != self.0.hash {
            return Err(CryptoError::SigningKeyHashMismatch {
                key_hash: self.0.hash,
                requested: hash_alg,
            });
        }
        let signature = self
            .0
            .pair
            .sign(&SystemRandom::new(), data)
            .map_err(|_| CryptoError::OperationFailed(CryptoOperation::Sign))?;
        out.clear();
        out.extend_from_slice(signature.as_ref());
        Ok(())
    }

    fn algorithm(&self) -> SignatureAlgorithm {
        SignatureAlgorithm::ECDSA
    }

    fn hash_algorithm(&self) -> HashAlgorithm {
        self.0.hash
    }

    fn supported_hash_algorithms(&self) -> &[HashAlgorithm] {
        std::slice::from_ref(&self.0.hash)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cert::{Certificate, KeyType};

    #[test]
    fn registered_keys_are_answered_from_the_cache_and_forgotten_with_their_certificate() {
        let c = Certificate::self_signed(KeyType::EcdsaP256, "cache").unwrap();
        let der = c.private_key_der().to_vec();
        let fallback = dimpl::crypto::aws_lc_rs::default_provider().key_provider;
        let provider = CachingKeyProvider { fallback };
        assert!(lookup(&der).is_none());
        let key = SharedKey::parse(&der).expect("a P-256 PKCS#8 key parses");
        let cached = lookup(&der).expect("registered");
        assert!(Arc::ptr_eq(&cached, &key));
        drop(cached);
        // A signature from the cached handle verifies with the certificate's public key.
        let mut signer = provider.load_private_key(&der).unwrap();
        assert_eq!(signer.hash_algorithm(), HashAlgorithm::SHA256);
        let mut sig = Buf::new();
        signer
            .sign(b"transcript", HashAlgorithm::SHA256, &mut sig)
            .unwrap();
        let public = key.pair.public_key().as_ref().to_vec();
        aws_lc_rs::signature::UnparsedPublicKey::new(
            &aws_lc_rs::signature::ECDSA_P256_SHA256_ASN1,
            &public,
        )
        .verify(b"transcript", &sig)
        .expect("the cached key signs like the certificate's key");
        assert!(matches!(
            signer.sign(b"x", HashAlgorithm::SHA384, &mut sig),
            Err(CryptoError::SigningKeyHashMismatch { .. })
        ));
        // Once the certificate and the handles are gone, nothing keeps the key.
        drop(signer);
        drop(key);
        assert!(lookup(&der).is_none());
        // An unregistered key still loads through the fallback.
        assert!(provider.load_private_key(&der).is_ok());
        // A key that is not ECDSA P-256/P-384 is not cached.
        let rsa = Certificate::self_signed(KeyType::Rsa2048, "cache-rsa").unwrap();
        assert!(SharedKey::parse(rsa.private_key_der()).is_none());
    }
}
