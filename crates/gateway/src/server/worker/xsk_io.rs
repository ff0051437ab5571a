//! The AF_XDP path of a worker ([`secrelay_xsk`]): the XDP filter hands the media ports'
//! admitted datagrams that come in on this worker's receive queue to its XDP socket as raw
//! frames, past the kernel's IP and UDP layers and its socket lookups. The worker checks each
//! frame's headers ([`frame::parse`]: a frame is untrusted input; one that does not check out
//! is dropped and counted as `bad_frame`) and gives the datagram the same walk as one its
//! sockets read ([`Worker::take`]). What it sends goes out as frames it writes itself, to the
//! next hop's MAC address from the kernel's neighbour table (IPv4's or IPv6's, the family of
//! the socket's address); a datagram the path cannot take (next hop not resolved yet, a
//! socket bound to any address, every transmit frame in flight) stays in its socket's queue
//! and is sent there (`sendmmsg`), which also makes the kernel resolve the next hop.
//!
//! The worker's sockets stay open and read as on the `mmsg` path: the filter passes to them
//! what it does not redirect (IP fragments, a leg's datagrams on another worker's queue).

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;
use std::time::Instant;

use mio::Token;
use secrelay_xsk::neigh::Neighbours;
use secrelay_xsk::{frame, Xsk};

use super::{record_relay_latency, Outbox, Worker, BATCH, BATCHES_PER_TURN};
use crate::counters::DropReason;
use crate::leg::Via;
use crate::server::xdp::Gate;
use crate::shard::Shard;

/// The XDP socket's descriptor (readable when frames wait).
pub(super) const XSK: Token = Token(1 << 18);

/// A worker's XDP socket and what writing frames needs.
pub(super) struct XskPath {
    xsk: Xsk,
    neighbours: Neighbours,
    /// The interface's MAC address: every frame's source.
    mac: [u8; 6],
    queue: u32,
    gate: std::sync::Arc<Gate>,
}

impl Drop for XskPath {
    fn drop(&mut self) {
        // The filter stops handing the queue's datagrams to a socket that is gone.
        self.gate.unset_socket(self.queue);
    }
}

/// Worker `index`'s XDP socket on `interface`'s receive queue `index`, the filter redirecting
/// to it; `None`, logged, where the kernel refuses it (no such queue, no AF_XDP): the worker
/// then reads its sockets.
pub(super) fn open(index: usize, interface: &str, gate: &std::sync::Arc<Gate>) -> Option<XskPath> {
    let queue = u32::try_from(index).ok()?;
    let opened = secrelay_xsk::hardware_address(interface).and_then(|mac| {
        let xsk = Xsk::open(interface, queue, secrelay_xsk::Config::default())?;
        Ok((mac, xsk))
    });
    let (mac, xsk) = match opened {
        Ok(x) => x,
        Err(e) => {
            tracing::warn!(worker = index, interface, error = %e, "no XDP socket for this worker: it reads its sockets (mmsg)");
            return None;
        }
    };
    if let Err(e) = gate.set_socket(queue, xsk.as_raw_fd()) {
        tracing::warn!(worker = index, interface, error = %e, "the XDP filter refused this worker's XDP socket: it reads its sockets (mmsg)");
        return None;
    }
    tracing::info!(
        worker = index,
        interface,
        queue,
        mode = xsk.mode().name(),
        "XDP socket open"
    );
    Some(XskPath {
        xsk,
        neighbours: Neighbours::new(interface),
        mac,
        queue,
        gate: gate.clone(),
    })
}

impl XskPath {
    /// The descriptor to poll.
    pub(super) fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.xsk.as_raw_fd()
    }

    /// The receive queue it is bound on (this worker's legs' ports are given to it).
    pub(super) fn queue(&self) -> u32 {
        self.queue
    }

    /// Writes what `out` holds as frames from `local`, those it can (their buffers back to
    /// `shard`); leaves the rest in `out` for the socket. How many it took and their bytes,
    /// and how many it left.
    fn take_outbox(
        &mut self,
        out: &mut Outbox,
        local: SocketAddr,
        now: Instant,
        shard: &mut Shard,
    ) -> [u64; 3] {
        let queued = out.batch.len() as u64;
        if local.ip().is_unspecified() {
            // No address to write as the frames' source (a socket bound to any).
            return [0, 0, queued];
        }
        let (mut sent, mut bytes) = (0u64, 0u64);
        let (xsk, neighbours, mac) = (&mut self.xsk, &mut self.neighbours, self.mac);
        out.batch.take_where(
            |to, d| {
                let to = secrelay_uring::canonical(to);
                let hop = match (local.ip(), to.ip()) {
                    (IpAddr::V4(_), IpAddr::V4(v4)) => neighbours.resolve(v4, now),
                    (IpAddr::V6(_), IpAddr::V6(v6)) => neighbours.resolve_v6(v6, now),
                    // A dual-stack socket's other family: the socket sends it.
                    _ => None,
                };
                let Some(dst) = hop else {
                    return false;
                };
                let macs = frame::Macs { src: mac, dst };
                let ok = xsk
                    .transmit(|f| frame::build(f, macs, local, to, d))
                    .is_ok();
                if ok {
                    sent += 1;
                    bytes += d.len() as u64;
                }
                ok
            },
            |buf| shard.recycle(buf),
        );
        [sent, bytes, queued - sent]
    }
}

impl Worker {
    /// Handles up to `BATCHES_PER_TURN` batches of frames from the XDP socket: `true` when
    /// more may wait.
    pub(super) fn read_xsk(&mut self) -> bool {
        // Taken out of `self` while its frames go to the shard (which needs `&mut self`; they
        // are borrowed from the socket's memory, not copied), and put back before sending.
        let Some(mut path) = self.xsk.take() else {
            return false;
        };
        let shared = self.shared_local;
        for _ in 0..BATCHES_PER_TURN {
            let received = Instant::now();
            self.refresh_routes();
            let (mut bytes, mut bad) = (0u64, 0u64);
            let n = path.xsk.receive(BATCH as u32, |f| match frame::parse(f) {
                Ok(u) => match self.via_of(shared, u.dst) {
                    Some(via) => {
                        let d = f.get(u.payload).unwrap_or_default();
                        bytes += d.len() as u64;
                        self.take(via, Some(u.src), d, received);
                    }
                    None => bad += 1,
                },
                Err(e) => {
                    tracing::trace!(worker = self.index, error = %e, "frame dropped");
                    bad += 1;
                }
            });
            if n == 0 {
                break;
            }
            let st = &self.stats;
            st.datagrams_in.fetch_add(u64::from(n), Ordering::Relaxed);
            st.bytes_in.fetch_add(bytes, Ordering::Relaxed);
            if bad > 0 {
                self.shard.count_drops(DropReason::BadFrame, bad);
            }
            self.wake_peers();
            self.xsk = Some(path);
            self.send_outputs();
            path = self.xsk.take().expect("put back just above");
            if (n as usize) < BATCH {
                break;
            }
        }
        let more = path.xsk.readable();
        self.xsk = Some(path);
        more
    }

    /// The socket a datagram to `dst` would have been read on: the shared one, or a leg's
    /// own; `None` for an address no socket of this worker is bound on.
    fn via_of(&self, shared: SocketAddr, dst: SocketAddr) -> Option<Via> {
        if dst == shared {
            return Some(Via::Shared);
        }
        let leg = self.legs.get(&dst.port())?;
        (leg.local == dst).then_some(Via::Port(dst.port()))
    }

    /// Writes what the shared socket and the legs' sockets have queued as frames, those the
    /// path can take, and hands them to the kernel; the rest stays queued for the sockets.
    pub(super) fn xsk_flush(&mut self) {
        let Some(path) = self.xsk.as_mut() else {
            return;
        };
        let now = Instant::now();
        let mut total = [0u64; 3];
        let mut add = |c: [u64; 3]| {
            for (t, c) in total.iter_mut().zip(c) {
                *t += c;
            }
        };
        if !self.out.batch.is_empty() {
            add(path.take_outbox(&mut self.out, self.shared_local, now, &mut self.shard));
        }
        for p in &self.dirty_legs {
            if let Some(l) = self.legs.get_mut(p) {
                add(path.take_outbox(&mut l.out, l.local, now, &mut self.shard));
            }
        }
        let st = &self.stats;
        if total[2] > 0 {
            st.xsk_socket_sends.fetch_add(total[2], Ordering::Relaxed);
        }
        if total[0] == 0 && path.xsk.backlog() == 0 {
            return;
        }
        path.xsk.flush();
        let done = Instant::now();
        st.datagrams_out.fetch_add(total[0], Ordering::Relaxed);
        st.bytes_out.fetch_add(total[1], Ordering::Relaxed);
        // Every copy's latency is taken at the frames' hand-over (those left for the socket
        // go out right after, in the same turn).
        record_relay_latency(st, done, self.out.origin.drain(..).flatten());
        for p in &self.dirty_legs {
            if let Some(l) = self.legs.get_mut(p) {
                record_relay_latency(st, done, l.out.origin.drain(..).flatten());
            }
        }
    }

    /// Publishes what the kernel counted at the XDP socket.
    pub(super) fn publish_xsk(&self) {
        if let Some(Ok(s)) = self.xsk.as_ref().map(|p| p.xsk.statistics()) {
            self.stats
                .xsk_kernel_drops
                .store(s.rx_dropped + s.rx_ring_full, Ordering::Relaxed);
        }
    }
}
