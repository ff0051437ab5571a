//! Packet index estimation (RFC 3711 §3.3.1 and Appendix A).
//!
//! The 48-bit SRTP packet index is ROC·2^16 + SEQ. A receiver (and a sender, which guards
//! against reusing an index) knows only SEQ from the packet and guesses the ROC from the highest
//! index seen so far, `s_l`.

/// Largest SRTP packet index (2^48 − 1).
pub const MAX_INDEX: u64 = (1 << 48) - 1;

/// Estimates the index of a packet with sequence number `seq`, given the highest index seen.
///
/// Returns `None` when the estimate would fall before index 0 (a packet from "before" the
/// stream started), or past 2^48 − 1.
#[inline]
pub fn estimate(highest: u64, seq: u16) -> Option<u64> {
    let roc = highest >> 16;
    let s_l = (highest & 0xffff) as u16;
    let seq_i = seq as i64;
    let s_l_i = s_l as i64;
    let v: i64 = if s_l < 0x8000 {
        if seq_i - s_l_i > 0x8000 {
            roc as i64 - 1
        } else {
            roc as i64
        }
    } else if s_l_i - 0x8000 > seq_i {
        roc as i64 + 1
    } else {
        roc as i64
    };
    if v < 0 {
        return None;
    }
    let index = ((v as u64) << 16) | seq as u64;
    (index <= MAX_INDEX).then_some(index)
}

/// Where a stream's index tracking stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IndexState {
    /// No packet yet: the first one takes `roc` (0 unless set from outside) and its own SEQ.
    Fresh { roc: u32 },
    /// The highest index processed so far.
    Seen { highest: u64 },
}

impl IndexState {
    /// The index a packet with this SEQ gets.
    #[inline]
    pub(crate) fn index_for(&self, seq: u16) -> Option<u64> {
        match *self {
            IndexState::Fresh { roc } => Some(((roc as u64) << 16) | seq as u64),
            IndexState::Seen { highest } => estimate(highest, seq),
        }
    }

    /// Records a processed index.
    #[inline]
    pub(crate) fn advance(&mut self, index: u64) {
        match self {
            IndexState::Fresh { .. } => *self = IndexState::Seen { highest: index },
            IndexState::Seen { highest } => {
                if index > *highest {
                    *highest = index
                }
            }
        }
    }

    /// The highest index processed, if any.
    pub(crate) fn highest(&self) -> Option<u64> {
        match *self {
            IndexState::Fresh { .. } => None,
            IndexState::Seen { highest } => Some(highest),
        }
    }

    /// The current rollover counter.
    pub(crate) fn roc(&self) -> u32 {
        match *self {
            IndexState::Fresh { roc } => roc,
            IndexState::Seen { highest } => (highest >> 16) as u32,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn rollover_both_ways() {
        // Just below the wrap, a small SEQ belongs to the next ROC.
        assert_eq!(estimate(0xfffe, 2), Some(0x1_0002));
        // Just after the wrap, a large SEQ belongs to the previous ROC.
        assert_eq!(estimate(0x1_0002, 0xfffe), Some(0xfffe));
        // Before the stream's first ROC there is nothing.
        assert_eq!(estimate(5, 0xfff0), None);
        assert_eq!(estimate(0x3_1234, 0x1235), Some(0x3_1235));
        assert_eq!(estimate(MAX_INDEX, 1), None);
    }

    proptest! {
        /// Any packet within 2^15 − 1 of the highest index seen is placed exactly.
        #[test]
        fn exact_within_half_the_sequence_space(highest in 0u64..(1 << 47), delta in -32767i64..32767) {
            let actual = highest as i64 + delta;
            prop_assume!(actual >= 0);
            let actual = actual as u64;
            prop_assert_eq!(estimate(highest, (actual & 0xffff) as u16), Some(actual));
        }

        #[test]
        fn estimate_is_within_2_15_of_highest(highest in 0u64..(1 << 47), seq in any::<u16>()) {
            if let Some(i) = estimate(highest, seq) {
                prop_assert!(i.abs_diff(highest) <= 0x8000);
                prop_assert_eq!(i & 0xffff, seq as u64);
            }
        }
    }
}
