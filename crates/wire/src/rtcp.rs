//! RTCP sender and receiver reports (RFC 3550 §6.4), source descriptions (§6.5) and feedback
//! (RFC 4585, 5104), as a media relay reads and writes them: a compound read once
//! ([`compound`]) into its SR/RR packets with their report blocks and its feedback messages
//! (generic NACK, PLI, FIR, REMB, transport-wide congestion control), other packets skipped;
//! compounds written with one SR or RR, its report blocks, and an SDES CNAME; feedback
//! messages written ([`write_pli`], [`write_fir`], [`write_nack`], [`write_remb`]). Untrusted
//! input never panics; a compound that does not frame is an error.

use crate::rtp::{ParseError, RtcpPacketType, RTCP_HEADER_LEN, RTP_VERSION};

/// One report block: what the reporter received from one source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReportBlock {
    /// The source reported on.
    pub ssrc: u32,
    /// Fraction lost since the last report, out of 256.
    pub fraction_lost: u8,
    /// Cumulative packets lost (24 bits, signed).
    pub cumulative_lost: i32,
    /// Extended highest sequence number received.
    pub highest_seq: u32,
    /// Interarrival jitter, in timestamp units.
    pub jitter: u32,
    /// The middle 32 bits of the NTP timestamp of the last SR received from the source (0:
    /// none yet).
    pub lsr: u32,
    /// Delay since that SR, in 1/65536 s.
    pub dlsr: u32,
}

/// A sender report's sender information.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SenderInfo {
    /// NTP timestamp (64 bits).
    pub ntp: u64,
    /// The RTP timestamp of the same instant.
    pub rtp_timestamp: u32,
    /// Packets sent.
    pub packets: u32,
    /// Payload octets sent.
    pub octets: u32,
}

/// An SR or RR read from a compound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// The reporter's SSRC.
    pub ssrc: u32,
    /// Sender information (SR only).
    pub sender: Option<SenderInfo>,
    /// Report blocks.
    pub blocks: Vec<ReportBlock>,
}

fn be32(b: &[u8], at: usize) -> u32 {
    match b.get(at..at + 4) {
        Some(&[a, c, d, e]) => u32::from_be_bytes([a, c, d, e]),
        _ => 0,
    }
}

/// A feedback message (RFC 4585 §6) read from a compound.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Feedback {
    /// Generic NACK (RTPFB, FMT 1): the media source's packets the sender lost.
    Nack {
        /// The feedback's sender.
        sender: u32,
        /// The stream the packets belong to.
        media: u32,
        /// The lost sequence numbers, in the order the message lists them.
        lost: Vec<u16>,
    },
    /// Picture Loss Indication (PSFB, FMT 1): the sender needs a keyframe of `media`.
    Pli {
        /// The feedback's sender.
        sender: u32,
        /// The stream whose picture was lost.
        media: u32,
    },
    /// Full Intra Request (PSFB, FMT 4, RFC 5104 §4.3.1): keyframes asked of each stream.
    Fir {
        /// The feedback's sender.
        sender: u32,
        /// (stream, command sequence number) per request.
        requests: Vec<(u32, u8)>,
    },
    /// Receiver Estimated Maximum Bitrate (PSFB, FMT 15, `REMB`).
    Remb {
        /// The feedback's sender.
        sender: u32,
        /// The estimate in bits per second.
        bitrate: u64,
        /// The streams it applies to.
        ssrcs: Vec<u32>,
    },
    /// Transport-wide congestion control feedback (RTPFB, FMT 15): the feedback control
    /// information as it came.
    TransportCc {
        /// The feedback's sender.
        sender: u32,
        /// The media source field (the first stream it covers).
        media: u32,
        /// The feedback control information.
        fci: Vec<u8>,
    },
}

/// What a compound carries: its reports and its feedback messages, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Compound {
    /// SR and RR packets.
    pub reports: Vec<Report>,
    /// Feedback messages (RTPFB and PSFB packets this module reads; others are skipped).
    pub feedback: Vec<Feedback>,
}

/// RTPFB (transport layer feedback, RFC 4585).
const RTPFB: u8 = 205;
/// PSFB (payload-specific feedback, RFC 4585).
const PSFB: u8 = 206;

/// The SR and RR packets of a (plain, unprotected) compound, in order; other packets
/// (SDES, BYE, feedback, …) are skipped. Err: a packet whose header or length does not fit.
pub fn reports(compound: &[u8]) -> Result<Vec<Report>, ParseError> {
    self::compound(compound).map(|c| c.reports)
}

/// Reads a (plain, unprotected) compound once: its SR/RR packets and its feedback messages.
/// Other packets (SDES, BYE, APP, feedback of kinds not read here) are skipped. Err: a packet
/// whose header or length does not fit.
pub fn compound(compound: &[u8]) -> Result<Compound, ParseError> {
    crate::parse_count::count();
    let mut out = Compound::default();
    let mut at = 0;
    while at < compound.len() {
        let rest = &compound[at..];
        if rest.len() < RTCP_HEADER_LEN {
            return Err(ParseError::Truncated {
                needed: RTCP_HEADER_LEN,
                available: rest.len(),
            });
        }
        let version = rest[0] >> 6;
        if version != RTP_VERSION {
            return Err(ParseError::BadVersion(version));
        }
        let len = (usize::from(u16::from_be_bytes([rest[2], rest[3]])) + 1) * 4;
        if rest.len() < len {
            return Err(ParseError::Truncated {
                needed: len,
                available: rest.len(),
            });
        }
        let pkt = &rest[..len];
        let count = usize::from(pkt[0] & 0x1f);
        let (sender, blocks_at) = match RtcpPacketType::from(pkt[1]) {
            RtcpPacketType::SenderReport if len >= 28 => (
                Some(SenderInfo {
                    ntp: (u64::from(be32(pkt, 8)) << 32) | u64::from(be32(pkt, 12)),
                    rtp_timestamp: be32(pkt, 16),
                    packets: be32(pkt, 20),
                    octets: be32(pkt, 24),
                }),
                28,
            ),
            RtcpPacketType::ReceiverReport => (None, 8),
            _ => {
                if let Some(f) = feedback_of(pkt) {
                    out.feedback.push(f);
                }
                at += len;
                continue;
            }
        };
        let mut blocks = Vec::new();
        for k in 0..count {
            let b = blocks_at + 24 * k;
            if b + 24 > len {
                return Err(ParseError::Truncated {
                    needed: b + 24,
                    available: len,
                });
            }
            let lost = be32(pkt, b + 4);
            // 24-bit two's complement.
            let cumulative = ((lost & 0x00ff_ffff) << 8) as i32 >> 8;
            blocks.push(ReportBlock {
                ssrc: be32(pkt, b),
                fraction_lost: (lost >> 24) as u8,
                cumulative_lost: cumulative,
                highest_seq: be32(pkt, b + 8),
                jitter: be32(pkt, b + 12),
                lsr: be32(pkt, b + 16),
                dlsr: be32(pkt, b + 20),
            });
        }
        out.reports.push(Report {
            ssrc: be32(pkt, 4),
            sender,
            blocks,
        });
        at += len;
    }
    Ok(out)
}

/// A feedback message of a kind read here, from one framed RTCP packet; `None` for other
/// packets and for feedback too short for its kind.
fn feedback_of(pkt: &[u8]) -> Option<Feedback> {
    if pkt.len() < 12 {
        return None;
    }
    let fmt = pkt[0] & 0x1f;
    let sender = be32(pkt, 4);
    let media = be32(pkt, 8);
    let fci = &pkt[12..];
    match (pkt[1], fmt) {
        (RTPFB, 1) => {
            let mut lost = Vec::new();
            for e in fci.chunks_exact(4) {
                let pid = u16::from_be_bytes([e[0], e[1]]);
                let blp = u16::from_be_bytes([e[2], e[3]]);
                lost.push(pid);
                for k in 0..16 {
                    if blp & (1 << k) != 0 {
                        lost.push(pid.wrapping_add(k + 1));
                    }
                }
            }
            Some(Feedback::Nack {
                sender,
                media,
                lost,
            })
        }
        (RTPFB, 15) => Some(Feedback::TransportCc {
            sender,
            media,
            fci: fci.to_vec(),
        }),
        (PSFB, 1) => Some(Feedback::Pli { sender, media }),
        (PSFB, 4) => Some(Feedback::Fir {
            sender,
            requests: fci.chunks_exact(8).map(|e| (be32(e, 0), e[4])).collect(),
        }),
        (PSFB, 15) if fci.len() >= 8 && &fci[..4] == b"REMB" => {
            let n = usize::from(fci[4]);
            let exp = u32::from(fci[5] >> 2);
            let mantissa =
                (u64::from(fci[5] & 3) << 16) | (u64::from(fci[6]) << 8) | u64::from(fci[7]);
            let bitrate = mantissa.checked_shl(exp).unwrap_or(u64::MAX);
            let ssrcs = fci[8..]
                .chunks_exact(4)
                .take(n)
                .map(|e| be32(e, 0))
                .collect();
            Some(Feedback::Remb {
                sender,
                bitrate,
                ssrcs,
            })
        }
        _ => None,
    }
}

/// Appends a feedback packet's common header (RFC 4585 §6.1) for `fci_len` bytes of FCI.
fn feedback_header(out: &mut Vec<u8>, fmt: u8, pt: u8, sender: u32, media: u32, fci_len: usize) {
    let words = 2 + fci_len / 4;
    out.push(0x80 | (fmt & 0x1f));
    out.push(pt);
    out.extend_from_slice(&(words as u16).to_be_bytes());
    out.extend_from_slice(&sender.to_be_bytes());
    out.extend_from_slice(&media.to_be_bytes());
}

/// Appends an empty receiver report from `ssrc`: the first packet of a compound that carries
/// only feedback (RFC 3550 §6.1 asks a compound to start with an SR or RR; RFC 5506's reduced
/// size would allow feedback alone, where both sides negotiated it).
pub fn write_empty_rr(out: &mut Vec<u8>, ssrc: u32) {
    out.extend_from_slice(&[0x80, 201, 0, 1]);
    out.extend_from_slice(&ssrc.to_be_bytes());
}

/// Appends a PLI from `sender` for stream `media`.
pub fn write_pli(out: &mut Vec<u8>, sender: u32, media: u32) {
    feedback_header(out, 1, PSFB, sender, media, 0);
}

/// Appends a FIR from `sender` asking stream `media` for a keyframe, with command sequence
/// number `seq` (RFC 5104: the same number for a repetition, the next for a new request).
pub fn write_fir(out: &mut Vec<u8>, sender: u32, media: u32, seq: u8) {
    feedback_header(out, 4, PSFB, sender, 0, 8);
    out.extend_from_slice(&media.to_be_bytes());
    out.extend_from_slice(&[seq, 0, 0, 0]);
}

/// Appends a generic NACK from `sender` for stream `media`'s `lost` sequence numbers (each
/// PID takes the 16 that follow it in its bitmask; at most 256 entries).
pub fn write_nack(out: &mut Vec<u8>, sender: u32, media: u32, lost: &[u16]) {
    let mut entries: Vec<(u16, u16)> = Vec::new();
    for &seq in lost {
        if let Some((pid, blp)) = entries.last_mut() {
            let d = seq.wrapping_sub(*pid).wrapping_sub(1);
            if d < 16 && seq != *pid {
                *blp |= 1 << d;
                continue;
            }
        }
        if entries.len() >= 256 {
            break;
        }
        entries.push((seq, 0));
    }
    feedback_header(out, 1, RTPFB, sender, media, 4 * entries.len());
    for (pid, blp) in entries {
        out.extend_from_slice(&pid.to_be_bytes());
        out.extend_from_slice(&blp.to_be_bytes());
    }
}

/// Appends a REMB from `sender`: an estimate of `bitrate` bits per second for `ssrcs` (at
/// most 255).
pub fn write_remb(out: &mut Vec<u8>, sender: u32, bitrate: u64, ssrcs: &[u32]) {
    let ssrcs = &ssrcs[..ssrcs.len().min(255)];
    // 18 bits of mantissa, 6 of exponent, rounded down.
    let mut exp = 0u32;
    let mut mantissa = bitrate;
    while mantissa >= 1 << 18 && exp < 63 {
        mantissa >>= 1;
        exp += 1;
    }
    feedback_header(out, 15, PSFB, sender, 0, 8 + 4 * ssrcs.len());
    out.extend_from_slice(b"REMB");
    out.push(ssrcs.len() as u8);
    out.push(((exp as u8) << 2) | ((mantissa >> 16) as u8 & 3));
    out.extend_from_slice(&(mantissa as u16).to_be_bytes());
    for s in ssrcs {
        out.extend_from_slice(&s.to_be_bytes());
    }
}

fn block_bytes(b: &ReportBlock, out: &mut Vec<u8>) {
    out.extend_from_slice(&b.ssrc.to_be_bytes());
    let lost = (u32::from(b.fraction_lost) << 24)
        | ((b.cumulative_lost.clamp(-(1 << 23), (1 << 23) - 1) as u32) & 0x00ff_ffff);
    out.extend_from_slice(&lost.to_be_bytes());
    out.extend_from_slice(&b.highest_seq.to_be_bytes());
    out.extend_from_slice(&b.jitter.to_be_bytes());
    out.extend_from_slice(&b.lsr.to_be_bytes());
    out.extend_from_slice(&b.dlsr.to_be_bytes());
}

/// Appends a compound of one SR (with `sender`) or RR (without) from `ssrc` with up to 31
/// report `blocks`, and an SDES packet with `cname` for `ssrc`.
pub fn write_report(
    out: &mut Vec<u8>,
    ssrc: u32,
    sender: Option<&SenderInfo>,
    blocks: &[ReportBlock],
    cname: &str,
) {
    let blocks = &blocks[..blocks.len().min(31)];
    let words = match sender {
        Some(_) => 6 + 6 * blocks.len(),
        None => 1 + 6 * blocks.len(),
    };
    out.push(0x80 | blocks.len() as u8);
    out.push(if sender.is_some() { 200 } else { 201 });
    out.extend_from_slice(&(words as u16).to_be_bytes());
    out.extend_from_slice(&ssrc.to_be_bytes());
    if let Some(s) = sender {
        out.extend_from_slice(&((s.ntp >> 32) as u32).to_be_bytes());
        out.extend_from_slice(&(s.ntp as u32).to_be_bytes());
        out.extend_from_slice(&s.rtp_timestamp.to_be_bytes());
        out.extend_from_slice(&s.packets.to_be_bytes());
        out.extend_from_slice(&s.octets.to_be_bytes());
    }
    for b in blocks {
        block_bytes(b, out);
    }
    // SDES: one chunk, CNAME item, END, padded to a word.
    let cname = &cname.as_bytes()[..cname.len().min(255)];
    let chunk = 4 + 2 + cname.len() + 1;
    let padded = chunk.div_ceil(4) * 4;
    out.push(0x81);
    out.push(202);
    out.extend_from_slice(&((padded / 4) as u16).to_be_bytes());
    out.extend_from_slice(&ssrc.to_be_bytes());
    out.push(1);
    out.push(cname.len() as u8);
    out.extend_from_slice(cname);
    out.resize(out.len() + (padded - chunk) + 1, 0);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_report_reads_back() {
        let blocks = [
            ReportBlock {
                ssrc: 7,
                fraction_lost: 25,
                cumulative_lost: -3,
                highest_seq: 0x0001_0005,
                jitter: 80,
                lsr: 0x1234_5678,
                dlsr: 65536,
            },
            ReportBlock {
                ssrc: 8,
                fraction_lost: 0,
                cumulative_lost: 1_000_000,
                highest_seq: 9,
                jitter: 0,
                lsr: 0,
                dlsr: 0,
            },
        ];
        let sender = SenderInfo {
            ntp: 0x0102_0304_0506_0708,
            rtp_timestamp: 160,
            packets: 50,
            octets: 8000,
        };
        let mut sr = Vec::new();
        write_report(&mut sr, 0xabc, Some(&sender), &blocks, "secrelay");
        assert_eq!(sr.len() % 4, 0);
        let r = reports(&sr).unwrap();
        assert_eq!(r.len(), 1, "the SDES is skipped");
        assert_eq!(r[0].ssrc, 0xabc);
        assert_eq!(r[0].sender, Some(sender));
        assert_eq!(r[0].blocks, blocks.to_vec());
        let mut rr = Vec::new();
        write_report(&mut rr, 0xdef, None, &blocks[..1], "x");
        let r = reports(&rr).unwrap();
        assert_eq!(r[0].sender, None);
        assert_eq!(r[0].blocks[0].cumulative_lost, -3);
        // Both are valid RTCP to the demultiplexer and the header view.
        assert!(crate::RtcpHeader::parse(&rr).is_ok());
    }

    #[test]
    fn feedback_messages_written_read_back_beside_a_report() {
        let mut c = Vec::new();
        write_empty_rr(&mut c, 9);
        write_pli(&mut c, 9, 0x1111);
        write_fir(&mut c, 9, 0x2222, 7);
        // 100..=116 fit one entry (PID 100, BLP for 101..116), 300 a second, a wrap a third.
        let lost: Vec<u16> = (100..=116).chain([300, 65535, 0]).collect();
        write_nack(&mut c, 9, 0x3333, &lost);
        write_remb(&mut c, 9, 2_500_000, &[0x1111, 0x4444]);
        assert_eq!(c.len() % 4, 0);
        assert!(crate::RtcpHeader::parse(&c).is_ok());
        let got = compound(&c).unwrap();
        assert_eq!(got.reports.len(), 1);
        assert_eq!(got.reports[0].ssrc, 9);
        assert_eq!(
            got.feedback[0],
            Feedback::Pli {
                sender: 9,
                media: 0x1111
            }
        );
        assert_eq!(
            got.feedback[1],
            Feedback::Fir {
                sender: 9,
                requests: vec![(0x2222, 7)]
            }
        );
        let Feedback::Nack { media, lost: l, .. } = &got.feedback[2] else {
            panic!("{:?}", got.feedback[2]);
        };
        assert_eq!(*media, 0x3333);
        assert_eq!(l, &lost);
        let Feedback::Remb { bitrate, ssrcs, .. } = &got.feedback[3] else {
            panic!("{:?}", got.feedback[3]);
        };
        // 18 bits of mantissa: within 2^-17 of the estimate, never above it.
        assert!(*bitrate <= 2_500_000 && *bitrate > 2_499_960, "{bitrate}");
        assert_eq!(ssrcs, &vec![0x1111, 0x4444]);
    }

    #[test]
    fn short_or_unknown_feedback_is_skipped_not_an_error() {
        // A PSFB with no media SSRC, an RTPFB of an unknown FMT, a REMB cut short.
        let c = [
            0x81, 206, 0, 1, 0, 0, 0, 9, // PLI without its media field
            0x83, 205, 0, 2, 0, 0, 0, 9, 0, 0, 0, 1, // RTPFB FMT 3
            0x8f, 206, 0, 3, 0, 0, 0, 9, 0, 0, 0, 0, b'R', b'E', b'M', b'B',
        ];
        let got = compound(&c).unwrap();
        assert!(got.feedback.is_empty(), "{got:?}");
    }

    #[test]
    fn a_compound_that_does_not_frame_is_an_error() {
        let mut rr = Vec::new();
        write_report(&mut rr, 1, None, &[], "c");
        assert!(reports(&rr[..rr.len() - 3]).is_err());
        let mut bad = rr.clone();
        bad[0] = 0x81; // one block announced, none there
        assert!(reports(&bad).is_err());
        assert!(reports(&[0x80, 201, 0xff, 0xff, 0, 0, 0, 0]).is_err());
        assert_eq!(reports(&[]).unwrap(), vec![]);
    }
}
