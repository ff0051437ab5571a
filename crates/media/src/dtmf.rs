//! RFC 4733 telephone-events (DTMF digits as RTP packets, `telephone-event/8000` or
//! `/48000`): parse and build the payload, generate an event's packets, collect digits from
//! received packets, and carry events from one leg to another.
//!
//! An event's packets share one RTP timestamp (the event's start) and carry its duration so
//! far, in clock ticks; the first has the marker bit; the last has the E(nd) bit and is sent
//! three times (RFC 4733 §2.5.1.4), each with a new sequence number. A collector therefore
//! sees each event many times: it reports a digit once, when the first end packet arrives
//! (or, if every end packet was lost, when the next event starts or the caller calls
//! [`DtmfCollector::finish`]).
//!
//! Events longer than the 16-bit duration field (8.2 s at 8 kHz, 1.4 s at 48 kHz) are sent
//! in segments, each a new timestamp (§2.5.1.3): the generator does that, and a collector
//! reports each segment (with `complete: false` for all but the last).

use crate::Error;

/// Event codes 0–15 are the DTMF digits `0123456789*#ABCD`; 16 is a hook flash.
pub const FLASH: u8 = 16;
const DIGITS: &[u8; 16] = b"0123456789*#ABCD";

/// The event code of a DTMF character (`0`–`9`, `*`, `#`, `A`–`D`, case-insensitive).
pub fn event_for_char(c: char) -> Option<u8> {
    let up = c.to_ascii_uppercase() as u32;
    DIGITS.iter().position(|&d| d as u32 == up).map(|i| i as u8)
}

/// The DTMF character of an event code 0–15.
pub fn char_for_event(event: u8) -> Option<char> {
    DIGITS.get(event as usize).map(|&d| d as char)
}

/// The two frequencies (low, high) of a DTMF event 0–15, Hz (ITU-T Q.23).
pub fn frequencies(event: u8) -> Option<(f64, f64)> {
    const LOW: [f64; 4] = [697.0, 770.0, 852.0, 941.0];
    const HIGH: [f64; 4] = [1209.0, 1336.0, 1477.0, 1633.0];
    // Keypad position (row, column) of 0123456789*#ABCD.
    const POS: [(usize, usize); 16] = [
        (3, 1),
        (0, 0),
        (0, 1),
        (0, 2),
        (1, 0),
        (1, 1),
        (1, 2),
        (2, 0),
        (2, 1),
        (2, 2),
        (3, 0),
        (3, 2),
        (0, 3),
        (1, 3),
        (2, 3),
        (3, 3),
    ];
    POS.get(event as usize).map(|&(r, c)| (LOW[r], HIGH[c]))
}

/// One event block of a telephone-event payload (4 octets).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    /// Event code (0–15 DTMF, 16 flash, others per RFC 4734).
    pub event: u8,
    /// End of the event.
    pub end: bool,
    /// Volume in −dBm0, 0–63 (power level of the tone; 0 is loudest).
    pub volume: u8,
    /// Duration so far, RTP clock ticks.
    pub duration: u16,
}

impl Event {
    /// The 4 octets of this block (the reserved bit is sent as 0).
    pub fn to_bytes(&self) -> [u8; 4] {
        let d = self.duration.to_be_bytes();
        [
            self.event,
            (u8::from(self.end) << 7) | (self.volume & 0x3F),
            d[0],
            d[1],
        ]
    }

    /// Parses one 4-octet block.
    pub fn from_bytes(b: [u8; 4]) -> Event {
        Event {
            event: b[0],
            end: b[1] & 0x80 != 0,
            volume: b[1] & 0x3F,
            duration: u16::from_be_bytes([b[2], b[3]]),
        }
    }
}

/// Parses a telephone-event payload: one or more 4-octet blocks (more than one when a
/// sender repeats earlier events, RFC 4733 §2.5.1.5). Anything else is an
/// [`Error::Decode`].
pub fn parse(payload: &[u8]) -> Result<Vec<Event>, Error> {
    if payload.is_empty() || !payload.len().is_multiple_of(4) {
        return Err(Error::Decode(format!(
            "telephone-event payload of {} bytes (a multiple of 4 expected)",
            payload.len()
        )));
    }
    Ok(payload
        .chunks_exact(4)
        .map(|c| Event::from_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

/// One telephone-event packet to send: its RTP timestamp, marker bit and payload (the
/// sequence number is the sending stream's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventPacket {
    /// RTP timestamp: the start of the event (segment).
    pub timestamp: u32,
    /// Marker bit: set on the first packet of an event.
    pub marker: bool,
    /// The event block.
    pub event: Event,
}

/// Makes the packets of DTMF events: one every packet time while the event lasts, the
/// end packet three times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DtmfGenerator {
    clock_rate: u32,
    packet_ticks: u32,
    volume: u8,
}

impl DtmfGenerator {
    /// A generator for `telephone-event/clock_rate`, one packet every `ptime_ms`, at
    /// `volume` −dBm0 (10 is typical).
    pub fn new(clock_rate: u32, ptime_ms: u32, volume: u8) -> Result<DtmfGenerator, Error> {
        let packet_ticks = (clock_rate as u64 * ptime_ms as u64 / 1000) as u32;
        if packet_ticks == 0 || packet_ticks > u16::MAX as u32 || volume > 63 {
            return Err(Error::Setup(format!(
                "telephone-event/{clock_rate} every {ptime_ms} ms at -{volume} dBm0"
            )));
        }
        Ok(DtmfGenerator {
            clock_rate,
            packet_ticks,
            volume,
        })
    }

    /// RTP clock ticks in `ms` milliseconds.
    pub fn ticks(&self, ms: u32) -> u32 {
        (self.clock_rate as u64 * ms as u64 / 1000) as u32
    }

    /// Every packet of one event starting at `start` and lasting `duration` ticks, in
    /// sending order (one per packet time; the last three are the end packet).
    pub fn event_packets(&self, event: u8, start: u32, duration: u32) -> Vec<EventPacket> {
        let mut out = Vec::new();
        let max = u16::MAX as u32;
        let mut seg_start = start;
        let mut left = duration.max(1);
        let mut first = true;
        loop {
            let seg_len = left.min(max);
            let last_segment = left <= max;
            let mut d = 0u32;
            while d < seg_len {
                d = (d + self.packet_ticks).min(seg_len);
                let end = last_segment && d == seg_len;
                let ev = Event {
                    event,
                    end,
                    volume: self.volume,
                    duration: d as u16,
                };
                let p = EventPacket {
                    timestamp: seg_start,
                    marker: first,
                    event: ev,
                };
                first = false;
                out.push(p);
                if end {
                    // The end packet goes three times (RFC 4733 §2.5.1.4).
                    out.push(p);
                    out.push(p);
                }
            }
            if last_segment {
                break;
            }
            seg_start = seg_start.wrapping_add(seg_len);
            left -= seg_len;
        }
        out
    }
}

/// A digit (or event) collected from received packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Digit {
    /// Event code.
    pub event: u8,
    /// Start (RTP timestamp of its packets).
    pub timestamp: u32,
    /// Duration, RTP clock ticks.
    pub duration: u32,
    /// Volume, −dBm0.
    pub volume: u8,
    /// Whether an end packet was seen (false: it ended by a later event, or by
    /// [`DtmfCollector::finish`], its end packets lost).
    pub complete: bool,
}

impl Digit {
    /// The DTMF character, for events 0–15.
    pub fn char(&self) -> Option<char> {
        char_for_event(self.event)
    }
}

/// Counters of a [`DtmfCollector`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CollectorStats {
    /// Packets taken.
    pub packets: u64,
    /// End packets after the first for one event (the redundancy), ignored.
    pub repeated_ends: u64,
    /// Packets of an event older than the current one, ignored.
    pub late: u64,
    /// Payloads that did not parse (dropped).
    pub malformed: u64,
}

#[derive(Debug, Clone, Copy)]
struct Current {
    digit: Digit,
    reported: bool,
}

/// Collects digits from a stream of telephone-event packets, each reported once.
#[derive(Debug, Clone, Default)]
pub struct DtmfCollector {
    current: Option<Current>,
    stats: CollectorStats,
}

/// True when RTP timestamp `a` is before `b` (serial arithmetic).
fn ts_before(a: u32, b: u32) -> bool {
    a != b && b.wrapping_sub(a) < 0x8000_0000
}

impl DtmfCollector {
    /// An empty collector.
    pub fn new() -> DtmfCollector {
        DtmfCollector::default()
    }

    /// The counters.
    pub fn stats(&self) -> CollectorStats {
        self.stats
    }

    /// Takes one packet (its RTP timestamp and payload); appends the digits it completes to
    /// `digits`. A payload that does not parse is an error (the packet is dropped, counted).
    pub fn push(
        &mut self,
        timestamp: u32,
        payload: &[u8],
        digits: &mut Vec<Digit>,
    ) -> Result<(), Error> {
        let events = match parse(payload) {
            Ok(e) => e,
            Err(e) => {
                self.stats.malformed += 1;
                return Err(e);
            }
        };
        self.stats.packets += 1;
        // Blocks after the first are events that followed it (§2.5.1.5): each starts where
        // the one before ended.
        let mut start = timestamp;
        for ev in events {
            self.take(start, ev, digits);
            start = start.wrapping_add(ev.duration as u32);
        }
        Ok(())
    }

    fn take(&mut self, start: u32, ev: Event, digits: &mut Vec<Digit>) {
        match &mut self.current {
            Some(cur) if cur.digit.timestamp == start => {
                cur.digit.duration = cur.digit.duration.max(ev.duration as u32);
                if ev.end {
                    if cur.reported {
                        self.stats.repeated_ends += 1;
                    } else {
                        cur.reported = true;
                        cur.digit.complete = true;
                        digits.push(cur.digit);
                    }
                }
                return;
            }
            Some(cur) if ts_before(start, cur.digit.timestamp) => {
                self.stats.late += 1;
                return;
            }
            _ => {}
        }
        // A new event: the previous one, if never ended, is reported now.
        self.finish(digits);
        let digit = Digit {
            event: ev.event,
            timestamp: start,
            duration: ev.duration as u32,
            volume: ev.volume,
            complete: ev.end,
        };
        if ev.end {
            digits.push(digit);
        }
        self.current = Some(Current {
            digit,
            reported: ev.end,
        });
    }

    /// Reports the event in progress, if it was never ended (its end packets lost), as an
    /// incomplete digit. Call when the stream stops or after a timeout.
    pub fn finish(&mut self, digits: &mut Vec<Digit>) {
        if let Some(cur) = &mut self.current {
            if !cur.reported {
                cur.reported = true;
                digits.push(cur.digit);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_round_trip_and_rfc_layout() {
        let e = Event {
            event: 11,
            end: true,
            volume: 10,
            duration: 1600,
        };
        // RFC 4733 Figure 1: event, E|R|volume, duration.
        assert_eq!(e.to_bytes(), [11, 0x8A, 0x06, 0x40]);
        assert_eq!(parse(&e.to_bytes()).unwrap(), vec![e]);
        // The reserved bit is ignored on input.
        assert_eq!(Event::from_bytes([5, 0x4A, 0, 160]).volume, 10);
        for bad in [&[][..], &[1, 2, 3][..], &[1, 2, 3, 4, 5][..]] {
            assert!(parse(bad).unwrap_err().is_peer_fault());
        }
        assert_eq!(event_for_char('#'), Some(11));
        assert_eq!(event_for_char('d'), Some(15));
        assert_eq!(event_for_char('x'), None);
        assert_eq!(char_for_event(10), Some('*'));
        assert_eq!(frequencies(1), Some((697.0, 1209.0)));
        assert_eq!(frequencies(0), Some((941.0, 1336.0)));
        assert_eq!(frequencies(FLASH), None);
    }

    #[test]
    fn generator_follows_the_rfc() {
        let g = DtmfGenerator::new(8000, 20, 10).unwrap();
        let p = g.event_packets(5, 1000, g.ticks(100));
        // 100 ms in 20 ms steps: 5 packets, the last one three times.
        assert_eq!(p.len(), 7);
        assert!(p[0].marker && p[1..].iter().all(|x| !x.marker));
        assert!(p.iter().all(|x| x.timestamp == 1000 && x.event.event == 5));
        let durations: Vec<u16> = p.iter().map(|x| x.event.duration).collect();
        assert_eq!(durations, [160, 320, 480, 640, 800, 800, 800]);
        assert!(p[..4].iter().all(|x| !x.event.end) && p[4..].iter().all(|x| x.event.end));
        // 48 kHz: a 2 s event does not fit 16 bits: two segments.
        let g = DtmfGenerator::new(48_000, 20, 10).unwrap();
        let p = g.event_packets(1, 0, g.ticks(2000));
        let starts: Vec<u32> = p.iter().map(|x| x.timestamp).collect();
        assert!(starts.contains(&0) && starts.contains(&65_535));
        assert_eq!(p.iter().filter(|x| x.marker).count(), 1);
        assert!(!p.iter().any(|x| x.timestamp == 0 && x.event.end));
        assert_eq!(p.last().unwrap().event.duration as u32, 96_000 - 65_535);
        assert!(DtmfGenerator::new(8000, 0, 10).is_err());
        assert!(DtmfGenerator::new(8000, 20, 64).is_err());
    }

    #[test]
    fn a_sequence_round_trips_once_per_digit_with_losses_and_repeats() {
        let g = DtmfGenerator::new(8000, 20, 7).unwrap();
        let mut c = DtmfCollector::new();
        let mut digits = Vec::new();
        let sent = "123*#0ABCD9";
        let mut ts = 50_000u32;
        for (k, ch) in sent.chars().enumerate() {
            let packets = g.event_packets(event_for_char(ch).unwrap(), ts, g.ticks(80));
            for (i, p) in packets.iter().enumerate() {
                // Lose some middle packets, and for the 3rd digit two of its three ends.
                if (i == 1 && k % 2 == 0) || (k == 2 && i >= packets.len() - 2) {
                    continue;
                }
                c.push(p.timestamp, &p.event.to_bytes(), &mut digits)
                    .unwrap();
            }
            ts = ts.wrapping_add(g.ticks(200));
        }
        let got: String = digits.iter().map(|d| d.char().unwrap()).collect();
        assert_eq!(got, sent);
        assert!(digits
            .iter()
            .all(|d| d.complete && d.duration == 640 && d.volume == 7));
        assert_eq!(c.stats().repeated_ends, 2 * (sent.len() as u64 - 1));
        // A late packet of an old event is ignored; a malformed one is an error, counted.
        c.push(
            50_000,
            &Event::from_bytes([1, 0x87, 0, 160]).to_bytes(),
            &mut digits,
        )
        .unwrap();
        assert_eq!(c.stats().late, 1);
        assert!(c.push(ts, &[1, 2], &mut digits).is_err());
        assert_eq!(c.stats().malformed, 1);
        assert_eq!(digits.len(), sent.len());
    }

    #[test]
    fn lost_ends_are_reported_incomplete() {
        let g = DtmfGenerator::new(8000, 20, 10).unwrap();
        let mut c = DtmfCollector::new();
        let mut digits = Vec::new();
        for p in g.event_packets(4, 0, 800).iter().filter(|p| !p.event.end) {
            c.push(p.timestamp, &p.event.to_bytes(), &mut digits)
                .unwrap();
        }
        assert!(digits.is_empty());
        // The next event reports the first, incomplete.
        for p in g.event_packets(6, 2000, 400) {
            c.push(p.timestamp, &p.event.to_bytes(), &mut digits)
                .unwrap();
        }
        assert_eq!(digits.len(), 2);
        assert_eq!(
            (digits[0].event, digits[0].complete, digits[0].duration),
            (4, false, 640)
        );
        assert_eq!((digits[1].event, digits[1].complete), (6, true));
        // finish() reports an event in progress, once.
        for p in g.event_packets(7, 4000, 400).iter().take(2) {
            c.push(p.timestamp, &p.event.to_bytes(), &mut digits)
                .unwrap();
        }
        c.finish(&mut digits);
        c.finish(&mut digits);
        assert_eq!(digits.len(), 3);
        assert!(!digits[2].complete);
        // Two events in one packet (§2.5.1.5): the second starts where the first ended.
        let mut two = Event {
            event: 1,
            end: true,
            volume: 10,
            duration: 800,
        }
        .to_bytes()
        .to_vec();
        two.extend(
            Event {
                event: 2,
                end: true,
                volume: 10,
                duration: 800,
            }
            .to_bytes(),
        );
        let mut d = Vec::new();
        DtmfCollector::new().push(9000, &two, &mut d).unwrap();
        assert_eq!(
            d.iter().map(|x| (x.event, x.timestamp)).collect::<Vec<_>>(),
            [(1, 9000), (2, 9800)]
        );
    }
}
