//! Local ports for telephony legs: an even port for RTP and the next one for RTCP, from the
//! configured range, shared by every worker (a leg's sockets belong to the worker that owns
//! its room). A port another process holds is skipped; ports come back when their leg ends.

use std::collections::HashSet;
use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::Mutex;

use super::udp::bind_leg;

/// The pool.
#[derive(Debug)]
pub(crate) struct PortPool {
    lo: u16,
    hi: u16,
    inner: Mutex<Inner>,
}

#[derive(Debug)]
struct Inner {
    next: u16,
    used: HashSet<u16>,
}

/// Two bound sockets: RTP on an even port, RTCP on the next.
pub(crate) struct Pair {
    pub rtp: UdpSocket,
    pub rtcp: UdpSocket,
    pub rtp_addr: SocketAddr,
    pub rtcp_addr: SocketAddr,
}

impl PortPool {
    /// Ports `lo..=hi` (the first even one on).
    pub fn new(lo: u16, hi: u16) -> PortPool {
        let first = lo + lo % 2;
        PortPool {
            lo: first,
            hi,
            inner: Mutex::new(Inner {
                next: first,
                used: HashSet::new(),
            }),
        }
    }

    /// Binds the next free pair on `ip`. Err: the range is exhausted (every pair in use here or
    /// held by another process).
    pub fn bind_pair(&self, ip: IpAddr) -> io::Result<Pair> {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let pairs = (u32::from(self.hi) + 1 - u32::from(self.lo)) / 2;
        for _ in 0..pairs {
            let p = g.next;
            g.next = if u32::from(p) + 3 > u32::from(self.hi) {
                self.lo
            } else {
                p + 2
            };
            if g.used.contains(&p) || g.used.contains(&(p + 1)) {
                continue;
            }
            let (Ok(rtp), Ok(rtcp)) = (
                bind_leg(SocketAddr::new(ip, p)),
                bind_leg(SocketAddr::new(ip, p + 1)),
            ) else {
                // Held by someone else: try the next pair.
                continue;
            };
            g.used.insert(p);
            g.used.insert(p + 1);
            return Ok(Pair {
                rtp_addr: SocketAddr::new(ip, p),
                rtcp_addr: SocketAddr::new(ip, p + 1),
                rtp,
                rtcp,
            });
        }
        Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            format!(
                "no free port pair in rtp_ports {}-{} on {ip}",
                self.lo, self.hi
            ),
        ))
    }

    /// Gives a port back.
    pub fn release(&self, port: u16) {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .used
            .remove(&port);
    }

    /// Ports in use (nothing left behind once every leg ended).
    pub fn in_use(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .used
            .len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_are_even_and_odd_skip_busy_ports_and_come_back() {
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        // Find a free range of 6 ports, hold its first pair from outside.
        let probe = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let base = probe.local_addr().unwrap().port() & !1;
        drop(probe);
        let pool = PortPool::new(base, base + 5);
        let outside = std::net::UdpSocket::bind((ip, base));
        let a = pool.bind_pair(ip).unwrap();
        assert_eq!(a.rtp_addr.port() % 2, 0);
        assert_eq!(a.rtcp_addr.port(), a.rtp_addr.port() + 1);
        if outside.is_ok() {
            assert_ne!(a.rtp_addr.port(), base, "a port held elsewhere is skipped");
        }
        let b = pool.bind_pair(ip);
        assert_eq!(pool.in_use(), if b.is_ok() { 4 } else { 2 });
        let (pa, pb) = (
            a.rtp_addr.port(),
            b.as_ref().map(|b| b.rtp_addr.port()).ok(),
        );
        drop((a, b));
        pool.release(pa);
        pool.release(pa + 1);
        if let Some(pb) = pb {
            pool.release(pb);
            pool.release(pb + 1);
        }
        assert_eq!(pool.in_use(), 0);
        drop(outside);
    }
}
