#![no_main]

//! Parses a whole capture, rebuilds every UDP packet with a modified
//! payload, writes the result and reads it back.

use libfuzzer_sys::fuzz_target;
use secrelay_wire::pcap::{locate_udp, Capture, CaptureReader};

fuzz_target!(|data: &[u8]| {
    // The streaming reader yields the same packets as the slice parser, and
    // at most one error, last.
    let parsed = Capture::parse(data);
    if let Ok(reader) = CaptureReader::new(data) {
        let mut streamed = Vec::new();
        let mut error = None;
        for p in reader {
            assert!(error.is_none(), "packet after an error");
            match p {
                Ok(p) => streamed.push(p),
                Err(e) => error = Some(e),
            }
        }
        match &parsed {
            Ok(c) => {
                assert!(error.is_none());
                assert_eq!(c.packets.len(), streamed.len());
                for (a, b) in c.packets.iter().zip(&streamed) {
                    assert_eq!(a.data(), b.data());
                    assert_eq!(a.timestamp_ns(), b.timestamp_ns());
                    assert_eq!(a.udp(), b.udp());
                }
            }
            Err(_) => assert!(error.is_some()),
        }
    }

    let Ok(mut capture) = parsed else {
        return;
    };
    for p in &mut capture.packets {
        let Some(payload) = p.udp_payload().map(<[u8]>::to_vec) else {
            continue;
        };
        // Longer (SRTP-style tag appended) and shorter payloads.
        let mut longer = payload.clone();
        longer.extend_from_slice(&[0xa5; 10]);
        let shorter = &payload[..payload.len() / 2];
        for new in [&longer[..], shorter] {
            if let Ok(frame) = p.with_udp_payload(new) {
                let loc = locate_udp(p.link_type(), &frame).expect("rebuilt frame has UDP");
                assert_eq!(&frame[loc.payload.clone()], new);
            }
        }
        if p.replace_udp_payload(&longer).is_ok() {
            assert_eq!(p.udp_payload(), Some(&longer[..]));
        }
    }
    if let Ok(out) = capture.to_bytes() {
        let back = Capture::parse(&out).expect("own output parses");
        assert_eq!(back.packets.len(), capture.packets.len());
        for (a, b) in capture.packets.iter().zip(&back.packets) {
            assert_eq!(a.data(), b.data());
            assert_eq!(a.interface(), b.interface());
        }
    }
});
