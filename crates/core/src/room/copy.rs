//! The one place a copy of a packet is written for a receiver: relayed copies, retransmissions
//! (the packet again, or RTX), probes, and transcoded or mixed packets all come out of
//! [`write_copy`], straight into the buffer that is then protected and sent.
//!
//! A copy carries the receiver's payload type, SSRC, sequence number and timestamp. A receiver
//! that agreed on header extensions the gateway writes gets its own ([`Extensions`]: its
//! section's `mid`, the source's audio level, our send time, its own transport-wide sequence
//! number), in its ids, after the fixed header and CSRCs as the publisher wrote them; one that
//! agreed on none gets the header as the publisher wrote it. An RTX copy (RFC 4588) is the same
//! header with the RTX payload type, SSRC and sequence number, the copy's sequence number first
//! in its payload, and the payload without its padding.

use secrelay_wire::demux::RtpFacts;
use secrelay_wire::rtp::write_extension;

use crate::leg::ExtIds;

/// A packet a copy is made from: its header as written and its payload.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Original<'a> {
    /// The header: fixed part, CSRCs, and the extension if it has one.
    pub header: &'a [u8],
    /// The payload, with its padding if it has any.
    pub payload: &'a [u8],
}

impl<'a> Original<'a> {
    /// `rtp`, whose header was read as `facts`.
    pub fn of(rtp: &'a [u8], facts: &RtpFacts) -> Original<'a> {
        let at = usize::from(facts.header_len).min(rtp.len());
        let (header, payload) = rtp.split_at(at);
        Original { header, payload }
    }

    /// The fixed header and CSRCs.
    fn fixed(&self) -> &'a [u8] {
        let cc = usize::from(self.header.first().map_or(0, |b| b & 0x0f));
        &self.header[..(12 + 4 * cc).min(self.header.len())]
    }

    /// The payload without its padding (RFC 3550 §5.1: with the P bit set, the last byte
    /// counts the padding); empty if that count is wrong.
    pub fn unpadded(&self) -> &'a [u8] {
        if self.header.first().is_some_and(|b| b & 0x20 != 0) {
            let pad = usize::from(self.payload.last().copied().unwrap_or(0));
            return self
                .payload
                .get(..self.payload.len().saturating_sub(pad.max(1)))
                .unwrap_or_default();
        }
        self.payload
    }
}

/// The fields a receiver sees in a copy's fixed header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fields {
    /// Its payload type for the codec.
    pub pt: u8,
    /// The SSRC it knows the stream by.
    pub ssrc: u32,
    /// The sequence number in its numbering.
    pub seq: u16,
    /// The timestamp in its numbering.
    pub ts: u32,
}

/// The header extensions a copy carries for a receiver that agreed on some.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Extensions<'a> {
    /// The receiver's ids.
    pub ids: ExtIds,
    /// The mid of the section the stream goes to.
    pub mid: &'a [u8],
    /// The source's audio level element, when it sent one.
    pub audio_level: Option<&'a [u8]>,
    /// Our send time (24-bit `abs-send-time`).
    pub abs_send: u32,
    /// The receiver's transport-wide sequence number for this copy.
    pub twcc: Option<u16>,
}

/// How a copy is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// As the media packet.
    Media,
    /// As an RTX packet repairing it (RFC 4588 §4): its payload type, SSRC and sequence number.
    Rtx { pt: u8, ssrc: u32, seq: u16 },
}

/// Writes the copy of `o` a receiver gets into `out` (see the [module documentation](self)):
/// `fields` in its fixed header, `ext` when it agreed on extensions (else the header as
/// written), framed as `framing` says. Returns where the media payload begins in `out` (after
/// the header and, for RTX, the original sequence number): a VP8 descriptor rewritten per
/// receiver is there.
pub(crate) fn write_copy(
    out: &mut Vec<u8>,
    o: Original<'_>,
    fields: Fields,
    ext: Option<&Extensions<'_>>,
    framing: Framing,
) -> usize {
    crate::copy_count::count();
    out.clear();
    match ext {
        None => out.extend_from_slice(o.header),
        Some(e) => write_header_with(out, o, e),
    }
    let header = out.len();
    match framing {
        Framing::Media => {
            rewrite(out, fields);
            out.extend_from_slice(o.payload);
            header
        }
        Framing::Rtx { pt, ssrc, seq } => {
            rewrite(
                out,
                Fields {
                    pt,
                    ssrc,
                    seq,
                    ..fields
                },
            );
            if let Some(b) = out.first_mut() {
                *b &= !0x20;
            }
            out.extend_from_slice(&fields.seq.to_be_bytes());
            out.extend_from_slice(o.unpadded());
            header + 2
        }
    }
}

/// The fixed header and CSRCs of `o`, then the receiver's extension elements (the X bit set
/// when there are any, cleared when none).
fn write_header_with(out: &mut Vec<u8>, o: Original<'_>, e: &Extensions<'_>) {
    out.extend_from_slice(o.fixed());
    let abs = e.abs_send.to_be_bytes();
    let seq = e.twcc.unwrap_or(0).to_be_bytes();
    let mut els: [(u8, &[u8]); 4] = [(0, &[]); 4];
    let mut n = 0;
    let ids = e.ids;
    if ids.mid != 0 && !e.mid.is_empty() && e.mid.len() <= super::member::MID_MAX {
        els[n] = (ids.mid, e.mid);
        n += 1;
    }
    if let (true, Some(level)) = (ids.audio_level != 0, e.audio_level) {
        els[n] = (ids.audio_level, level);
        n += 1;
    }
    if ids.abs_send_time != 0 {
        els[n] = (ids.abs_send_time, &abs[1..]);
        n += 1;
    }
    if ids.twcc != 0 && e.twcc.is_some() {
        els[n] = (ids.twcc, &seq);
        n += 1;
    }
    if let Some(b) = out.first_mut() {
        if n > 0 {
            *b |= 0x10;
        } else {
            *b &= !0x10;
        }
    }
    write_extension(out, &els[..n]);
}

/// Sets the payload type (keeping the marker bit), sequence number, timestamp and SSRC of an
/// RTP header (at least 12 bytes; shorter is left alone).
fn rewrite(rtp: &mut [u8], f: Fields) {
    if rtp.len() >= 12 {
        rtp[1] = (rtp[1] & 0x80) | (f.pt & 0x7f);
        rtp[2..4].copy_from_slice(&f.seq.to_be_bytes());
        rtp[4..8].copy_from_slice(&f.ts.to_be_bytes());
        rtp[8..12].copy_from_slice(&f.ssrc.to_be_bytes());
    }
}

/// A plain RTP header (version 2, no CSRCs or extension) for a packet the gateway made (a
/// transcoded or mixed one): its fields are the receiver's, written by [`write_copy`].
pub(crate) fn made_header(marker: bool) -> [u8; 12] {
    let mut h = [0u8; 12];
    h[0] = 0x80;
    h[1] = if marker { 0x80 } else { 0 };
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet(padding: bool) -> Vec<u8> {
        let mut p = vec![0x80, 0x80 | 111, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3];
        if padding {
            p[0] |= 0x20;
        }
        p.extend_from_slice(b"payload");
        if padding {
            p.extend_from_slice(&[0, 0, 3]);
        }
        p
    }

    fn facts(p: &[u8]) -> RtpFacts {
        RtpFacts {
            header_len: 12,
            payload_type: p[1] & 0x7f,
            ..RtpFacts::default()
        }
    }

    const F: Fields = Fields {
        pt: 96,
        ssrc: 0xaabb_ccdd,
        seq: 0x0102,
        ts: 0x0304_0506,
    };

    #[test]
    fn a_copy_keeps_the_marker_and_takes_the_receivers_fields() {
        let p = packet(false);
        let mut out = Vec::new();
        let at = write_copy(
            &mut out,
            Original::of(&p, &facts(&p)),
            F,
            None,
            Framing::Media,
        );
        assert_eq!(at, 12);
        assert_eq!(out[1], 0x80 | 96);
        assert_eq!(&out[2..8], &[1, 2, 3, 4, 5, 6]);
        assert_eq!(&out[8..12], &[0xaa, 0xbb, 0xcc, 0xdd]);
        assert_eq!(&out[12..], b"payload");
    }

    #[test]
    fn an_rtx_copy_carries_the_sequence_number_first_and_no_padding() {
        let p = packet(true);
        let mut out = Vec::new();
        let rtx = Framing::Rtx {
            pt: 97,
            ssrc: 7,
            seq: 9,
        };
        let at = write_copy(&mut out, Original::of(&p, &facts(&p)), F, None, rtx);
        assert_eq!(at, 14);
        assert_eq!(out[0] & 0x20, 0, "no padding");
        assert_eq!(out[1], 0x80 | 97);
        assert_eq!(&out[2..4], &9u16.to_be_bytes());
        assert_eq!(&out[8..12], &7u32.to_be_bytes());
        assert_eq!(&out[12..14], &0x0102u16.to_be_bytes(), "the copy's number");
        assert_eq!(&out[14..], b"payload");
    }

    #[test]
    fn extensions_are_written_in_the_receivers_ids() {
        let p = packet(false);
        let ext = Extensions {
            ids: ExtIds {
                mid: 4,
                abs_send_time: 2,
                twcc: 3,
                ..ExtIds::default()
            },
            mid: b"1",
            audio_level: None,
            abs_send: 0x0012_3456,
            twcc: Some(77),
        };
        let mut out = Vec::new();
        let at = write_copy(
            &mut out,
            Original::of(&p, &facts(&p)),
            F,
            Some(&ext),
            Framing::Media,
        );
        assert_eq!(out[0] & 0x10, 0x10);
        let h = secrelay_wire::RtpHeader::parse(&out).unwrap();
        assert_eq!(h.header_len(), at);
        let els: Vec<(u8, Vec<u8>)> = h
            .extension_header()
            .unwrap()
            .elements()
            .map(|(i, d, _)| (i, d.to_vec()))
            .collect();
        assert_eq!(
            els,
            vec![
                (4, b"1".to_vec()),
                (2, vec![0x12, 0x34, 0x56]),
                (3, vec![0, 77])
            ]
        );
        assert_eq!(h.payload(), b"payload");
    }
}
