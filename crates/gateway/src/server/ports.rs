//! Local ports for telephony legs: an even port for RTP and the next one for RTCP, from the
//! configured range, shared by every worker (a leg's sockets belong to the worker that owns
//! its room). A port another process holds is skipped; ports come back when their leg ends.
//!
//! # Re-use
//! A freed port pair goes to the back of the queue: the pool hands out the pair freed longest
//! ago first, so a port is taken again as late as the range allows. And a pair remembers the
//! remote addresses its last leg latched to or sent to, for the quarantine time after it was
//! freed: the next leg on it gets them ([`Quarantine`]) and drops what they send
//! (`stale_source`), so the previous peer (a phone that never got the BYE, or someone who
//! learnt the port) is neither latched nor relayed by a call it has nothing to do with.

use std::collections::{HashMap, HashSet, VecDeque};
use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::udp::bind_leg;
use crate::leg::Quarantine;

/// Most remote addresses a pair remembers of its last leg.
const MAX_REMEMBERED: usize = 16;

/// Why no port pair was bound for a leg.
#[derive(Debug)]
pub enum PortError {
    /// Every pair of the range is in use on that address (`rtp_ports`).
    Exhausted {
        /// The range's first port.
        lo: u16,
        /// The range's last port.
        hi: u16,
        /// The address the pair was for.
        ip: IpAddr,
    },
    /// An exact RTP port that is odd, or the last port: RTP is even, with RTCP on the next.
    Odd(SocketAddr),
    /// A port of the pair at that RTP address is a leg's here.
    InUse(SocketAddr),
    /// The kernel did not bind the port (the address is not this machine's, another process
    /// holds the port).
    Bind(SocketAddr, io::Error),
}

impl std::fmt::Display for PortError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PortError::Exhausted { lo, hi, ip } => {
                write!(f, "no free port pair in rtp_ports {lo}-{hi} on {ip}")
            }
            PortError::Odd(a) => write!(f, "{a}: an RTP port is even, with RTCP on the next"),
            PortError::InUse(a) => write!(f, "{a}: the port pair is in use here"),
            PortError::Bind(a, e) => write!(f, "{a}: {e}"),
        }
    }
}

impl std::error::Error for PortError {}

/// The pool.
#[derive(Debug)]
pub(crate) struct PortPool {
    lo: u16,
    hi: u16,
    /// How long a freed pair's last peers are refused by its next leg.
    quarantine: Duration,
    inner: Mutex<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// Free pairs (their even port), the one freed longest ago first.
    free: VecDeque<u16>,
    used: HashSet<u16>,
    /// Each freed pair's last peers, and until when its next leg refuses them.
    remembered: HashMap<u16, Quarantine>,
}

/// Two bound sockets: RTP on an even port, RTCP on the next; and what the pair's next leg
/// must refuse.
pub(crate) struct Pair {
    pub rtp: UdpSocket,
    pub rtcp: UdpSocket,
    pub rtp_addr: SocketAddr,
    pub rtcp_addr: SocketAddr,
    pub quarantine: Quarantine,
}

impl PortPool {
    /// Ports `lo..=hi` (the first even one on); a freed pair's peers are refused by its next
    /// leg for `quarantine`.
    pub fn new(lo: u16, hi: u16, quarantine: Duration) -> PortPool {
        let first = lo + lo % 2;
        let free = (u32::from(first)..u32::from(hi))
            .step_by(2)
            .filter_map(|p| u16::try_from(p).ok())
            .collect();
        PortPool {
            lo: first,
            hi,
            quarantine,
            inner: Mutex::new(Inner {
                free,
                used: HashSet::new(),
                remembered: HashMap::new(),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Binds the free pair freed longest ago on `ip`, with what its last leg's peers are
    /// refused by at `now`. Err: the range is exhausted (every pair in use here or held by
    /// another process).
    pub fn bind_pair(&self, ip: IpAddr, now: Instant) -> Result<Pair, PortError> {
        let mut g = self.lock();
        for _ in 0..g.free.len() {
            let Some(p) = g.free.pop_front() else { break };
            let (Ok(rtp), Ok(rtcp)) = (
                bind_leg(SocketAddr::new(ip, p)),
                bind_leg(SocketAddr::new(ip, p + 1)),
            ) else {
                // Held by someone else: try it again after the others.
                g.free.push_back(p);
                continue;
            };
            g.used.insert(p);
            g.used.insert(p + 1);
            let quarantine = g
                .remembered
                .remove(&p)
                .filter(|q| q.until.is_some_and(|t| now < t))
                .unwrap_or_default();
            return Ok(Pair {
                rtp_addr: SocketAddr::new(ip, p),
                rtcp_addr: SocketAddr::new(ip, p + 1),
                rtp,
                rtcp,
                quarantine,
            });
        }
        Err(PortError::Exhausted {
            lo: self.lo,
            hi: self.hi,
            ip,
        })
    }

    /// Binds the pair at `rtp` exactly (RTCP on the next port), in the range or not: a leg
    /// taken over from a node that died keeps its ports. Err: a port of the pair is in use
    /// here, or cannot be bound (the address is not this machine's yet, another process holds
    /// the port).
    pub fn bind_at(&self, rtp: SocketAddr) -> Result<Pair, PortError> {
        let p = rtp.port();
        if !p.is_multiple_of(2) || p == u16::MAX {
            return Err(PortError::Odd(rtp));
        }
        let mut g = self.lock();
        if g.used.contains(&p) || g.used.contains(&(p + 1)) {
            return Err(PortError::InUse(rtp));
        }
        let rtcp_addr = SocketAddr::new(rtp.ip(), p + 1);
        let bind = |a| bind_leg(a).map_err(|e| PortError::Bind(a, e));
        let (rtp_socket, rtcp) = (bind(rtp)?, bind(rtcp_addr)?);
        g.free.retain(|&f| f != p);
        g.used.insert(p);
        g.used.insert(p + 1);
        // The call's own phones are the pair's peers: nothing is refused.
        g.remembered.remove(&p);
        Ok(Pair {
            rtp: rtp_socket,
            rtcp,
            rtp_addr: rtp,
            rtcp_addr,
            quarantine: Quarantine::default(),
        })
    }

    /// Gives a port back at `now`; `peers`: the remote addresses its leg latched to or sent
    /// to, refused by the pair's next leg for the quarantine time. The pair goes to the back
    /// of the queue once both its ports are back.
    pub fn release(&self, port: u16, peers: &[SocketAddr], now: Instant) {
        let mut g = self.lock();
        if !g.used.remove(&port) {
            return;
        }
        let base = port & !1;
        if !peers.is_empty() && !self.quarantine.is_zero() {
            let q = g.remembered.entry(base).or_default();
            for a in peers {
                if !q.sources.contains(a) && q.sources.len() < MAX_REMEMBERED {
                    q.sources.push(*a);
                }
            }
            q.until = Some(now + self.quarantine);
        }
        // A pair outside the range (one taken over from another node) is not handed out.
        let in_range = (self.lo..self.hi).contains(&base);
        if in_range && !g.used.contains(&base) && !g.used.contains(&(base + 1)) {
            g.free.push_back(base);
        }
    }

    /// Ports in use (nothing left behind once every leg ended).
    pub fn in_use(&self) -> usize {
        self.lock().used.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const IP: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

    /// An even port whose next `n` ports were free a moment ago.
    fn free_range(n: u16) -> u16 {
        loop {
            let probe = UdpSocket::bind((IP, 0)).unwrap();
            let base = probe.local_addr().unwrap().port() & !1;
            drop(probe);
            if base < 1024 || base.checked_add(n).is_none() {
                continue;
            }
            if (base..base + n).all(|p| UdpSocket::bind((IP, p)).is_ok()) {
                return base;
            }
        }
    }

    /// Drops a pair's sockets and gives both its ports back, with `peers`.
    fn give_back(pool: &PortPool, pair: Pair, peers: &[SocketAddr], now: Instant) -> u16 {
        let p = pair.rtp_addr.port();
        drop(pair);
        pool.release(p, peers, now);
        pool.release(p + 1, peers, now);
        p
    }

    #[test]
    fn pairs_are_even_and_odd_skip_busy_ports_and_come_back() {
        let base = free_range(6);
        let pool = PortPool::new(base, base + 5, Duration::from_secs(60));
        let now = Instant::now();
        let outside = UdpSocket::bind((IP, base));
        let a = pool.bind_pair(IP, now).unwrap();
        assert_eq!(a.rtp_addr.port() % 2, 0);
        assert_eq!(a.rtcp_addr.port(), a.rtp_addr.port() + 1);
        if outside.is_ok() {
            assert_ne!(a.rtp_addr.port(), base, "a port held elsewhere is skipped");
        }
        let b = pool.bind_pair(IP, now);
        assert_eq!(pool.in_use(), if b.is_ok() { 4 } else { 2 });
        give_back(&pool, a, &[], now);
        if let Ok(b) = b {
            give_back(&pool, b, &[], now);
        }
        assert_eq!(pool.in_use(), 0);
        drop(outside);
    }

    /// A pair bound at an exact address (a call taken over) is taken out of the queue while in
    /// use, refused while in use or odd, and one outside the range is not queued when freed.
    #[test]
    fn a_pair_bound_at_its_address_is_held_like_any_other() {
        let base = free_range(8);
        let pool = PortPool::new(base, base + 3, Duration::from_secs(60));
        let now = Instant::now();
        let inside = pool.bind_at(SocketAddr::new(IP, base + 2)).unwrap();
        assert_eq!(inside.rtcp_addr.port(), base + 3);
        assert!(
            pool.bind_at(SocketAddr::new(IP, base + 2)).is_err(),
            "in use"
        );
        assert!(pool.bind_at(SocketAddr::new(IP, base + 5)).is_err(), "odd");
        let other = pool.bind_pair(IP, now).unwrap();
        assert_eq!(
            other.rtp_addr.port(),
            base,
            "the pinned pair is not handed out"
        );
        assert!(pool.bind_pair(IP, now).is_err());
        let outside = pool.bind_at(SocketAddr::new(IP, base + 6)).unwrap();
        assert_eq!(pool.in_use(), 6);
        give_back(&pool, outside, &[], now);
        give_back(&pool, inside, &[], now);
        give_back(&pool, other, &[], now);
        assert_eq!(pool.in_use(), 0);
        let a = pool.bind_pair(IP, now).unwrap();
        let b = pool.bind_pair(IP, now).unwrap();
        assert!(
            pool.bind_pair(IP, now).is_err(),
            "the pair outside the range was not queued"
        );
        give_back(&pool, a, &[], now);
        give_back(&pool, b, &[], now);
    }

    /// The pair freed longest ago is taken first, so a freed pair is taken again only after
    /// every other one; it carries its last leg's peers to its next leg until the quarantine
    /// ends, and a pair given back twice is queued once.
    #[test]
    fn a_freed_pair_comes_back_last_and_hands_its_peers_to_the_next_leg() {
        let base = free_range(6);
        let quarantine = Duration::from_secs(60);
        let pool = PortPool::new(base, base + 5, quarantine);
        let t0 = Instant::now();
        let x: SocketAddr = "192.0.2.10:4000".parse().unwrap();
        let a = pool.bind_pair(IP, t0).unwrap();
        let b = pool.bind_pair(IP, t0).unwrap();
        assert_eq!((a.rtp_addr.port(), b.rtp_addr.port()), (base, base + 2));
        assert_eq!(a.quarantine, Quarantine::default());
        let pa = give_back(&pool, a, &[x], t0);
        pool.release(pa, &[x], t0); // again: no effect
        give_back(&pool, b, &[], t0);
        // The pair never used comes first, then a's, then b's.
        let c = pool.bind_pair(IP, t0).unwrap();
        assert_eq!(c.rtp_addr.port(), base + 4);
        let again = pool.bind_pair(IP, t0 + Duration::from_secs(1)).unwrap();
        assert_eq!(again.rtp_addr.port(), base);
        assert_eq!(again.quarantine.sources, vec![x]);
        assert_eq!(again.quarantine.until, Some(t0 + quarantine));
        let b2 = pool.bind_pair(IP, t0).unwrap();
        assert_eq!(b2.rtp_addr.port(), base + 2);
        assert!(b2.quarantine.sources.is_empty());
        assert!(pool.bind_pair(IP, t0).is_err(), "three pairs, three legs");
        // After the quarantine, a pair's old peers are nobody's business.
        let y: SocketAddr = "192.0.2.11:4000".parse().unwrap();
        give_back(&pool, again, &[y], t0);
        give_back(&pool, c, &[], t0);
        give_back(&pool, b2, &[], t0);
        let late = pool.bind_pair(IP, t0 + quarantine).unwrap();
        assert_eq!(late.rtp_addr.port(), base);
        assert_eq!(late.quarantine, Quarantine::default());
        give_back(&pool, late, &[], t0);
        assert_eq!(pool.in_use(), 0);
    }
}
