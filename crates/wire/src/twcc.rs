//! Transport-wide congestion control feedback (draft-holmer-rmcat-transport-wide-cc-
//! extensions-01, RTPFB FMT 15), as WebRTC stacks send and read it: which packets of a
//! transport-wide sequence arrived, and when.
//!
//! A feedback message covers `packet status count` sequence numbers from a base: each has a
//! status (not received, received with a small delta, received with a large or negative
//! delta) in run-length or status-vector chunks, then one receive delta per received packet,
//! in 250 µs units, each from the previous arrival (the first from the reference time, in
//! 64 ms units). [`write_feedback`] encodes arrivals; [`parse_feedback`] decodes them.
//! Untrusted input never panics.

/// One packet's entry in a feedback message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arrival {
    /// Its transport-wide sequence number.
    pub seq: u16,
    /// When it arrived, in microseconds on the receiver's clock (multiples of 250 from the
    /// message's reference time); `None` if it did not.
    pub at_us: Option<i64>,
}

/// Why a feedback message did not decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TwccError {
    /// Shorter than its header, chunks or deltas say.
    Truncated,
    /// A status symbol the draft reserves (`11`).
    ReservedSymbol,
}

impl std::fmt::Display for TwccError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TwccError::Truncated => f.write_str("transport-cc feedback cut short"),
            TwccError::ReservedSymbol => {
                f.write_str("transport-cc feedback with a reserved status")
            }
        }
    }
}

impl std::error::Error for TwccError {}

/// Status symbols.
const NOT_RECEIVED: u8 = 0;
const SMALL: u8 = 1;
const LARGE: u8 = 2;

/// Decodes a feedback message's FCI (the bytes after the sender and media SSRCs, as
/// [`crate::rtcp::Feedback::TransportCc`] carries them): the base's feedback packet count and
/// every packet it covers, in sequence order.
pub fn parse_feedback(fci: &[u8]) -> Result<(u8, Vec<Arrival>), TwccError> {
    if fci.len() < 8 {
        return Err(TwccError::Truncated);
    }
    let base = u16::from_be_bytes([fci[0], fci[1]]);
    let count = usize::from(u16::from_be_bytes([fci[2], fci[3]]));
    // 24-bit signed reference time in 64 ms units.
    let raw = (u32::from(fci[4]) << 16) | (u32::from(fci[5]) << 8) | u32::from(fci[6]);
    let reference = ((raw << 8) as i32 >> 8) as i64 * 64_000;
    let fb_count = fci[7];
    let mut symbols: Vec<u8> = Vec::with_capacity(count);
    let mut at = 8;
    while symbols.len() < count {
        let c = fci.get(at..at + 2).ok_or(TwccError::Truncated)?;
        let chunk = u16::from_be_bytes([c[0], c[1]]);
        at += 2;
        if chunk & 0x8000 == 0 {
            // Run length: symbol in bits 13-14, length in the low 13.
            let symbol = ((chunk >> 13) & 3) as u8;
            let run = usize::from(chunk & 0x1fff);
            for _ in 0..run.min(count - symbols.len()) {
                symbols.push(symbol);
            }
        } else if chunk & 0x4000 == 0 {
            // Status vector of 14 one-bit symbols.
            for k in (0..14).rev() {
                if symbols.len() < count {
                    symbols.push(((chunk >> k) & 1) as u8);
                }
            }
        } else {
            // Status vector of 7 two-bit symbols.
            for k in (0..7).rev() {
                if symbols.len() < count {
                    symbols.push(((chunk >> (2 * k)) & 3) as u8);
                }
            }
        }
    }
    let mut out = Vec::with_capacity(count);
    let mut t = reference;
    for (k, s) in symbols.into_iter().enumerate() {
        let seq = base.wrapping_add(k as u16);
        let at_us = match s {
            NOT_RECEIVED => None,
            SMALL => {
                let d = *fci.get(at).ok_or(TwccError::Truncated)?;
                at += 1;
                t += i64::from(d) * 250;
                Some(t)
            }
            LARGE => {
                let d = fci.get(at..at + 2).ok_or(TwccError::Truncated)?;
                at += 2;
                t += i64::from(i16::from_be_bytes([d[0], d[1]])) * 250;
                Some(t)
            }
            _ => return Err(TwccError::ReservedSymbol),
        };
        out.push(Arrival { seq, at_us });
    }
    Ok((fb_count, out))
}

/// Appends a complete feedback packet (RTCP header, sender and media SSRCs, FCI) for
/// `arrivals` (consecutive sequence numbers from the first, arrival times in µs on our clock),
/// numbered `fb_count`. Arrivals after one whose delta cannot be written (more than ~8 s from
/// the previous, or before the reference time) are left for the next message: the number of
/// arrivals written is returned (0 writes nothing). At most 0x1fff packets per message.
pub fn write_feedback(
    out: &mut Vec<u8>,
    sender: u32,
    media: u32,
    fb_count: u8,
    arrivals: &[Arrival],
) -> usize {
    let Some(first_at) = arrivals.iter().find_map(|a| a.at_us) else {
        return 0;
    };
    // The reference time: the first arrival, in whole 64 ms units (24 bits signed).
    let reference = first_at.div_euclid(64_000);
    let mut symbols = Vec::with_capacity(arrivals.len());
    let mut deltas: Vec<u8> = Vec::with_capacity(arrivals.len());
    let mut t = reference * 64_000;
    for (k, a) in arrivals.iter().take(0x1fff).enumerate() {
        if k > 0 && a.seq != arrivals[k - 1].seq.wrapping_add(1) {
            break;
        }
        match a.at_us {
            None => symbols.push(NOT_RECEIVED),
            Some(at) => {
                let d = (at - t).div_euclid(250);
                if (0..=255).contains(&d) {
                    symbols.push(SMALL);
                    deltas.push(d as u8);
                } else if let Ok(d16) = i16::try_from(d) {
                    symbols.push(LARGE);
                    deltas.extend_from_slice(&d16.to_be_bytes());
                } else {
                    break;
                }
                t += d * 250;
            }
        }
    }
    // Trailing losses carry no information for this message: the next one starts there.
    while symbols.last() == Some(&NOT_RECEIVED) {
        symbols.pop();
    }
    let n = symbols.len();
    if n == 0 {
        return 0;
    }
    let start = out.len();
    out.extend_from_slice(&[0x8f, 205, 0, 0]);
    out.extend_from_slice(&sender.to_be_bytes());
    out.extend_from_slice(&media.to_be_bytes());
    out.extend_from_slice(&arrivals[0].seq.to_be_bytes());
    out.extend_from_slice(&(n as u16).to_be_bytes());
    let r = (reference as i32 as u32) & 0x00ff_ffff;
    out.extend_from_slice(&[(r >> 16) as u8, (r >> 8) as u8, r as u8, fb_count]);
    let mut k = 0;
    while k < n {
        let run = symbols[k..]
            .iter()
            .take_while(|s| **s == symbols[k])
            .count();
        if run >= 7 {
            let run = run.min(0x1fff);
            let chunk = (u16::from(symbols[k]) << 13) | run as u16;
            out.extend_from_slice(&chunk.to_be_bytes());
            k += run;
        } else {
            let mut chunk: u16 = 0xc000;
            for j in 0..7 {
                let s = symbols.get(k + j).copied().unwrap_or(NOT_RECEIVED);
                chunk |= u16::from(s) << (2 * (6 - j));
            }
            out.extend_from_slice(&chunk.to_be_bytes());
            k += 7;
        }
    }
    out.extend_from_slice(&deltas);
    while !(out.len() - start).is_multiple_of(4) {
        out.push(0);
    }
    let words = ((out.len() - start) / 4 - 1) as u16;
    out[start + 2..start + 4].copy_from_slice(&words.to_be_bytes());
    n
}

/// What a receiver's feedback says of `arrivals` (transport-wide number, arrival time):
/// in sequence order (arrivals can be reordered), each number once, the numbers missing
/// between them as losses, each time in microseconds by `at_us`. After a gap longer than a
/// feedback can say, the list starts over from the packet after it. `arrivals` is emptied.
pub fn arrival_list<T: Copy>(
    arrivals: &mut Vec<(u16, T)>,
    at_us: impl Fn(T) -> i64,
) -> Vec<Arrival> {
    let Some(&(base, _)) = arrivals.first() else {
        return Vec::new();
    };
    arrivals.sort_by_key(|(seq, _)| seq.wrapping_sub(base.wrapping_sub(0x8000)));
    arrivals.dedup_by_key(|(seq, _)| *seq);
    let mut list: Vec<Arrival> = Vec::with_capacity(arrivals.len());
    for &(seq, at) in arrivals.iter() {
        if let Some(last) = list.last().map(|a| a.seq) {
            let gap = seq.wrapping_sub(last);
            if gap > 1000 {
                list.clear();
            } else {
                list.extend((1..gap).map(|k| Arrival {
                    seq: last.wrapping_add(k),
                    at_us: None,
                }));
            }
        }
        list.push(Arrival {
            seq,
            at_us: Some(at_us(at)),
        });
    }
    arrivals.clear();
    list
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rtcp::{compound, Feedback};

    #[test]
    fn arrival_lists_are_in_order_once_with_losses_and_restart_after_a_long_gap() {
        let mut a = vec![(2u16, 20i64), (65535, 5), (1, 10), (1, 11), (4, 40)];
        let list = arrival_list(&mut a, |t| t);
        let seqs: Vec<(u16, Option<i64>)> = list.iter().map(|a| (a.seq, a.at_us)).collect();
        assert_eq!(
            seqs,
            [
                (65535, Some(5)),
                (0, None),
                (1, Some(10)),
                (2, Some(20)),
                (3, None),
                (4, Some(40))
            ]
        );
        assert!(a.is_empty());
        let mut a = vec![(10u16, 1i64), (11, 2), (3000, 3), (3001, 4)];
        let list = arrival_list(&mut a, |t| t);
        assert_eq!(list.iter().map(|a| a.seq).collect::<Vec<_>>(), [3000, 3001]);
        assert!(arrival_list(&mut Vec::<(u16, i64)>::new(), |t| t).is_empty());
    }

    #[test]
    fn arrivals_written_read_back_with_gaps_runs_and_large_deltas() {
        let mut arrivals = Vec::new();
        let mut t = 1_000_250i64;
        for k in 0..40u16 {
            let seq = 65530u16.wrapping_add(k);
            let at = match k {
                // Losses in the middle, a run of received, a late and an early packet.
                3 | 4 => None,
                20 => Some(t + 150_000),
                21 => Some(t - 10_000),
                _ => Some(t),
            };
            if let Some(a) = at {
                t = a + 250 * i64::from(k % 5);
            }
            arrivals.push(Arrival { seq, at_us: at });
        }
        let mut out = Vec::new();
        let n = write_feedback(&mut out, 1, 2, 9, &arrivals);
        assert_eq!(n, 40);
        let c = compound(&out).unwrap();
        let Feedback::TransportCc { sender, media, fci } = &c.feedback[0] else {
            panic!("{:?}", c.feedback);
        };
        assert_eq!((*sender, *media), (1, 2));
        let (fb, back) = parse_feedback(fci).unwrap();
        assert_eq!(fb, 9);
        assert_eq!(back.len(), 40);
        // Times come back on the 250 µs grid, relative to the same reference.
        for (a, b) in arrivals.iter().zip(&back) {
            assert_eq!(a.seq, b.seq);
            match (a.at_us, b.at_us) {
                (None, None) => {}
                (Some(x), Some(y)) => assert_eq!(y, x - x.rem_euclid(250), "seq {}", a.seq),
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn trailing_losses_and_untellable_gaps_are_left_for_the_next_message() {
        let arrivals = [
            Arrival {
                seq: 1,
                at_us: Some(0),
            },
            Arrival {
                seq: 2,
                at_us: Some(20_000_000),
            },
        ];
        let mut out = Vec::new();
        assert_eq!(write_feedback(&mut out, 1, 2, 0, &arrivals), 1);
        let lost_tail = [
            Arrival {
                seq: 1,
                at_us: Some(0),
            },
            Arrival {
                seq: 2,
                at_us: None,
            },
        ];
        let mut out = Vec::new();
        assert_eq!(write_feedback(&mut out, 1, 2, 0, &lost_tail), 1);
        assert_eq!(write_feedback(&mut Vec::new(), 1, 2, 0, &lost_tail[1..]), 0);
    }

    #[test]
    fn cut_or_reserved_feedback_is_an_error_not_a_panic() {
        assert_eq!(parse_feedback(&[0; 7]), Err(TwccError::Truncated));
        // Two packets announced, no chunk.
        assert_eq!(
            parse_feedback(&[0, 1, 0, 2, 0, 0, 0, 0]),
            Err(TwccError::Truncated)
        );
        // A run of reserved symbols.
        assert_eq!(
            parse_feedback(&[0, 1, 0, 2, 0, 0, 0, 0, 0x60, 2]),
            Err(TwccError::ReservedSymbol)
        );
        // Received, but its delta missing.
        assert_eq!(
            parse_feedback(&[0, 1, 0, 1, 0, 0, 0, 0, 0x20, 1]),
            Err(TwccError::Truncated)
        );
    }
}
