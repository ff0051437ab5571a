//! Resampling between the codecs' PCM rates (8, 16, 24, 48 kHz), through `rubato`'s
//! synchronous FFT resampler (a fixed ratio, anti-aliasing filter with a Blackman-Harris
//! window).
//!
//! The stage works in blocks of 10 ms, the smallest packet time: every complete 10 ms of
//! input gives exactly 10 ms of output, so sample counts (and RTP timestamps derived from
//! them) stay exact across a stream, and what is short of a block waits for the next call.
//! The output lags the input by [`Resampler::delay`] samples (half an FFT block: 5 ms); that
//! latency is there from the first block (it starts with silence), never added later.

use rubato::audioadapter_buffers::direct::InterleavedSlice;
use rubato::{Fft, FixedSync, Resampler as _};

use crate::Error;

/// A mono resampler from one rate to another (or a pass-through when they are equal).
pub struct Resampler {
    from: u32,
    to: u32,
    inner: Option<Fft<f32>>,
    block_in: usize,
    block_out: usize,
    pending: Vec<i16>,
    buf_in: Vec<f32>,
    buf_out: Vec<f32>,
}

impl std::fmt::Debug for Resampler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resampler")
            .field("from", &self.from)
            .field("to", &self.to)
            .field("pending", &self.pending.len())
            .finish()
    }
}

impl Resampler {
    /// A resampler from `from` Hz to `to` Hz; both must be multiples of 100 Hz (whole 10 ms
    /// blocks) between 8 and 48 kHz.
    pub fn new(from: u32, to: u32) -> Result<Resampler, Error> {
        for r in [from, to] {
            if !(8000..=48_000).contains(&r) || r % 100 != 0 {
                return Err(Error::Setup(format!(
                    "resampler rates are 8000-48000 Hz in steps of 100, not {r}"
                )));
            }
        }
        let block_in = from as usize / 100;
        let block_out = to as usize / 100;
        let inner = if from == to {
            None
        } else {
            let fft = Fft::<f32>::new(from as usize, to as usize, block_in, 1, FixedSync::Both)
                .map_err(|e| Error::Setup(format!("resampler {from} → {to} Hz: {e}")))?;
            if fft.input_frames_next() != block_in || fft.output_frames_next() != block_out {
                return Err(Error::Setup(format!(
                    "resampler {from} → {to} Hz works in blocks of {}/{} samples, not 10 ms",
                    fft.input_frames_next(),
                    fft.output_frames_next()
                )));
            }
            Some(fft)
        };
        Ok(Resampler {
            from,
            to,
            inner,
            block_in,
            block_out,
            pending: Vec::with_capacity(block_in),
            buf_in: vec![0.0; block_in],
            buf_out: vec![0.0; block_out],
        })
    }

    /// Input rate, Hz.
    pub fn from_rate(&self) -> u32 {
        self.from
    }

    /// Output rate, Hz.
    pub fn to_rate(&self) -> u32 {
        self.to
    }

    /// Output samples by which the output lags the input (0 for a pass-through).
    pub fn delay(&self) -> usize {
        self.inner.as_ref().map_or(0, |r| r.output_delay())
    }

    /// Input samples waiting for a whole 10 ms block.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Resamples `pcm`, appending the output of every complete 10 ms block to `out`;
    /// returns how many samples were appended.
    pub fn process(&mut self, pcm: &[i16], out: &mut Vec<i16>) -> usize {
        let Some(fft) = self.inner.as_mut() else {
            out.extend_from_slice(pcm);
            return pcm.len();
        };
        let start = out.len();
        let mut rest = pcm;
        loop {
            let need = self.block_in - self.pending.len();
            if rest.len() < need {
                self.pending.extend_from_slice(rest);
                break;
            }
            let (now, later) = rest.split_at(need);
            rest = later;
            let src = self.pending.iter().chain(now.iter());
            for (d, &s) in self.buf_in.iter_mut().zip(src) {
                *d = s as f32 * (1.0 / 32768.0);
            }
            self.pending.clear();
            let input = InterleavedSlice::new(&self.buf_in[..], 1, self.block_in)
                .expect("the input buffer holds one block");
            let mut output = InterleavedSlice::new_mut(&mut self.buf_out[..], 1, self.block_out)
                .expect("the output buffer holds one block");
            match fft.process_into_buffer(&input, &mut output, None) {
                Ok(_) => out.extend(
                    self.buf_out
                        .iter()
                        .map(|&v| (v * 32768.0).round().clamp(-32768.0, 32767.0) as i16),
                ),
                // Cannot happen with buffers sized from the resampler itself; keep the
                // sample count exact anyway.
                Err(_) => out.resize(out.len() + self.block_out, 0),
            }
        }
        out.len() - start
    }

    /// Forgets pending input and the filter's history (a new stream).
    pub fn reset(&mut self) {
        self.pending.clear();
        if let Some(r) = self.inner.as_mut() {
            r.reset();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tone;

    #[test]
    fn every_rate_pair_keeps_a_tones_frequency_and_the_sample_count() {
        let rates = [8000u32, 16_000, 48_000];
        for &from in &rates {
            for &to in &rates {
                let mut r = Resampler::new(from, to).unwrap();
                let x = tone::sine(from, 1000.0, 10_000.0, from as usize);
                let mut y = Vec::new();
                // Fed in uneven pieces: the output is still whole blocks.
                let mut n = 0;
                for piece in x.chunks(from as usize / 50 + 7) {
                    n += r.process(piece, &mut y);
                }
                assert_eq!(n, y.len());
                let whole_blocks = x.len() / (from as usize / 100);
                assert_eq!(y.len(), whole_blocks * to as usize / 100, "{from}→{to}");
                let tail = &y[r.delay() + to as usize / 10..];
                let f = tone::zero_crossing_hz(tail, to);
                assert!((f - 1000.0).abs() < 0.5, "{from}→{to}: {f:.2} Hz");
                assert!(tone::sinad_db(tail, to, 1000.0) > 50.0, "{from}→{to}");
                // Amplitude kept: power of a 10,000-peak sine is 5e7.
                let p = tone::goertzel_power(tail, to, 1000.0);
                assert!((p / 5e7 - 1.0).abs() < 0.05, "{from}→{to}: power {p:.3e}");
            }
        }
    }

    #[test]
    fn downsampling_removes_what_the_lower_rate_cannot_carry() {
        // 6 kHz is above 8 kHz's Nyquist frequency: it must not alias down to 2 kHz.
        let mut r = Resampler::new(48_000, 8000).unwrap();
        let x = tone::sine(48_000, 6000.0, 10_000.0, 48_000);
        let mut y = Vec::new();
        r.process(&x, &mut y);
        let tail = &y[800..];
        let p = tone::goertzel_power(tail, 8000, 2000.0);
        assert!(p < 5e7 * 1e-4, "aliased power {p:.3e}");
    }

    #[test]
    fn pass_through_and_bad_rates() {
        let mut r = Resampler::new(16_000, 16_000).unwrap();
        let mut y = Vec::new();
        assert_eq!(r.process(&[1, 2, 3], &mut y), 3);
        assert_eq!((y, r.delay()), (vec![1, 2, 3], 0));
        assert!(Resampler::new(44_100, 48_000).is_ok());
        assert!(matches!(
            Resampler::new(44_150, 48_000),
            Err(Error::Setup(_))
        ));
        assert!(matches!(Resampler::new(8000, 96_000), Err(Error::Setup(_))));
        let mut r = Resampler::new(8000, 48_000).unwrap();
        let mut y = Vec::new();
        assert_eq!(r.process(&[0; 79], &mut y), 0);
        assert_eq!(r.pending(), 79);
        assert_eq!(r.process(&[0; 1], &mut y), 480);
        r.reset();
        assert_eq!(r.pending(), 0);
    }
}
