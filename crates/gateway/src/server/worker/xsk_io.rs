//! The AF_XDP path of a worker ([`secrelay_xsk`]): the XDP filter hands the media ports'
//! admitted datagrams that come in on this worker's receive queue of each `xdp` interface to
//! the worker's XDP socket on that interface as raw frames, past the kernel's IP and UDP
//! layers and its socket lookups. The worker checks each
//! frame's headers ([`frame::parse`]: a frame is untrusted input; one that does not check out
//! is dropped and counted as `bad_frame`) and gives the datagram the same walk as one its
//! sockets read ([`Worker::take`]). What it sends goes out as frames it writes itself, to the
//! next hop's MAC address from the kernel's neighbour table (IPv4's or IPv6's, the family of
//! the socket's address), through the XDP socket of the interface the kernel's route to the
//! destination goes out of; a datagram the path cannot take (next hop not resolved yet, a
//! socket bound to any address, a route out of an interface without an XDP socket, every
//! transmit frame in flight) stays in its socket's queue
//! and is sent there (`sendmmsg`), which also makes the kernel resolve the next hop.
//!
//! The worker's sockets stay open and read as on the `mmsg` path: the filter passes to them
//! what it does not redirect (IP fragments, a leg's datagrams on another worker's queue).

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;
use std::time::Instant;

use secrelay_xsk::neigh::Neighbours;
use secrelay_xsk::{frame, Xsk};

use super::{record_relay_latency, Outbox, Worker, BATCH};
use crate::counters::DropReason;
use crate::leg::Via;
use crate::server::xdp::Gate;
use crate::shard::Shard;

/// The first XDP socket's descriptor (readable when frames wait); the socket on the worker's
/// `i`th interface is `XSK + i`.
pub(super) const XSK: usize = 1 << 18;

/// A worker's XDP socket on one interface and what writing frames needs.
pub(super) struct XskPath {
    xsk: Xsk,
    interface: String,
    neighbours: Neighbours,
    /// The interface's MAC address: every frame's source.
    mac: [u8; 6],
    queue: u32,
    gate: std::sync::Arc<Gate>,
}

impl Drop for XskPath {
    fn drop(&mut self) {
        // The filter stops handing the queue's datagrams to a socket that is gone.
        self.gate.unset_socket(&self.interface, self.queue);
    }
}

/// Worker `index`'s XDP sockets on receive queue `index` of each of `interfaces`, the filter
/// redirecting to them; none on an interface where the kernel refuses it (no such queue, no
/// AF_XDP), logged: the worker then reads its sockets for what comes in there.
pub(super) fn open_all(
    index: usize,
    interfaces: &[String],
    gate: &std::sync::Arc<Gate>,
) -> Vec<XskPath> {
    interfaces
        .iter()
        .take(secrelay_xdp::MAX_INTERFACES as usize)
        .filter_map(|i| open(index, i, gate))
        .collect()
}

/// Worker `index`'s XDP socket on `interface`'s receive queue `index`.
fn open(index: usize, interface: &str, gate: &std::sync::Arc<Gate>) -> Option<XskPath> {
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
    if let Err(e) = gate.set_socket(interface, queue, xsk.as_raw_fd()) {
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
        interface: interface.to_owned(),
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

    /// The next hop's MAC address for a frame from `local` to `to` when the kernel's route
    /// to `to` goes out of this interface and the hop is resolved.
    fn hop(&mut self, local: IpAddr, to: IpAddr, now: Instant) -> Option<[u8; 6]> {
        match (local, to) {
            (IpAddr::V4(_), IpAddr::V4(v4)) => self.neighbours.resolve(v4, now),
            (IpAddr::V6(_), IpAddr::V6(v6)) => self.neighbours.resolve_v6(v6, now),
            // A dual-stack socket's other family: the socket sends it.
            _ => None,
        }
    }
}

/// Writes what `out` holds as frames from `local`, those one of `paths` can take (each through
/// the interface its destination is routed out of; their buffers back to `shard`); leaves the
/// rest in `out` for the socket. How many it took and their bytes, and how many it left.
fn take_outbox(
    paths: &mut [XskPath],
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
    let mut last = out.xsk_hint;
    out.batch.take_where(
        |to, d| {
            let to = secrelay_uring::canonical(to);
            let mut order = std::iter::once(last).chain((0..paths.len()).filter(|&i| i != last));
            let Some((i, dst)) =
                order.find_map(|i| Some((i, paths.get_mut(i)?.hop(local.ip(), to.ip(), now)?)))
            else {
                return false;
            };
            last = i;
            let path = &mut paths[i];
            let macs = frame::Macs { src: path.mac, dst };
            let ok = path
                .xsk
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
    out.xsk_hint = last;
    [sent, bytes, queued - sent]
}

impl Worker {
    /// Handles up to `batches` batches of frames from the XDP socket on the worker's `i`th
    /// interface: `true` when more may wait.
    pub(super) fn read_xsk(&mut self, i: usize, batches: usize) -> bool {
        // Taken out of `self` while their frames go to the shard (which needs `&mut self`;
        // they are borrowed from the socket's memory, not copied), and put back before
        // sending.
        let mut paths = std::mem::take(&mut self.xsk);
        let shared = self.shared_local;
        for _ in 0..batches {
            let Some(path) = paths.get_mut(i) else {
                break;
            };
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
            self.xsk = paths;
            self.send_outputs();
            paths = std::mem::take(&mut self.xsk);
            if (n as usize) < BATCH {
                break;
            }
        }
        let more = paths.get(i).is_some_and(|p| p.xsk.readable());
        self.xsk = paths;
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
    /// paths can take, and hands them to the kernel; the rest stays queued for the sockets.
    pub(super) fn xsk_flush(&mut self) {
        if self.xsk.is_empty() {
            return;
        }
        let now = Instant::now();
        let mut total = [0u64; 3];
        let mut add = |c: [u64; 3]| {
            for (t, c) in total.iter_mut().zip(c) {
                *t += c;
            }
        };
        let paths = &mut self.xsk;
        if !self.out.batch.is_empty() {
            add(take_outbox(
                paths,
                &mut self.out,
                self.shared_local,
                now,
                &mut self.shard,
            ));
        }
        for p in &self.dirty_legs {
            if let Some(l) = self.legs.get_mut(p) {
                add(take_outbox(
                    paths,
                    &mut l.out,
                    l.local,
                    now,
                    &mut self.shard,
                ));
            }
        }
        let st = &self.stats;
        if total[2] > 0 {
            st.xsk_socket_sends.fetch_add(total[2], Ordering::Relaxed);
        }
        let mut flushed = false;
        for path in paths.iter_mut().filter(|p| p.xsk.backlog() > 0) {
            path.xsk.flush();
            flushed = true;
        }
        if total[0] == 0 && !flushed {
            return;
        }
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

    /// Publishes what the kernel counted at the XDP sockets.
    /// Left as it was when no socket answers.
    pub(super) fn publish_xsk(&self) {
        let dropped = self
            .xsk
            .iter()
            .filter_map(|p| p.xsk.statistics().ok())
            .map(|s| s.rx_dropped + s.rx_ring_full)
            .reduce(|a, b| a + b);
        if let Some(dropped) = dropped {
            self.stats
                .xsk_kernel_drops
                .store(dropped, Ordering::Relaxed);
        }
    }
}
