//! secrelay's SRTP engine against rtpengine's (Debian's rtpengine-daemon; `scripts/setup`
//! installs it) in the SDES suites libsrtp does not have: AES-192 counter mode and AES in f8
//! mode, each with an 80- and a 32-bit tag, and the NULL cipher with a 32-bit tag. Two phones
//! whose SRTP is this crate's call each other through rtpengine in one suite: rtpengine
//! unprotects what the caller protected and protects it again, in the same suite under its own
//! key, for the callee, and the other way round. Every packet must come through both ways, which
//! happens only if both ends agree on the keystream, the IVs (the rollover counter included:
//! the sequence numbers roll over during the call), the key derivation and the tags (a phone
//! panics on a packet that does not unprotect).
//!
//! Without rtpengine the test fails under CI (`CI` set) and says SKIPPED elsewhere.

mod lab_support;

use std::time::{Duration, Instant};

use secrelay_lab::failover::PhoneCall;
use secrelay_srtp::Profile;
use secrelay_testkit::ng::command;

#[test]
fn rtpengine_and_secrelay_agree_on_aes_192_f8_and_null_32() {
    let test = "rtpengine_and_secrelay_agree_on_aes_192_f8_and_null_32";
    let Some(mut rtpengine) = lab_support::start_rtpengine(test, (47000, 47999)) else {
        return;
    };
    let ng = &mut rtpengine.ng;
    let suites = [
        Profile::AesCm192HmacSha1_80,
        Profile::AesCm192HmacSha1_32,
        Profile::F8Aes128HmacSha1_80,
        Profile::F8Aes128HmacSha1_32,
        Profile::NullHmacSha1_32,
    ];
    for (n, suite) in suites.into_iter().enumerate() {
        let id = format!("suite-{n}@test");
        let mut call = PhoneCall::open(ng, &id, Some(suite), 0x5000 + n as u32, 65_520)
            .unwrap_or_else(|e| panic!("{suite}: the call through rtpengine: {e:#}"));
        let rounds = 40;
        for _ in 0..rounds {
            call.exchange().unwrap();
            std::thread::sleep(Duration::from_millis(5));
        }
        let end = Instant::now() + Duration::from_secs(2);
        while call.heard() != (rounds, rounds) && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(20));
            call.caller.read();
            call.callee.read();
        }
        assert_eq!(
            call.heard(),
            (rounds, rounds),
            "{suite}: packets that came through rtpengine and unprotected (caller, callee)"
        );
        ng.call(command("delete", &id, "caller", None, None))
            .unwrap();
    }
}
