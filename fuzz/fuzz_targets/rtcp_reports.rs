#![no_main]

//! RTCP compounds as members send them, read for their sender and receiver reports: never a
//! panic; every report read writes back to one that reads the same.

use libfuzzer_sys::fuzz_target;
use secrelay_wire::rtcp::{reports, write_report};

fuzz_target!(|data: &[u8]| {
    let Ok(found) = reports(data) else {
        return;
    };
    for r in found {
        if r.blocks.len() > 31 {
            continue;
        }
        let mut out = Vec::new();
        write_report(&mut out, r.ssrc, r.sender.as_ref(), &r.blocks, "fuzz");
        let again = reports(&out).expect("what was written reads");
        assert_eq!(again, vec![r]);
    }
});
