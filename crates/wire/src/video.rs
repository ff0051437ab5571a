//! What a video relay reads in RTP payloads of VP8 (RFC 7741) and H.264 (RFC 6184): whether a
//! packet starts a keyframe (where a receiver can switch to a stream), and the VP8 payload
//! descriptor's picture ID and TL0PICIDX (which a relay that switches a receiver between
//! simulcast layers renumbers, so the receiver's decoder sees one continuous sequence).
//! Untrusted input never panics; what does not parse is "not a keyframe" / `None`.

/// A video payload format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VideoFormat {
    /// VP8 (RFC 7741).
    Vp8,
    /// H.264 (RFC 6184).
    H264,
}

/// Where a VP8 payload descriptor keeps what a relay renumbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Vp8Descriptor {
    /// The picture ID, whether it is 15 bits (M set) or 7, and its offset in the payload.
    pub picture_id: Option<(u16, bool, usize)>,
    /// TL0PICIDX and its offset.
    pub tl0picidx: Option<(u8, usize)>,
    /// Start of a VP8 partition (S).
    pub start: bool,
    /// The partition index (PID).
    pub partition: u8,
    /// The descriptor's length: where the VP8 payload begins.
    pub len: usize,
}

/// Reads a VP8 payload descriptor; `None` if it runs past the payload.
pub fn vp8_descriptor(payload: &[u8]) -> Option<Vp8Descriptor> {
    let b0 = *payload.first()?;
    let mut at = 1;
    let mut d = Vp8Descriptor {
        picture_id: None,
        tl0picidx: None,
        start: b0 & 0x10 != 0,
        partition: b0 & 0x07,
        len: 0,
    };
    if b0 & 0x80 != 0 {
        let x = *payload.get(at)?;
        at += 1;
        if x & 0x80 != 0 {
            let p = *payload.get(at)?;
            if p & 0x80 != 0 {
                let lo = *payload.get(at + 1)?;
                d.picture_id = Some(((u16::from(p & 0x7f) << 8) | u16::from(lo), true, at));
                at += 2;
            } else {
                d.picture_id = Some((u16::from(p), false, at));
                at += 1;
            }
        }
        if x & 0x40 != 0 {
            d.tl0picidx = Some((*payload.get(at)?, at));
            at += 1;
        }
        if x & 0x30 != 0 {
            payload.get(at)?;
            at += 1;
        }
    }
    if at > payload.len() {
        return None;
    }
    d.len = at;
    Some(d)
}

/// Writes picture ID `picture_id` (kept to the descriptor's width) and TL0PICIDX `tl0` into a
/// payload whose descriptor is `d`; fields the descriptor does not carry are left alone.
pub fn vp8_rewrite(payload: &mut [u8], d: &Vp8Descriptor, picture_id: u16, tl0: u8) {
    if let Some((_, fifteen, at)) = d.picture_id {
        if fifteen {
            if let Some(b) = payload.get_mut(at..at + 2) {
                b[0] = 0x80 | ((picture_id >> 8) as u8 & 0x7f);
                b[1] = picture_id as u8;
            }
        } else if let Some(b) = payload.get_mut(at) {
            *b = picture_id as u8 & 0x7f;
        }
    }
    if let Some((_, at)) = d.tl0picidx {
        if let Some(b) = payload.get_mut(at) {
            *b = tl0;
        }
    }
}

/// Whether `payload` (an RTP payload of `format`) starts a keyframe: VP8's first packet of a
/// frame whose frame header says key frame; H.264's packet that starts an IDR picture or carries
/// its SPS (single NAL, the first NAL of a STAP-A, or the start of a fragmented NAL).
pub fn starts_keyframe(format: VideoFormat, payload: &[u8]) -> bool {
    match format {
        VideoFormat::Vp8 => {
            let Some(d) = vp8_descriptor(payload) else {
                return false;
            };
            // The frame header's first bit is the inverse key frame flag (RFC 6386 §9.1).
            d.start && d.partition == 0 && payload.get(d.len).is_some_and(|b| b & 0x01 == 0)
        }
        VideoFormat::H264 => {
            let Some(&nal) = payload.first() else {
                return false;
            };
            let key = |t: u8| t == 5 || t == 7;
            match nal & 0x1f {
                // STAP-A: 16-bit size, then the NAL.
                24 => {
                    let mut at = 1;
                    while let Some(size) = payload.get(at..at + 2) {
                        let n = usize::from(u16::from_be_bytes([size[0], size[1]]));
                        let Some(&inner) = payload.get(at + 2) else {
                            return false;
                        };
                        if key(inner & 0x1f) {
                            return true;
                        }
                        at += 2 + n;
                    }
                    false
                }
                // FU-A: the FU header's start bit and the fragmented NAL's type.
                28 => payload
                    .get(1)
                    .is_some_and(|fu| fu & 0x80 != 0 && key(fu & 0x1f)),
                t => key(t),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vp8_descriptors_read_and_renumber() {
        // X, S, PID 0; I and L; 15-bit picture id 0x1234; TL0PICIDX 9; a key frame header.
        let mut key = vec![0x90, 0xc0, 0x92, 0x34, 9, 0x10, 0x02, 0x00];
        let d = vp8_descriptor(&key).unwrap();
        assert_eq!(d.picture_id, Some((0x1234, true, 2)));
        assert_eq!(d.tl0picidx, Some((9, 4)));
        assert_eq!(d.len, 5);
        assert!(starts_keyframe(VideoFormat::Vp8, &key));
        vp8_rewrite(&mut key, &d, 0x7ffe, 200);
        let again = vp8_descriptor(&key).unwrap();
        assert_eq!(again.picture_id, Some((0x7ffe, true, 2)));
        assert_eq!(again.tl0picidx, Some((200, 4)));
        // The same frame's next packet, and an inter frame's first, are not key starts.
        let cont = [0x80, 0xc0, 0x92, 0x34, 9, 0xff];
        assert!(!starts_keyframe(VideoFormat::Vp8, &cont));
        let inter = [0x90, 0x80, 0x12, 0x01];
        assert_eq!(
            vp8_descriptor(&inter).unwrap().picture_id,
            Some((0x12, false, 2))
        );
        assert!(!starts_keyframe(VideoFormat::Vp8, &inter));
        // Cut short.
        assert_eq!(vp8_descriptor(&[0x80, 0x80]), None);
        assert!(!starts_keyframe(VideoFormat::Vp8, &[]));
    }

    #[test]
    fn h264_idr_and_sps_start_keyframes() {
        assert!(starts_keyframe(VideoFormat::H264, &[0x65, 0x88]));
        assert!(starts_keyframe(VideoFormat::H264, &[0x67, 0x42]));
        assert!(!starts_keyframe(VideoFormat::H264, &[0x41, 0x9a]));
        // STAP-A with SPS, PPS.
        assert!(starts_keyframe(
            VideoFormat::H264,
            &[0x78, 0, 2, 0x67, 0x42, 0, 2, 0x68, 0xce]
        ));
        // FU-A: start of an IDR, then its middle.
        assert!(starts_keyframe(VideoFormat::H264, &[0x7c, 0x85, 1]));
        assert!(!starts_keyframe(VideoFormat::H264, &[0x7c, 0x05, 1]));
        assert!(!starts_keyframe(VideoFormat::H264, &[0x78, 0, 9]));
    }
}
