//! A datagram on a port shared by STUN, DTLS, RTP and RTCP, classified once where it is read.
//!
//! [`demux`] does the RFC 7983 first-byte demultiplexing and the RFC 5761 RTP/RTCP separation
//! of [`crate::classify`], and in the same pass the parse every later stage needs: a STUN
//! message is parsed whole (its framing, attribute order and FINGERPRINT checked) and the ICE
//! username's target fragment located, an RTP header's fields are read (SSRC, payload type,
//! sequence number, timestamp, marker, header length), an RTCP compound's first header is
//! checked and its sender SSRC read. The result, a [`Class`], owns no bytes: it travels with
//! the datagram (between threads too), and every later stage takes it as it is instead of
//! parsing again ([`StunFacts::message`] gives the parsed message back without a second
//! parse). DTLS records are left to the DTLS stack, which parses them anyway.

use crate::rtp::{classify_uncounted, PacketKind, ParseError, RtcpHeader, RtpHeader};
use crate::stun::{Message, Parts, StunError};

/// What a datagram is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// A STUN message that parsed.
    Stun(StunFacts),
    /// A DTLS record (first byte 20..=63).
    Dtls,
    /// An RTP (or SRTP) packet whose header parsed.
    Rtp(RtpFacts),
    /// An RTCP (or SRTCP) compound whose first header parsed.
    Rtcp(RtcpFacts),
    /// In the STUN, RTP or RTCP range, but not well formed.
    Malformed(Malformed),
    /// In a range of RFC 7983 the gateway does not speak (ZRTP, TURN channel data), or in the
    /// RTP range but shorter than a header.
    Other,
    /// Empty, or a first byte in none of RFC 7983's ranges: no protocol multiplexed on a media
    /// port.
    Unclassified,
}

/// Why a datagram in the STUN, RTP or RTCP range is not well formed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Malformed {
    /// STUN that does not parse.
    Stun(StunError),
    /// An RTP header that does not parse.
    Rtp(ParseError),
    /// An RTCP header that does not parse.
    Rtcp(ParseError),
}

/// A parsed STUN message, without its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StunFacts {
    parts: Parts,
    /// Where the USERNAME's part before the colon is (offset, length), if there is one.
    target_ufrag: Option<(u16, u16)>,
}

impl StunFacts {
    /// The message, over the datagram it was parsed from (`None` for other bytes).
    pub fn message<'a>(&self, datagram: &'a [u8]) -> Option<Message<'a>> {
        Message::from_parts(datagram, self.parts)
    }

    /// The local ICE ufrag a Binding request is addressed to: the USERNAME's part before the
    /// colon (RFC 8445 §7.2.2: `<receiver ufrag>:<sender ufrag>`), in UTF-8.
    pub fn target_ufrag<'a>(&self, datagram: &'a [u8]) -> Option<&'a str> {
        let (at, len) = self.target_ufrag?;
        let at = usize::from(at);
        std::str::from_utf8(datagram.get(at..at + usize::from(len))?).ok()
    }
}

/// Header extension elements read at the edge: up to [`ExtElements::MAX`] (id, where its data
/// is in the datagram, its length). Ids are the sender's; their meaning is what its SDP
/// negotiated (`a=extmap`), which the member that owns the datagram knows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct ExtElements {
    n: u8,
    items: [(u8, u16, u8); ExtElements::MAX],
}

impl ExtElements {
    /// Most elements read (Chrome sends up to 6 on video).
    pub const MAX: usize = 8;

    fn push(&mut self, id: u8, at: usize, len: usize) {
        let (Ok(at), Ok(len)) = (u16::try_from(at), u8::try_from(len)) else {
            return;
        };
        if usize::from(self.n) < Self::MAX {
            self.items[usize::from(self.n)] = (id, at, len);
            self.n += 1;
        }
    }

    /// The elements: (id, offset of its data in the packet, length).
    pub fn iter(&self) -> impl Iterator<Item = (u8, usize, usize)> + '_ {
        self.items[..usize::from(self.n)]
            .iter()
            .map(|(id, at, len)| (*id, usize::from(*at), usize::from(*len)))
    }

    /// Element `id`'s data in `packet` (the datagram these were read from, or the same packet
    /// after SRTP, which leaves the header in place).
    pub fn get<'a>(&self, packet: &'a [u8], id: u8) -> Option<&'a [u8]> {
        self.iter()
            .find(|(i, _, _)| *i == id)
            .and_then(|(_, at, len)| packet.get(at..at + len))
    }

    /// Whether none were read.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }
}

/// An RTP header's fields. Unchanged by SRTP (which leaves the header in the clear), so they
/// hold for the packet after it is unprotected too.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct RtpFacts {
    /// The SSRC.
    pub ssrc: u32,
    /// The payload type.
    pub payload_type: u8,
    /// The marker bit.
    pub marker: bool,
    /// The sequence number.
    pub sequence: u16,
    /// The timestamp.
    pub timestamp: u32,
    /// The header's length: fixed part, CSRCs and extension.
    pub header_len: u16,
    /// Its header extension's elements (RFC 8285), if it has one.
    pub ext: ExtElements,
}

/// The first RTCP header of a compound.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RtcpFacts {
    /// The sender SSRC of the first packet.
    pub ssrc: u32,
    /// The first packet's type (200 SR, 201 RR, 205 RTPFB, 206 PSFB, …).
    pub packet_type: u8,
}

/// Classifies a UDP payload received on a shared media port, parsing it once (see the
/// [module documentation](self)).
pub fn demux(datagram: &[u8]) -> Class {
    crate::parse_count::count();
    match classify_uncounted(datagram) {
        PacketKind::Stun => match Message::parse_uncounted(datagram) {
            Ok(m) => Class::Stun(StunFacts {
                parts: m.parts(),
                target_ufrag: m.username().and_then(|u| {
                    let colon = u.iter().position(|b| *b == b':')?;
                    let at = u.as_ptr() as usize - datagram.as_ptr() as usize;
                    Some((u16::try_from(at).ok()?, u16::try_from(colon).ok()?))
                }),
            }),
            Err(e) => Class::Malformed(Malformed::Stun(e)),
        },
        PacketKind::Dtls => Class::Dtls,
        PacketKind::Rtp => match RtpHeader::parse_uncounted(datagram) {
            Ok(h) => Class::Rtp(RtpFacts {
                ssrc: h.ssrc(),
                payload_type: h.payload_type(),
                marker: h.marker(),
                sequence: h.sequence(),
                timestamp: h.timestamp(),
                header_len: u16::try_from(h.header_len()).unwrap_or(u16::MAX),
                ext: h
                    .extension_header()
                    .map(|e| {
                        // Offsets from the datagram's start: the extension's data begins
                        // 4 bytes into the block after the fixed header and CSRCs.
                        let base = 12 + 4 * usize::from(h.csrc_count()) + 4;
                        let mut x = ExtElements::default();
                        for (id, data, at) in e.elements() {
                            x.push(id, base + at, data.len());
                        }
                        x
                    })
                    .unwrap_or_default(),
            }),
            Err(e) => Class::Malformed(Malformed::Rtp(e)),
        },
        PacketKind::Rtcp => match RtcpHeader::parse_uncounted(datagram) {
            Ok(h) => Class::Rtcp(RtcpFacts {
                ssrc: h.sender_ssrc(),
                packet_type: h.packet_type(),
            }),
            Err(e) => Class::Malformed(Malformed::Rtcp(e)),
        },
        PacketKind::Other => match datagram.first() {
            Some(16..=19 | 64..=79 | 128..=191) => Class::Other,
            _ => Class::Unclassified,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stun::{attr, Class as StunClass, MessageBuilder, BINDING};

    fn binding(username: &str) -> Vec<u8> {
        let mut buf = [0u8; 256];
        let n = MessageBuilder::new(&mut buf, StunClass::Request, BINDING, [7; 12])
            .attribute(attr::USERNAME, username.as_bytes())
            .integrity(b"password")
            .fingerprint()
            .unwrap();
        buf[..n].to_vec()
    }

    #[test]
    fn stun_is_parsed_once_and_read_back_without_a_second_parse() {
        let d = binding("local:remote");
        let Class::Stun(facts) = demux(&d) else {
            panic!("{:?}", demux(&d))
        };
        assert_eq!(facts.target_ufrag(&d), Some("local"));
        let m = facts.message(&d).unwrap();
        assert_eq!(m.class(), StunClass::Request);
        assert!(m.check_integrity(b"password").is_ok());
        assert!(facts.message(&d[..d.len() - 4]).is_none(), "other bytes");
        let no_colon = binding("nocolon");
        let Class::Stun(f) = demux(&no_colon) else {
            panic!()
        };
        assert_eq!(f.target_ufrag(&no_colon), None);
    }

    #[test]
    fn rtp_rtcp_dtls_and_the_rest() {
        let mut rtp = vec![0x90, 0x80 | 111, 0, 7, 0, 0, 3, 0xc0, 0, 0, 0x10, 0x01];
        rtp.extend_from_slice(&[0xbe, 0xde, 0, 1, 0x12, 0xaa, 0xbb, 0xcc, 9, 9]);
        assert_eq!(
            demux(&rtp),
            Class::Rtp(RtpFacts {
                ssrc: 0x1001,
                payload_type: 111,
                marker: true,
                sequence: 7,
                timestamp: 960,
                header_len: 20,
                ext: {
                    // Element 0x12: id 1, 3 bytes at 17.
                    let mut x = ExtElements::default();
                    x.push(1, 17, 3);
                    x
                },
            })
        );
        let Class::Rtp(f) = demux(&rtp) else { panic!() };
        assert_eq!(f.ext.get(&rtp, 1), Some(&[0xaa, 0xbb, 0xcc][..]));
        assert_eq!(f.ext.get(&rtp, 2), None);
        let rr = [0x80, 201, 0, 1, 0, 0, 0x5e, 0xc0];
        assert_eq!(
            demux(&rr),
            Class::Rtcp(RtcpFacts {
                ssrc: 0x5ec0,
                packet_type: 201
            })
        );
        assert_eq!(demux(&[22, 254, 253, 0]), Class::Dtls);
        // Ranges no protocol of the gateway's: ZRTP, TURN channel data, RTP too short.
        assert_eq!(demux(&[0x10; 40]), Class::Other);
        assert_eq!(demux(&[0x40; 40]), Class::Other);
        assert_eq!(demux(&[0x80; 8]), Class::Other);
        // In no range at all.
        assert_eq!(demux(&[]), Class::Unclassified);
        assert_eq!(demux(&[0x70; 40]), Class::Unclassified);
        assert_eq!(demux(&[0x04; 40]), Class::Unclassified);
        assert_eq!(demux(&[0xc0; 40]), Class::Unclassified);
        // An extension that runs past the end.
        let mut bad = rtp.clone();
        bad.truncate(17);
        assert!(matches!(demux(&bad), Class::Malformed(Malformed::Rtp(_))));
        assert!(matches!(
            demux(&[0, 1, 0, 2, 0x21, 0x12, 0xa4, 0x42, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
            Class::Malformed(Malformed::Stun(_))
        ));
        let mut long_rr = rr.to_vec();
        long_rr[3] = 9;
        assert!(matches!(
            demux(&long_rr),
            Class::Malformed(Malformed::Rtcp(_))
        ));
    }
}
