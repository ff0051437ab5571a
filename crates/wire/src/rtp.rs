//! Zero-copy RTP and RTCP header views (RFC 3550) and first-byte packet
//! demultiplexing (RFC 7983, RFC 5761).
//!
//! Nothing in this module allocates. The views borrow the packet bytes and
//! decode fields on access; constructing a view validates everything the
//! accessors rely on, so no accessor can panic.

use core::fmt;

/// The only RTP/RTCP version this module accepts (RFC 3550 §5.1).
pub const RTP_VERSION: u8 = 2;

/// Length of the fixed RTP header, without CSRCs or extension.
pub const RTP_FIXED_HEADER_LEN: usize = 12;

/// Length of the common RTCP header including the sender SSRC.
pub const RTCP_HEADER_LEN: usize = 8;

/// Why an RTP or RTCP header could not be parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ParseError {
    /// The input ends before the header (or the part of the packet the
    /// header declares) does.
    Truncated {
        /// Bytes the header declares or needs at minimum.
        needed: usize,
        /// Bytes that were available.
        available: usize,
    },
    /// The two version bits are not 2.
    BadVersion(u8),
    /// The RTCP packet type is outside 192..=223 (RFC 5761 §4).
    NotRtcp(u8),
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseError::Truncated { needed, available } => {
                write!(f, "truncated header: need {needed} bytes, have {available}")
            }
            ParseError::BadVersion(v) => write!(f, "unsupported RTP/RTCP version {v}, expected 2"),
            ParseError::NotRtcp(pt) => {
                write!(f, "packet type {pt} is outside the RTCP range 192..=223")
            }
        }
    }
}

impl std::error::Error for ParseError {}

fn be16(b: &[u8], at: usize) -> u16 {
    match b.get(at..at + 2) {
        Some(&[x, y]) => u16::from_be_bytes([x, y]),
        _ => 0,
    }
}

fn be32(b: &[u8], at: usize) -> u32 {
    match b.get(at..at + 4) {
        Some(&[a, c, d, e]) => u32::from_be_bytes([a, c, d, e]),
        _ => 0,
    }
}

fn check_len(buf: &[u8], needed: usize) -> Result<(), ParseError> {
    if buf.len() < needed {
        Err(ParseError::Truncated {
            needed,
            available: buf.len(),
        })
    } else {
        Ok(())
    }
}

/// A validated, borrowed view of an RTP header (RFC 3550 §5.1).
///
/// The view covers the fixed header, the CSRC list and the header
/// extension; [`RtpHeader::payload`] is everything after that (for SRTP this
/// includes the authentication tag, and padding is left in place).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct RtpHeader<'a> {
    buf: &'a [u8],
    header_len: usize,
}

impl<'a> RtpHeader<'a> {
    /// Parses the RTP header at the start of `buf`.
    ///
    /// Checks the version, and that the CSRC list and (if the X bit is set)
    /// the header extension fit in `buf`.
    pub fn parse(buf: &'a [u8]) -> Result<Self, ParseError> {
        crate::parse_count::count();
        RtpHeader::parse_uncounted(buf)
    }

    /// [`RtpHeader::parse`] without counting (for [`crate::demux`], which counts itself).
    pub(crate) fn parse_uncounted(buf: &'a [u8]) -> Result<Self, ParseError> {
        check_len(buf, RTP_FIXED_HEADER_LEN)?;
        let version = buf[0] >> 6;
        if version != RTP_VERSION {
            return Err(ParseError::BadVersion(version));
        }
        let csrc_count = usize::from(buf[0] & 0x0f);
        let mut header_len = RTP_FIXED_HEADER_LEN + 4 * csrc_count;
        check_len(buf, header_len)?;
        if buf[0] & 0x10 != 0 {
            // Extension header: 16-bit profile, 16-bit length in 32-bit words.
            check_len(buf, header_len + 4)?;
            let words = usize::from(be16(buf, header_len + 2));
            header_len += 4 + 4 * words;
            check_len(buf, header_len)?;
        }
        Ok(RtpHeader { buf, header_len })
    }

    /// The padding (P) bit.
    pub fn padding(&self) -> bool {
        self.buf[0] & 0x20 != 0
    }

    /// The extension (X) bit.
    pub fn extension(&self) -> bool {
        self.buf[0] & 0x10 != 0
    }

    /// Number of CSRC identifiers (CC field, 0–15).
    pub fn csrc_count(&self) -> u8 {
        self.buf[0] & 0x0f
    }

    /// The marker (M) bit.
    pub fn marker(&self) -> bool {
        self.buf[1] & 0x80 != 0
    }

    /// The 7-bit payload type.
    pub fn payload_type(&self) -> u8 {
        self.buf[1] & 0x7f
    }

    /// The 16-bit sequence number.
    pub fn sequence(&self) -> u16 {
        be16(self.buf, 2)
    }

    /// The 32-bit RTP timestamp.
    pub fn timestamp(&self) -> u32 {
        be32(self.buf, 4)
    }

    /// The synchronisation source identifier.
    pub fn ssrc(&self) -> u32 {
        be32(self.buf, 8)
    }

    /// The contributing source identifiers, in order.
    pub fn csrcs(&self) -> impl ExactSizeIterator<Item = u32> + 'a {
        let start = RTP_FIXED_HEADER_LEN;
        let end = start + 4 * usize::from(self.csrc_count());
        let list: &'a [u8] = self.buf.get(start..end).unwrap_or(&[]);
        list.chunks_exact(4)
            .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]))
    }

    /// The header extension, if the X bit is set.
    pub fn extension_header(&self) -> Option<RtpExtension<'a>> {
        if !self.extension() {
            return None;
        }
        let at = RTP_FIXED_HEADER_LEN + 4 * usize::from(self.csrc_count());
        let data = self.buf.get(at + 4..self.header_len)?;
        Some(RtpExtension {
            profile: be16(self.buf, at),
            data,
        })
    }

    /// Total header length in bytes: 12 + 4·CC, plus 4 + 4·length when the
    /// extension is present.
    pub fn header_len(&self) -> usize {
        self.header_len
    }

    /// Offset of the payload within the parsed buffer (equal to
    /// [`header_len`](Self::header_len)).
    pub fn payload_offset(&self) -> usize {
        self.header_len
    }

    /// Everything after the header (payload, padding and, for SRTP, the
    /// authentication tag).
    pub fn payload(&self) -> &'a [u8] {
        self.buf.get(self.header_len..).unwrap_or(&[])
    }

    /// The header bytes (fixed header, CSRCs and extension).
    pub fn header_bytes(&self) -> &'a [u8] {
        self.buf.get(..self.header_len).unwrap_or(self.buf)
    }
}

impl fmt::Debug for RtpHeader<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RtpHeader")
            .field("padding", &self.padding())
            .field("extension", &self.extension())
            .field("csrc_count", &self.csrc_count())
            .field("marker", &self.marker())
            .field("payload_type", &self.payload_type())
            .field("sequence", &self.sequence())
            .field("timestamp", &self.timestamp())
            .field("ssrc", &self.ssrc())
            .field("header_len", &self.header_len)
            .finish()
    }
}

/// The RTP header extension (RFC 3550 §5.3.1): a 16-bit profile-defined
/// identifier followed by `4·length` bytes of data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtpExtension<'a> {
    /// The "defined by profile" field (e.g. 0xBEDE for RFC 8285 one-byte
    /// headers).
    pub profile: u16,
    /// The extension data, without the 4-byte extension header.
    pub data: &'a [u8],
}

impl<'a> RtpExtension<'a> {
    /// The RFC 8285 elements of the extension: (id, data) for the one-byte form (profile
    /// `0xBEDE`) and the two-byte form (`0x100x`); nothing for another profile. Padding is
    /// skipped; an element that runs past the end, or id 15 in the one-byte form, ends it.
    pub fn elements(&self) -> ExtensionElements<'a> {
        let form = if self.profile == 0xBEDE {
            1
        } else if self.profile & 0xFFF0 == 0x1000 {
            2
        } else {
            0
        };
        ExtensionElements {
            data: self.data,
            at: 0,
            form,
        }
    }
}

/// The elements of a header extension (see [`RtpExtension::elements`]): (id, data, offset of
/// the data within the extension's data).
#[derive(Debug, Clone)]
pub struct ExtensionElements<'a> {
    data: &'a [u8],
    at: usize,
    form: u8,
}

impl<'a> Iterator for ExtensionElements<'a> {
    type Item = (u8, &'a [u8], usize);

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let b = *self.data.get(self.at)?;
            match self.form {
                1 => {
                    if b == 0 {
                        self.at += 1;
                        continue;
                    }
                    let (id, len) = (b >> 4, usize::from(b & 0x0f) + 1);
                    // 15 ends the list (RFC 8285 §4.2); 0 with a length is not padding: stop.
                    if id == 15 || id == 0 {
                        return None;
                    }
                    let start = self.at + 1;
                    let data = self.data.get(start..start + len)?;
                    self.at = start + len;
                    return Some((id, data, start));
                }
                2 => {
                    if b == 0 {
                        self.at += 1;
                        continue;
                    }
                    let len = usize::from(*self.data.get(self.at + 1)?);
                    let start = self.at + 2;
                    let data = self.data.get(start..start + len)?;
                    self.at = start + len;
                    return Some((b, data, start));
                }
                _ => return None,
            }
        }
    }
}

/// Appends to `out` an RTP header extension holding `elements` (id, data), in the one-byte
/// form (RFC 8285 §4.2) when every id is 1–14 and every element 1–16 bytes, else the two-byte
/// form (§4.3), padded to a multiple of four bytes. Appends nothing for no elements. Elements
/// with id 0 (or over 255 bytes) are left out.
pub fn write_extension(out: &mut Vec<u8>, elements: &[(u8, &[u8])]) {
    let elements = elements.iter().filter(|(id, d)| *id != 0 && d.len() <= 255);
    let one_byte = elements
        .clone()
        .all(|(id, d)| *id <= 14 && (1..=16).contains(&d.len()));
    if elements.clone().next().is_none() {
        return;
    }
    let at = out.len();
    out.extend_from_slice(if one_byte {
        &[0xBE, 0xDE]
    } else {
        &[0x10, 0x00]
    });
    out.extend_from_slice(&[0, 0]);
    for (id, d) in elements {
        if one_byte {
            out.push((id << 4) | (d.len() as u8 - 1));
        } else {
            out.push(*id);
            out.push(d.len() as u8);
        }
        out.extend_from_slice(d);
    }
    while !(out.len() - at).is_multiple_of(4) {
        out.push(0);
    }
    let words = ((out.len() - at) / 4 - 1) as u16;
    out[at + 2..at + 4].copy_from_slice(&words.to_be_bytes());
}

/// Well-known RTCP packet types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RtcpPacketType {
    /// Sender report (200).
    SenderReport,
    /// Receiver report (201).
    ReceiverReport,
    /// Source description (202).
    SourceDescription,
    /// Goodbye (203).
    Goodbye,
    /// Application-defined (204).
    App,
    /// Transport-layer feedback, RFC 4585 (205).
    TransportFeedback,
    /// Payload-specific feedback, RFC 4585 (206).
    PayloadFeedback,
    /// Extended report, RFC 3611 (207).
    ExtendedReport,
    /// Any other value in the RTCP range 192..=223.
    Other(u8),
}

impl From<u8> for RtcpPacketType {
    fn from(pt: u8) -> Self {
        match pt {
            200 => RtcpPacketType::SenderReport,
            201 => RtcpPacketType::ReceiverReport,
            202 => RtcpPacketType::SourceDescription,
            203 => RtcpPacketType::Goodbye,
            204 => RtcpPacketType::App,
            205 => RtcpPacketType::TransportFeedback,
            206 => RtcpPacketType::PayloadFeedback,
            207 => RtcpPacketType::ExtendedReport,
            other => RtcpPacketType::Other(other),
        }
    }
}

/// A validated, borrowed view of the header of the first RTCP packet in a
/// (possibly compound, possibly SRTCP-protected) RTCP datagram.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct RtcpHeader<'a> {
    buf: &'a [u8],
}

impl<'a> RtcpHeader<'a> {
    /// Parses the RTCP header at the start of `buf`.
    ///
    /// Requires at least 8 bytes, version 2, a packet type in 192..=223 and
    /// that the first packet's declared length (`(length + 1) * 4` bytes)
    /// fits in `buf`. The SRTCP trailer after the compound is not inspected.
    pub fn parse(buf: &'a [u8]) -> Result<Self, ParseError> {
        crate::parse_count::count();
        RtcpHeader::parse_uncounted(buf)
    }

    /// [`RtcpHeader::parse`] without counting (for [`crate::demux`], which counts itself).
    pub(crate) fn parse_uncounted(buf: &'a [u8]) -> Result<Self, ParseError> {
        check_len(buf, RTCP_HEADER_LEN)?;
        let version = buf[0] >> 6;
        if version != RTP_VERSION {
            return Err(ParseError::BadVersion(version));
        }
        if !(192..=223).contains(&buf[1]) {
            return Err(ParseError::NotRtcp(buf[1]));
        }
        let header = RtcpHeader { buf };
        check_len(buf, header.packet_len())?;
        Ok(header)
    }

    /// The padding (P) bit of the first packet.
    pub fn padding(&self) -> bool {
        self.buf[0] & 0x20 != 0
    }

    /// The 5-bit count field (reception report count, source count or
    /// subtype, depending on the packet type).
    pub fn count(&self) -> u8 {
        self.buf[0] & 0x1f
    }

    /// The raw packet type byte (192..=223).
    pub fn packet_type(&self) -> u8 {
        self.buf[1]
    }

    /// The packet type as a well-known kind.
    pub fn kind(&self) -> RtcpPacketType {
        RtcpPacketType::from(self.buf[1])
    }

    /// The length field: packet length in 32-bit words minus one.
    pub fn length_words(&self) -> u16 {
        be16(self.buf, 2)
    }

    /// Length in bytes of the first RTCP packet, header included.
    pub fn packet_len(&self) -> usize {
        (usize::from(self.length_words()) + 1) * 4
    }

    /// The SSRC in bytes 4..8 (the sender/packet sender SSRC for SR, RR,
    /// APP and feedback packets; the first chunk's SSRC for SDES and BYE).
    pub fn sender_ssrc(&self) -> u32 {
        be32(self.buf, 4)
    }

    /// The bytes of the first RTCP packet.
    pub fn packet_bytes(&self) -> &'a [u8] {
        self.buf.get(..self.packet_len()).unwrap_or(self.buf)
    }
}

impl fmt::Debug for RtcpHeader<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RtcpHeader")
            .field("padding", &self.padding())
            .field("count", &self.count())
            .field("packet_type", &self.packet_type())
            .field("length_words", &self.length_words())
            .field("sender_ssrc", &self.sender_ssrc())
            .finish()
    }
}

/// What a datagram on a multiplexed media port is, by RFC 7983 first-byte
/// demultiplexing and RFC 5761 RTP/RTCP separation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PacketKind {
    /// STUN (first byte 0..=3).
    Stun,
    /// DTLS (first byte 20..=63).
    Dtls,
    /// RTP or SRTP (first byte 128..=191, second byte outside 192..=223,
    /// at least 12 bytes).
    Rtp,
    /// RTCP or SRTCP (first byte 128..=191, second byte in 192..=223, at
    /// least 8 bytes).
    Rtcp,
    /// Anything else: empty, ZRTP, TURN channel data, too short, unknown.
    Other,
}

/// Classifies a UDP payload received on a port shared by STUN, DTLS, RTP and
/// RTCP.
///
/// STUN and DTLS are recognised by the first byte alone (RFC 7983 §7); their
/// own parsers validate the rest. For the RTP/RTCP range, the second byte
/// decides (RFC 5761 §4): 192..=223 is RTCP (packet types 200–204 and the
/// rest of the conflict range), anything else is RTP. A packet shorter than
/// the minimal header (12 bytes RTP, 8 bytes RTCP) is [`PacketKind::Other`].
pub fn classify(payload: &[u8]) -> PacketKind {
    crate::parse_count::count();
    classify_uncounted(payload)
}

/// [`classify`] without counting (for [`crate::demux`], which counts itself).
pub(crate) fn classify_uncounted(payload: &[u8]) -> PacketKind {
    let Some(&first) = payload.first() else {
        return PacketKind::Other;
    };
    match first {
        0..=3 => PacketKind::Stun,
        20..=63 => PacketKind::Dtls,
        128..=191 => match payload.get(1) {
            Some(192..=223) if payload.len() >= RTCP_HEADER_LEN => PacketKind::Rtcp,
            Some(192..=223) => PacketKind::Other,
            Some(_) if payload.len() >= RTP_FIXED_HEADER_LEN => PacketKind::Rtp,
            _ => PacketKind::Other,
        },
        _ => PacketKind::Other,
    }
}

#[cfg(test)]
mod extension_tests {
    use super::*;

    #[test]
    fn extensions_written_read_back_in_both_forms() {
        let mut out = Vec::new();
        write_extension(&mut out, &[(1, &[0xaa][..]), (3, &[1, 2, 3][..])]);
        assert_eq!(&out[..2], &[0xbe, 0xde]);
        assert_eq!(out.len() % 4, 0);
        let e = RtpExtension {
            profile: 0xbede,
            data: &out[4..],
        };
        let got: Vec<(u8, Vec<u8>)> = e.elements().map(|(i, d, _)| (i, d.to_vec())).collect();
        assert_eq!(got, vec![(1, vec![0xaa]), (3, vec![1, 2, 3])]);
        // An id over 14 needs the two-byte form.
        let mut out = Vec::new();
        write_extension(&mut out, &[(20, &[7, 7][..]), (2, &[][..])]);
        assert_eq!(&out[..2], &[0x10, 0x00]);
        let e = RtpExtension {
            profile: 0x1000,
            data: &out[4..],
        };
        let got: Vec<(u8, Vec<u8>)> = e.elements().map(|(i, d, _)| (i, d.to_vec())).collect();
        assert_eq!(got, vec![(20, vec![7, 7]), (2, vec![])]);
        let mut none = Vec::new();
        write_extension(&mut none, &[]);
        assert!(none.is_empty());
    }

    #[test]
    fn an_extension_block_is_appended_byte_for_byte() {
        let long = [7u8; 256];
        let mut out = vec![0x80, 0x60];
        let els = [
            (1, &[0xaa][..]),
            (0, &[5][..]),
            (3, &[1, 2, 3][..]),
            (4, &long[..]),
        ];
        write_extension(&mut out, &els);
        let one_byte = [
            0x80, 0x60, 0xbe, 0xde, 0, 2, 0x10, 0xaa, 0x32, 1, 2, 3, 0, 0,
        ];
        assert_eq!(
            out, one_byte,
            "id 0 and a 256-byte element left out, padded"
        );
        let mut out = Vec::new();
        write_extension(&mut out, &[(15, &[1][..]), (2, &[][..])]);
        assert_eq!(out, [0x10, 0, 0, 2, 15, 1, 1, 2, 0, 0, 0, 0]);
    }

    #[test]
    fn elements_that_run_past_the_end_stop_the_list() {
        let e = RtpExtension {
            profile: 0xbede,
            data: &[0x10, 9, 0x23, 1],
        };
        assert_eq!(e.elements().count(), 1);
        let other = RtpExtension {
            profile: 0x1234,
            data: &[1, 2, 3, 4],
        };
        assert_eq!(other.elements().count(), 0);
    }
}
