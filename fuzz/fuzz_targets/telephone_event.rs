#![no_main]

//! RFC 4733 telephone-event payloads from the network, through the parser and a collector:
//! a payload parses into 4-octet blocks or is a peer error; the collector reports each event
//! at most once per start timestamp and never panics, whatever order packets come in.

use libfuzzer_sys::fuzz_target;
use secrelay_media::dtmf::{parse, DtmfCollector};

fuzz_target!(|data: &[u8]| {
    // Packets: a 4-byte timestamp, a length byte, then that many bytes of payload.
    let mut c = DtmfCollector::new();
    let mut digits = Vec::new();
    let mut blocks = 0usize;
    let mut rest = data;
    while rest.len() >= 5 {
        let ts = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]);
        let n = usize::from(rest[4]).min(rest.len() - 5);
        let payload = &rest[5..5 + n];
        rest = &rest[5 + n..];
        match parse(payload) {
            Ok(events) => {
                assert_eq!(events.len() * 4, payload.len());
                blocks += events.len();
                for (e, block) in events.iter().zip(payload.chunks_exact(4)) {
                    let mut again = e.to_bytes();
                    again[1] |= block[1] & 0x40; // the reserved bit is not kept
                    assert_eq!(&again[..], block);
                }
                c.push(ts, payload, &mut digits).expect("parsed above");
            }
            Err(e) => {
                assert!(e.is_peer_fault());
                assert!(c.push(ts, payload, &mut digits).is_err());
            }
        }
    }
    c.finish(&mut digits);
    // Each block starts at most one event, reported at most once.
    assert!(
        digits.len() <= blocks,
        "{} digits from {blocks} blocks",
        digits.len()
    );
});
