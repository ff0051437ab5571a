#![no_main]

//! An ng request as a SIP proxy sends it to the gateway's control socket (cookie, space,
//! bencoded dictionary): decoded and read into a request, never a panic; what reads as an
//! offer or answer carries the keys it needs, and its `codec` manipulations and packet times
//! (the `codec` dictionary, `codec-…` flags, `ptime`) are read within their bounds.

use libfuzzer_sys::fuzz_target;
use secrelay_wire::bencode::ng_decode;
use secrelay_wire::ng::{parse, Request};

fuzz_target!(|data: &[u8]| {
    let Ok((_, body)) = ng_decode(data) else {
        return;
    };
    match parse(&body) {
        Ok(Request::Answer(a)) => assert!(a.to_tag.is_some()),
        Ok(Request::Offer(o)) => {
            let _ = o.flags.has("SIP-source-address");
            for p in [o.flags.ptime, o.flags.ptime_reverse].into_iter().flatten() {
                assert!((1..=1000).contains(&p));
            }
            let _ = o.flags.codec.is_empty();
        }
        Ok(_) | Err(_) => {}
    }
});
