//! Opus (RFC 6716; RTP payload format RFC 7587) through libopus, via the `opus` crate.
//!
//! The codec runs at the PCM rate it is given: 8 kHz (narrowband, for telephone PCM and
//! G.711 transcoding, no resampler needed), 12, 16, 24 or 48 kHz. Whatever that rate, the
//! RTP clock of Opus is 48 kHz (RFC 7587 §4.1), so timestamps advance by 960 per 20 ms.

use ::opus::{Application, Bitrate, Channels, Decoder, Encoder};

use crate::{Codec, Error};

/// Largest Opus packet (RFC 6716 §3.2.1: 1275 bytes per frame).
const MAX_PACKET: usize = 1275;

/// An Opus encoder and decoder pair, mono, VoIP application.
pub struct Opus {
    enc: Encoder,
    dec: Decoder,
    pcm_rate: u32,
    payload_type: u8,
    scratch: Vec<i16>,
}

impl std::fmt::Debug for Opus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Opus")
            .field("pcm_rate", &self.pcm_rate)
            .field("payload_type", &self.payload_type)
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

    /// An Opus codec taking and giving mono PCM at `pcm_rate` Hz (8000, 12000, 16000, 24000
    /// or 48000), encoding at `bitrate` bits per second (500..=512000), variable bitrate.
    pub fn new(pcm_rate: u32, bitrate: i32) -> Result<Opus, Error> {
        if ![8000, 12000, 16000, 24000, 48000].contains(&pcm_rate) {
            return Err(Error::Setup(format!(
                "Opus takes 8, 12, 16, 24 or 48 kHz PCM, not {pcm_rate} Hz"
            )));
        }
        let mut enc = Encoder::new(pcm_rate, Channels::Mono, Application::Voip).map_err(setup)?;
        enc.set_bitrate(Bitrate::Bits(bitrate)).map_err(setup)?;
        let dec = Decoder::new(pcm_rate, Channels::Mono).map_err(setup)?;
        Ok(Opus {
            enc,
            dec,
            pcm_rate,
            payload_type: Self::DEFAULT_PAYLOAD_TYPE,
            // The longest Opus packet holds 120 ms.
            scratch: vec![0; pcm_rate as usize * 120 / 1000],
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

    /// The libopus version string.
    pub fn library_version() -> &'static str {
        ::opus::version()
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

    fn to_pcm(&mut self, payload: &[u8], pcm: &mut Vec<i16>) -> Result<usize, Error> {
        if payload.is_empty() {
            return Err(Error::Decode("empty Opus payload".into()));
        }
        let n = self
            .dec
            .decode(payload, &mut self.scratch, false)
            .map_err(|e| Error::Decode(e.to_string()))?;
        pcm.extend_from_slice(&self.scratch[..n]);
        Ok(n)
    }

    fn from_pcm(&mut self, pcm: &[i16], out: &mut Vec<u8>) -> Result<usize, Error> {
        // Opus frames last 2.5, 5, 10, 20, 40 or 60 ms.
        let tenths_of_ms = pcm.len() as u64 * 10_000 / self.pcm_rate as u64;
        let exact = (pcm.len() as u64 * 10_000).is_multiple_of(self.pcm_rate as u64);
        if !exact || ![25, 50, 100, 200, 400, 600].contains(&tenths_of_ms) {
            return Err(Error::Encode(format!(
                "{} samples at {} Hz is not an Opus frame (2.5, 5, 10, 20, 40 or 60 ms)",
                pcm.len(),
                self.pcm_rate
            )));
        }
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

    fn conceal(&mut self, pcm: &mut Vec<i16>) -> Result<usize, Error> {
        let want = self.frame_samples();
        let n = self
            .dec
            .decode(&[], &mut self.scratch[..want], false)
            .map_err(|e| Error::Decode(e.to_string()))?;
        pcm.extend_from_slice(&self.scratch[..n]);
        Ok(n)
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
        let pcm = tone(48_000, 1234.0, 0.6);
        let (out, _) = round_trip(&mut c, &pcm);
        let f = zero_crossing_freq(&out[9600..], 48_000);
        assert!((f - 1234.0).abs() < 10.0, "zero crossings say {f:.1} Hz");
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
        // Loss concealment gives one 20 ms frame.
        assert_eq!(c.conceal(&mut pcm).unwrap(), 160);
        assert!(Opus::library_version().contains("libopus"));
    }
}
