//! Re-framing PCM to a target packet time: a phone that sends 20 ms packets and one that
//! wants 30 ms (`a=ptime:30`) meet here.
//!
//! [`Reframer`] is a FIFO of PCM samples at one rate: whatever arrives (a decoded 20 ms
//! packet, 60 ms, a concealed gap) is appended, and whole frames of the target packet time
//! come out, in order, with nothing lost or repeated. What is short of a frame waits; its
//! length is [`Reframer::buffered`], at most one frame less one sample once frames are taken.

use std::collections::VecDeque;

use crate::Error;

/// A PCM FIFO that hands out frames of one packet time.
#[derive(Debug, Clone)]
pub struct Reframer {
    rate: u32,
    channels: usize,
    ptime_ms: u32,
    frame: usize,
    buf: VecDeque<i16>,
}

impl Reframer {
    /// Frames of `ptime_ms` at `rate` Hz, `channels` interleaved. The frame must be a whole
    /// number of samples.
    pub fn new(rate: u32, channels: u8, ptime_ms: u32) -> Result<Reframer, Error> {
        if ptime_ms == 0 || ptime_ms > 1000 || channels == 0 || channels > 2 {
            return Err(Error::Setup(format!(
                "packet time {ptime_ms} ms with {channels} channels (1-1000 ms, 1-2 channels)"
            )));
        }
        let per_channel = rate as u64 * ptime_ms as u64;
        if !per_channel.is_multiple_of(1000) || per_channel == 0 {
            return Err(Error::Setup(format!(
                "{ptime_ms} ms at {rate} Hz is not a whole number of samples"
            )));
        }
        let frame = (per_channel / 1000) as usize * channels as usize;
        Ok(Reframer {
            rate,
            channels: channels as usize,
            ptime_ms,
            frame,
            buf: VecDeque::with_capacity(frame * 4),
        })
    }

    /// Samples (all channels) in one output frame.
    pub fn frame_len(&self) -> usize {
        self.frame
    }

    /// The target packet time, ms.
    pub fn ptime_ms(&self) -> u32 {
        self.ptime_ms
    }

    /// The PCM rate, Hz.
    pub fn rate(&self) -> u32 {
        self.rate
    }

    /// Samples (all channels) waiting for a whole frame.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// Appends PCM (interleaved as configured).
    pub fn push(&mut self, pcm: &[i16]) {
        // From a slice: copied a run at a time, not sample by sample.
        self.buf.extend(pcm);
    }

    /// Takes the next whole frame into `frame` (cleared first); false when there is none yet.
    pub fn pop(&mut self, frame: &mut Vec<i16>) -> bool {
        if self.buf.len() < self.frame {
            return false;
        }
        // The ring's two runs copied whole (a drain read sample by sample), then let go of.
        frame.clear();
        let (head, tail) = self.buf.as_slices();
        let from_head = head.len().min(self.frame);
        frame.extend_from_slice(&head[..from_head]);
        frame.extend_from_slice(&tail[..self.frame - from_head]);
        self.buf.drain(..self.frame);
        true
    }

    /// Drops what is buffered (a discontinuity in the stream); returns how many samples
    /// were dropped.
    pub fn clear(&mut self) -> usize {
        let n = self.buf.len();
        self.buf.clear();
        n
    }

    /// Pads what is buffered with silence to a whole frame (the end of a stream) and takes
    /// it; false when nothing was buffered.
    pub fn flush(&mut self, frame: &mut Vec<i16>) -> bool {
        if self.buf.is_empty() {
            return false;
        }
        let short = self.frame - self.buf.len() % self.frame;
        if short != self.frame {
            self.buf.extend(std::iter::repeat_n(0, short));
        }
        self.pop(frame)
    }

    /// Channels per sample frame.
    pub fn channels(&self) -> usize {
        self.channels
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 20 ms packets of a counting signal re-framed to `ptime`: every sample comes out once,
    /// in order, in frames of exactly `ptime`.
    fn reframe_20_to(ptime: u32, rate: u32) {
        let mut r = Reframer::new(rate, 1, ptime).unwrap();
        let in_frame = rate as usize / 50;
        let mut next_in = 0i32;
        let mut next_out = 0i32;
        let mut frame = Vec::new();
        let mut frames = 0;
        for _ in 0..30 {
            let pkt: Vec<i16> = (0..in_frame)
                .map(|_| {
                    next_in += 1;
                    (next_in % 30_000) as i16
                })
                .collect();
            r.push(&pkt);
            while r.pop(&mut frame) {
                assert_eq!(frame.len(), rate as usize * ptime as usize / 1000);
                for &s in &frame {
                    next_out += 1;
                    assert_eq!(s as i32, next_out % 30_000);
                }
                frames += 1;
            }
            assert!(r.buffered() < r.frame_len());
        }
        // 30 × 20 ms = 600 ms: a whole number of 10, 30 and 60 ms frames.
        assert_eq!(frames, 600 / ptime as usize, "20 → {ptime} ms");
        assert_eq!(r.buffered(), 0);
        assert_eq!(next_in, next_out);
    }

    #[test]
    fn twenty_to_thirty_sixty_and_ten() {
        for rate in [8000, 16_000, 48_000] {
            for ptime in [10, 20, 30, 60] {
                reframe_20_to(ptime, rate);
            }
        }
    }

    #[test]
    fn stereo_flush_and_clear() {
        let mut r = Reframer::new(8000, 2, 10).unwrap();
        assert_eq!(r.frame_len(), 160);
        r.push(&[5; 100]);
        let mut f = Vec::new();
        assert!(!r.pop(&mut f));
        assert!(r.flush(&mut f));
        assert_eq!(f.len(), 160);
        assert!(f[..100].iter().all(|&s| s == 5) && f[100..].iter().all(|&s| s == 0));
        assert!(!r.flush(&mut f));
        r.push(&[1; 7]);
        assert_eq!(r.clear(), 7);
        assert!(matches!(Reframer::new(8000, 1, 0), Err(Error::Setup(_))));
        assert!(matches!(Reframer::new(44_100, 1, 15), Err(Error::Setup(_))));
        assert!(matches!(Reframer::new(8000, 3, 20), Err(Error::Setup(_))));
    }
}
