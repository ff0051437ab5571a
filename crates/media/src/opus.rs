//! Opus (RFC 6716; RTP payload format RFC 7587) through libopus, via the `opus` crate.
//!
//! The codec runs at the PCM rate it is given: 8 kHz (narrowband, for telephone PCM and
//! G.711 transcoding without a resampler), 12, 16, 24 or 48 kHz; mono or stereo
//! (interleaved). Whatever that rate, the RTP clock of Opus is 48 kHz (RFC 7587 §4.1), so
//! timestamps advance by 960 per 20 ms, and the SDP says `opus/48000/2` even for mono.
//!
//! Packets of 10, 20, 40 and 60 ms are single Opus frames; 30 ms is three 10 ms frames joined
//! by libopus's repacketizer (one RTP payload, RFC 6716 §3.2 code 3). Loss concealment is
//! libopus's; with in-band FEC on ([`Opus::set_inband_fec`], or `useinbandfec=1` in the
//! fmtp) a lost packet is rebuilt from the redundancy in the next one ([`Codec::recover`]).

use ::opus::{Application, Bitrate, Channels, Decoder, Encoder, Repacketizer};

use crate::{Codec, Error};

/// Largest Opus packet (RFC 6716 §3.2.1: 1275 bytes per frame, three frames for 30 ms).
const MAX_PACKET: usize = 3 * 1275 + 8;

/// An Opus encoder and decoder pair, VoIP application.
pub struct Opus {
    enc: Encoder,
    dec: Decoder,
    repack: Repacketizer,
    pcm_rate: u32,
    channels: u8,
    payload_type: u8,
    fec: bool,
    complexity: i32,
    scratch: Vec<i16>,
    parts: Vec<Vec<u8>>,
}

impl std::fmt::Debug for Opus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Opus")
            .field("pcm_rate", &self.pcm_rate)
            .field("channels", &self.channels)
            .field("payload_type", &self.payload_type)
            .field("fec", &self.fec)
            .field("complexity", &self.complexity)
            .finish()
    }
}

fn setup(e: ::opus::Error) -> Error {
    Error::Setup(e.to_string())
}

impl Opus {
    /// Dynamic payload type used unless [`Opus::with_payload_type`] says otherwise (the
    /// value browsers commonly offer).
    pub const DEFAULT_PAYLOAD_TYPE: u8 = 111;
    /// libopus's default encoder complexity (0–10), which [`Opus::new`] keeps.
    pub const DEFAULT_COMPLEXITY: i32 = 10;

    /// A mono Opus codec taking and giving PCM at `pcm_rate` Hz (8000, 12000, 16000, 24000
    /// or 48000), encoding at `bitrate` bits per second (500..=512000), variable bitrate.
    pub fn new(pcm_rate: u32, bitrate: i32) -> Result<Opus, Error> {
        Opus::with_channels(pcm_rate, 1, bitrate)
    }

    /// As [`Opus::new`], with 1 or 2 channels (stereo PCM is interleaved).
    pub fn with_channels(pcm_rate: u32, channels: u8, bitrate: i32) -> Result<Opus, Error> {
        if ![8000, 12000, 16000, 24000, 48000].contains(&pcm_rate) {
            return Err(Error::Setup(format!(
                "Opus takes 8, 12, 16, 24 or 48 kHz PCM, not {pcm_rate} Hz"
            )));
        }
        let ch = match channels {
            1 => Channels::Mono,
            2 => Channels::Stereo,
            n => {
                return Err(Error::Setup(format!(
                    "Opus here takes 1 or 2 channels, not {n}"
                )))
            }
        };
        let mut enc = Encoder::new(pcm_rate, ch, Application::Voip).map_err(setup)?;
        enc.set_bitrate(Bitrate::Bits(bitrate)).map_err(setup)?;
        let dec = Decoder::new(pcm_rate, ch).map_err(setup)?;
        Ok(Opus {
            enc,
            dec,
            repack: Repacketizer::new().map_err(setup)?,
            pcm_rate,
            channels,
            payload_type: Self::DEFAULT_PAYLOAD_TYPE,
            fec: false,
            complexity: Self::DEFAULT_COMPLEXITY,
            // The longest Opus packet holds 120 ms.
            scratch: vec![0; pcm_rate as usize * 120 / 1000 * channels as usize],
            parts: Vec::new(),
        })
    }

    /// Narrowband Opus for 8 kHz telephone PCM at 16 kbit/s.
    pub fn narrowband() -> Result<Opus, Error> {
        Opus::new(8000, 16_000)
    }

    /// Uses `pt` as the RTP payload type.
    pub fn with_payload_type(mut self, pt: u8) -> Opus {
        self.payload_type = pt;
        self
    }

    /// Constant bitrate (every 20 ms packet the same size) instead of variable.
    pub fn set_cbr(&mut self, cbr: bool) -> Result<(), Error> {
        self.enc.set_vbr(!cbr).map_err(setup)
    }

    /// Encoder complexity, 0 (fastest) to 10 (libopus's default, best quality).
    pub fn set_complexity(&mut self, complexity: i32) -> Result<(), Error> {
        if !(0..=10).contains(&complexity) {
            return Err(Error::Setup(format!(
                "Opus complexity is 0 to 10, not {complexity}"
            )));
        }
        self.enc.set_complexity(complexity).map_err(setup)?;
        self.complexity = complexity;
        Ok(())
    }

    /// The encoder complexity in use.
    pub fn complexity(&self) -> i32 {
        self.complexity
    }

    /// In-band FEC in what we encode (RFC 7587 `useinbandfec=1`), tuned for `loss_pct`
    /// percent of packets lost (libopus adds redundancy only when it expects loss).
    pub fn set_inband_fec(&mut self, on: bool, loss_pct: i32) -> Result<(), Error> {
        self.enc.set_inband_fec(on).map_err(setup)?;
        self.enc
            .set_packet_loss_perc(if on { loss_pct.clamp(0, 100) } else { 0 })
            .map_err(setup)?;
        self.fec = on;
        Ok(())
    }

    /// Sets the encoder's target bitrate, bits per second.
    pub fn set_bitrate(&mut self, bitrate: i32) -> Result<(), Error> {
        self.enc.set_bitrate(Bitrate::Bits(bitrate)).map_err(setup)
    }

    /// The libopus version string.
    pub fn library_version() -> &'static str {
        ::opus::version()
    }

    fn encode_frame(&mut self, pcm: &[i16], out: &mut Vec<u8>) -> Result<usize, Error> {
        let start = out.len();
        out.resize(start + MAX_PACKET, 0);
        match self.enc.encode(pcm, &mut out[start..]) {
            Ok(n) => {
                out.truncate(start + n);
                Ok(n)
            }
            Err(e) => {
                out.truncate(start);
                Err(Error::Encode(e.to_string()))
            }
        }
    }
}

impl Codec for Opus {
    fn encoding_name(&self) -> &'static str {
        "opus"
    }
    fn payload_type(&self) -> u8 {
        self.payload_type
    }
    fn clock_rate(&self) -> u32 {
        48_000
    }
    fn pcm_rate(&self) -> u32 {
        self.pcm_rate
    }
    fn channels(&self) -> u8 {
        self.channels
    }
    fn ptimes(&self) -> &'static [u32] {
        &[10, 20, 30, 40, 60]
    }
    fn has_plc(&self) -> bool {
        true
    }
    fn has_fec(&self) -> bool {
        true
    }

    fn to_pcm(&mut self, payload: &[u8], pcm: &mut Vec<i16>) -> Result<usize, Error> {
        if payload.is_empty() {
            return Err(Error::Decode("empty Opus payload".into()));
        }
        let n = self
            .dec
            .decode(payload, &mut self.scratch, false)
            .map_err(|e| Error::Decode(e.to_string()))?;
        let n = n * self.channels as usize;
        pcm.extend_from_slice(&self.scratch[..n]);
        Ok(n)
    }

    fn from_pcm(&mut self, pcm: &[i16], out: &mut Vec<u8>) -> Result<usize, Error> {
        let ch = self.channels as usize;
        if !pcm.len().is_multiple_of(ch) {
            return Err(Error::Encode(format!(
                "{} samples is not a whole number of {ch}-channel frames",
                pcm.len()
            )));
        }
        // Opus frames last 2.5, 5, 10, 20, 40 or 60 ms; 30 ms is three 10 ms frames.
        let per_channel = (pcm.len() / ch) as u64;
        let tenths_of_ms = per_channel * 10_000 / self.pcm_rate as u64;
        let exact = (per_channel * 10_000).is_multiple_of(self.pcm_rate as u64);
        if exact && tenths_of_ms == 300 {
            let third = pcm.len() / 3;
            let mut parts = std::mem::take(&mut self.parts);
            parts.resize_with(3, Vec::new);
            for (i, part) in parts.iter_mut().enumerate() {
                part.clear();
                if let Err(e) = self.encode_frame(&pcm[i * third..(i + 1) * third], part) {
                    self.parts = parts;
                    return Err(e);
                }
            }
            let start = out.len();
            out.resize(start + MAX_PACKET, 0);
            let refs: Vec<&[u8]> = parts.iter().map(|p| p.as_slice()).collect();
            let r = self.repack.combine(&refs, &mut out[start..]);
            drop(refs);
            self.parts = parts;
            return match r {
                Ok(n) => {
                    out.truncate(start + n);
                    Ok(n)
                }
                Err(e) => {
                    out.truncate(start);
                    Err(Error::Encode(format!("joining three 10 ms frames: {e}")))
                }
            };
        }
        if !exact || ![25, 50, 100, 200, 400, 600].contains(&tenths_of_ms) {
            return Err(Error::Encode(format!(
                "{per_channel} samples at {} Hz is not an Opus packet (2.5, 5, 10, 20, 30, 40 or 60 ms)",
                self.pcm_rate
            )));
        }
        self.encode_frame(pcm, out)
    }

    fn conceal(&mut self, samples: usize, pcm: &mut Vec<i16>) -> Result<usize, Error> {
        // libopus conceals in multiples of 2.5 ms, at most 120 ms per call.
        let quantum = self.pcm_rate as usize / 400;
        let ch = self.channels as usize;
        let mut left = samples;
        let start = pcm.len();
        while left > 0 {
            let want = left.min(self.scratch.len() / ch);
            let asked = want.div_ceil(quantum) * quantum;
            let n = match self.dec.decode(&[], &mut self.scratch[..asked * ch], false) {
                Ok(n) => n,
                Err(e) => {
                    pcm.truncate(start);
                    return Err(Error::Decode(e.to_string()));
                }
            };
            let take = n.min(want);
            pcm.extend_from_slice(&self.scratch[..take * ch]);
            if take == 0 {
                break;
            }
            left -= take;
        }
        // Whatever libopus did not give (a request below 2.5 ms) is silence.
        pcm.resize(start + samples * ch, 0);
        Ok(samples * ch)
    }

    fn recover(&mut self, next: &[u8], samples: usize, pcm: &mut Vec<i16>) -> Result<usize, Error> {
        let ch = self.channels as usize;
        let quantum = self.pcm_rate as usize / 400;
        if next.is_empty() || !samples.is_multiple_of(quantum) || samples * ch > self.scratch.len()
        {
            return self.conceal(samples, pcm);
        }
        // With fec = true libopus decodes the redundancy in `next` for the lost frame (or
        // conceals, when `next` carries none).
        match self
            .dec
            .decode(next, &mut self.scratch[..samples * ch], true)
        {
            Ok(n) => {
                pcm.extend_from_slice(&self.scratch[..n * ch]);
                if n < samples {
                    self.conceal(samples - n, pcm)?;
                }
                Ok(samples * ch)
            }
            Err(_) => self.conceal(samples, pcm),
        }
    }

    fn reset(&mut self) {
        let _ = self.enc.reset_state();
        let _ = self.dec.reset_state();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::f64::consts::PI;

    fn tone(rate: u32, freq: f64, secs: f64) -> Vec<i16> {
        (0..(rate as f64 * secs) as usize)
            .map(|i| (9000.0 * (2.0 * PI * freq * i as f64 / rate as f64).sin()) as i16)
            .collect()
    }

    /// Power of `x` at `freq` (Goertzel).
    fn goertzel(x: &[i16], rate: u32, freq: f64) -> f64 {
        let w = 2.0 * PI * freq / rate as f64;
        let c = 2.0 * w.cos();
        let (mut s1, mut s2) = (0.0, 0.0);
        for &v in x {
            let s0 = v as f64 + c * s1 - s2;
            s2 = s1;
            s1 = s0;
        }
        s1 * s1 + s2 * s2 - c * s1 * s2
    }

    /// Frequency from rising zero crossings (linearly interpolated).
    fn zero_crossing_freq(x: &[i16], rate: u32) -> f64 {
        let mut crossings = Vec::new();
        for i in 1..x.len() {
            let (a, b) = (x[i - 1] as f64, x[i] as f64);
            if a < 0.0 && b >= 0.0 {
                crossings.push(i as f64 - 1.0 + (-a) / (b - a));
            }
        }
        let (first, last) = (crossings[0], crossings[crossings.len() - 1]);
        (crossings.len() - 1) as f64 * rate as f64 / (last - first)
    }

    fn round_trip(codec: &mut Opus, pcm: &[i16]) -> (Vec<i16>, Vec<usize>) {
        let frame = codec.frame_samples();
        let mut out = Vec::new();
        let mut sizes = Vec::new();
        for f in pcm.chunks_exact(frame) {
            let mut payload = Vec::new();
            sizes.push(codec.from_pcm(f, &mut payload).unwrap());
            assert_eq!(codec.to_pcm(&payload, &mut out).unwrap(), frame);
        }
        (out, sizes)
    }

    #[test]
    fn narrowband_tone_keeps_its_frequency() {
        let mut c = Opus::narrowband().unwrap();
        assert_eq!(
            (
                c.encoding_name(),
                c.payload_type(),
                c.clock_rate(),
                c.pcm_rate()
            ),
            ("opus", 111, 48_000, 8000)
        );
        assert_eq!(c.frame_samples(), 160);
        let pcm = tone(8000, 1000.0, 1.0);
        let (out, sizes) = round_trip(&mut c, &pcm);
        assert_eq!(out.len(), pcm.len());
        // 16 kbit/s is 40 bytes per 20 ms on average; nothing near the 160 of G.711.
        let mean = sizes.iter().sum::<usize>() as f64 / sizes.len() as f64;
        assert!(mean > 10.0 && mean < 80.0, "mean packet {mean} B");
        // Past the codec's start-up, the tone is there and nothing else is.
        let tail = &out[2000..];
        let f = zero_crossing_freq(tail, 8000);
        assert!((f - 1000.0).abs() < 10.0, "zero crossings say {f:.1} Hz");
        let on = goertzel(tail, 8000, 1000.0);
        for off in [500.0, 700.0, 1500.0, 2500.0] {
            let p = goertzel(tail, 8000, off);
            assert!(on > 100.0 * p, "1000 Hz {on:.3e} vs {off} Hz {p:.3e}");
        }
    }

    #[test]
    fn wideband_tone_keeps_its_frequency() {
        let mut c = Opus::new(48_000, 32_000).unwrap().with_payload_type(96);
        assert_eq!((c.payload_type(), c.frame_samples()), (96, 960));
        c.set_complexity(5).unwrap();
        assert_eq!(c.complexity(), 5);
        let pcm = tone(48_000, 1234.0, 0.6);
        let (out, _) = round_trip(&mut c, &pcm);
        let f = zero_crossing_freq(&out[9600..], 48_000);
        assert!((f - 1234.0).abs() < 10.0, "zero crossings say {f:.1} Hz");
    }

    /// Opus does not keep the waveform, so quality is SINAD: the tone over everything else,
    /// after the codec's start-up. Floors set below what this libopus measures (printed).
    #[test]
    fn tone_sinad_floors() {
        for (rate, channels, bitrate, freq, floor) in [
            (8000, 1, 16_000, 1000.0, 25.0),
            (16_000, 1, 24_000, 1000.0, 24.0),
            (48_000, 1, 32_000, 1000.0, 12.0),
            (48_000, 1, 64_000, 3000.0, 30.0),
            (48_000, 2, 64_000, 440.0, 32.0),
        ] {
            let mut c = Opus::with_channels(rate, channels, bitrate).unwrap();
            let mono = crate::tone::sine(rate, freq, 9000.0, rate as usize);
            let pcm: Vec<i16> = mono
                .iter()
                .flat_map(|&s| std::iter::repeat_n(s, channels as usize))
                .collect();
            let frame = c.frame_samples() * channels as usize;
            let mut out = Vec::new();
            for f in pcm.chunks_exact(frame) {
                let mut payload = Vec::new();
                c.from_pcm(f, &mut payload).unwrap();
                c.to_pcm(&payload, &mut out).unwrap();
            }
            let left: Vec<i16> = out.iter().step_by(channels as usize).copied().collect();
            let sinad = crate::tone::sinad_db(&left[rate as usize / 5..], rate, freq);
            eprintln!("Opus {rate} Hz ×{channels} {bitrate} bit/s, {freq} Hz: SINAD {sinad:.1} dB");
            assert!(sinad > floor, "{rate} Hz ×{channels}: {sinad:.1} dB");
        }
    }

    #[test]
    fn thirty_ms_packets_and_stereo() {
        let mut c = Opus::with_channels(48_000, 2, 64_000).unwrap();
        assert_eq!(c.channels(), 2);
        let pcm = vec![0i16; 1440 * 2];
        let mut p = Vec::new();
        c.from_pcm(&pcm, &mut p).unwrap();
        // Code 3 (several frames), three of them.
        assert_eq!(p[0] & 0x03, 3);
        assert_eq!(p[1] & 0x3F, 3);
        let mut back = Vec::new();
        assert_eq!(c.to_pcm(&p, &mut back).unwrap(), 1440 * 2);
        assert!(c.from_pcm(&pcm[..3], &mut p).is_err());
    }

    #[test]
    fn cbr_packets_are_all_one_size() {
        let mut c = Opus::narrowband().unwrap();
        c.set_cbr(true).unwrap();
        let (_, sizes) = round_trip(&mut c, &tone(8000, 440.0, 0.5));
        assert!(sizes.iter().all(|&s| s == 40), "{sizes:?}");
    }

    #[test]
    fn bad_frames_and_payloads_are_errors() {
        let mut c = Opus::narrowband().unwrap();
        let mut out = Vec::new();
        let e = c.from_pcm(&[0; 150], &mut out).unwrap_err();
        assert!(matches!(e, Error::Encode(_)) && !e.is_peer_fault(), "{e}");
        assert!(out.is_empty());
        let mut pcm = Vec::new();
        assert!(c.to_pcm(&[], &mut pcm).unwrap_err().is_peer_fault());
        // Code 3 (arbitrary frame count) without its count byte.
        assert!(c.to_pcm(&[0x03], &mut pcm).unwrap_err().is_peer_fault());
        assert!(pcm.is_empty());
        assert!(matches!(Opus::new(44_100, 32_000), Err(Error::Setup(_))));
        // Loss concealment gives what was asked, 2.5 ms multiples or not.
        assert_eq!(c.conceal(160, &mut pcm).unwrap(), 160);
        assert_eq!(c.conceal(7, &mut pcm).unwrap(), 7);
        assert_eq!(pcm.len(), 167);
        assert!(matches!(
            Opus::with_channels(48_000, 3, 64_000),
            Err(Error::Setup(_))
        ));
        assert!(matches!(c.set_complexity(11), Err(Error::Setup(_))));
        assert!(Opus::library_version().contains("libopus"));
    }
}
