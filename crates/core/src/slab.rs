//! A slab: values at stable indexes (a removed value's index is reused by a later insert), so
//! that what refers to a value holds its index and finds it without a search. Whoever holds an
//! index across removals checks that the value there is still the one it meant (a room's
//! members carry their [`crate::room::MemberId`] for that).

/// Values at stable `u32` indexes.
#[derive(Debug)]
pub(crate) struct Slab<T> {
    items: Vec<Option<T>>,
    free: Vec<u32>,
    len: usize,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Slab {
            items: Vec::new(),
            free: Vec::new(),
            len: 0,
        }
    }
}

impl<T> Slab<T> {
    /// Puts `value` at a free index (the last one freed, else a new one): its index.
    pub fn insert(&mut self, value: T) -> u32 {
        self.len += 1;
        match self.free.pop() {
            Some(i) => {
                self.items[i as usize] = Some(value);
                i
            }
            None => {
                self.items.push(Some(value));
                u32::try_from(self.items.len() - 1).expect("fewer than 2^32 values")
            }
        }
    }

    /// Takes the value at `i` out, freeing the index.
    pub fn remove(&mut self, i: u32) -> Option<T> {
        let v = self.items.get_mut(i as usize)?.take()?;
        self.free.push(i);
        self.len -= 1;
        Some(v)
    }

    /// The value at `i`.
    pub fn get(&self, i: u32) -> Option<&T> {
        self.items.get(i as usize)?.as_ref()
    }

    /// The value at `i`, to change it.
    pub fn get_mut(&mut self, i: u32) -> Option<&mut T> {
        self.items.get_mut(i as usize)?.as_mut()
    }

    /// The values at two different indexes, both to change.
    pub fn pair_mut(&mut self, a: u32, b: u32) -> Option<(&mut T, &mut T)> {
        let (a, b) = (a as usize, b as usize);
        if a == b || a.max(b) >= self.items.len() {
            return None;
        }
        let (x, y) = if a < b {
            let (lo, hi) = self.items.split_at_mut(b);
            (&mut lo[a], &mut hi[0])
        } else {
            let (lo, hi) = self.items.split_at_mut(a);
            (&mut hi[0], &mut lo[b])
        };
        Some((x.as_mut()?, y.as_mut()?))
    }

    /// How many values it holds.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Asks the CPU to start loading the first `lines` cache lines of the place at `i` (a hint
    /// for a loop that will read it soon; it reads nothing and `i` may be anything).
    pub fn prefetch(&self, i: u32, lines: usize) {
        let at = self.items.as_ptr().wrapping_add(i as usize);
        secrelay_srtp::simd::prefetch::prefetch_bytes(
            at.cast(),
            std::mem::size_of::<Option<T>>(),
            lines,
        );
    }

    /// Asks the CPU to start loading the cache line `offset` bytes into the place at `i` (a
    /// field's line, `offset` from [`std::mem::offset_of!`]; a hint, as [`Slab::prefetch`]).
    /// The place is an `Option<T>`: the field is at that offset where `T` has a niche for the
    /// `None` (as a room's `Member` does); where it has not, the hint falls a tag's width off,
    /// on the line before at worst, and only hints less.
    pub fn prefetch_at(&self, i: u32, offset: usize) {
        let at = self.items.as_ptr().wrapping_add(i as usize);
        secrelay_srtp::simd::prefetch::line(at.cast::<u8>().wrapping_add(offset));
    }

    /// The values and their indexes, in index order.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &T)> + '_ {
        self.items
            .iter()
            .enumerate()
            .filter_map(|(i, v)| Some((i as u32, v.as_ref()?)))
    }

    /// Every index's place, free ones included (`None`), in index order: what a caller that
    /// borrows several values at once walks.
    pub fn places_mut(&mut self) -> std::slice::IterMut<'_, Option<T>> {
        self.items.iter_mut()
    }
}

impl<T> std::ops::Index<u32> for Slab<T> {
    type Output = T;
    fn index(&self, i: u32) -> &T {
        self.get(i).expect("an index the slab holds")
    }
}

impl<T> std::ops::IndexMut<u32> for Slab<T> {
    fn index_mut(&mut self, i: u32) -> &mut T {
        self.get_mut(i).expect("an index the slab holds")
    }
}

#[cfg(test)]
mod tests {
    use super::Slab;

    #[test]
    fn indexes_stay_put_and_freed_ones_are_reused() {
        let mut s = Slab::default();
        let a = s.insert("a");
        let b = s.insert("b");
        let c = s.insert("c");
        assert_eq!((a, b, c), (0, 1, 2));
        assert_eq!(s.remove(b), Some("b"));
        assert_eq!(s.remove(b), None);
        assert_eq!(s.get(c), Some(&"c"));
        assert_eq!(s.len(), 2);
        assert_eq!(s.insert("d"), 1);
        let (x, y) = s.pair_mut(2, 0).unwrap();
        assert_eq!((*x, *y), ("c", "a"));
        assert!(s.pair_mut(1, 1).is_none());
        assert_eq!(
            s.iter().map(|(_, v)| *v).collect::<Vec<_>>(),
            ["a", "d", "c"]
        );
    }
}
