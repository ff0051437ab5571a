#![no_main]

//! A stream of arbitrary RTP packets (sequence numbers, timestamps, markers, payloads,
//! telephone-events) into transcoders, as a gateway feeds them from the network: Opus →
//! PCMU at 30 ms and G.722 → Opus at 20 ms. Malformed payloads are peer errors; whatever
//! comes out is a clean stream (sequence numbers one apart, payloads of the output codec's
//! frame size), and nothing panics.

use libfuzzer_sys::fuzz_target;
use secrelay_media::g711::Pcmu;
use secrelay_media::g722::G722;
use secrelay_media::opus::Opus;
use secrelay_media::transcode::{InPacket, Transcoder};

fuzz_target!(|data: &[u8]| {
    let mut a = Transcoder::new(
        Box::new(Opus::new(48_000, 32_000).expect("Opus sets up")),
        Box::new(Pcmu),
        30,
    )
    .expect("transcoder sets up")
    .with_events(101, 0x65);
    let mut b = Transcoder::new(
        Box::new(G722::new()),
        Box::new(Opus::new(48_000, 32_000).expect("Opus sets up")),
        20,
    )
    .expect("transcoder sets up");
    let mut out = Vec::new();
    let mut rest = data;
    // Packets: flags, 2-byte seq, 4-byte timestamp, length byte, payload.
    while rest.len() >= 8 {
        let flags = rest[0];
        let seq = u16::from_be_bytes([rest[1], rest[2]]);
        let ts = u32::from_be_bytes([rest[3], rest[4], rest[5], rest[6]]);
        let n = usize::from(rest[7]).min(rest.len() - 8);
        let payload = &rest[8..8 + n];
        rest = &rest[8 + n..];
        let pkt = InPacket {
            seq,
            timestamp: ts,
            marker: flags & 1 != 0,
            payload,
        };
        let r = match flags >> 6 {
            0 => a.push(&pkt, &mut out),
            1 => a.push_event(&pkt, &mut out),
            _ => b.push(&pkt, &mut out),
        };
        if let Err(e) = r {
            assert!(e.is_peer_fault(), "{e}");
        }
    }
    for p in &out {
        if p.payload_type == 0 {
            assert_eq!(p.payload.len(), 240);
        }
    }
});
