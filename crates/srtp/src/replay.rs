//! Sliding replay window (RFC 3711 §3.3.2), one per stream and direction.
//!
//! A ring of bits indexed by `index mod capacity`, so moving the window forward clears only the
//! words it passes over instead of shifting the whole bitmap. Checking is read-only; the window
//! moves only through [`ReplayWindow::update`], which callers invoke after authentication.

use crate::error::ConfigError;

/// Smallest configurable window.
pub const MIN_WINDOW: usize = 64;
/// Largest configurable window.
pub const MAX_WINDOW: usize = 32768;
/// Default SRTP window (packets).
pub const DEFAULT_WINDOW: usize = 1024;

/// Why a packet index was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplayError {
    /// Already received.
    Duplicate,
    /// Behind the window.
    Old,
}

/// The set of recently accepted packet indices.
#[derive(Clone, Debug)]
pub struct ReplayWindow {
    bits: Box<[u64]>,
    size: u64,
    top: Option<u64>,
}

impl ReplayWindow {
    /// A window of `size` packets (64..=32768).
    pub fn new(size: usize) -> Result<Self, ConfigError> {
        if !(MIN_WINDOW..=MAX_WINDOW).contains(&size) {
            return Err(ConfigError::ReplayWindow(size));
        }
        let words = size.div_ceil(64).next_power_of_two();
        Ok(ReplayWindow {
            bits: vec![0u64; words].into_boxed_slice(),
            size: size as u64,
            top: None,
        })
    }

    /// The window size in packets.
    pub fn size(&self) -> usize {
        self.size as usize
    }

    /// The highest index accepted so far.
    pub fn top(&self) -> Option<u64> {
        self.top
    }

    #[inline]
    fn cap(&self) -> u64 {
        (self.bits.len() as u64) * 64
    }

    /// Starts loading the window's bits into the cache (a hint for the batch engines).
    #[inline]
    pub(crate) fn prefetch(&self) {
        crate::simd::prefetch::prefetch_bytes(self.bits.as_ptr().cast(), self.bits.len() * 8, 3);
    }

    #[inline]
    fn slot(&self, index: u64) -> (usize, u64) {
        let pos = index & (self.cap() - 1);
        ((pos / 64) as usize, 1u64 << (pos % 64))
    }

    /// Whether `index` would be accepted, without changing the window.
    #[inline]
    pub fn check(&self, index: u64) -> Result<(), ReplayError> {
        let Some(top) = self.top else { return Ok(()) };
        if index > top {
            return Ok(());
        }
        if top - index >= self.size {
            return Err(ReplayError::Old);
        }
        let (w, m) = self.slot(index);
        if self.bits[w] & m != 0 {
            Err(ReplayError::Duplicate)
        } else {
            Ok(())
        }
    }

    /// Records `index` as received, moving the window forward if it is the new highest.
    #[inline]
    pub fn update(&mut self, index: u64) {
        match self.top {
            None => {
                self.bits.fill(0);
                self.top = Some(index);
            }
            Some(top) if index > top => {
                let advance = index - top;
                if advance >= self.cap() {
                    self.bits.fill(0);
                } else if advance == 1 {
                    // The common case: the next packet in order.
                    let (w, m) = self.slot(index);
                    self.bits[w] &= !m;
                } else {
                    // Clear the slots of top+1 ..= index, a word at a time where possible.
                    let mut i = top + 1;
                    while i <= index {
                        let (w, m) = self.slot(i);
                        if i % 64 == 0 && index - i >= 63 {
                            self.bits[w] = 0;
                            i += 64;
                        } else {
                            self.bits[w] &= !m;
                            i += 1;
                        }
                    }
                }
                self.top = Some(index);
            }
            Some(top) if top - index >= self.size => return,
            Some(_) => {}
        }
        let (w, m) = self.slot(index);
        self.bits[w] |= m;
    }

    /// Forgets everything (used when a stream's ROC is set from outside).
    pub fn reset(&mut self) {
        self.bits.fill(0);
        self.top = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    /// The obvious model: every accepted index in a set.
    fn model_check(seen: &BTreeSet<u64>, size: u64, index: u64) -> Result<(), ReplayError> {
        let Some(&top) = seen.iter().next_back() else {
            return Ok(());
        };
        if index > top {
            Ok(())
        } else if top - index >= size {
            Err(ReplayError::Old)
        } else if seen.contains(&index) {
            Err(ReplayError::Duplicate)
        } else {
            Ok(())
        }
    }

    proptest! {
        #[test]
        fn agrees_with_a_set_model(
            size in prop_oneof![Just(64usize), Just(100), Just(1024), Just(4000), Just(32768)],
            start in 0u64..1 << 40,
            steps in prop::collection::vec((-2000i64..2000, any::<bool>()), 1..300),
        ) {
            let mut w = ReplayWindow::new(size).unwrap();
            let mut seen = BTreeSet::new();
            let mut cur = start as i64;
            for (delta, accept) in steps {
                cur = (cur + delta).max(0);
                let idx = cur as u64;
                let got = w.check(idx);
                prop_assert_eq!(got, model_check(&seen, size as u64, idx), "index {}", idx);
                if got.is_ok() && accept {
                    w.update(idx);
                    seen.insert(idx);
                }
            }
        }
    }

    #[test]
    fn duplicate_and_old_are_told_apart() {
        let mut w = ReplayWindow::new(64).unwrap();
        w.update(1000);
        assert_eq!(w.check(1000), Err(ReplayError::Duplicate));
        assert_eq!(w.check(999), Ok(()));
        assert_eq!(w.check(1000 - 64), Err(ReplayError::Old));
        assert_eq!(w.check(1000 - 63), Ok(()));
        w.update(5000);
        assert_eq!(w.check(1000), Err(ReplayError::Old));
        assert!(ReplayWindow::new(63).is_err());
        assert!(ReplayWindow::new(32769).is_err());
    }
}
