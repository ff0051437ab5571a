//! The ring provider: ring's AES-GCM; the rest as the RustCrypto provider has it (ring offers
//! no raw AES-CTR or single-block AES, and its HMAC-SHA1 runs without SHA-NI: 4× the time of
//! the one built here, measured with `cargo bench -p secrelay-srtp --bench primitives`).
//!
//! ring keeps a key's schedule and GCM's hash key inside the key value and does not wipe them
//! when the key is dropped, so each ring key here is held in a [`Wiped`], overwritten once ring
//! is done with it (inline: the provider's boxed `AesGcm` is the key's allocation, and the
//! engines' cache hints reach it there). Best effort, as with RustCrypto's keys: the copies a
//! key's construction leaves on the stack before it is boxed are not scrubbed.
#![allow(unsafe_code)]

use core::mem::MaybeUninit;

use ::ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_128_GCM, AES_256_GCM};
use zeroize::Zeroize;

use super::rustcrypto::RustCrypto;
use super::{AesBlock, AesCtr, AesGcm, AuthError, CryptoProvider, HmacSha1, KeyError};

pub(super) struct Ring;

impl CryptoProvider for Ring {
    fn name(&self) -> &'static str {
        "ring"
    }

    fn aes_ctr(&self, key: &[u8]) -> Result<Box<dyn AesCtr>, KeyError> {
        RustCrypto.aes_ctr(key)
    }

    fn aes_block(&self, key: &[u8]) -> Result<Box<dyn AesBlock>, KeyError> {
        RustCrypto.aes_block(key)
    }

    fn hmac_sha1(&self, key: &[u8]) -> Result<Box<dyn HmacSha1>, KeyError> {
        RustCrypto.hmac_sha1(key)
    }

    fn aes_gcm(&self, key: &[u8]) -> Result<Box<dyn AesGcm>, KeyError> {
        Ok(Box::new(gcm(key)?))
    }
}

/// ring's AES-GCM keyed with `key` (16 or 32 bytes).
pub(super) fn gcm(key: &[u8]) -> Result<Gcm, KeyError> {
    let alg = match key.len() {
        16 => &AES_128_GCM,
        32 => &AES_256_GCM,
        _ => return Err(KeyError("AES-GCM keys are 16 or 32 bytes")),
    };
    let k = UnboundKey::new(alg, key).map_err(|_| KeyError("AES-GCM key"))?;
    Ok(Gcm(Wiped::new(LessSafeKey::new(k))))
}

/// A value whose bytes are overwritten with zeros (volatile writes) after it is dropped.
struct Wiped<T>(MaybeUninit<T>);

impl<T> Wiped<T> {
    fn new(value: T) -> Wiped<T> {
        Wiped(MaybeUninit::new(value))
    }

    fn get(&self) -> &T {
        // SAFETY: initialised in `new`; only `drop` ends the value, and nothing reads it after.
        unsafe { self.0.assume_init_ref() }
    }
}

impl<T> Drop for Wiped<T> {
    fn drop(&mut self) {
        // SAFETY: the value was initialised in `new` and is dropped once, here; the bytes left
        // are only overwritten (any bit pattern is a valid `MaybeUninit`), never read as a `T`.
        unsafe { self.0.assume_init_drop() };
        self.0.zeroize();
    }
}

pub(super) struct Gcm(Wiped<LessSafeKey>);

impl AesGcm for Gcm {
    fn seal(&self, nonce: &[u8; 12], aad: &[u8], data: &mut [u8], tag: &mut [u8; 16]) {
        match self.0.get().seal_in_place_separate_tag(
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
            .get()
            .open_in_place(
                Nonce::assume_unique_for_key(*nonce),
                Aad::from(aad),
                data_and_tag,
            )
            .map(|_| ())
            .map_err(|_| AuthError)
    }
}
