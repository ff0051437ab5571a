//! Which worker owns a datagram's member, by source address and by ICE ufrag.
//!
//! Every worker reads datagrams from its own SO_REUSEPORT socket on the shared port; the kernel
//! picks the socket by a hash of the flow, not by room, so a datagram may arrive at a worker
//! whose shard does not own its member. A worker first asks its own shard; when the shard says
//! the datagram is not its, the directory answers which worker's is: by source address once ICE
//! has validated it, by the USERNAME's target ufrag of a STUN check before that. Workers keep
//! what they learn of the address map in a local cache (no lock per packet) and drop it when
//! the directory's generation moves (a member left, so an address may have changed hands). The
//! shards themselves report every route they gain or lose (`shard::Event`), and the worker
//! writes it here. The XDP filter, when one is attached, passes datagrams to the shared port
//! from exactly the addresses routed here (and STUN from anyone).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use super::xdp::Gate;

#[derive(Debug, Default)]
struct Maps {
    by_ufrag: HashMap<String, usize>,
    by_addr: HashMap<SocketAddr, usize>,
}

/// The shared directory: routes to workers.
#[derive(Debug, Default)]
pub(crate) struct Directory {
    maps: RwLock<Maps>,
    generation: AtomicU64,
    /// The XDP filter, told of every address that enters or leaves the address map.
    gate: Option<Arc<Gate>>,
}

impl Directory {
    /// A directory that tells `gate` (the XDP filter, if one is attached) which addresses it
    /// routes: those pass the filter on the shared port.
    pub fn new(gate: Option<Arc<Gate>>) -> Directory {
        Directory {
            gate,
            ..Directory::default()
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Maps> {
        // A worker that panicked while holding the lock left maps that are still consistent
        // (each update is one insert or remove), so a poisoned lock is used as is.
        self.maps.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Maps> {
        self.maps.write().unwrap_or_else(|e| e.into_inner())
    }

    /// The generation: changes whenever a route is removed or moves.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Routes a local ICE ufrag to `worker`.
    pub fn add_ufrag(&self, ufrag: &str, worker: usize) {
        self.write().by_ufrag.insert(ufrag.to_owned(), worker);
    }

    /// Routes a validated source address to `worker`; the worker that had it before, if
    /// another (its member must give it up: one remote address belongs to one member).
    pub fn add_addr(&self, addr: SocketAddr, worker: usize) -> Option<usize> {
        let mut m = self.write();
        let was = m.by_addr.insert(addr, worker);
        if let (None, Some(g)) = (was, &self.gate) {
            g.admit(addr);
        }
        let moved = was.filter(|old| *old != worker);
        if moved.is_some() {
            // The address moved to another worker: cached copies are stale.
            self.generation.fetch_add(1, Ordering::AcqRel);
        }
        moved
    }

    /// Removes the ufrags and addresses of a member of `worker`'s (an address that moved to
    /// another worker since stays routed there).
    pub fn remove(&self, ufrags: &[String], addrs: &[SocketAddr], worker: usize) {
        let mut m = self.write();
        for u in ufrags {
            m.by_ufrag.remove(u);
        }
        for a in addrs {
            if m.by_addr.get(a) == Some(&worker) {
                m.by_addr.remove(a);
                if let Some(g) = &self.gate {
                    g.revoke(*a);
                }
            }
        }
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// The worker that owns a source address.
    pub fn by_addr(&self, addr: &SocketAddr) -> Option<usize> {
        self.read().by_addr.get(addr).copied()
    }

    /// The worker that owns a local ufrag.
    pub fn by_ufrag(&self, ufrag: &str) -> Option<usize> {
        self.read().by_ufrag.get(ufrag).copied()
    }

    /// Numbers of registered ufrags and addresses (nothing left behind once everybody left).
    pub fn sizes(&self) -> (usize, usize) {
        let m = self.read();
        (m.by_ufrag.len(), m.by_addr.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_that_moves_names_its_old_worker_and_is_not_removed_by_it() {
        let d = Directory::default();
        let a: SocketAddr = "192.0.2.1:5000".parse().unwrap();
        assert_eq!(d.add_addr(a, 0), None);
        assert_eq!(d.add_addr(a, 0), None);
        let g = d.generation();
        assert_eq!(d.add_addr(a, 1), Some(0));
        assert_ne!(d.generation(), g, "cached routes are dropped");
        // Worker 0's member leaves: the address stays worker 1's.
        d.remove(&[], &[a], 0);
        assert_eq!(d.by_addr(&a), Some(1));
        d.remove(&[], &[a], 1);
        assert_eq!(d.sizes(), (0, 0));
    }
}
