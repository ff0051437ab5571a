#![no_main]

use libfuzzer_sys::fuzz_target;

// The lenient SDP reader the ng server rewrites peers' SDP with, and the telephony view over it.
fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(doc) = secrelay_wire::sdp_doc::SdpDoc::parse(text) {
            assert!(!doc.media.is_empty());
            let d = secrelay_wire::sdp_rtp::rtp_description(&doc);
            assert_eq!(d.sections.len(), doc.media.len());
            for i in 0..doc.media.len() {
                let _ = doc.address_of(i);
            }
        }
    }
});
