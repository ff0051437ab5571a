#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(offer) = secrelay_wire::sdp::parse_offer(text) {
            assert!(!offer.media.is_empty());
            assert!(matches!(
                offer.fingerprint.0.as_str(),
                "sha-256" | "sha-384" | "sha-512"
            ));
        }
    }
});
