//! The aws-lc-rs provider.

use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_128_GCM, AES_256_GCM};
use aws_lc_rs::cipher::{
    Algorithm, EncryptingKey, EncryptionContext, UnboundCipherKey, AES_128, AES_192, AES_256,
};
use aws_lc_rs::hmac;
use aws_lc_rs::iv::FixedLength;

use super::{AesBlock, AesCtr, AesGcm, AuthError, CryptoProvider, HmacSha1, KeyError};

pub(super) struct AwsLc;

impl CryptoProvider for AwsLc {
    fn name(&self) -> &'static str {
        "aws-lc"
    }

    fn aes_ctr(&self, key: &[u8]) -> Result<Box<dyn AesCtr>, KeyError> {
        let k = UnboundCipherKey::new(aes(key)?, key).map_err(|_| KeyError("AES key"))?;
        Ok(Box::new(Ctr(
            EncryptingKey::ctr(k).map_err(|_| KeyError("AES-CTR key"))?
        )))
    }

    fn aes_block(&self, key: &[u8]) -> Result<Box<dyn AesBlock>, KeyError> {
        let k = UnboundCipherKey::new(aes(key)?, key).map_err(|_| KeyError("AES key"))?;
        Ok(Box::new(Ecb(
            EncryptingKey::ecb(k).map_err(|_| KeyError("AES-ECB key"))?
        )))
    }

    fn hmac_sha1(&self, key: &[u8]) -> Result<Box<dyn HmacSha1>, KeyError> {
        Ok(Box::new(Hmac(hmac::Key::new(
            hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY,
            key,
        ))))
    }

    fn aes_gcm(&self, key: &[u8]) -> Result<Box<dyn AesGcm>, KeyError> {
        let alg = match key.len() {
            16 => &AES_128_GCM,
            32 => &AES_256_GCM,
            _ => return Err(KeyError("AES-GCM keys are 16 or 32 bytes")),
        };
        let k = UnboundKey::new(alg, key).map_err(|_| KeyError("AES-GCM key"))?;
        Ok(Box::new(Gcm(LessSafeKey::new(k))))
    }
}

/// The AES algorithm for a key of this length.
fn aes(key: &[u8]) -> Result<&'static Algorithm, KeyError> {
    match key.len() {
        16 => Ok(&AES_128),
        24 => Ok(&AES_192),
        32 => Ok(&AES_256),
        _ => Err(KeyError("AES keys are 16, 24 or 32 bytes")),
    }
}

struct Ecb(EncryptingKey);

impl AesBlock for Ecb {
    fn encrypt_block(&self, block: &mut [u8; 16]) {
        // ECB of one whole block with no IV cannot fail.
        let _ = self.0.less_safe_encrypt(block, EncryptionContext::None);
    }
}

struct Ctr(EncryptingKey);

impl AesCtr for Ctr {
    fn apply_keystream(&self, iv: &[u8; 16], data: &mut [u8]) {
        // CTR accepts any length and a 16-byte IV, so this cannot fail.
        let _ = self
            .0
            .less_safe_encrypt(data, EncryptionContext::Iv128(FixedLength::from(*iv)));
    }
}

struct Hmac(hmac::Key);

impl HmacSha1 for Hmac {
    fn sign2(&self, a: &[u8], b: &[u8], out: &mut [u8; 20]) {
        let mut c = hmac::Context::with_key(&self.0);
        c.update(a);
        c.update(b);
        out.copy_from_slice(c.sign().as_ref());
    }
}

struct Gcm(LessSafeKey);

impl AesGcm for Gcm {
    fn seal(&self, nonce: &[u8; 12], aad: &[u8], data: &mut [u8], tag: &mut [u8; 16]) {
        match self.0.seal_in_place_separate_tag(
            Nonce::assume_unique_for_key(*nonce),
            Aad::from(aad),
            data,
        ) {
            Ok(t) => tag.copy_from_slice(t.as_ref()),
            // Sealing fails only for inputs far beyond a packet's size.
            Err(_) => tag.fill(0),
        }
    }

    fn open(&self, nonce: &[u8; 12], aad: &[u8], data_and_tag: &mut [u8]) -> Result<(), AuthError> {
        self.0
            .open_in_place(
                Nonce::assume_unique_for_key(*nonce),
                Aad::from(aad),
                data_and_tag,
            )
            .map(|_| ())
            .map_err(|_| AuthError)
    }
}
