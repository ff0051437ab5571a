//! The HMAC under the HTTPS server's key schedule: rustls' aws-lc-rs cipher suites with their
//! HKDF (TLS 1.3) and PRF (TLS 1.2) run over RustCrypto's `hmac` and `sha2` (SHA-NI where the
//! CPU has it) instead of aws-lc's HMAC, everything else (AEADs, key exchange, signatures,
//! hashes of the transcript) unchanged.
//!
//! Why: a TLS 1.3 handshake derives ~25 secrets, each an HMAC or two with a key used only a
//! few times. aws-lc builds an HMAC context for each one (hashing both pads again, allocating
//! and cleansing it), which costs more than the SHA-256 blocks themselves; here the key's
//! inner and outer states are computed once per key (`with_key`) and copied for each use,
//! as the DTLS side's provider does for dimpl's PRF (`secrelay_dtls::provider`). The keyed
//! states are zeroized on drop (the crates' `zeroize` feature). Known answers (RFC 4231,
//! RFC 5869) and the aws-lc-rs provider's own output are checked in the tests below.

use std::sync::OnceLock;

use hmac::{Hmac, KeyInit, Mac};
use rustls::crypto::hash::HashAlgorithm;
use rustls::crypto::hmac::{Hmac as RustlsHmac, Key, Tag};
use rustls::crypto::tls12::PrfUsingHmac;
use rustls::crypto::tls13::HkdfUsingHmac;
use rustls::crypto::CipherSuiteCommon;
use rustls::{SupportedCipherSuite, Tls12CipherSuite, Tls13CipherSuite};
use sha2::{Sha256, Sha384};

macro_rules! rustcrypto_hmac {
    ($name:ident, $key:ident, $digest:ty, $len:expr) => {
        /// HMAC over RustCrypto, keyed states precomputed per key.
        pub(crate) struct $name;

        struct $key(Hmac<$digest>);

        impl RustlsHmac for $name {
            fn with_key(&self, key: &[u8]) -> Box<dyn Key> {
                Box::new($key(
                    <Hmac<$digest> as KeyInit>::new_from_slice(key)
                        .expect("HMAC takes a key of any length"),
                ))
            }

            fn hash_output_len(&self) -> usize {
                $len
            }
        }

        impl Key for $key {
            fn sign_concat(&self, first: &[u8], middle: &[&[u8]], last: &[u8]) -> Tag {
                let mut mac = self.0.clone();
                mac.update(first);
                for m in middle {
                    mac.update(m);
                }
                mac.update(last);
                Tag::new(&mac.finalize().into_bytes())
            }

            fn tag_len(&self) -> usize {
                $len
            }
        }
    };
}

rustcrypto_hmac!(HmacSha256, KeySha256, Sha256, 32);
rustcrypto_hmac!(HmacSha384, KeySha384, Sha384, 48);

static HMAC_SHA256: HmacSha256 = HmacSha256;
static HMAC_SHA384: HmacSha384 = HmacSha384;
static HKDF_SHA256: HkdfUsingHmac<'static> = HkdfUsingHmac(&HMAC_SHA256);
static HKDF_SHA384: HkdfUsingHmac<'static> = HkdfUsingHmac(&HMAC_SHA384);
static PRF_SHA256: PrfUsingHmac<'static> = PrfUsingHmac(&HMAC_SHA256);
static PRF_SHA384: PrfUsingHmac<'static> = PrfUsingHmac(&HMAC_SHA384);

fn common(c: &CipherSuiteCommon) -> CipherSuiteCommon {
    CipherSuiteCommon {
        suite: c.suite,
        hash_provider: c.hash_provider,
        confidentiality_limit: c.confidentiality_limit,
    }
}

/// `suite` with its key schedule's HMAC replaced (SHA-256 and SHA-384 suites; any other is
/// returned as it is). Each replaced suite is made once per process.
pub(crate) fn with_fast_hmac(suite: SupportedCipherSuite) -> SupportedCipherSuite {
    static MADE: OnceLock<std::sync::Mutex<Vec<SupportedCipherSuite>>> = OnceLock::new();
    let made = MADE.get_or_init(Default::default);
    let mut made = made.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(s) = made.iter().find(|s| s.suite() == suite.suite()) {
        return *s;
    }
    let fast = match suite {
        SupportedCipherSuite::Tls13(t) => {
            let hkdf: &'static HkdfUsingHmac<'static> = match t.common.hash_provider.algorithm() {
                HashAlgorithm::SHA256 => &HKDF_SHA256,
                HashAlgorithm::SHA384 => &HKDF_SHA384,
                _ => return suite,
            };
            SupportedCipherSuite::Tls13(Box::leak(Box::new(Tls13CipherSuite {
                common: common(&t.common),
                hkdf_provider: hkdf,
                aead_alg: t.aead_alg,
                quic: t.quic,
            })))
        }
        SupportedCipherSuite::Tls12(t) => {
            let prf: &'static PrfUsingHmac<'static> = match t.common.hash_provider.algorithm() {
                HashAlgorithm::SHA256 => &PRF_SHA256,
                HashAlgorithm::SHA384 => &PRF_SHA384,
                _ => return suite,
            };
            SupportedCipherSuite::Tls12(Box::leak(Box::new(Tls12CipherSuite {
                common: common(&t.common),
                prf_provider: prf,
                kx: t.kx,
                sign: t.sign,
                aead_alg: t.aead_alg,
            })))
        }
    };
    made.push(fast);
    fast
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::crypto::tls13::Hkdf;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn hmac_known_answers_rfc4231() {
        // Test case 2: key "Jefe", data "what do ya want for nothing?".
        let data = b"what do ya want for nothing?";
        let t = HMAC_SHA256
            .with_key(b"Jefe")
            .sign(&[&data[..10], &data[10..]]);
        assert_eq!(
            t.as_ref(),
            hex("5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
        );
        let t = HMAC_SHA384.with_key(b"Jefe").sign(&[data]);
        assert_eq!(
            t.as_ref(),
            hex("af45d2e376484031617f78d2b58a6b1b9c7ef464f5a01b47e42ec3736322445e8e2240ca5e69e2c78b3239ecfab21649")
        );
        // Test case 6: a key longer than the block (hashed first).
        let t = HMAC_SHA256
            .with_key(&[0xaa; 131])
            .sign(&[b"Test Using Larger Than Block-Size Key - Hash Key First"]);
        assert_eq!(
            t.as_ref(),
            hex("60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54")
        );
    }

    #[test]
    fn hkdf_known_answer_rfc5869() {
        // Test case 1.
        let ikm = [0x0b; 22];
        let salt = hex("000102030405060708090a0b0c");
        let info = hex("f0f1f2f3f4f5f6f7f8f9");
        let prk = HKDF_SHA256.extract_from_secret(Some(&salt), &ikm);
        let mut okm = [0u8; 42];
        prk.expand_slice(&[&info], &mut okm).unwrap();
        assert_eq!(
            okm.to_vec(),
            hex("3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865")
        );
    }

    #[test]
    fn the_key_schedule_matches_aws_lc() {
        for suite in rustls::crypto::aws_lc_rs::ALL_CIPHER_SUITES {
            let fast = with_fast_hmac(*suite);
            assert_eq!(fast.suite(), suite.suite());
            match (suite, fast) {
                (SupportedCipherSuite::Tls13(a), SupportedCipherSuite::Tls13(b)) => {
                    let secret = [0x42u8; 48];
                    let (x, y) = (
                        a.hkdf_provider.extract_from_secret(Some(b"salt"), &secret),
                        b.hkdf_provider.extract_from_secret(Some(b"salt"), &secret),
                    );
                    assert_eq!(
                        x.expand_block(&[b"tls13 ", b"derived"]).as_ref(),
                        y.expand_block(&[b"tls13 ", b"derived"]).as_ref()
                    );
                    let (mut p, mut q) = ([0u8; 80], [0u8; 80]);
                    x.expand_slice(&[b"a", b"b"], &mut p).unwrap();
                    y.expand_slice(&[b"a", b"b"], &mut q).unwrap();
                    assert_eq!(p, q);
                    let okm = x.expand_block(&[b"finished"]);
                    assert_eq!(
                        a.hkdf_provider.hmac_sign(&okm, b"transcript").as_ref(),
                        b.hkdf_provider.hmac_sign(&okm, b"transcript").as_ref()
                    );
                }
                (SupportedCipherSuite::Tls12(a), SupportedCipherSuite::Tls12(b)) => {
                    let (mut p, mut q) = ([0u8; 104], [0u8; 104]);
                    a.prf_provider
                        .for_secret(&mut p, &[7u8; 48], b"key expansion", &[9u8; 64]);
                    b.prf_provider
                        .for_secret(&mut q, &[7u8; 48], b"key expansion", &[9u8; 64]);
                    assert_eq!(p, q);
                }
                _ => panic!("the version changed"),
            }
        }
    }
}
