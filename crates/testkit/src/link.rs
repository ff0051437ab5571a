//! A simulated network link on simulated time: one-way delay, jitter (which reorders), loss
//! and duplication, each decided by a seeded generator so that a run can be repeated.
//!
//! [`Link`] is the link's behaviour (what happens to one datagram); [`Air`] holds the datagrams
//! in flight and hands them over in order of arrival. Time is whatever the caller counts in
//! (`Instant`, or a `Duration` since a start), as long as a `Duration` can be added to it.

use std::ops::Add;
use std::time::Duration;

/// A small deterministic generator (xorshift64*): the same seed gives the same run.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed` (any value, zero included).
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// True with probability `p` (never for `p` ≤ 0).
    pub fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && ((self.next_u64() >> 11) as f64 / (1u64 << 53) as f64) < p
    }

    /// A number below `n` (0 for `n` ≤ 1).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

/// How a link treats datagrams.
#[derive(Debug, Clone)]
pub struct Link {
    /// One-way delay.
    pub delay: Duration,
    /// Extra random delay, up to this (datagrams overtake one another).
    pub jitter: Duration,
    /// Probability that a datagram is lost.
    pub loss: f64,
    /// Probability that a datagram arrives twice.
    pub duplicate: f64,
    /// The generator deciding all of it.
    pub rng: Rng,
}

impl Link {
    /// 1 ms one way, nothing lost, reordered or duplicated.
    pub fn perfect() -> Link {
        Link::lossy(Duration::from_millis(1), 0.0, 1)
    }

    /// `delay` one way and `loss` probability each datagram, decided by `seed`; no jitter, no
    /// duplicates.
    pub fn lossy(delay: Duration, loss: f64, seed: u64) -> Link {
        Link {
            delay,
            jitter: Duration::ZERO,
            loss,
            duplicate: 0.0,
            rng: Rng::new(seed),
        }
    }

    /// What happens to one datagram: after how long each of its copies arrives (none when it
    /// is lost, two when it is duplicated).
    pub fn transit(&mut self) -> Transit {
        if self.rng.chance(self.loss) {
            return Transit::Lost;
        }
        let first = self.one_way();
        if self.rng.chance(self.duplicate) {
            Transit::Twice(first, self.one_way())
        } else {
            Transit::Once(first)
        }
    }

    /// The delay plus a draw of the jitter.
    fn one_way(&mut self) -> Duration {
        let j = self.jitter.as_nanos().min(u128::from(u64::MAX)) as u64;
        self.delay + Duration::from_nanos(if j > 0 { self.rng.below(j) } else { 0 })
    }
}

/// The fate of one datagram on a [`Link`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transit {
    /// Never arrives.
    Lost,
    /// Arrives after this long.
    Once(Duration),
    /// Arrives twice, after each of these.
    Twice(Duration, Duration),
}

/// Datagrams in flight, each with its destination (`E`: whatever names an end), handed over in
/// order of arrival and, at the same instant, of sending.
#[derive(Debug)]
pub struct Air<T, E> {
    flying: Vec<(T, u64, E, Vec<u8>)>,
    seq: u64,
    /// Datagrams sent.
    pub sent: usize,
    /// Of those, lost on the link.
    pub lost: usize,
    /// Copies handed over so far.
    pub delivered: usize,
}

impl<T, E> Default for Air<T, E> {
    fn default() -> Self {
        Air {
            flying: Vec::new(),
            seq: 0,
            sent: 0,
            lost: 0,
            delivered: 0,
        }
    }
}

impl<T: Copy + Ord + Add<Duration, Output = T>, E: Clone> Air<T, E> {
    /// Nothing in flight.
    pub fn new() -> Air<T, E> {
        Air::default()
    }

    /// Sends `datagram` to `to` at `at` over `link`; whether it was lost.
    pub fn send(&mut self, link: &mut Link, at: T, to: E, datagram: Vec<u8>) -> bool {
        self.sent += 1;
        match link.transit() {
            Transit::Lost => {
                self.lost += 1;
                return true;
            }
            Transit::Once(d) => self.push(at + d, to, datagram),
            Transit::Twice(a, b) => {
                self.push(at + a, to.clone(), datagram.clone());
                self.push(at + b, to, datagram);
            }
        }
        false
    }

    fn push(&mut self, at: T, to: E, datagram: Vec<u8>) {
        self.seq += 1;
        self.flying.push((at, self.seq, to, datagram));
    }

    /// When the next datagram arrives.
    pub fn next_arrival(&self) -> Option<T> {
        self.flying.iter().map(|f| f.0).min()
    }

    /// The next datagram to arrive: (arrival, destination, bytes).
    pub fn pop(&mut self) -> Option<(T, E, Vec<u8>)> {
        let k = self
            .flying
            .iter()
            .enumerate()
            .min_by_key(|(_, f)| (f.0, f.1))
            .map(|(k, _)| k)?;
        let (at, _, to, d) = self.flying.swap_remove(k);
        self.delivered += 1;
        Some((at, to, d))
    }

    /// The next datagram if it has arrived by `now`.
    pub fn pop_due(&mut self, now: T) -> Option<(T, E, Vec<u8>)> {
        if self.next_arrival()? <= now {
            self.pop()
        } else {
            None
        }
    }

    /// Whether nothing is in flight.
    pub fn is_empty(&self) -> bool {
        self.flying.is_empty()
    }

    /// Datagrams in flight.
    pub fn len(&self) -> usize {
        self.flying.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rng_is_seeded_and_near_its_rate() {
        let mut a = Rng::new(7);
        let mut b = Rng::new(7);
        assert_eq!(a.next_u64(), b.next_u64());
        let hits = (0..100_000).filter(|_| a.chance(0.01)).count();
        assert!((700..1300).contains(&hits), "{hits}");
        assert!(!(0..1000).any(|_| a.chance(0.0)));
        assert!((0..1000).all(|_| a.chance(1.0)));
    }

    #[test]
    fn air_delivers_in_arrival_order_then_sending_order() {
        let mut link = Link::perfect();
        let mut air: Air<Duration, u8> = Air::new();
        air.send(&mut link, Duration::from_millis(5), 1, vec![1]);
        air.send(&mut link, Duration::ZERO, 2, vec![2]);
        air.send(&mut link, Duration::ZERO, 3, vec![3]);
        assert_eq!(air.next_arrival(), Some(Duration::from_millis(1)));
        assert_eq!(air.pop_due(Duration::ZERO), None);
        let order: Vec<u8> = std::iter::from_fn(|| air.pop())
            .map(|(_, to, _)| to)
            .collect();
        assert_eq!(order, vec![2, 3, 1]);
        assert_eq!((air.sent, air.lost, air.delivered), (3, 0, 3));
    }

    #[test]
    fn loss_and_duplicates_follow_the_link() {
        let mut link = Link {
            duplicate: 1.0,
            ..Link::lossy(Duration::from_millis(10), 0.5, 3)
        };
        let mut air: Air<Duration, ()> = Air::new();
        let mut lost = 0;
        for _ in 0..1000 {
            lost += usize::from(air.send(&mut link, Duration::ZERO, (), vec![0]));
        }
        assert!((400..600).contains(&lost), "{lost}");
        assert_eq!(air.len(), 2 * (1000 - lost), "every survivor twice");
    }
}
