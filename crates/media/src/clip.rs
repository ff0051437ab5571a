//! An audio file decoded for playing into a call (the ng protocol's `play media`): WAV (integer
//! PCM, float, A-law, μ-law), MP3 or FLAC, demuxed and decoded by `symphonia`, mixed down to
//! mono 16-bit PCM at the file's own rate, which the player's encoder resamples to each
//! receiver's codec.
//!
//! The bytes may come from the network (an ng `blob`), so decoding is bounded and contained:
//! at most [`MAX_SAMPLES`] samples are kept (a file that decodes to more is refused, not cut),
//! a packet that does not decode is skipped, and a panic inside the decoder becomes an error.
//! A clip's rate is one the player's resampler takes (8–48 kHz in steps of 100 Hz: 8, 16, 32,
//! 44.1, 48 kHz and the like); a file at another rate (11.025 or 22.05 kHz, 96 kHz) is converted
//! once, on load, to the next of 8, 16, 24, 32 or 48 kHz at or above it (48 kHz above that).

use std::fmt;

use rubato::audioadapter_buffers::direct::InterleavedSlice;
use rubato::{Fft, FixedSync, Resampler as _};
use symphonia::core::audio::SampleBuffer;
use symphonia::core::codecs::{DecoderOptions, CODEC_TYPE_NULL};
use symphonia::core::errors::Error as DecodeError;
use symphonia::core::formats::FormatOptions;
use symphonia::core::io::MediaSourceStream;
use symphonia::core::meta::MetadataOptions;
use symphonia::core::probe::Hint;

/// The most samples a clip holds (32 MiB of PCM: 35 minutes at 8 kHz, about 6 at 48 kHz).
pub const MAX_SAMPLES: usize = 1 << 24;

/// Mono PCM to play, at a rate the encoders take.
#[derive(Clone, PartialEq, Eq)]
pub struct Clip {
    rate: u32,
    pcm: Vec<i16>,
}

impl fmt::Debug for Clip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Clip")
            .field("rate", &self.rate)
            .field("samples", &self.pcm.len())
            .finish()
    }
}

/// Why a file gives no clip.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClipError {
    /// Not a file of a format we read, or its audio would not decode (what the decoder said).
    Format(String),
    /// Its sample rate is not one the player takes (nor one converted on load).
    Rate(u32),
    /// It decodes to more than [`MAX_SAMPLES`] samples.
    TooLong {
        /// Its rate, to say how long the limit is there.
        rate: u32,
    },
    /// It holds no audio.
    Empty,
}

impl fmt::Display for ClipError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClipError::Format(why) => write!(f, "not a WAV, MP3 or FLAC file we can decode: {why}"),
            ClipError::Rate(r) => write!(
                f,
                "sample rate {r} Hz: files are played at {}-{} Hz in steps of {RATE_STEP} Hz",
                CONVERTIBLE.start(),
                CONVERTIBLE.end()
            ),
            ClipError::TooLong { rate } => write!(
                f,
                "longer than the {} s a clip at {rate} Hz may last",
                MAX_SAMPLES as u64 / u64::from((*rate).max(1))
            ),
            ClipError::Empty => f.write_str("the file holds no audio"),
        }
    }
}

impl std::error::Error for ClipError {}

/// The rates a file may have, in steps of [`RATE_STEP`]: those the player takes are kept, the
/// others converted on load.
const CONVERTIBLE: std::ops::RangeInclusive<u32> = 4000..=192_000;

/// The step of the rates converted on load (11,025 Hz is 441 of them): it bounds the converting
/// resampler's FFT sizes (the two rates over their greatest common divisor).
const RATE_STEP: u32 = 25;

/// Whether a file at `rate` is taken (kept or converted).
fn convertible(rate: u32) -> bool {
    CONVERTIBLE.contains(&rate) && rate.is_multiple_of(RATE_STEP)
}

/// Whether the player takes `rate` (the resampler's rates).
fn playable_rate(rate: u32) -> bool {
    (8000..=48_000).contains(&rate) && rate.is_multiple_of(100)
}

impl Clip {
    /// A clip of mono `pcm` at `rate` Hz.
    pub fn from_pcm(rate: u32, pcm: Vec<i16>) -> Result<Clip, ClipError> {
        if !playable_rate(rate) {
            return Err(ClipError::Rate(rate));
        }
        if pcm.len() > MAX_SAMPLES {
            return Err(ClipError::TooLong { rate });
        }
        if pcm.is_empty() {
            return Err(ClipError::Empty);
        }
        Ok(Clip { rate, pcm })
    }

    /// Decodes a whole file (`extension`, e.g. `wav`, helps tell its format; its contents
    /// decide). Channels are averaged into one.
    pub fn decode(bytes: Vec<u8>, extension: Option<&str>) -> Result<Clip, ClipError> {
        let ext = extension.map(str::to_owned);
        std::panic::catch_unwind(move || decode_all(bytes, ext.as_deref())).unwrap_or_else(|_| {
            Err(ClipError::Format(
                "the decoder failed on it (a malformed file)".into(),
            ))
        })
    }

    /// Samples per second.
    pub fn rate(&self) -> u32 {
        self.rate
    }

    /// The mono samples.
    pub fn pcm(&self) -> &[i16] {
        &self.pcm
    }

    /// How long it plays, ms (rounded down).
    pub fn duration_ms(&self) -> u64 {
        self.pcm.len() as u64 * 1000 / u64::from(self.rate)
    }
}

/// A 16-bit PCM WAV file of `samples` (interleaved when `channels` > 1) at `rate`: what a clip
/// is read from, for tests and tools that make one.
pub fn wav_pcm16(rate: u32, channels: u16, samples: &[i16]) -> Vec<u8> {
    let data_len = (samples.len() * 2) as u32;
    let mut w = Vec::with_capacity(44 + samples.len() * 2);
    w.extend_from_slice(b"RIFF");
    w.extend_from_slice(&(36 + data_len).to_le_bytes());
    w.extend_from_slice(b"WAVEfmt ");
    w.extend_from_slice(&16u32.to_le_bytes());
    w.extend_from_slice(&1u16.to_le_bytes());
    w.extend_from_slice(&channels.to_le_bytes());
    w.extend_from_slice(&rate.to_le_bytes());
    w.extend_from_slice(&(rate * 2 * u32::from(channels)).to_le_bytes());
    w.extend_from_slice(&(2 * channels).to_le_bytes());
    w.extend_from_slice(&16u16.to_le_bytes());
    w.extend_from_slice(b"data");
    w.extend_from_slice(&data_len.to_le_bytes());
    w.extend(samples.iter().flat_map(|s| s.to_le_bytes()));
    w
}

/// [`Clip::decode`]'s work (outside the panic guard).
fn decode_all(bytes: Vec<u8>, extension: Option<&str>) -> Result<Clip, ClipError> {
    let format_err = |e: DecodeError| ClipError::Format(e.to_string());
    let stream = MediaSourceStream::new(Box::new(std::io::Cursor::new(bytes)), Default::default());
    let mut hint = Hint::new();
    if let Some(ext) = extension {
        hint.with_extension(ext);
    }
    let probed = symphonia::default::get_probe()
        .format(
            &hint,
            stream,
            &FormatOptions::default(),
            &MetadataOptions::default(),
        )
        .map_err(format_err)?;
    let mut format = probed.format;
    let track = format
        .tracks()
        .iter()
        .find(|t| t.codec_params.codec != CODEC_TYPE_NULL)
        .ok_or_else(|| ClipError::Format("no audio track".into()))?;
    let track_id = track.id;
    let mut decoder = symphonia::default::get_codecs()
        .make(&track.codec_params, &DecoderOptions::default())
        .map_err(format_err)?;
    let mut mono = Mono::default();
    loop {
        let packet = match format.next_packet() {
            Ok(p) => p,
            // The end of the file (symphonia's way of saying so), or a stream that restarts
            // with other parameters: what came before is the clip.
            Err(DecodeError::IoError(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
            Err(DecodeError::ResetRequired) => break,
            Err(e) => return Err(format_err(e)),
        };
        if packet.track_id() != track_id {
            continue;
        }
        match decoder.decode(&packet) {
            Ok(audio) => mono.add(audio)?,
            // A damaged packet: skipped, as a player would.
            Err(DecodeError::DecodeError(_) | DecodeError::IoError(_)) => continue,
            Err(e) => return Err(format_err(e)),
        }
    }
    let rate = mono.rate.ok_or(ClipError::Empty)?;
    if playable_rate(rate) {
        return Clip::from_pcm(rate, mono.pcm);
    }
    let (to, pcm) = convert(rate, &mono.pcm)?;
    Clip::from_pcm(to, pcm)
}

/// `pcm` at `from` Hz, converted whole to the next of 8, 16, 24, 32 and 48 kHz at or above it
/// (48 kHz above that), through `rubato`'s FFT resampler (its start-up delay trimmed).
fn convert(from: u32, pcm: &[i16]) -> Result<(u32, Vec<i16>), ClipError> {
    let to = [8000, 16_000, 24_000, 32_000, 48_000]
        .into_iter()
        .find(|&r| r >= from)
        .unwrap_or(48_000);
    let failed = |e: String| ClipError::Format(format!("converting {from} Hz to {to} Hz: {e}"));
    if pcm.is_empty() {
        return Err(ClipError::Empty);
    }
    let input: Vec<f32> = pcm.iter().map(|&s| f32::from(s) / 32768.0).collect();
    let adapter =
        InterleavedSlice::new(&input[..], 1, input.len()).map_err(|e| failed(e.to_string()))?;
    let mut fft = Fft::<f32>::new(from as usize, to as usize, 1024, 1, FixedSync::Input)
        .map_err(|e| failed(e.to_string()))?;
    let out = fft
        .process_all(&adapter, input.len(), None)
        .map_err(|e| failed(e.to_string()))?;
    let samples = out
        .take_data()
        .into_iter()
        .map(|v| (v * 32768.0).round().clamp(-32768.0, 32767.0) as i16)
        .collect();
    Ok((to, samples))
}

/// Decoded buffers mixed down into one channel.
#[derive(Default)]
struct Mono {
    rate: Option<u32>,
    pcm: Vec<i16>,
    buf: Option<SampleBuffer<i16>>,
}

impl Mono {
    fn add(&mut self, audio: symphonia::core::audio::AudioBufferRef<'_>) -> Result<(), ClipError> {
        let spec = *audio.spec();
        match self.rate {
            None if !convertible(spec.rate) => return Err(ClipError::Rate(spec.rate)),
            None => self.rate = Some(spec.rate),
            Some(r) if r != spec.rate => {
                return Err(ClipError::Format(format!(
                    "its sample rate changes from {r} to {} Hz",
                    spec.rate
                )))
            }
            Some(_) => {}
        }
        let channels = spec.channels.count().max(1);
        let cap = audio.capacity() as u64;
        let buf = match &mut self.buf {
            Some(b) if b.capacity() as u64 >= cap * channels as u64 => b,
            slot => slot.insert(SampleBuffer::new(cap, spec)),
        };
        buf.copy_interleaved_ref(audio);
        let samples = buf.samples();
        if self.pcm.len() + samples.len() / channels > MAX_SAMPLES {
            return Err(ClipError::TooLong { rate: spec.rate });
        }
        self.pcm.extend(samples.chunks_exact(channels).map(|frame| {
            let sum: i32 = frame.iter().map(|&s| i32::from(s)).sum();
            (sum / channels as i32) as i16
        }));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{g711, tone};

    /// A RIFF/WAVE file: `format` 1 (PCM), 3 (float), 6 (A-law), 7 (μ-law); the formats
    /// other than PCM with the extension size their `fmt ` chunk has.
    fn wav(format: u16, channels: u16, rate: u32, bits: u16, data: &[u8]) -> Vec<u8> {
        let block = channels * bits / 8;
        let fmt_len: u32 = if format == 1 { 16 } else { 18 };
        let mut v = Vec::new();
        v.extend_from_slice(b"RIFF");
        v.extend_from_slice(&(20 + fmt_len + data.len() as u32).to_le_bytes());
        v.extend_from_slice(b"WAVEfmt ");
        v.extend_from_slice(&fmt_len.to_le_bytes());
        v.extend_from_slice(&format.to_le_bytes());
        v.extend_from_slice(&channels.to_le_bytes());
        v.extend_from_slice(&rate.to_le_bytes());
        v.extend_from_slice(&(rate * u32::from(block)).to_le_bytes());
        v.extend_from_slice(&block.to_le_bytes());
        v.extend_from_slice(&bits.to_le_bytes());
        if format != 1 {
            v.extend_from_slice(&0u16.to_le_bytes());
        }
        v.extend_from_slice(b"data");
        v.extend_from_slice(&(data.len() as u32).to_le_bytes());
        v.extend_from_slice(data);
        v
    }

    fn le(pcm: &[i16]) -> Vec<u8> {
        pcm.iter().flat_map(|s| s.to_le_bytes()).collect()
    }

    #[test]
    fn the_wav_writer_writes_what_the_generic_one_does() {
        let x = [1i16, -2, 300, -400];
        assert_eq!(wav_pcm16(16_000, 2, &x), wav(1, 2, 16_000, 16, &le(&x)));
    }

    #[test]
    fn a_16_bit_wav_decodes_to_its_samples() {
        let x = tone::sine(8000, 440.0, 8000.0, 4000);
        let clip = Clip::decode(wav(1, 1, 8000, 16, &le(&x)), Some("wav")).unwrap();
        assert_eq!(
            (clip.rate(), clip.pcm(), clip.duration_ms()),
            (8000, &x[..], 500)
        );
    }

    #[test]
    fn stereo_is_averaged_into_one_channel() {
        let l = tone::sine(48_000, 1000.0, 8000.0, 4800);
        let stereo: Vec<i16> = l.iter().flat_map(|&s| [s, 0]).collect();
        let clip = Clip::decode(wav(1, 2, 48_000, 16, &le(&stereo)), None).unwrap();
        assert_eq!((clip.rate(), clip.pcm().len()), (48_000, 4800));
        for (a, b) in clip.pcm().iter().zip(&l) {
            assert_eq!(*a, b / 2);
        }
    }

    #[test]
    fn rates_the_player_does_not_take_are_converted_on_load() {
        for (from, to) in [(11_025u32, 16_000u32), (22_050, 24_000), (96_000, 48_000)] {
            let x = tone::sine(from, 1000.0, 8000.0, from as usize / 2);
            let clip = Clip::decode(wav(1, 1, from, 16, &le(&x)), Some("wav")).unwrap();
            assert_eq!(clip.rate(), to, "{from} Hz");
            let want = to as usize / 2;
            assert!(
                clip.pcm().len().abs_diff(want) <= 2,
                "{from} Hz: {} samples",
                clip.pcm().len()
            );
            let middle = &clip.pcm()[want / 4..want * 3 / 4];
            let f = tone::zero_crossing_hz(middle, to);
            assert!((f - 1000.0).abs() < 2.0, "{from} Hz: {f:.1} Hz");
            assert!(tone::tone_share(middle, to, 1000.0) > 0.99, "{from} Hz");
        }
    }

    #[test]
    fn g711_wavs_decode_to_the_tone_they_hold() {
        let x = tone::sine(8000, 1000.0, 8000.0, 8000);
        for (format, law) in [
            (7u16, g711::ulaw_encode as fn(i16) -> u8),
            (6, g711::alaw_encode),
        ] {
            let data: Vec<u8> = x.iter().map(|&s| law(s)).collect();
            let clip = Clip::decode(wav(format, 1, 8000, 8, &data), Some("wav")).unwrap();
            assert_eq!(clip.pcm().len(), 8000, "format {format}");
            let snr = tone::sinad_db(clip.pcm(), 8000, 1000.0);
            assert!(snr > 30.0, "format {format}: {snr:.1} dB");
        }
    }

    #[test]
    fn bad_files_and_rates_are_refused_with_a_reason() {
        assert!(matches!(
            Clip::decode(b"not audio at all".to_vec(), Some("wav")),
            Err(ClipError::Format(_))
        ));
        let e = Clip::decode(wav(1, 1, 250_000, 16, &le(&[1; 2500])), None).unwrap_err();
        assert_eq!(e, ClipError::Rate(250_000));
        assert!(e.to_string().contains("250000 Hz"), "{e}");
        assert_eq!(
            Clip::decode(wav(1, 1, 22_051, 16, &le(&[1; 2205])), None),
            Err(ClipError::Rate(22_051))
        );
        assert_eq!(
            Clip::decode(wav(1, 1, 8000, 16, &[]), None),
            Err(ClipError::Empty)
        );
        // A header that claims more data than there is: what is there is the clip.
        let mut cut = wav(1, 1, 8000, 16, &le(&[7; 800]));
        cut.truncate(cut.len() - 800);
        assert_eq!(Clip::decode(cut, None).map(|c| c.pcm().len()), Ok(400));
        assert!(matches!(
            Clip::from_pcm(8000, vec![0; MAX_SAMPLES + 1]),
            Err(ClipError::TooLong { rate: 8000 })
        ));
    }
}
