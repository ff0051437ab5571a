//! Comfort noise (RFC 3389 "CN"), between a phone that stops sending audio in silence and sends
//! comfort-noise packets instead, and one that does not know them.
//!
//! - [`parse`] and [`write`]: the RFC 3389 payload. Its first byte is the noise level in −dBov
//!   (0–127, the top bit zero); spectral information may follow (quantized reflection
//!   coefficients, one byte each), which is accepted and not used: the noise made here is
//!   white.
//! - [`NoiseSynth`]: white noise at a payload's level, from a seeded generator (xorshift32),
//!   so that one packet time of it can stand in for a comfort-noise packet.
//! - [`is_silent`]: whether decoded audio is digital silence ([`SILENCE`]), for sending a
//!   comfort-noise packet in its place.
//!
//! Levels are relative to the overload point of 16-bit PCM: 0 dBov is the level of a
//! full-scale square wave (an RMS of 32767), −32 dBov an RMS of about 824.

use crate::Error;

/// The static RTP payload type of comfort noise at 8000 Hz (RFC 3551).
pub const PAYLOAD_TYPE: u8 = 13;

/// The level, −dBov, of the comfort-noise packets the gateway sends in place of silence
/// (rtpengine's default payload, `0x20`).
pub const DEFAULT_LEVEL: u8 = 32;

/// The quietest level a payload can say, −dBov.
pub const MAX_LEVEL: u8 = 127;

/// The largest sample magnitude counted as digital silence: G.711's quietest steps (A-law has
/// no zero code, its silence `0xD5` decodes to +8; µ-law's `0xFF` decodes to 0).
pub const SILENCE: u16 = 8;

/// A comfort-noise payload read from the network.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sid<'a> {
    /// The noise level, −dBov (0–127).
    pub level: u8,
    /// The spectral information after the level (quantized reflection coefficients), as sent.
    pub coefficients: &'a [u8],
}

/// Reads an RFC 3389 payload. Err (the sender's fault): an empty payload, or a level byte with
/// its top bit set (a level beyond 127).
pub fn parse(payload: &[u8]) -> Result<Sid<'_>, Error> {
    let (&level, coefficients) = payload
        .split_first()
        .ok_or_else(|| Error::Decode("empty comfort-noise payload".into()))?;
    if level > MAX_LEVEL {
        return Err(Error::Decode(format!(
            "comfort-noise level {level} is beyond {MAX_LEVEL}"
        )));
    }
    Ok(Sid {
        level,
        coefficients,
    })
}

/// Appends the payload of a comfort-noise packet at `level` (−dBov, at most 127) with no
/// spectral information to `out`.
pub fn write(level: u8, out: &mut Vec<u8>) {
    out.push(level.min(MAX_LEVEL));
}

/// Whether every sample of `pcm` is within [`SILENCE`] of zero (an empty frame is not silent:
/// it says nothing).
pub fn is_silent(pcm: &[i16]) -> bool {
    !pcm.is_empty() && pcm.iter().all(|s| s.unsigned_abs() <= SILENCE)
}

/// The RMS of noise at `level` −dBov in 16-bit PCM.
pub fn rms_of_level(level: u8) -> f64 {
    32767.0 * 10f64.powf(-f64::from(level.min(MAX_LEVEL)) / 20.0)
}

/// White noise at a comfort-noise payload's level. See the [module documentation](self).
#[derive(Debug, Clone)]
pub struct NoiseSynth {
    state: u32,
}

impl NoiseSynth {
    /// A generator started from `seed` (any value; the same seed makes the same noise).
    pub fn new(seed: u32) -> NoiseSynth {
        NoiseSynth {
            // xorshift's state must not be zero.
            state: seed | 1,
        }
    }

    fn next(&mut self) -> u32 {
        let mut x = self.state;
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        self.state = x;
        x
    }

    /// Appends `samples` of noise at `level` −dBov to `pcm`: uniform samples whose RMS is the
    /// level's ([`rms_of_level`]), clipped to 16 bits at the loudest levels.
    pub fn render(&mut self, level: u8, samples: usize, pcm: &mut Vec<i16>) {
        // A uniform variable on [−a, a] has an RMS of a/√3.
        let amplitude = (rms_of_level(level) * 3f64.sqrt()).min(32767.0);
        pcm.reserve(samples);
        for _ in 0..samples {
            // 24 bits, centred: [−1, 1).
            let u = f64::from(self.next() >> 8) / f64::from(1u32 << 23) - 1.0;
            pcm.push((u * amplitude).round().clamp(-32768.0, 32767.0) as i16);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::g711;

    fn rms(pcm: &[i16]) -> f64 {
        let e: f64 = pcm.iter().map(|&s| f64::from(s) * f64::from(s)).sum();
        (e / pcm.len() as f64).sqrt()
    }

    #[test]
    fn payloads_are_read_with_or_without_spectral_information() {
        let sid = parse(&[0x12, 0x23, 0x23, 0x34, 0x56]).unwrap();
        assert_eq!(sid.level, 18);
        assert_eq!(sid.coefficients, &[0x23, 0x23, 0x34, 0x56]);
        assert_eq!(parse(&[127]).unwrap().coefficients, &[] as &[u8]);
        assert_eq!(parse(&[0]).unwrap().level, 0);
    }

    #[test]
    fn malformed_payloads_are_the_senders_fault() {
        for bad in [&[][..], &[128], &[0xFF, 1, 2]] {
            let e = parse(bad).unwrap_err();
            assert!(e.is_peer_fault(), "{e}");
        }
    }

    #[test]
    fn written_payload_is_the_level_alone() {
        let mut out = Vec::new();
        write(DEFAULT_LEVEL, &mut out);
        assert_eq!(out, [0x20]);
        out.clear();
        write(200, &mut out);
        assert_eq!(out, [127]);
    }

    #[test]
    fn noise_is_at_the_level_and_not_flat() {
        for level in [18u8, 32, 50, 70] {
            let mut synth = NoiseSynth::new(7);
            let mut pcm = Vec::new();
            synth.render(level, 8000, &mut pcm);
            assert_eq!(pcm.len(), 8000);
            let got = 20.0 * (rms(&pcm) / 32767.0).log10();
            assert!(
                (got + f64::from(level)).abs() < 0.5,
                "{level}: {got:.2} dBov"
            );
            // White: neighbouring samples are not alike.
            let corr: f64 = pcm
                .windows(2)
                .map(|w| f64::from(w[0]) * f64::from(w[1]))
                .sum::<f64>()
                / pcm
                    .iter()
                    .map(|&s| f64::from(s) * f64::from(s))
                    .sum::<f64>();
            assert!(corr.abs() < 0.1, "{level}: correlation {corr:.3}");
        }
    }

    #[test]
    fn noise_is_the_same_from_the_same_seed_and_goes_on() {
        let (mut a, mut b) = (NoiseSynth::new(42), NoiseSynth::new(42));
        let (mut x, mut y) = (Vec::new(), Vec::new());
        a.render(30, 160, &mut x);
        b.render(30, 160, &mut y);
        assert_eq!(x, y);
        a.render(30, 160, &mut x);
        assert_ne!(x[..160], x[160..]);
        let mut zero = NoiseSynth::new(0);
        let mut z = Vec::new();
        zero.render(0, 100, &mut z);
        assert!(z.iter().any(|&s| s != 0));
    }

    #[test]
    fn g711_silence_is_silent_and_speech_is_not() {
        let ulaw: Vec<i16> = [0xFFu8; 160]
            .iter()
            .map(|&c| g711::ulaw_decode(c))
            .collect();
        let alaw: Vec<i16> = [0xD5u8; 160]
            .iter()
            .map(|&c| g711::alaw_decode(c))
            .collect();
        assert!(is_silent(&ulaw) && is_silent(&alaw));
        let loud: Vec<i16> = [0x00u8; 160]
            .iter()
            .map(|&c| g711::ulaw_decode(c))
            .collect();
        assert!(!is_silent(&loud));
        let mut one = vec![0i16; 160];
        one[80] = 9;
        assert!(!is_silent(&one));
        assert!(!is_silent(&[]));
    }
}
