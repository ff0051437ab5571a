//! The peer-signature check of the dimpl engine (`secrelay_dtls`'s `FastVerifier`, which reads
//! the key with webpki's certificate parser) against dimpl's own verifier (x509-cert), on
//! certificates and signatures that are valid, mutated or arbitrary: never a panic, and the two
//! agree on whether the signature verifies wherever dimpl's verifier decodes the certificate.
//!
//! Input: a byte of set-up (bit 0: SHA-384 instead of SHA-256; bits 1-2: which template; bit 3:
//! arbitrary certificate bytes instead of the template; bit 4: arbitrary signature instead of
//! the template's), then triples (2-byte position, xor byte) applied to the template
//! certificate (position's top bit clear) or signature (set), or the arbitrary bytes themselves.
#![no_main]

use libfuzzer_sys::fuzz_target;
use secrelay_dtls::fuzzing::verify_both;

/// What the fixtures' signatures sign.
const DATA: &[u8] = b"ServerKeyExchange params or the handshake transcript";

/// Certificates with a signature over `DATA` by their key (curve's own hash), made once with
/// the openssl CLI: P-256 and P-384, each as OpenSSL's default X.509 v3 (with extensions) and
/// bare (v1, no extensions). Fixed bytes, so that a failing input reproduces.
const TEMPLATES: [(&[u8], &[u8]); 4] = [
    (
        include_bytes!("../fixtures/verifier-p256.der"),
        include_bytes!("../fixtures/verifier-p256.sig"),
    ),
    (
        include_bytes!("../fixtures/verifier-p384.der"),
        include_bytes!("../fixtures/verifier-p384.sig"),
    ),
    (
        include_bytes!("../fixtures/verifier-p256-bare.der"),
        include_bytes!("../fixtures/verifier-p256-bare.sig"),
    ),
    (
        include_bytes!("../fixtures/verifier-p384-bare.der"),
        include_bytes!("../fixtures/verifier-p384-bare.sig"),
    ),
];

fuzz_target!(|input: &[u8]| {
    let Some((&setup, rest)) = input.split_first() else {
        return;
    };
    let (cert_t, sig_t) = TEMPLATES[usize::from((setup >> 1) & 3)];
    let (mut cert, mut sig) = (cert_t.to_vec(), sig_t.to_vec());
    match (setup & 8 != 0, setup & 16 != 0) {
        (true, true) => {
            let (a, b) = rest.split_at(rest.len() / 2);
            cert = a.to_vec();
            sig = b.to_vec();
        }
        (true, false) => cert = rest.to_vec(),
        (false, true) => sig = rest.to_vec(),
        (false, false) => {
            for pair in rest.chunks_exact(3) {
                let pos = usize::from(u16::from_be_bytes([pair[0], pair[1]]));
                let target = if pos & 0x8000 != 0 {
                    &mut sig
                } else {
                    &mut cert
                };
                let len = target.len();
                if len > 0 {
                    target[(pos & 0x7fff) % len] ^= pair[2];
                }
            }
        }
    }
    let (ours, dimpls) = verify_both(&cert, DATA, &sig, setup & 1 != 0);
    // Nothing dimpl's verifier accepts is refused, and nothing it refuses for the signature is
    // accepted. webpki decodes some certificates x509-cert will not (e.g. a GeneralizedTime
    // year before 1970): there the signature is checked against the key the certificate
    // carries, where dimpl's verifier stopped at decoding.
    match (&ours, &dimpls) {
        (Ok(()), Ok(())) | (Err(_), Err(_)) => {}
        (Ok(()), Err(dimpl::CryptoError::CertificateParseFailed)) => {}
        _ => panic!("FastVerifier {ours:?}, dimpl's verifier {dimpls:?}"),
    }
});
