//! Which worker owns which participant, by ICE username fragment and by source address.
//!
//! Every worker reads datagrams from its own SO_REUSEPORT socket on the shared port; the kernel
//! picks the socket by a hash of the flow, not by room, so a datagram may arrive at a worker
//! that does not own its participant. The directory answers "who owns this": by source address
//! once ICE has validated it, by the USERNAME of a STUN check before that. Workers keep a local
//! copy of the address map (no lock per packet) and drop it when the directory's generation
//! moves (a participant left, so an address may have changed hands).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::RwLock;

use crate::room::MemberId;

/// Where a participant lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Route {
    /// The worker that owns it.
    pub worker: usize,
    /// Its room's slot in that worker.
    pub slot: usize,
    /// The room's incarnation in that slot (slots are reused).
    pub room_gen: u64,
    /// The member in the room.
    pub member: MemberId,
}

#[derive(Debug, Default)]
struct Maps {
    by_ufrag: HashMap<String, Route>,
    by_addr: HashMap<SocketAddr, Route>,
}

/// The shared directory.
#[derive(Debug, Default)]
pub struct Directory {
    maps: RwLock<Maps>,
    generation: AtomicU64,
}

impl Directory {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, Maps> {
        // A worker that panicked while holding the lock left maps that are still consistent
        // (each update is one insert or remove), so a poisoned lock is used as is.
        self.maps.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Maps> {
        self.maps.write().unwrap_or_else(|e| e.into_inner())
    }

    /// The generation: changes whenever a route is removed.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Registers a participant's local ICE ufrag.
    pub fn add_ufrag(&self, ufrag: &str, route: Route) {
        self.write().by_ufrag.insert(ufrag.to_owned(), route);
    }

    /// Registers a validated source address.
    pub fn add_addr(&self, addr: SocketAddr, route: Route) {
        let mut m = self.write();
        if m.by_addr
            .insert(addr, route)
            .is_some_and(|old| old != route)
        {
            // The address moved to another participant: cached copies are stale.
            self.generation.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// Removes a participant's ufrag and addresses.
    pub fn remove(&self, ufrags: &[String], addrs: &[SocketAddr]) {
        let mut m = self.write();
        for u in ufrags {
            m.by_ufrag.remove(u);
        }
        for a in addrs {
            m.by_addr.remove(a);
        }
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// The owner of a source address.
    pub fn by_addr(&self, addr: &SocketAddr) -> Option<Route> {
        self.read().by_addr.get(addr).copied()
    }

    /// The owner of a local ufrag.
    pub fn by_ufrag(&self, ufrag: &str) -> Option<Route> {
        self.read().by_ufrag.get(ufrag).copied()
    }

    /// Numbers of registered ufrags and addresses (for tests: nothing left behind).
    pub fn sizes(&self) -> (usize, usize) {
        let m = self.read();
        (m.by_ufrag.len(), m.by_addr.len())
    }
}

/// The local ufrag a STUN Binding request is addressed to: the part of its USERNAME before the
/// colon (RFC 8445 §7.2.2: `<receiver ufrag>:<sender ufrag>`). `None` for anything else.
pub fn stun_target_ufrag(datagram: &[u8]) -> Option<&str> {
    let msg = secrelay_wire::stun::Message::parse(datagram).ok()?;
    let user = msg.username()?;
    let user = std::str::from_utf8(user).ok()?;
    user.split_once(':').map(|(ours, _)| ours)
}
