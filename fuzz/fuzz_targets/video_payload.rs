#![no_main]

//! VP8 and H.264 RTP payloads as a simulcast publisher sends them (the gateway reads each
//! one's descriptor and whether it starts a keyframe): never a panic; a VP8 descriptor that
//! reads lies within the payload, and renumbering its picture ID and TL0PICIDX changes those
//! fields only, to values that read back.

use libfuzzer_sys::fuzz_target;
use secrelay_wire::video::{starts_keyframe, vp8_descriptor, vp8_rewrite, VideoFormat};

fuzz_target!(|data: &[u8]| {
    let _ = starts_keyframe(VideoFormat::H264, data);
    let key = starts_keyframe(VideoFormat::Vp8, data);
    let Some(d) = vp8_descriptor(data) else {
        assert!(!key, "a keyframe has a descriptor");
        return;
    };
    assert!(d.len <= data.len());
    let (id, tl0) = (
        u16::from_le_bytes([data[0], data.get(1).copied().unwrap_or(0)]),
        data.last().copied().unwrap_or(0),
    );
    let mut copy = data.to_vec();
    vp8_rewrite(&mut copy, &d, id, tl0);
    let again = vp8_descriptor(&copy).expect("a renumbered descriptor still reads");
    assert_eq!(again.len, d.len);
    assert_eq!(again.start, d.start);
    assert_eq!(again.partition, d.partition);
    if let Some((got, fifteen, _)) = again.picture_id {
        let mask = if fifteen { 0x7fff } else { 0x7f };
        assert_eq!(got, id & mask);
    }
    if let Some((got, _)) = again.tl0picidx {
        assert_eq!(got, tl0);
    }
    // Nothing past the descriptor changes.
    assert_eq!(copy[d.len..], data[d.len..]);
    assert_eq!(starts_keyframe(VideoFormat::Vp8, &copy), key);
});
