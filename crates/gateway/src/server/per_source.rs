//! Limits per source address on the signaling ports, so that one client (or one flood from
//! one address) cannot take what every other client needs: at most
//! `max_connections_per_source` HTTP and HTTPS connections open at once, and, when
//! `requests_per_source` is set, a token bucket of requests per second (`request_burst_per_source`
//! deep). A source is an IPv4 address or an IPv6 /64, the block one subscriber usually holds,
//! so hopping between addresses of one's own /64 does not escape the limit.
//!
//! State is kept only for sources with a connection open, or whose bucket has not yet
//! refilled since their last request: at most `max_connections` entries, plus the sources that
//! have just left; a source that opens a new connection for each request still finds its
//! bucket as it left it.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The key a source is counted under: its IPv4 address, or the /64 of its IPv6 address (an
/// IPv4-mapped IPv6 address counts as the IPv4 address).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SourceKey {
    /// An IPv4 source.
    V4([u8; 4]),
    /// The first 64 bits of an IPv6 source.
    V6Prefix([u8; 8]),
}

impl SourceKey {
    /// The key `ip` is counted under.
    pub fn of(ip: IpAddr) -> SourceKey {
        match ip {
            IpAddr::V4(v4) => SourceKey::V4(v4.octets()),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => SourceKey::V4(v4.octets()),
                None => {
                    let o = v6.octets();
                    let mut p = [0u8; 8];
                    p.copy_from_slice(&o[..8]);
                    SourceKey::V6Prefix(p)
                }
            },
        }
    }
}

/// The limits (from [`super::ServeConfig`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SourceLimits {
    /// Connections one source may hold open at once.
    pub connections: usize,
    /// Requests per second one source may make on average; 0: no limit.
    pub requests_per_sec: f64,
    /// How many requests a source may make at once after being quiet.
    pub burst: f64,
}

#[derive(Debug)]
struct Entry {
    connections: usize,
    tokens: f64,
    refilled: Instant,
}

/// The per-source state of every signaling listener of one server.
#[derive(Debug)]
pub struct PerSource {
    limits: SourceLimits,
    entries: Mutex<Entries>,
}

#[derive(Debug)]
struct Entries {
    map: HashMap<SourceKey, Entry>,
    /// The size at which the next sweep runs: twice what the last one left, at least
    /// [`SWEEP_FLOOR`], so its cost is spread over the insertions that grew the map.
    sweep_at: usize,
}

const SWEEP_FLOOR: usize = 1024;

/// One connection's place in its source's count, given back on drop.
#[derive(Debug)]
pub struct SourceSlot {
    owner: Arc<PerSource>,
    key: SourceKey,
}

impl Drop for SourceSlot {
    fn drop(&mut self) {
        let now = Instant::now();
        let mut entries = self.owner.lock();
        if let Some(e) = entries.map.get_mut(&self.key) {
            e.connections = e.connections.saturating_sub(1);
            if e.connections == 0 && self.owner.full_at(e, now) {
                entries.map.remove(&self.key);
            }
        }
    }
}

impl PerSource {
    /// No source known yet.
    pub fn new(limits: SourceLimits) -> Arc<PerSource> {
        Arc::new(PerSource {
            limits,
            entries: Mutex::new(Entries {
                map: HashMap::new(),
                sweep_at: SWEEP_FLOOR,
            }),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        // A panic while holding this lock leaves only counts behind: keep going with them.
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn limited(&self) -> bool {
        self.limits.requests_per_sec > 0.0
    }

    /// Refills `e`'s bucket up to `now`; true when it is full (nothing to remember).
    fn full_at(&self, e: &mut Entry, now: Instant) -> bool {
        if !self.limited() {
            return true;
        }
        let secs = now.saturating_duration_since(e.refilled).as_secs_f64();
        e.tokens = (e.tokens + secs * self.limits.requests_per_sec).min(self.limits.burst);
        e.refilled = now;
        e.tokens >= self.limits.burst
    }

    /// A connection from `ip`: its slot, or `None` when the source already holds
    /// `max_connections_per_source`.
    pub fn connect(self: &Arc<Self>, ip: IpAddr) -> Option<SourceSlot> {
        let key = SourceKey::of(ip);
        let now = Instant::now();
        let mut entries = self.lock();
        if entries.map.len() >= entries.sweep_at {
            // Forget the sources that left and whose buckets are full again.
            entries
                .map
                .retain(|_, e| e.connections > 0 || !self.full_at(e, now));
            entries.sweep_at = (2 * entries.map.len()).max(SWEEP_FLOOR);
        }
        let e = entries.map.entry(key).or_insert(Entry {
            connections: 0,
            tokens: self.limits.burst,
            refilled: now,
        });
        if e.connections >= self.limits.connections {
            return None;
        }
        e.connections += 1;
        Some(SourceSlot {
            owner: self.clone(),
            key,
        })
    }

    /// One request from the source of `slot`: `Ok`, or how long until it may ask again.
    pub fn request(&self, slot: &SourceSlot) -> Result<(), Duration> {
        if !self.limited() {
            return Ok(());
        }
        let now = Instant::now();
        let mut entries = self.lock();
        let Some(e) = entries.map.get_mut(&slot.key) else {
            return Ok(());
        };
        self.full_at(e, now);
        if e.tokens >= 1.0 {
            e.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64(
                (1.0 - e.tokens) / self.limits.requests_per_sec,
            ))
        }
    }

    /// Sources with state kept (for tests and the soak's "nothing remains").
    pub fn sources(&self) -> usize {
        self.lock().map.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(connections: usize, rate: f64, burst: f64) -> SourceLimits {
        SourceLimits {
            connections,
            requests_per_sec: rate,
            burst,
        }
    }

    #[test]
    fn connections_are_counted_per_source_and_given_back() {
        let p = PerSource::new(limits(2, 0.0, 0.0));
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "192.0.2.2".parse().unwrap();
        let s1 = p.connect(a).unwrap();
        let _s2 = p.connect(a).unwrap();
        assert!(p.connect(a).is_none(), "a third from one source");
        let _t = p.connect(b).expect("another source is not affected");
        drop(s1);
        assert!(p.connect(a).is_some(), "a slot comes back on drop");
    }

    #[test]
    fn an_ipv6_source_is_its_64_and_mapped_v4_is_v4() {
        let p = PerSource::new(limits(1, 0.0, 0.0));
        let _s = p.connect("2001:db8:1:2::1".parse().unwrap()).unwrap();
        assert!(p.connect("2001:db8:1:2:ffff::9".parse().unwrap()).is_none());
        assert!(p.connect("2001:db8:1:3::1".parse().unwrap()).is_some());
        let _v4 = p.connect("198.51.100.7".parse().unwrap()).unwrap();
        assert!(p.connect("::ffff:198.51.100.7".parse().unwrap()).is_none());
    }

    #[test]
    fn requests_spend_a_bucket_that_refills_and_reconnecting_does_not_reset_it() {
        let p = PerSource::new(limits(8, 10.0, 3.0));
        let ip: IpAddr = "203.0.113.5".parse().unwrap();
        let slot = p.connect(ip).unwrap();
        for _ in 0..3 {
            p.request(&slot).unwrap();
        }
        let wait = p.request(&slot).unwrap_err();
        assert!(
            wait > Duration::ZERO && wait <= Duration::from_millis(100),
            "{wait:?}"
        );
        // Closing and reconnecting finds the bucket as it was.
        drop(slot);
        assert_eq!(p.sources(), 1, "an empty bucket is remembered");
        let slot = p.connect(ip).unwrap();
        assert!(p.request(&slot).is_err());
        std::thread::sleep(Duration::from_millis(120));
        p.request(&slot).expect("refilled at 10 per second");
        drop(slot);
    }

    #[test]
    fn without_a_rate_nothing_is_remembered_after_the_last_connection() {
        let p = PerSource::new(limits(4, 0.0, 0.0));
        let slots: Vec<_> = (0..4)
            .map(|i| p.connect(IpAddr::from([10, 0, 0, i])).unwrap())
            .collect();
        assert_eq!(p.sources(), 4);
        for s in &slots {
            assert!(p.request(s).is_ok());
        }
        drop(slots);
        assert_eq!(p.sources(), 0);
    }

    #[test]
    fn the_map_forgets_refilled_sources_as_it_grows() {
        let p = PerSource::new(limits(4, 1000.0, 1.0));
        for i in 0..3000u32 {
            let s = p.connect(IpAddr::from(i.to_be_bytes())).unwrap();
            p.request(&s).unwrap();
        }
        std::thread::sleep(Duration::from_millis(5));
        // Growing past the next power of two sweeps the refilled ones away.
        for i in 3000..4200u32 {
            drop(p.connect(IpAddr::from(i.to_be_bytes())).unwrap());
        }
        assert!(p.sources() < 3000, "{}", p.sources());
    }
}
