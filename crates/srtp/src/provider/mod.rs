//! Crypto providers: where the primitives come from.
//!
//! The SRTP maths (IVs, key derivation, tag layout, tag comparison) stays in this crate; the
//! primitives — AES in counter mode, AES on single blocks (for f8), HMAC-SHA1, AES-GCM — come
//! from a provider, a
//! `&'static dyn CryptoProvider` in the manner of rustls' `CryptoProvider`. Every provider runs
//! the same known-answer tests (`tests/known_answers.rs`).
//!
//! Providers shipped:
//! - [`rustcrypto()`]: RustCrypto's `aes` (AES-NI/VAES, detected at run time), `ctr`, `sha1`
//!   (SHA-NI) and `aes-gcm`. HMAC-SHA1 is built on `sha1`'s compression function with the keyed
//!   inner and outer states computed once per key, so a packet costs only its own blocks.
//! - [`aws_lc()`] (feature `aws-lc`): aws-lc-rs for all three.
//! - [`ring()`]: ring's AES-GCM (the rest as [`rustcrypto()`] has it).
//! - [`default()`]: the fastest combination measured on x86-64 with AES-NI, VAES, SHA-NI and
//!   VPCLMULQDQ (`cargo bench -p secrelay-srtp --bench primitives`, figures in
//!   `docs/benchmarks.md`): aws-lc's AES-CTR, AES-GCM (1.2–1.6× and 2–3× faster than
//!   RustCrypto's; ring's instead on CPUs with VAES but without AVX-512, where it is faster
//!   still: [`ring_gcm_faster`]) and single-block AES for f8 (a 172-byte f8 packet in
//!   0.63–0.68× the time with RustCrypto's blocks), and the HMAC-SHA1 built here on
//!   RustCrypto's SHA-NI compression function (0.68–0.87× aws-lc's time: aws-lc's HMAC
//!   re-initialises its context on every call).

use core::fmt;

#[cfg(feature = "aws-lc")]
mod aws_lc;
pub(crate) mod hmac_sha1;
mod ring;
mod rustcrypto;

pub use hmac_sha1::HmacSha1State;

/// Constant-time comparison of a received tag with the computed one.
#[inline]
pub(crate) fn tags_equal(a: &[u8], b: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    a.len() == b.len() && bool::from(a.ct_eq(b))
}

/// AES in counter mode with a 128-bit big-endian counter, keyed once.
pub trait AesCtr: Send + Sync {
    /// XORs the keystream that starts at counter block `iv` into `data`.
    fn apply_keystream(&self, iv: &[u8; 16], data: &mut [u8]);
}

/// AES on single 16-byte blocks, keyed once: what f8 mode ([`crate::f8`]) chains block by block.
pub trait AesBlock: Send + Sync {
    /// Encrypts `block` in place.
    fn encrypt_block(&self, block: &mut [u8; 16]);
}

/// HMAC-SHA1, keyed once.
pub trait HmacSha1: Send + Sync {
    /// Computes HMAC-SHA1 over `a ‖ b` (SRTP authenticates the packet followed by the ROC).
    fn sign2(&self, a: &[u8], b: &[u8], out: &mut [u8; 20]);
}

/// AES-GCM with 12-byte nonces and 16-byte tags, keyed once.
pub trait AesGcm: Send + Sync {
    /// Encrypts `data` in place and writes the tag.
    fn seal(&self, nonce: &[u8; 12], aad: &[u8], data: &mut [u8], tag: &mut [u8; 16]);
    /// Decrypts `data_and_tag` (ciphertext followed by its 16-byte tag) in place after checking
    /// the tag in constant time; on success the plaintext is `data_and_tag[..len - 16]`.
    fn open(&self, nonce: &[u8; 12], aad: &[u8], data_and_tag: &mut [u8]) -> Result<(), AuthError>;
}

/// The AEAD tag did not verify.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuthError;

/// The provider cannot key a primitive with the bytes given (wrong length).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyError(pub &'static str);

/// A source of the primitives SRTP needs.
pub trait CryptoProvider: Send + Sync + 'static {
    /// A short name for reports (`rustcrypto`, `aws-lc`, …).
    fn name(&self) -> &'static str;
    /// AES-CTR keyed with a 16-, 24- or 32-byte key.
    fn aes_ctr(&self, key: &[u8]) -> Result<Box<dyn AesCtr>, KeyError>;
    /// AES on single blocks, keyed with a 16-, 24- or 32-byte key.
    fn aes_block(&self, key: &[u8]) -> Result<Box<dyn AesBlock>, KeyError>;
    /// HMAC-SHA1 keyed with `key`.
    fn hmac_sha1(&self, key: &[u8]) -> Result<Box<dyn HmacSha1>, KeyError>;
    /// AES-GCM keyed with a 16- or 32-byte key.
    fn aes_gcm(&self, key: &[u8]) -> Result<Box<dyn AesGcm>, KeyError>;
}

impl fmt::Debug for dyn CryptoProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CryptoProvider({})", self.name())
    }
}

/// RustCrypto for every primitive.
pub fn rustcrypto() -> &'static dyn CryptoProvider {
    &rustcrypto::RustCrypto
}

/// ring's AES-GCM; AES-CTR, single-block AES and HMAC-SHA1 as [`rustcrypto()`] has them.
pub fn ring() -> &'static dyn CryptoProvider {
    &ring::Ring
}

/// aws-lc-rs for every primitive.
#[cfg(feature = "aws-lc")]
pub fn aws_lc() -> &'static dyn CryptoProvider {
    &aws_lc::AwsLc
}

/// The fastest combination measured (see the module docs).
pub fn default() -> &'static dyn CryptoProvider {
    &Mixed
}

/// Every provider compiled in, for tests and benchmarks that compare them.
pub fn all() -> Vec<&'static dyn CryptoProvider> {
    let v: Vec<&'static dyn CryptoProvider> = vec![default(), rustcrypto(), ring()];
    #[cfg(feature = "aws-lc")]
    let v = {
        let mut v = v;
        v.push(aws_lc());
        v
    };
    v
}

/// aws-lc's AES-CTR and AES-GCM (ring's AES-GCM where [`ring_gcm_faster`]) with the HMAC-SHA1
/// built here; without aws-lc, RustCrypto's AES-CTR and ring's AES-GCM.
struct Mixed;

impl CryptoProvider for Mixed {
    fn name(&self) -> &'static str {
        match (cfg!(feature = "aws-lc"), ring_gcm_faster()) {
            (true, false) => "default (aws-lc aes-ctr+gcm, sha-ni hmac)",
            (true, true) => "default (aws-lc aes-ctr, ring aes-gcm, sha-ni hmac)",
            (false, _) => "default (rustcrypto, ring aes-gcm)",
        }
    }
    fn aes_ctr(&self, key: &[u8]) -> Result<Box<dyn AesCtr>, KeyError> {
        #[cfg(feature = "aws-lc")]
        {
            aws_lc::AwsLc.aes_ctr(key)
        }
        #[cfg(not(feature = "aws-lc"))]
        {
            rustcrypto::RustCrypto.aes_ctr(key)
        }
    }
    fn hmac_sha1(&self, key: &[u8]) -> Result<Box<dyn HmacSha1>, KeyError> {
        rustcrypto::RustCrypto.hmac_sha1(key)
    }
    fn aes_block(&self, key: &[u8]) -> Result<Box<dyn AesBlock>, KeyError> {
        #[cfg(feature = "aws-lc")]
        {
            aws_lc::AwsLc.aes_block(key)
        }
        #[cfg(not(feature = "aws-lc"))]
        {
            rustcrypto::RustCrypto.aes_block(key)
        }
    }
    fn aes_gcm(&self, key: &[u8]) -> Result<Box<dyn AesGcm>, KeyError> {
        #[cfg(feature = "aws-lc")]
        if !ring_gcm_faster() {
            return aws_lc::AwsLc.aes_gcm(key);
        }
        Ok(Box::new(ring::gcm(key)?))
    }
}

/// Whether ring's AES-GCM is the one [`default()`] uses: on x86-64 with VAES, VPCLMULQDQ and
/// AVX2 but without AVX-512 (AMD Zen 3, Intel's client cores) ring has a VAES path on 256-bit
/// registers and aws-lc has none (ring took 0.50–0.66× aws-lc's time for a seal of 160 to
/// 1,200 bytes on a Zen 3 server); elsewhere aws-lc's (with its AVX-512 path where the CPU has
/// one), as measured before. Without the `aws-lc` feature, always ring's.
pub fn ring_gcm_faster() -> bool {
    if !cfg!(feature = "aws-lc") {
        return true;
    }
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        has!("vaes") && has!("vpclmulqdq") && has!("avx2") && !has!("avx512f")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}
