//! The SDP `a=fingerprint` value parser: errors, never panics; what parses prints back to the
//! same fingerprint.
#![no_main]

use libfuzzer_sys::fuzz_target;
use secrelay_dtls::Fingerprint;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(fp) = text.parse::<Fingerprint>() {
        let again: Fingerprint = fp.to_string().parse().unwrap();
        assert_eq!(again.bytes(), fp.bytes());
        assert_eq!(again.algorithm(), fp.algorithm());
    }
});
