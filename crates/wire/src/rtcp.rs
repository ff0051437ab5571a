//! RTCP sender and receiver reports (RFC 3550 §6.4) and source descriptions (§6.5), as a
//! media relay reads and writes them: the SR/RR packets of a compound read with their report
//! blocks, other packets skipped; compounds written with one SR or RR, its report blocks, and
//! an SDES CNAME. Untrusted input never panics; a compound that does not frame is an error.

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

/// The SR and RR packets of a (plain, unprotected) compound, in order; other packets
/// (SDES, BYE, feedback, …) are skipped. Err: a packet whose header or length does not fit.
pub fn reports(compound: &[u8]) -> Result<Vec<Report>, ParseError> {
    crate::parse_count::count();
    let mut out = Vec::new();
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
        out.push(Report {
            ssrc: be32(pkt, 4),
            sender,
            blocks,
        });
        at += len;
    }
    Ok(out)
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
