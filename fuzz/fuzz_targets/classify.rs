#![no_main]

use libfuzzer_sys::fuzz_target;
use secrelay_wire::rtp::{classify, PacketKind, RtcpHeader, RtpHeader};

fuzz_target!(|data: &[u8]| {
    match classify(data) {
        PacketKind::Rtp => {
            assert!(data.len() >= 12);
            let _ = RtpHeader::parse(data);
        }
        PacketKind::Rtcp => {
            assert!(data.len() >= 8);
            let _ = RtcpHeader::parse(data);
        }
        PacketKind::Stun => assert!(data[0] <= 3),
        PacketKind::Dtls => assert!((20..=63).contains(&data[0])),
        PacketKind::Other => {}
    }
});
