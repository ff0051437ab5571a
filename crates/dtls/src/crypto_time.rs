//! Where a handshake's time goes: the time spent inside the crypto provider, by part.
//!
//! An endpoint made with [`EndpointConfig::time_crypto`] gets a dimpl configuration whose
//! provider (secrelay's, `provider.rs`) has a clock around every call: each call adds its
//! duration to this thread's [`CryptoTime`], which [`take`] reads and resets. The lab
//! (`lab handshake --in-memory`) times only the server, runs both sides on one thread, and takes
//! the counters after each handshake: what the server spent in public-key operations where the
//! handshake does them, in symmetric crypto (the PRF's HMACs, the transcript hash, the records'
//! AEAD), and, by difference, in everything else.
//!
//! The clocks cost two `Instant::now` per call (about 60 calls per handshake), which lands in
//! "everything else". Off by default; the gateway and `handshake-server` never time. Only
//! DTLS 1.2's record protection is wrapped (the lab's handshakes are DTLS 1.2); DTLS 1.3's
//! HKDF runs on the timed HMAC.
//!
//! [`EndpointConfig::time_crypto`]: crate::EndpointConfig::time_crypto

use std::cell::Cell;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use dimpl::crypto::{
    Aad, ActiveKeyExchange, Buf, Cipher, CryptoProvider, Dtls12CipherSuite, HashAlgorithm,
    HashContext, HashProvider, HmacProvider, KeyProvider, NamedGroup, Nonce, SignatureAlgorithm,
    SignatureVerifier, SigningKey, SupportedDtls12CipherSuite, SupportedKxGroup, TmpBuf,
};
use dimpl::CryptoError;

/// Time inside the crypto provider on one thread, by part, since the last [`take`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CryptoTime {
    /// Signing with our key (ServerKeyExchange or CertificateVerify).
    pub sign: Duration,
    /// Verifying the peer's signature against its certificate.
    pub verify: Duration,
    /// The ephemeral key pair with its public value.
    pub key_pair: Duration,
    /// The ECDH agreement.
    pub shared_secret: Duration,
    /// HMACs: the PRF (master secret, key block, Finished, exporter) and cookies.
    pub hmac: Duration,
    /// The handshake transcript hash.
    pub hash: Duration,
    /// Record protection (key set-up, encryption, decryption).
    pub aead: Duration,
    /// Timed calls.
    pub calls: u32,
}

impl CryptoTime {
    /// Sign, verify, key pair and agreement: the work the crypto floor measures on its own.
    pub fn public_key(&self) -> Duration {
        self.sign + self.verify + self.key_pair + self.shared_secret
    }

    /// HMAC, hash and AEAD.
    pub fn symmetric(&self) -> Duration {
        self.hmac + self.hash + self.aead
    }
}

thread_local! {
    static SPENT: Cell<CryptoTime> = Cell::new(CryptoTime::default());
}

/// This thread's time inside timed providers since the last call; resets it.
pub fn take() -> CryptoTime {
    SPENT.with(|s| s.take())
}

/// Which counter a call adds to.
#[derive(Clone, Copy)]
enum Part {
    Sign,
    Verify,
    KeyPair,
    SharedSecret,
    Hmac,
    Hash,
    Aead,
}

/// Runs `f`, adding its duration to `part`.
fn timed<T>(part: Part, f: impl FnOnce() -> T) -> T {
    let t = Instant::now();
    let out = f();
    let d = t.elapsed();
    SPENT.with(|s| {
        let mut c = s.get();
        let slot = match part {
            Part::Sign => &mut c.sign,
            Part::Verify => &mut c.verify,
            Part::KeyPair => &mut c.key_pair,
            Part::SharedSecret => &mut c.shared_secret,
            Part::Hmac => &mut c.hmac,
            Part::Hash => &mut c.hash,
            Part::Aead => &mut c.aead,
        };
        *slot += d;
        c.calls += 1;
        s.set(c);
    });
    out
}

/// secrelay's provider with a clock around every call (built once per process).
pub(crate) fn timed_provider() -> CryptoProvider {
    static TIMED: OnceLock<CryptoProvider> = OnceLock::new();
    TIMED
        .get_or_init(|| {
            let base = crate::provider::crypto_provider();
            fn leak<T>(t: T) -> &'static T {
                Box::leak(Box::new(t))
            }
            let kx: Vec<&'static dyn SupportedKxGroup> = base
                .kx_groups
                .iter()
                .map(|g| leak(TimedKx(*g)) as &'static dyn SupportedKxGroup)
                .collect();
            let suites: Vec<&'static dyn SupportedDtls12CipherSuite> = base
                .cipher_suites
                .iter()
                .map(|s| leak(TimedSuite(*s)) as &'static dyn SupportedDtls12CipherSuite)
                .collect();
            CryptoProvider {
                kx_groups: Box::leak(kx.into_boxed_slice()),
                signature_verification: leak(TimedVerifier(base.signature_verification)),
                key_provider: leak(TimedKeys(base.key_provider)),
                hash_provider: leak(TimedHashes(base.hash_provider)),
                hmac_provider: leak(TimedHmac(base.hmac_provider)),
                cipher_suites: Box::leak(suites.into_boxed_slice()),
                ..base
            }
        })
        .clone()
}

#[derive(Debug)]
struct TimedKeys(&'static dyn KeyProvider);

impl KeyProvider for TimedKeys {
    fn load_private_key(&self, key_der: &[u8]) -> Result<Box<dyn SigningKey>, CryptoError> {
        let key = self.0.load_private_key(key_der)?;
        Ok(Box::new(TimedSigner(key)))
    }
}

#[derive(Debug)]
struct TimedSigner(Box<dyn SigningKey>);

impl SigningKey for TimedSigner {
    fn sign(&mut self, data: &[u8], hash: HashAlgorithm, out: &mut Buf) -> Result<(), CryptoError> {
        timed(Part::Sign, || self.0.sign(data, hash, out))
    }
    fn algorithm(&self) -> SignatureAlgorithm {
        self.0.algorithm()
    }
    fn hash_algorithm(&self) -> HashAlgorithm {
        self.0.hash_algorithm()
    }
    fn supported_hash_algorithms(&self) -> &[HashAlgorithm] {
        self.0.supported_hash_algorithms()
    }
}

#[derive(Debug)]
struct TimedVerifier(&'static dyn SignatureVerifier);

impl SignatureVerifier for TimedVerifier {
    fn verify_signature(
        &self,
        cert_der: &[u8],
        data: &[u8],
        signature: &[u8],
        hash: HashAlgorithm,
        sig: SignatureAlgorithm,
    ) -> Result<(), CryptoError> {
        timed(Part::Verify, || {
            self.0
                .verify_signature(cert_der, data, signature, hash, sig)
        })
    }
}

#[derive(Debug)]
struct TimedKx(&'static dyn SupportedKxGroup);

impl SupportedKxGroup for TimedKx {
    fn name(&self) -> NamedGroup {
        self.0.name()
    }
    fn start_exchange(&self, buf: Buf) -> Result<Box<dyn ActiveKeyExchange>, CryptoError> {
        let kx = timed(Part::KeyPair, || self.0.start_exchange(buf))?;
        Ok(Box::new(TimedExchange(kx)))
    }
}

#[derive(Debug)]
struct TimedExchange(Box<dyn ActiveKeyExchange>);

impl ActiveKeyExchange for TimedExchange {
    fn pub_key(&self) -> &[u8] {
        self.0.pub_key()
    }
    fn complete(self: Box<Self>, peer_pub: &[u8], out: &mut Buf) -> Result<(), CryptoError> {
        let inner = self.0;
        timed(Part::SharedSecret, || inner.complete(peer_pub, out))
    }
    fn group(&self) -> NamedGroup {
        self.0.group()
    }
}

#[derive(Debug)]
struct TimedHmac(&'static dyn HmacProvider);

impl HmacProvider for TimedHmac {
    fn hmac(
        &self,
        hash: HashAlgorithm,
        key: &[u8],
        data: &[u8],
        out: &mut [u8],
    ) -> Result<usize, CryptoError> {
        timed(Part::Hmac, || self.0.hmac(hash, key, data, out))
    }
}

#[derive(Debug)]
struct TimedHashes(&'static dyn HashProvider);

impl HashProvider for TimedHashes {
    fn create_hash(&self, algorithm: HashAlgorithm) -> Box<dyn HashContext> {
        Box::new(TimedHash(timed(Part::Hash, || {
            self.0.create_hash(algorithm)
        })))
    }
}

#[derive(Debug)]
struct TimedHash(Box<dyn HashContext>);

impl HashContext for TimedHash {
    fn update(&mut self, data: &[u8]) {
        timed(Part::Hash, || self.0.update(data))
    }
    fn clone_and_finalize(&self, out: &mut Buf) {
        timed(Part::Hash, || self.0.clone_and_finalize(out))
    }
}

#[derive(Debug)]
struct TimedSuite(&'static dyn SupportedDtls12CipherSuite);

impl SupportedDtls12CipherSuite for TimedSuite {
    fn suite(&self) -> Dtls12CipherSuite {
        self.0.suite()
    }
    fn hash_algorithm(&self) -> HashAlgorithm {
        self.0.hash_algorithm()
    }
    fn key_lengths(&self) -> (usize, usize, usize) {
        self.0.key_lengths()
    }
    fn explicit_nonce_len(&self) -> usize {
        self.0.explicit_nonce_len()
    }
    fn tag_len(&self) -> usize {
        self.0.tag_len()
    }
    fn min_protected_fragment_len(&self) -> usize {
        self.0.min_protected_fragment_len()
    }
    fn create_cipher(&self, key: &[u8]) -> Result<Box<dyn Cipher>, CryptoError> {
        let cipher = timed(Part::Aead, || self.0.create_cipher(key))?;
        Ok(Box::new(TimedCipher(cipher)))
    }
}

#[derive(Debug)]
struct TimedCipher(Box<dyn Cipher>);

impl Cipher for TimedCipher {
    fn encrypt(&mut self, plaintext: &mut Buf, aad: Aad, nonce: Nonce) -> Result<(), CryptoError> {
        timed(Part::Aead, || self.0.encrypt(plaintext, aad, nonce))
    }
    fn decrypt(
        &mut self,
        ciphertext: &mut TmpBuf<'_>,
        aad: Aad,
        nonce: Nonce,
    ) -> Result<(), CryptoError> {
        timed(Part::Aead, || self.0.decrypt(ciphertext, aad, nonce))
    }
}
