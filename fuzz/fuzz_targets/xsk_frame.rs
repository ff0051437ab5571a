#![no_main]
//! Fuzzes `frame::parse` with arbitrary frames; a frame it accepts must
//! rebuild, through `frame::build`, into a frame that parses to the same
//! addresses and payload.

use libfuzzer_sys::fuzz_target;
use secrelay_xsk::frame::{build, parse, Macs, V6_HEADERS};

fuzz_target!(|data: &[u8]| {
    let Ok(udp) = parse(data) else { return };
    let payload = data
        .get(udp.payload.clone())
        .expect("the payload range lies within the frame");
    let macs = Macs {
        src: [0x02, 0, 0, 0, 0, 1],
        dst: [0x02, 0, 0, 0, 0, 2],
    };
    let mut buf = vec![0u8; V6_HEADERS + payload.len()];
    let len = build(&mut buf, macs, udp.src, udp.dst, payload)
        .unwrap_or_else(|e| panic!("a parsed datagram does not rebuild: {e}"));
    let frame = buf
        .get(..len)
        .expect("build returns a length within the buffer");
    let again = parse(frame).expect("a rebuilt frame parses");
    assert_eq!((again.src, again.dst), (udp.src, udp.dst));
    assert_eq!(frame.get(again.payload), Some(payload));
});
