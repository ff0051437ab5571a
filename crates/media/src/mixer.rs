//! The N−1 mixer: each member of a conference hears the sum of everyone else, never itself.
//!
//! A [`Mixer`] runs in ticks of one frame (say 20 ms at the room's PCM rate). During a tick
//! each member that sent audio puts one frame ([`Mixer::put`]); then [`Mixer::mix`] gives
//! every member its N−1 sum and starts the next tick. The sums are computed in a wider type
//! (i32 for i16 samples, f32 for f32) as the total of all frames minus the member's own, so
//! a tick costs O(N) rather than O(N²), and saturate once, at the end (i16 to
//! −32768..=32767, f32 to −1.0..=1.0): three loud talkers clip rather than wrap.
//!
//! Semantics a caller can rely on:
//! - a member that put no frame this tick (silent, a lost packet not concealed, send-only
//!   off) contributes silence and still gets the others' sum; [`MixStats::missing`] counts it;
//! - a member alone in the mixer gets silence;
//! - a second `put` for one member in one tick replaces the first (counted in
//!   [`MixStats::replaced`]);
//! - a frame of the wrong length is an error and is not mixed.

use crate::Error;

/// A sample type the mixer sums: i16 (saturating at the 16-bit range) or f32 (clipped to ±1).
pub trait MixSample: Copy + Default + Send + 'static {
    /// The type sums are kept in.
    type Acc: Copy + Default + std::ops::Add<Output = Self::Acc> + std::ops::Sub<Output = Self::Acc>;
    /// Widens a sample.
    fn widen(self) -> Self::Acc;
    /// Narrows a sum back to a sample, saturating.
    fn narrow(acc: Self::Acc) -> Self;
}

impl MixSample for i16 {
    type Acc = i32;
    #[inline]
    fn widen(self) -> i32 {
        self as i32
    }
    #[inline]
    fn narrow(acc: i32) -> i16 {
        acc.clamp(i16::MIN as i32, i16::MAX as i32) as i16
    }
}

impl MixSample for f32 {
    type Acc = f32;
    #[inline]
    fn widen(self) -> f32 {
        self
    }
    #[inline]
    fn narrow(acc: f32) -> f32 {
        acc.clamp(-1.0, 1.0)
    }
}

/// What happened in one tick.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MixStats {
    /// Members that put a frame.
    pub contributed: usize,
    /// Members that did not (mixed as silence).
    pub missing: usize,
    /// Frames put twice for one member (the later one was mixed).
    pub replaced: usize,
}

/// Largest number of members (so the i32 sums of i16 frames cannot overflow).
pub const MAX_MEMBERS: usize = 65_535;

#[derive(Debug, Clone)]
struct Member<S: MixSample> {
    id: u64,
    frame: Vec<S>,
    has_frame: bool,
    out: Vec<S>,
}

/// An N−1 mixer over frames of a fixed length.
#[derive(Debug, Clone)]
pub struct Mixer<S: MixSample = i16> {
    frame_len: usize,
    members: Vec<Member<S>>,
    total: Vec<S::Acc>,
    replaced: usize,
}

impl<S: MixSample> Mixer<S> {
    /// A mixer of frames of `frame_len` samples (e.g. 960 for 20 ms at 48 kHz).
    pub fn new(frame_len: usize) -> Result<Mixer<S>, Error> {
        if frame_len == 0 {
            return Err(Error::Setup("mixer frames of 0 samples".into()));
        }
        Ok(Mixer {
            frame_len,
            members: Vec::new(),
            total: vec![S::Acc::default(); frame_len],
            replaced: 0,
        })
    }

    /// Samples per frame.
    pub fn frame_len(&self) -> usize {
        self.frame_len
    }

    /// Members in the mix.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether the mix has no members.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Adds member `id` (a no-op when it is already in).
    pub fn add(&mut self, id: u64) -> Result<(), Error> {
        if self.members.iter().any(|m| m.id == id) {
            return Ok(());
        }
        if self.members.len() >= MAX_MEMBERS {
            return Err(Error::Setup(format!(
                "a mixer takes at most {MAX_MEMBERS} members"
            )));
        }
        self.members.push(Member {
            id,
            frame: vec![S::default(); self.frame_len],
            has_frame: false,
            out: vec![S::default(); self.frame_len],
        });
        Ok(())
    }

    /// Removes member `id`; false when it was not in.
    pub fn remove(&mut self, id: u64) -> bool {
        let before = self.members.len();
        self.members.retain(|m| m.id != id);
        before != self.members.len()
    }

    /// Member `id`'s frame for this tick.
    pub fn put(&mut self, id: u64, frame: &[S]) -> Result<(), Error> {
        if frame.len() != self.frame_len {
            return Err(Error::Encode(format!(
                "mixer frame of {} samples, expected {}",
                frame.len(),
                self.frame_len
            )));
        }
        let m = self
            .members
            .iter_mut()
            .find(|m| m.id == id)
            .ok_or_else(|| Error::Setup(format!("member {id} is not in the mix")))?;
        if m.has_frame {
            self.replaced += 1;
        }
        m.frame.copy_from_slice(frame);
        m.has_frame = true;
        Ok(())
    }

    /// Ends the tick: every member's N−1 mix is ready in [`Mixer::output`]; contributions are
    /// cleared for the next tick.
    pub fn mix(&mut self) -> MixStats {
        self.total.fill(S::Acc::default());
        let mut stats = MixStats {
            replaced: std::mem::take(&mut self.replaced),
            ..MixStats::default()
        };
        for m in self.members.iter().filter(|m| m.has_frame) {
            for (t, &s) in self.total.iter_mut().zip(&m.frame) {
                *t = *t + s.widen();
            }
        }
        for m in &mut self.members {
            if m.has_frame {
                stats.contributed += 1;
                for ((o, &t), &own) in m.out.iter_mut().zip(&self.total).zip(&m.frame) {
                    *o = S::narrow(t - own.widen());
                }
            } else {
                stats.missing += 1;
                for (o, &t) in m.out.iter_mut().zip(&self.total) {
                    *o = S::narrow(t);
                }
            }
            m.has_frame = false;
        }
        stats
    }

    /// Member `id`'s mix from the last [`Mixer::mix`] (silence before the first).
    pub fn output(&self, id: u64) -> Option<&[S]> {
        self.members
            .iter()
            .find(|m| m.id == id)
            .map(|m| m.out.as_slice())
    }

    /// Every member's id and mix from the last [`Mixer::mix`].
    pub fn outputs(&self) -> impl Iterator<Item = (u64, &[S])> + '_ {
        self.members.iter().map(|m| (m.id, m.out.as_slice()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tone;

    #[test]
    fn each_member_hears_the_others_and_not_itself() {
        let rate = 8000;
        let freqs = [440.0, 1000.0, 1700.0];
        let signals: Vec<Vec<i16>> = freqs
            .iter()
            .map(|&f| tone::sine(rate, f, 6000.0, 1600))
            .collect();
        let mut m = Mixer::<i16>::new(160).unwrap();
        for id in 0..3 {
            m.add(id).unwrap();
        }
        let mut heard: Vec<Vec<i16>> = vec![Vec::new(); 3];
        for tick in 0..10 {
            for (id, s) in signals.iter().enumerate() {
                m.put(id as u64, &s[tick * 160..(tick + 1) * 160]).unwrap();
            }
            assert_eq!(
                m.mix(),
                MixStats {
                    contributed: 3,
                    missing: 0,
                    replaced: 0
                }
            );
            for (id, out) in m.outputs() {
                heard[id as usize].extend_from_slice(out);
            }
        }
        for (id, h) in heard.iter().enumerate() {
            for (other, &f) in freqs.iter().enumerate() {
                let share = tone::tone_share(h, rate, f);
                if other == id {
                    assert!(share < 1e-6, "member {id} hears itself: {share}");
                } else {
                    assert!((share - 0.5).abs() < 0.01, "member {id}, {f} Hz: {share}");
                }
            }
            // Exactly the sum of the other two, sample by sample (no clipping at this level).
            for (i, &v) in h.iter().enumerate() {
                let expect: i32 = (0..3)
                    .filter(|&o| o != id)
                    .map(|o| signals[o][i] as i32)
                    .sum();
                assert_eq!(v as i32, expect);
            }
        }
    }

    #[test]
    fn silent_members_and_saturation() {
        let mut m = Mixer::<i16>::new(4).unwrap();
        for id in [7, 8, 9] {
            m.add(id).unwrap();
        }
        m.add(7).unwrap();
        assert_eq!(m.len(), 3);
        m.put(7, &[30_000, -30_000, 1, 0]).unwrap();
        m.put(8, &[30_000, -30_000, 2, 0]).unwrap();
        // 9 is silent this tick.
        let st = m.mix();
        assert_eq!((st.contributed, st.missing), (2, 1));
        assert_eq!(m.output(7).unwrap(), &[30_000, -30_000, 2, 0]);
        assert_eq!(m.output(9).unwrap(), &[i16::MAX, i16::MIN, 3, 0]);
        // Next tick: nobody sent, everyone hears silence.
        let st = m.mix();
        assert_eq!((st.contributed, st.missing), (0, 3));
        assert!(m.outputs().all(|(_, o)| o.iter().all(|&s| s == 0)));
        // A replaced frame counts, and the later one is mixed.
        m.put(7, &[1, 1, 1, 1]).unwrap();
        m.put(7, &[2, 2, 2, 2]).unwrap();
        assert_eq!(m.mix().replaced, 1);
        assert_eq!(m.output(8).unwrap(), &[2, 2, 2, 2]);
        assert!(matches!(m.put(7, &[1, 2, 3]), Err(Error::Encode(_))));
        assert!(matches!(m.put(1, &[1, 2, 3, 4]), Err(Error::Setup(_))));
        assert!(m.remove(8) && !m.remove(8));
        // Alone: silence.
        m.remove(9);
        m.put(7, &[5, 5, 5, 5]).unwrap();
        m.mix();
        assert_eq!(m.output(7).unwrap(), &[0, 0, 0, 0]);
        assert!(Mixer::<i16>::new(0).is_err());
    }

    #[test]
    fn f32_mix_clips_to_unity() {
        let mut m = Mixer::<f32>::new(2).unwrap();
        for id in 0..3 {
            m.add(id).unwrap();
        }
        m.put(0, &[0.75, -0.5]).unwrap();
        m.put(1, &[0.75, -0.75]).unwrap();
        m.put(2, &[0.25, 0.0]).unwrap();
        m.mix();
        assert_eq!(m.output(2).unwrap(), &[1.0, -1.0]);
        assert_eq!(m.output(0).unwrap(), &[1.0, -0.75]);
        assert_eq!(m.output(1).unwrap(), &[1.0, -0.5]);
    }
}
