//! AES in f8 mode (RFC 3711 §4.1.2), the cipher of the `F8_128_HMAC_SHA1_*` SDES suites.
//!
//! f8 is output feedback with a block counter folded in: with `E` the block cipher keyed with
//! the session key `k_e`, and `m = k_s ‖ 0x55…55` the session salt padded to the key's length,
//!
//! ```text
//! IV'  = E(k_e ⊕ m, IV)
//! S(-1) = 0;  S(j) = E(k_e, IV' ⊕ j ⊕ S(j-1))
//! ```
//!
//! and the keystream `S(0) ‖ S(1) ‖ …` is XORed into the payload. Each block depends on the one
//! before, so a packet's blocks run one after another (AES-CM's run side by side): f8 is kept
//! for the peers that offer it, not for speed. The block cipher comes from the provider
//! ([`crate::provider::CryptoProvider::aes_block`]); the mode and its IVs are here.

use zeroize::Zeroizing;

use crate::provider::{AesBlock, CryptoProvider, KeyError};

/// An f8 keystream generator keyed with a session key and salt.
pub(crate) struct F8 {
    /// `E(k_e, ·)`.
    key: Box<dyn AesBlock>,
    /// `E(k_e ⊕ m, ·)`, for the IV.
    iv_key: Box<dyn AesBlock>,
}

impl F8 {
    /// Keys f8 with session key `enc` and session salt `salt` (no longer than the key).
    pub(crate) fn new(
        provider: &dyn CryptoProvider,
        enc: &[u8],
        salt: &[u8],
    ) -> Result<F8, KeyError> {
        if salt.len() > enc.len() {
            return Err(KeyError("the f8 salt is longer than its key"));
        }
        let mut masked = Zeroizing::new(vec![0x55u8; enc.len()]);
        masked[..salt.len()].copy_from_slice(salt);
        for (m, k) in masked.iter_mut().zip(enc) {
            *m ^= k;
        }
        Ok(F8 {
            key: provider.aes_block(enc)?,
            iv_key: provider.aes_block(&masked)?,
        })
    }

    /// XORs the keystream for `iv` into `data` (encrypts or decrypts alike).
    pub(crate) fn apply(&self, iv: &[u8; 16], data: &mut [u8]) {
        let mut iv_prime = *iv;
        self.iv_key.encrypt_block(&mut iv_prime);
        let iv_prime = u128::from_be_bytes(iv_prime);
        let mut s = 0u128;
        for (j, chunk) in data.chunks_mut(16).enumerate() {
            let mut block = (iv_prime ^ j as u128 ^ s).to_be_bytes();
            self.key.encrypt_block(&mut block);
            s = u128::from_be_bytes(block);
            for (d, k) in chunk.iter_mut().zip(block) {
                *d ^= k;
            }
        }
    }
}

/// The f8 IV of an SRTP packet (RFC 3711 §4.1.2.2): `0x00 ‖ M ‖ PT ‖ SEQ ‖ TS ‖ SSRC ‖ ROC`,
/// that is the fixed header with its first byte zeroed, then the rollover counter.
#[inline]
pub(crate) fn rtp_iv(header: &[u8], roc: u32) -> [u8; 16] {
    let mut iv = [0u8; 16];
    iv[1..12].copy_from_slice(&header[1..12]);
    iv[12..].copy_from_slice(&roc.to_be_bytes());
    iv
}

/// The f8 IV of an SRTCP packet (RFC 3711 §4.1.2.3): `0…0 ‖ E ‖ SRTCP index ‖ V ‖ P ‖ RC ‖ PT ‖
/// length ‖ SSRC`, with `trailer` the E‖index word.
#[inline]
pub(crate) fn rtcp_iv(header: &[u8], trailer: u32) -> [u8; 16] {
    let mut iv = [0u8; 16];
    iv[4..8].copy_from_slice(&trailer.to_be_bytes());
    iv[8..].copy_from_slice(&header[..8]);
    iv
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// RFC 3711 Appendix B.2, with every provider.
    #[test]
    fn rfc3711_test_vector() {
        let header = unhex("806e5cba50681de55c621599");
        let iv = rtp_iv(&header, 0xd462_564a);
        assert_eq!(iv.to_vec(), unhex("006e5cba50681de55c621599d462564a"));
        for provider in crate::provider::all() {
            let f8 = F8::new(
                provider,
                &unhex("234829008467be186c3de14aae72d62c"),
                &unhex("32f2870d"),
            )
            .unwrap();
            let mut data = b"pseudorandomness is the next best thing".to_vec();
            f8.apply(&iv, &mut data);
            assert_eq!(
                data,
                unhex(
                    "019ce7a26e7854014a6366aa95d4eefd1ad4172a14f9faf455b7f1d4b62bd08f562c0eef7c4802"
                ),
                "{}",
                provider.name()
            );
            f8.apply(&iv, &mut data);
            assert_eq!(
                data,
                b"pseudorandomness is the next best thing",
                "{}",
                provider.name()
            );
        }
    }

    /// RFC 3711 §4.1.2.3: 32 zero bits, the E bit and SRTCP index, then the first 64 bits of
    /// the RTCP header (V, P, RC, PT, length, SSRC).
    #[test]
    fn the_srtcp_iv_is_laid_out_as_the_rfc_says() {
        let header = unhex("81c8000bcafebabe");
        let iv = rtcp_iv(&header, 0x8000_0001);
        assert_eq!(
            iv.to_vec(),
            unhex(
                "0000000080000001 81c8000bcafebabe"
                    .replace(' ', "")
                    .as_str()
            )
        );
    }

    #[test]
    fn a_salt_longer_than_the_key_is_refused() {
        let p = crate::provider::rustcrypto();
        assert!(F8::new(p, &[1; 16], &[2; 17]).is_err());
    }
}
