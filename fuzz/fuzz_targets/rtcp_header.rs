#![no_main]

use libfuzzer_sys::fuzz_target;
use secrelay_wire::rtp::RtcpHeader;

fuzz_target!(|data: &[u8]| {
    if let Ok(h) = RtcpHeader::parse(data) {
        assert!(h.packet_len() <= data.len());
        assert!((192..=223).contains(&h.packet_type()));
        assert_eq!(h.packet_bytes().len(), h.packet_len());
        let _ = (
            h.kind(),
            h.count(),
            h.padding(),
            h.sender_ssrc(),
            h.length_words(),
        );
    }
});
