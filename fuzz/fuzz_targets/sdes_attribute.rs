#![no_main]

//! SDES `a=crypto` values (RFC 4568) and telephony SDP offers, as a SIP phone or proxy sends
//! them: never a panic; a crypto value that parses writes back to one that parses the same.

use libfuzzer_sys::fuzz_target;
use secrelay_wire::sdes::Crypto;
use secrelay_wire::sdp_rtp::parse_rtp;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(c) = Crypto::parse(text) {
        let again = Crypto::parse(&c.to_value()).expect("what was written parses");
        assert_eq!(again, c);
        let _ = c.unsupported_session_param();
    }
    if let Ok(d) = parse_rtp(text) {
        assert!(!d.sections.is_empty());
        for s in &d.sections {
            for c in &s.crypto {
                assert!(Crypto::parse(&c.to_value()).is_ok());
            }
        }
    }
});
