//! A map from SSRC to a context's per-stream state, laid out for the packet path.
//!
//! A context holds one stream (a SIP leg) to a handful (a WebRTC bundle: audio, video, their
//! retransmissions): those sit side by side in one vector, found by comparing SSRCs in order,
//! so that finding a packet's stream touches the context and one more cache line, whose
//! address the context alone gives ([`SsrcMap::first_entry_addr`]: a batch engine starts
//! loading it several packets ahead). Past [`SCAN`] streams a hash index keeps lookups
//! constant-time (contexts that take any SSRC can hold up to their `max_streams`).

use std::collections::HashMap;

/// Streams found by a linear scan; from one more on, through the hash index.
pub(crate) const SCAN: usize = 8;

type Index = HashMap<u32, usize, foldhash::fast::RandomState>;

/// SSRC → `T`.
pub(crate) struct SsrcMap<T> {
    entries: Vec<(u32, T)>,
    /// Position of each SSRC in `entries`, once there are more than [`SCAN`].
    index: Option<Index>,
}

impl<T> Default for SsrcMap<T> {
    fn default() -> Self {
        SsrcMap {
            entries: Vec::new(),
            index: None,
        }
    }
}

impl<T> SsrcMap<T> {
    /// Where the stream of `ssrc` is, for [`Self::at_mut`].
    #[inline]
    pub(crate) fn position(&self, ssrc: u32) -> Option<usize> {
        match &self.index {
            None => self.entries.iter().position(|(s, _)| *s == ssrc),
            Some(ix) => ix.get(&ssrc).copied(),
        }
    }

    /// Number of streams.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether `ssrc` has a stream.
    #[inline]
    pub(crate) fn contains_key(&self, ssrc: u32) -> bool {
        self.position(ssrc).is_some()
    }

    /// The stream of `ssrc`.
    #[inline]
    pub(crate) fn get(&self, ssrc: u32) -> Option<&T> {
        let i = self.position(ssrc)?;
        Some(&self.entries[i].1)
    }

    /// The stream of `ssrc`, to update.
    #[inline]
    pub(crate) fn get_mut(&mut self, ssrc: u32) -> Option<&mut T> {
        let i = self.position(ssrc)?;
        Some(&mut self.entries[i].1)
    }

    /// The stream at `position` (from [`Self::position`], with no change in between).
    #[inline]
    pub(crate) fn at_mut(&mut self, position: usize) -> Option<&mut T> {
        self.entries.get_mut(position).map(|(_, v)| v)
    }

    /// Sets the stream of `ssrc`, replacing any it had; returns it.
    pub(crate) fn insert(&mut self, ssrc: u32, value: T) -> &mut T {
        if let Some(i) = self.position(ssrc) {
            self.entries[i].1 = value;
            return &mut self.entries[i].1;
        }
        let i = self.entries.len();
        self.entries.push((ssrc, value));
        if let Some(ix) = &mut self.index {
            ix.insert(ssrc, i);
        } else if self.entries.len() > SCAN {
            self.index = Some(
                self.entries
                    .iter()
                    .enumerate()
                    .map(|(i, (s, _))| (*s, i))
                    .collect(),
            );
        }
        &mut self.entries[i].1
    }

    /// Every entry, in no particular order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u32, &T)> {
        self.entries.iter().map(|(s, v)| (*s, v))
    }

    /// Removes the stream of `ssrc`; returns it.
    pub(crate) fn remove(&mut self, ssrc: u32) -> Option<T> {
        let i = self.position(ssrc)?;
        let (_, value) = self.entries.swap_remove(i);
        if let Some(ix) = &mut self.index {
            ix.remove(&ssrc);
            if let Some((moved, _)) = self.entries.get(i) {
                ix.insert(*moved, i);
            }
            if self.entries.len() <= SCAN {
                self.index = None;
            }
        }
        Some(value)
    }

    /// Where the first stream starts in memory (the only one, in most contexts), for a cache
    /// hint; found without reading anything but the map itself.
    #[inline]
    pub(crate) fn first_entry_addr(&self) -> Option<(*const u8, usize)> {
        (!self.entries.is_empty()).then(|| {
            (
                self.entries.as_ptr().cast::<u8>(),
                core::mem::size_of::<(u32, T)>(),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The map against a `HashMap` through a long random sequence of inserts, replacements
    /// and removals that crosses the scan/index boundary both ways.
    #[test]
    fn behaves_as_a_hash_map() {
        let mut map: SsrcMap<u64> = SsrcMap::default();
        let mut model: HashMap<u32, u64> = HashMap::new();
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for step in 0..20_000u64 {
            let r = next();
            // A small key space, so that keys come back; the size drifts through SCAN.
            let ssrc = (r % 24) as u32;
            match (r >> 8) % 3 {
                0 | 1 => {
                    assert_eq!(*map.insert(ssrc, step), step);
                    model.insert(ssrc, step);
                }
                _ => assert_eq!(map.remove(ssrc), model.remove(&ssrc)),
            }
            assert_eq!(map.len(), model.len());
            assert_eq!(
                map.index.is_some(),
                map.len() > SCAN,
                "index only past SCAN"
            );
            for k in 0..24 {
                assert_eq!(map.get(k), model.get(&k), "step {step}, ssrc {k}");
                assert_eq!(map.contains_key(k), model.contains_key(&k));
            }
        }
        if let Some(v) = map.get_mut(3) {
            *v = 7;
        }
        assert!(map.get(3).is_none_or(|v| *v == 7));
    }

    #[test]
    fn first_entry_is_the_first_stream() {
        let mut map: SsrcMap<u32> = SsrcMap::default();
        assert!(map.first_entry_addr().is_none());
        map.insert(5, 50);
        let (p, len) = map.first_entry_addr().expect("one stream");
        assert_eq!(p, map.entries.as_ptr().cast());
        assert_eq!(len, core::mem::size_of::<(u32, u32)>());
    }
}
