//! DTMF played into a member's stream as if the member had sent it (rtpengine's `play DTMF`:
//! a digit a phone signalled out of band, in a SIP INFO, sent on to the far end in its media).
//!
//! The digits take the place of the member's own audio packets, one for one, so their sequence
//! numbers, SSRC and timing are the member's and a relayed stream stays one stream: each audio
//! packet while a digit plays becomes a telephone-event packet (RFC 4733: the first with the
//! marker bit, the duration so far in each, the end packet three times) under the member's
//! telephone-event payload type at its audio's clock; or, when the member negotiated no
//! telephone-event, the digit's two tones in its audio, where that audio is G.711. Between
//! queued digits the member's audio goes on for the digit's pause. The room then treats the
//! packets as the member's: relayed, transcoded, made into tones for a receiver without
//! telephone-events where DTMF crosses, blocked by `block DTMF`.
//!
//! A member that sends no audio (on hold, silence-suppressed) sends no digit until it does.

use std::collections::VecDeque;

use secrelay_media::dtmf::Event;
use secrelay_media::g711::{Pcma, Pcmu};
use secrelay_media::inband::ToneSynth;
use secrelay_media::Codec;
use secrelay_wire::demux::RtpFacts;

use super::gate::header_into;
use super::member::Member;
use super::route::Received;
use crate::leg::CodecId;

/// At most this many digits wait to be played.
pub const MAX_QUEUED: usize = 32;

/// A digit to play.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DtmfDigit {
    /// The event code (0–15: `0`–`9`, `*`, `#`, `A`–`D`).
    pub event: u8,
    /// How long it lasts, ms.
    pub duration_ms: u32,
    /// Its volume, −dBm0 (0 loudest, 63 quietest).
    pub volume: u8,
    /// The pause after it, ms, before the next queued digit.
    pub pause_ms: u32,
}

/// What one of the member's audio packets becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// It goes on as it is.
    Pass,
    /// A telephone-event packet: its timestamp (the digit's start), marker and event block.
    Event {
        timestamp: u32,
        marker: bool,
        event: Event,
    },
    /// The digit's tones in place of its audio (the digit's event code and volume).
    Tone { event: u8, volume: u8 },
}

#[derive(Debug, Clone, Copy)]
enum Phase {
    /// Playing: the digit's start timestamp, ticks played, ticks it lasts, end packets sent.
    Playing {
        start: u32,
        played: u32,
        total: u32,
        ends: u8,
    },
    /// Its pause: ticks left.
    Pause(u32),
}

/// A member's digits to play, and where the one playing is.
#[derive(Debug, Clone)]
pub(crate) struct Injector {
    queue: VecDeque<DtmfDigit>,
    now: Option<(DtmfDigit, Phase)>,
    /// The timestamp of the member's last audio packet, for the ticks each packet stands for.
    last_ts: Option<u32>,
    /// The tones of a digit played as tones (G.711, 8 kHz).
    synth: ToneSynth,
}

impl Default for Injector {
    fn default() -> Injector {
        Injector {
            queue: VecDeque::new(),
            now: None,
            last_ts: None,
            synth: ToneSynth::new(8000),
        }
    }
}

/// Whether DTMF can be played as member `m` sends it: it negotiated telephone-events, or it
/// sends G.711 (the digits then go as tones).
pub(crate) fn can_play(m: &Member) -> bool {
    m.neg.takes_events()
        || m.neg.sends_events()
        || m.neg.pt(CodecId::Pcmu).is_some()
        || m.neg.pt(CodecId::Pcma).is_some()
}

/// Member `src`'s audio packet `p` (of `codec`) while it plays DTMF: made into `out` as what
/// its digit makes of it (its facts then), or `None` when it goes on as it is. The digit goes
/// as telephone-events when the member negotiated them at the audio's clock and either every
/// receiver takes them (`receivers_take_events`) or the audio is not G.711; else as tones in
/// G.711 audio (what reaches a receiver without telephone-events, as rtpengine does it).
pub(crate) fn play(
    src: &mut Member,
    p: &Received<'_>,
    codec: CodecId,
    receivers_take_events: bool,
    out: &mut Vec<u8>,
) -> Option<RtpFacts> {
    let clock = codec.clock_rate();
    let g711 = matches!(codec, CodecId::Pcmu | CodecId::Pcma);
    let event_pt = CodecId::event_for_clock(clock)
        .and_then(|e| src.neg.pt(e))
        .filter(|_| receivers_take_events || !g711);
    if event_pt.is_none() && !g711 {
        // Neither way with this packet's format: it goes on, and so does the digit's time.
        src.inject.on_audio(p.facts.timestamp, clock, false);
        return None;
    }
    let step = src
        .inject
        .on_audio(p.facts.timestamp, clock, event_pt.is_some());
    let header_len = usize::from(p.facts.header_len);
    match (step, event_pt, g711) {
        (Step::Pass, ..) => None,
        (
            Step::Event {
                timestamp,
                marker,
                event,
            },
            Some(pt),
            _,
        ) => {
            header_into(p.rtp, header_len, out)?;
            if out.len() < 12 {
                return None;
            }
            out[1] = (u8::from(marker) << 7) | pt;
            out[4..8].copy_from_slice(&timestamp.to_be_bytes());
            out.extend_from_slice(&event.to_bytes());
            Some(RtpFacts {
                payload_type: pt,
                marker,
                timestamp,
                ..p.facts
            })
        }
        (Step::Tone { event, volume }, _, true) => {
            let samples = header_into(p.rtp, header_len, out)?.len();
            let mut pcm = Vec::with_capacity(samples);
            src.inject.synth.render(event, volume, samples, &mut pcm);
            let mut payload = Vec::with_capacity(samples);
            let encoded = if codec == CodecId::Pcmu {
                Pcmu.from_pcm(&pcm, &mut payload)
            } else {
                Pcma.from_pcm(&pcm, &mut payload)
            };
            encoded.ok()?;
            out.extend_from_slice(&payload);
            Some(p.facts)
        }
        _ => None,
    }
}

impl Injector {
    /// Queues a digit; `false` when [`MAX_QUEUED`] wait already.
    pub fn push(&mut self, digit: DtmfDigit) -> bool {
        if self.queue.len() >= MAX_QUEUED {
            return false;
        }
        self.queue.push_back(digit);
        true
    }

    /// Whether nothing is playing or waiting to.
    pub fn is_idle(&self) -> bool {
        self.now.is_none() && self.queue.is_empty()
    }

    /// What the member's next audio packet (timestamp `ts`, at `clock` Hz) becomes, as
    /// telephone-events (`events`) or tones.
    pub fn on_audio(&mut self, ts: u32, clock: u32, events: bool) -> Step {
        // The ticks this packet stands for: the step from the last one, when it is a packet's
        // worth (up to 200 ms); else 20 ms.
        let ticks = self
            .last_ts
            .map(|l| ts.wrapping_sub(l))
            .filter(|&d| d > 0 && d <= clock / 5)
            .unwrap_or(clock / 50)
            .max(1);
        self.last_ts = Some(ts);
        loop {
            let Some((digit, phase)) = self.now.as_mut() else {
                let Some(digit) = self.queue.pop_front() else {
                    return Step::Pass;
                };
                let total = u64::from(digit.duration_ms) * u64::from(clock) / 1000;
                let phase = Phase::Playing {
                    start: ts,
                    played: 0,
                    // An event's duration is 16 bits of ticks (1.36 s at 48 kHz).
                    total: total.clamp(1, u64::from(u16::MAX)) as u32,
                    ends: 0,
                };
                self.now = Some((digit, phase));
                continue;
            };
            match phase {
                Phase::Playing {
                    start,
                    played,
                    total,
                    ends,
                } => {
                    let marker = *played == 0;
                    *played = (*played + ticks).min(*total);
                    let end = *played >= *total;
                    let step = if events {
                        Step::Event {
                            timestamp: *start,
                            marker,
                            event: Event {
                                event: digit.event,
                                end,
                                volume: digit.volume,
                                duration: *played as u16,
                            },
                        }
                    } else {
                        Step::Tone {
                            event: digit.event,
                            volume: digit.volume,
                        }
                    };
                    if end {
                        *ends += 1;
                        // The end packet goes three times (RFC 4733 §2.5.1.4); tones once.
                        if !events || *ends >= 3 {
                            let pause = u64::from(digit.pause_ms) * u64::from(clock) / 1000;
                            *phase = Phase::Pause(pause.min(u64::from(u32::MAX)) as u32);
                        }
                    }
                    return step;
                }
                Phase::Pause(left) => {
                    if *left == 0 || self.queue.is_empty() {
                        self.now = None;
                        if self.queue.is_empty() {
                            return Step::Pass;
                        }
                        continue;
                    }
                    *left = left.saturating_sub(ticks);
                    return Step::Pass;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digit(event: u8, duration_ms: u32, pause_ms: u32) -> DtmfDigit {
        DtmfDigit {
            event,
            duration_ms,
            volume: 8,
            pause_ms,
        }
    }

    /// The steps of `packets` 20 ms packets at 8 kHz from timestamp 1000.
    fn run(inj: &mut Injector, packets: u32, events: bool) -> Vec<Step> {
        (0..packets)
            .map(|k| inj.on_audio(1000 + 160 * k, 8000, events))
            .collect()
    }

    #[test]
    fn a_digit_takes_its_packets_as_rfc_4733_says_then_audio_goes_on() {
        let mut inj = Injector::default();
        assert!(inj.is_idle());
        assert!(inj.push(digit(5, 100, 100)));
        let steps = run(&mut inj, 10, true);
        // 100 ms at 20 ms a packet: five updates (the first marked), the last the end, which
        // goes twice more; then audio.
        let events: Vec<Event> = steps
            .iter()
            .filter_map(|s| match s {
                Step::Event {
                    timestamp, event, ..
                } => {
                    assert_eq!(*timestamp, 1000, "the digit's start");
                    Some(*event)
                }
                _ => None,
            })
            .collect();
        assert_eq!(events.len(), 7);
        let durations: Vec<u16> = events.iter().map(|e| e.duration).collect();
        assert_eq!(durations, [160, 320, 480, 640, 800, 800, 800]);
        assert!(events[..4].iter().all(|e| !e.end) && events[4..].iter().all(|e| e.end));
        assert!(matches!(steps[0], Step::Event { marker: true, .. }));
        assert!(matches!(steps[1], Step::Event { marker: false, .. }));
        assert!(steps[7..].iter().all(|s| *s == Step::Pass));
        assert!(inj.is_idle());
    }

    #[test]
    fn queued_digits_are_apart_by_the_pause_and_tones_go_once() {
        let mut inj = Injector::default();
        assert!(inj.push(digit(1, 40, 60)));
        assert!(inj.push(digit(2, 40, 60)));
        let steps = run(&mut inj, 10, false);
        let tone = |e| Step::Tone {
            event: e,
            volume: 8,
        };
        assert_eq!(
            steps,
            [
                tone(1),
                tone(1),
                Step::Pass,
                Step::Pass,
                Step::Pass,
                tone(2),
                tone(2),
                Step::Pass,
                Step::Pass,
                Step::Pass,
            ]
        );
        for _ in 0..MAX_QUEUED {
            assert!(inj.push(digit(3, 100, 100)));
        }
        assert!(!inj.push(digit(3, 100, 100)), "bounded");
    }

    #[test]
    fn a_long_digit_at_48_khz_is_held_to_sixteen_bits_of_duration() {
        let mut inj = Injector::default();
        assert!(inj.push(digit(9, 5000, 100)));
        let mut last = 0;
        for k in 0..80u32 {
            if let Step::Event { event, .. } = inj.on_audio(960 * k, 48_000, true) {
                assert!(event.duration >= last);
                last = event.duration;
            }
        }
        assert_eq!(last, u16::MAX);
    }
}
