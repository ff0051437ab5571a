//! In-band DTMF: digits found in audio ([`Detector`]) and telephone-events rendered as tones
//! ([`ToneSynth`]), for a gateway between a phone that signals digits as tones in its audio and
//! one that signals them as RFC 4733 telephone-events.
//!
//! The detector measures the eight DTMF frequencies (ITU-T Q.23) with Goertzel's recurrence
//! over blocks of 25.6 ms (205 samples at 8 kHz, scaled to the rate: bins of ~39 Hz, narrow
//! enough to tell 697 from 770 Hz). A block holds a digit when (Q.24's checks, as DSP
//! detectors apply them):
//! - its strongest low-group and strongest high-group tones are each at least
//!   [`MIN_LEVEL_DBM0`];
//! - the two are within 8 dB of each other (twist);
//! - every other tone of each group is at least 8 dB below that group's strongest;
//! - the two tones hold at least 70 % of the block's power (speech and noise spread theirs).
//!
//! A digit starts after two consecutive blocks hold it (51 ms: Q.24 asks that 40 ms be
//! recognised) and ends after two consecutive blocks do not, so one noisy block neither starts
//! nor splits a digit.

use std::f64::consts::PI;

use crate::{dtmf, tone};

/// The quietest tone the detector takes, dBm0 (Q.24 asks for −25 dBm0 at least).
pub const MIN_LEVEL_DBM0: f64 = -30.0;

/// A 0 dBm0 sine's peak in 16-bit linear PCM (G.711: full scale is +3.17 dBm0).
const DBM0_PEAK: f64 = 22_702.0;

/// Block length at 8 kHz; other rates scale it.
const BLOCK_8K: usize = 205;

const LOW: [f64; 4] = [697.0, 770.0, 852.0, 941.0];
const HIGH: [f64; 4] = [1209.0, 1336.0, 1477.0, 1633.0];

/// Twist and the other tones' margin: 8 dB as a power ratio.
const MARGIN: f64 = 6.309_573_444_801_933;

/// The share of a block's power its two tones must hold.
const MIN_SHARE: f64 = 0.7;

/// A digit the detector is hearing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Heard {
    /// Event code 0–15 (`0123456789*#ABCD`).
    pub event: u8,
    /// Its level, −dBm0 (0–63), the weaker tone's: what a telephone-event's volume says.
    pub volume: u8,
}

/// Finds DTMF digits in mono PCM. See the [module documentation](self).
#[derive(Debug, Clone)]
pub struct Detector {
    rate: u32,
    block: Vec<i16>,
    len: usize,
    /// The digit the last block held, and how many blocks in a row held it.
    last: Option<Heard>,
    run: u8,
    /// Blocks in a row that did not hold the current digit.
    misses: u8,
    current: Option<Heard>,
}

impl Detector {
    /// A detector for PCM at `rate` Hz (8000–48000).
    pub fn new(rate: u32) -> Detector {
        let rate = rate.clamp(8_000, 48_000);
        let len = (BLOCK_8K * rate as usize).div_ceil(8_000);
        Detector {
            rate,
            block: Vec::with_capacity(len),
            len,
            last: None,
            run: 0,
            misses: 0,
            current: None,
        }
    }

    /// The PCM rate.
    pub fn rate(&self) -> u32 {
        self.rate
    }

    /// Takes `pcm`; returns the digit being heard after it, if any.
    pub fn push(&mut self, pcm: &[i16]) -> Option<Heard> {
        let mut rest = pcm;
        while !rest.is_empty() {
            let take = (self.len - self.block.len()).min(rest.len());
            self.block.extend_from_slice(&rest[..take]);
            rest = &rest[take..];
            if self.block.len() == self.len {
                let heard = self.judge();
                self.block.clear();
                self.step(heard);
            }
        }
        self.current
    }

    /// The digit being heard now.
    pub fn current(&self) -> Option<Heard> {
        self.current
    }

    /// Forgets what it heard (a discontinuity in the audio).
    pub fn reset(&mut self) {
        self.block.clear();
        self.last = None;
        self.run = 0;
        self.misses = 0;
        self.current = None;
    }

    fn step(&mut self, heard: Option<Heard>) {
        let same = |a: Option<Heard>, b: Option<Heard>| a.map(|h| h.event) == b.map(|h| h.event);
        if heard.is_some() && same(heard, self.last) {
            self.run = self.run.saturating_add(1);
        } else {
            self.run = u8::from(heard.is_some());
        }
        self.last = heard;
        match self.current {
            Some(cur) if heard.is_some_and(|h| h.event == cur.event) => self.misses = 0,
            Some(_) => {
                self.misses += 1;
                if self.misses >= 2 {
                    self.current = None;
                    self.misses = 0;
                }
            }
            None => {}
        }
        if self.current.is_none() && self.run >= 2 {
            self.current = heard;
            self.misses = 0;
        }
    }

    /// The digit one full block holds, by the checks in the module documentation.
    fn judge(&self) -> Option<Heard> {
        let n = self.block.len() as f64;
        let mean: f64 = self
            .block
            .iter()
            .map(|&v| f64::from(v).powi(2))
            .sum::<f64>()
            / n;
        if mean <= 0.0 {
            return None;
        }
        // The power of a sinusoid at each frequency (A²/2 for amplitude A).
        let mut power = [0.0f64; 8];
        for (p, &f) in power.iter_mut().zip(LOW.iter().chain(HIGH.iter())) {
            *p = tone::goertzel_power(&self.block, self.rate, f);
        }
        let strongest = |g: &[f64]| {
            let (k, &p) = g
                .iter()
                .enumerate()
                .max_by(|a, b| a.1.total_cmp(b.1))
                .expect("four tones");
            let others_quiet = g
                .iter()
                .enumerate()
                .all(|(j, &q)| j == k || q * MARGIN <= p);
            (k, p, others_quiet)
        };
        let (row, pr, row_clean) = strongest(&power[..4]);
        let (col, pc, col_clean) = strongest(&power[4..]);
        let floor = (DBM0_PEAK * 10f64.powf(MIN_LEVEL_DBM0 / 20.0)).powi(2) / 2.0;
        let twist_ok = pr <= pc * MARGIN && pc <= pr * MARGIN;
        if pr < floor || pc < floor || !twist_ok || !row_clean || !col_clean {
            return None;
        }
        if pr + pc < MIN_SHARE * mean {
            return None;
        }
        let event = (0u8..16).find(|&e| dtmf::frequencies(e) == Some((LOW[row], HIGH[col])))?;
        let weaker = pr.min(pc);
        let dbm0 = 10.0 * (weaker / (DBM0_PEAK * DBM0_PEAK / 2.0)).log10();
        let volume = (-dbm0).round().clamp(0.0, 63.0) as u8;
        Some(Heard { event, volume })
    }
}

/// The DTMF digits heard in `pcm` (mono, at `rate` Hz), each once where it begins: a
/// [`Detector`] fed 20 ms at a time. What a test or a tool reads a call's audio for.
pub fn digits_heard(pcm: &[i16], rate: u32) -> String {
    let mut d = Detector::new(rate);
    let (mut out, mut last) = (String::new(), None);
    for frame in pcm.chunks((rate as usize / 50).max(1)) {
        let now = d.push(frame).map(|h| h.event);
        if now.is_some() && now != last {
            out.extend(now.and_then(dtmf::char_for_event));
        }
        last = now;
    }
    out
}

/// Renders a telephone-event as its two tones, phase-continuous from one call to the next.
#[derive(Debug, Clone)]
pub struct ToneSynth {
    rate: u32,
    /// Samples made of the current event.
    n: u64,
    event: Option<u8>,
}

impl ToneSynth {
    /// A synthesizer of PCM at `rate` Hz.
    pub fn new(rate: u32) -> ToneSynth {
        ToneSynth {
            rate: rate.max(1),
            n: 0,
            event: None,
        }
    }

    /// Appends `samples` samples of event `event` (0–15) at `volume` −dBm0 per tone (as an
    /// event's volume field says) to `out`; an event code that is not a digit makes silence.
    /// A new event code starts its tones at phase zero.
    pub fn render(&mut self, event: u8, volume: u8, samples: usize, out: &mut Vec<i16>) {
        if self.event != Some(event) {
            self.event = Some(event);
            self.n = 0;
        }
        let Some((f1, f2)) = dtmf::frequencies(event) else {
            out.extend(std::iter::repeat_n(0, samples));
            return;
        };
        let amp = DBM0_PEAK * 10f64.powf(-f64::from(volume.min(63)) / 20.0);
        let (w1, w2) = (
            2.0 * PI * f1 / f64::from(self.rate),
            2.0 * PI * f2 / f64::from(self.rate),
        );
        out.extend((0..samples as u64).map(|i| {
            let t = (self.n + i) as f64;
            (amp * ((w1 * t).sin() + (w2 * t).sin()))
                .round()
                .clamp(-32_768.0, 32_767.0) as i16
        }));
        self.n += samples as u64;
    }

    /// The tones stop: the next event starts at phase zero.
    pub fn stop(&mut self) {
        self.event = None;
        self.n = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::g711;
    use crate::tone;

    /// `ms` of event `e`'s tones at `volume` −dBm0 at `rate`.
    fn digit(rate: u32, e: u8, volume: u8, ms: usize) -> Vec<i16> {
        let mut out = Vec::new();
        ToneSynth::new(rate).render(e, volume, rate as usize * ms / 1000, &mut out);
        out
    }

    /// What the detector hears, 20 ms at a time: the digit heard after each frame.
    fn listen(rate: u32, pcm: &[i16]) -> Vec<Option<u8>> {
        let mut d = Detector::new(rate);
        pcm.chunks(rate as usize / 50)
            .map(|f| d.push(f).map(|h| h.event))
            .collect()
    }

    #[test]
    fn every_digit_is_heard_at_every_rate() {
        for rate in [8_000, 16_000, 48_000] {
            for e in 0..16u8 {
                let mut pcm = vec![0i16; rate as usize / 10];
                pcm.extend(digit(rate, e, 10, 100));
                pcm.extend(vec![0i16; rate as usize / 10]);
                let heard = listen(rate, &pcm);
                let got: Vec<u8> = heard.iter().flatten().copied().collect();
                assert!(!got.is_empty(), "{rate} Hz: digit {e} not heard");
                assert!(
                    got.iter().all(|&g| g == e),
                    "{rate} Hz: {e} heard as {got:?}"
                );
                // Heard within the digit's 100 ms, gone by the end of the silence after it.
                assert_eq!(heard.last(), Some(&None), "{rate} Hz {e}: {heard:?}");
            }
        }
    }

    #[test]
    fn the_volume_heard_is_the_tones_level() {
        let mut d = Detector::new(8_000);
        let h = d.push(&digit(8_000, 5, 10, 100)).expect("heard");
        assert_eq!(h.event, 5);
        assert!((9..=11).contains(&h.volume), "{h:?}");
    }

    #[test]
    fn digits_survive_g711() {
        // The tones through µ-law and back, as a PCMU phone sends them.
        let pcm = digit(8_000, 11, 15, 120);
        let back: Vec<i16> = pcm
            .iter()
            .map(|&s| g711::ulaw_decode(g711::ulaw_encode(s)))
            .collect();
        assert!(listen(8_000, &back).contains(&Some(11)));
    }

    #[test]
    fn short_bursts_single_tones_quiet_tones_and_noise_are_not_digits() {
        let rate = 8_000;
        // 30 ms of a digit: under the two blocks a digit needs.
        let mut short = digit(rate, 1, 10, 30);
        short.extend(vec![0; 1600]);
        assert!(listen(rate, &short).iter().all(Option::is_none));
        // One tone of a pair alone.
        let single = tone::sine(rate, 697.0, 8_000.0, 1600);
        assert!(listen(rate, &single).iter().all(Option::is_none));
        // A digit at −40 dBm0: below the floor.
        assert!(listen(rate, &digit(rate, 1, 40, 200))
            .iter()
            .all(Option::is_none));
        // A digit buried in loud noise (its tones hold well under 70 % of the power).
        let mut seed = 1u32;
        let noisy: Vec<i16> = digit(rate, 1, 20, 200)
            .iter()
            .map(|&s| {
                seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                s.saturating_add(((seed >> 16) as i16) / 3)
            })
            .collect();
        assert!(listen(rate, &noisy).iter().all(Option::is_none));
        // Twist beyond 8 dB: the two tones 12 dB apart.
        let (f1, f2) = dtmf::frequencies(1).unwrap();
        let a = tone::sine(rate, f1, 8_000.0, 1600);
        let b = tone::sine(rate, f2, 2_000.0, 1600);
        let twisted: Vec<i16> = a.iter().zip(&b).map(|(x, y)| x + y).collect();
        assert!(listen(rate, &twisted).iter().all(Option::is_none));
    }

    #[test]
    fn one_noisy_block_neither_splits_a_digit_nor_ends_it() {
        let rate = 8_000;
        let mut pcm = digit(rate, 7, 10, 100);
        // 20 ms of silence in the middle of the digit.
        pcm.extend(vec![0; 160]);
        let mut rest = ToneSynth::new(rate);
        rest.render(7, 10, 800, &mut pcm);
        let heard = listen(rate, &pcm);
        let first = heard.iter().position(Option::is_some).expect("heard");
        assert!(heard[first..].iter().all(|h| *h == Some(7)), "{heard:?}");
    }

    #[test]
    fn synthesized_tones_hold_the_digits_frequencies_and_continue_in_phase() {
        let rate = 8_000;
        let mut s = ToneSynth::new(rate);
        let mut pcm = Vec::new();
        // Two calls: the second continues the first without a step.
        s.render(8, 10, 160, &mut pcm);
        s.render(8, 10, 160, &mut pcm);
        let (f1, f2) = dtmf::frequencies(8).unwrap();
        let share = tone::tone_share(&pcm, rate, f1) + tone::tone_share(&pcm, rate, f2);
        assert!(share > 0.95, "{share}");
        let mut whole = Vec::new();
        ToneSynth::new(rate).render(8, 10, 320, &mut whole);
        assert_eq!(pcm, whole);
        // Not a digit: silence.
        let mut flash = Vec::new();
        s.render(dtmf::FLASH, 10, 80, &mut flash);
        assert!(flash.iter().all(|&x| x == 0));
    }
}
