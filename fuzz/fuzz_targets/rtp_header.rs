#![no_main]

use libfuzzer_sys::fuzz_target;
use secrelay_wire::rtp::RtpHeader;

fuzz_target!(|data: &[u8]| {
    if let Ok(h) = RtpHeader::parse(data) {
        assert!(h.header_len() <= data.len());
        assert_eq!(h.payload_offset(), h.header_len());
        assert_eq!(h.header_len() + h.payload().len(), data.len());
        assert_eq!(h.csrcs().count(), usize::from(h.csrc_count()));
        if let Some(ext) = h.extension_header() {
            assert_eq!(ext.data.len() % 4, 0);
        }
        let _ = (
            h.padding(),
            h.marker(),
            h.payload_type(),
            h.sequence(),
            h.timestamp(),
            h.ssrc(),
        );
    }
});
