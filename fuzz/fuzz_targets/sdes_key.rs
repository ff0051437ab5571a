//! The SDES inline key parser and the profile name parser: errors, never panics; what parses
//! prints back to a form that parses to the same key.
#![no_main]

use libfuzzer_sys::fuzz_target;
use secrelay_srtp::{MasterKey, Profile};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = text.parse::<Profile>();
    for profile in Profile::ALL {
        if let Ok(k) = MasterKey::from_sdes_inline(profile, text) {
            let again = MasterKey::from_sdes_inline(profile, &k.to_sdes_inline()).unwrap();
            assert_eq!(again.key(), k.key());
            assert_eq!(again.salt(), k.salt());
        }
    }
});
