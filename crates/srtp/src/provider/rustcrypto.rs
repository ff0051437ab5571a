//! The RustCrypto provider: `aes` (AES-NI, VAES), `ctr`, `sha1` (SHA-NI), `aes-gcm`.

use aes::cipher::{BlockCipherEncrypt, InnerIvInit, KeyInit, StreamCipher};
use aes::{Aes128Enc, Aes192Enc, Aes256Enc};
use aes_gcm::aead::AeadInOut;
use aes_gcm::{Aes128Gcm, Aes256Gcm};

use super::{
    AesBlock, AesCtr, AesGcm, AuthError, CryptoProvider, HmacSha1, HmacSha1State, KeyError,
};

pub(super) struct RustCrypto;

impl CryptoProvider for RustCrypto {
    fn name(&self) -> &'static str {
        "rustcrypto"
    }

    fn aes_ctr(&self, key: &[u8]) -> Result<Box<dyn AesCtr>, KeyError> {
        Ok(Box::new(Ctr::new(key)?))
    }

    fn aes_block(&self, key: &[u8]) -> Result<Box<dyn AesBlock>, KeyError> {
        Ok(Box::new(Ctr::new(key)?))
    }

    fn hmac_sha1(&self, key: &[u8]) -> Result<Box<dyn HmacSha1>, KeyError> {
        Ok(Box::new(HmacSha1State::new(key)))
    }

    fn aes_gcm(&self, key: &[u8]) -> Result<Box<dyn AesGcm>, KeyError> {
        match key.len() {
            16 => Ok(Box::new(Gcm::A128(Box::new(
                Aes128Gcm::new_from_slice(key).map_err(|_| KeyError("AES-128-GCM key"))?,
            )))),
            32 => Ok(Box::new(Gcm::A256(Box::new(
                Aes256Gcm::new_from_slice(key).map_err(|_| KeyError("AES-256-GCM key"))?,
            )))),
            _ => Err(KeyError("AES-GCM keys are 16 or 32 bytes")),
        }
    }
}

/// An expanded AES key of any of the three sizes: the keystream of counter mode, or single
/// blocks for f8.
enum Ctr {
    A128(Aes128Enc),
    A192(Aes192Enc),
    A256(Aes256Enc),
}

impl Ctr {
    fn new(key: &[u8]) -> Result<Ctr, KeyError> {
        Ok(match key.len() {
            16 => Ctr::A128(Aes128Enc::new_from_slice(key).map_err(|_| KeyError("AES-128 key"))?),
            24 => Ctr::A192(Aes192Enc::new_from_slice(key).map_err(|_| KeyError("AES-192 key"))?),
            32 => Ctr::A256(Aes256Enc::new_from_slice(key).map_err(|_| KeyError("AES-256 key"))?),
            _ => return Err(KeyError("AES keys are 16, 24 or 32 bytes")),
        })
    }
}

impl AesBlock for Ctr {
    #[inline]
    fn encrypt_block(&self, block: &mut [u8; 16]) {
        match self {
            Ctr::A128(k) => k.encrypt_block(block.into()),
            Ctr::A192(k) => k.encrypt_block(block.into()),
            Ctr::A256(k) => k.encrypt_block(block.into()),
        }
    }
}

impl AesCtr for Ctr {
    #[inline]
    fn apply_keystream(&self, iv: &[u8; 16], data: &mut [u8]) {
        // The expanded key schedule is copied, not recomputed, per packet.
        match self {
            Ctr::A128(k) => ctr::Ctr128BE::<Aes128Enc>::from_core(ctr::CtrCore::inner_iv_init(
                k.clone(),
                iv.into(),
            ))
            .apply_keystream(data),
            Ctr::A192(k) => ctr::Ctr128BE::<Aes192Enc>::from_core(ctr::CtrCore::inner_iv_init(
                k.clone(),
                iv.into(),
            ))
            .apply_keystream(data),
            Ctr::A256(k) => ctr::Ctr128BE::<Aes256Enc>::from_core(ctr::CtrCore::inner_iv_init(
                k.clone(),
                iv.into(),
            ))
            .apply_keystream(data),
        }
    }
}

impl HmacSha1 for HmacSha1State {
    #[inline]
    fn sign2(&self, a: &[u8], b: &[u8], out: &mut [u8; 20]) {
        HmacSha1State::sign2(self, a, b, out)
    }
}

enum Gcm {
    A128(Box<Aes128Gcm>),
    A256(Box<Aes256Gcm>),
}

impl AesGcm for Gcm {
    fn seal(&self, nonce: &[u8; 12], aad: &[u8], data: &mut [u8], tag: &mut [u8; 16]) {
        let t = match self {
            Gcm::A128(k) => k.encrypt_inout_detached(nonce.into(), aad, data.into()),
            Gcm::A256(k) => k.encrypt_inout_detached(nonce.into(), aad, data.into()),
        };
        // Encryption fails only for messages over 2^36 bytes, which a packet cannot be.
        match t {
            Ok(t) => tag.copy_from_slice(&t),
            Err(_) => tag.fill(0),
        }
    }

    fn open(&self, nonce: &[u8; 12], aad: &[u8], data_and_tag: &mut [u8]) -> Result<(), AuthError> {
        let split = data_and_tag.len().checked_sub(16).ok_or(AuthError)?;
        let (data, tag) = data_and_tag.split_at_mut(split);
        let tag: &[u8] = tag;
        let r = match self {
            Gcm::A128(k) => k.decrypt_inout_detached(
                nonce.into(),
                aad,
                data.into(),
                tag.try_into().map_err(|_| AuthError)?,
            ),
            Gcm::A256(k) => k.decrypt_inout_detached(
                nonce.into(),
                aad,
                data.into(),
                tag.try_into().map_err(|_| AuthError)?,
            ),
        };
        // aes-gcm compares the tag in constant time.
        r.map_err(|_| AuthError)
    }
}
