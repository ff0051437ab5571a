//! The io_uring path of a worker's UDP sockets ([`secrelay_uring`]): the shared socket and
//! every telephony leg's port each have one multishot receive armed on the worker's ring, so
//! a turn reads what all of them brought from one completion queue, with no system call per
//! socket; what a batch sends, out of however many sockets, goes to the kernel in one
//! submission. Datagrams take the same walk as on the `recvmmsg` path ([`Worker::take`]); only
//! the reading and writing differ.

use std::sync::atomic::Ordering;
use std::time::Instant;

use secrelay_uring::{Completion, Ring};

use super::{record_relay_latency, Outbox, Worker, BATCH, BATCHES_PER_TURN};
use crate::counters::DropReason;
use crate::leg::Via;
use crate::shard::Shard;

/// The key the shared socket's receive is armed with (a leg's socket: its port).
const SHARED: u32 = 1 << 16;

/// A worker's ring (sends carry nothing to their completion).
pub(super) type MediaRing = Ring<()>;

/// The worker's ring with the shared socket armed (at the first submit, on the worker's
/// thread); `None`, logged, where the kernel refuses this worker a ring after all.
pub(super) fn ring_for(index: usize, socket: &mio::net::UdpSocket) -> Option<MediaRing> {
    match Ring::new(secrelay_uring::Config::default()) {
        Ok(mut r) => {
            r.arm(SHARED, socket);
            Some(r)
        }
        Err(e) => {
            tracing::warn!(
                worker = index,
                error = %e,
                "io_uring refused to this worker: it uses recvmmsg/sendmmsg"
            );
            None
        }
    }
}

/// Queues what `out` holds on `ring`, for `socket`; a datagram the ring cannot take is
/// dropped and counted.
fn queue(ring: &mut MediaRing, out: &mut Outbox, socket: &mio::net::UdpSocket, shard: &mut Shard) {
    let v6 = out.batch.is_v6();
    for (to, buf) in out.batch.drain() {
        if let Err((buf, ())) = ring.send(socket, to, v6, buf, ()) {
            shard.count_drop(DropReason::SendFailed);
            shard.recycle(buf);
        }
    }
}

/// Sends completed in one reap: each buffer back to the shard's pool, counted once for the
/// lot.
#[derive(Default)]
struct Sends {
    sent: u64,
    bytes: u64,
    failed: u64,
}

impl Sends {
    fn note(&mut self, shard: &mut Shard, result: std::io::Result<usize>, buf: Vec<u8>) {
        shard.recycle(buf);
        match result {
            Ok(n) => {
                self.sent += 1;
                self.bytes += n as u64;
            }
            Err(_) => self.failed += 1,
        }
    }

    fn count(self, w: &mut Worker) {
        if self.sent > 0 {
            w.stats
                .datagrams_out
                .fetch_add(self.sent, Ordering::Relaxed);
            w.stats.bytes_out.fetch_add(self.bytes, Ordering::Relaxed);
        }
        if self.failed > 0 {
            w.shard.count_drops(DropReason::SendFailed, self.failed);
        }
    }
}

impl Worker {
    /// Handles up to `BATCHES_PER_TURN` batches of completions: datagrams received (to the
    /// shard, then what it queued is sent, as after a `recvmmsg` batch) and sends done.
    pub(super) fn read_ring(&mut self) {
        // The ring is taken out of `self` while its datagrams go to the shard (which needs
        // `&mut self`; they are borrowed from the ring's buffers, not copied), and put back
        // before anything is sent.
        let Some(mut ring) = self.ring.take() else {
            return;
        };
        let mut done = std::mem::take(&mut self.completions);
        for _ in 0..BATCHES_PER_TURN {
            done.clear();
            ring.reap(&mut done, BATCH);
            if done.is_empty() {
                break;
            }
            let received = Instant::now();
            self.refresh_routes();
            let (mut read, mut read_bytes) = (0u64, 0u64);
            let mut sends = Sends::default();
            for c in done.drain(..) {
                match c {
                    Completion::Received(r) => {
                        let d = ring.payload(&r);
                        read += 1;
                        read_bytes += d.len() as u64;
                        let via = u16::try_from(r.key).map_or(Via::Shared, Via::Port);
                        self.take(via, r.from, d, received);
                        ring.recycle(&r);
                    }
                    Completion::Sent { result, buf, .. } => {
                        sends.note(&mut self.shard, result, buf);
                    }
                }
            }
            let st = &self.stats;
            st.datagrams_in.fetch_add(read, Ordering::Relaxed);
            st.bytes_in.fetch_add(read_bytes, Ordering::Relaxed);
            sends.count(self);
            self.wake_peers();
            self.ring = Some(ring);
            self.send_outputs();
            ring = self.ring.take().expect("put back just above");
        }
        self.completions = done;
        self.ring = Some(ring);
    }

    /// Queues everything the shared socket and the legs' sockets have to send and hands it
    /// to the kernel in one submission (which also re-arms receives and gives buffers back).
    pub(super) fn ring_flush(&mut self) {
        let Some(ring) = self.ring.as_mut() else {
            return;
        };
        queue(ring, &mut self.out, &self.socket, &mut self.shard);
        let dirty = std::mem::take(&mut self.dirty_legs);
        for p in &dirty {
            if let Some(l) = self.legs.get_mut(p) {
                queue(ring, &mut l.out, &l.socket, &mut self.shard);
            }
        }
        if let Err(e) = ring.submit() {
            tracing::error!(worker = self.index, error = %e, "io_uring submit");
        }
        // The sends just submitted have finished, as a rule: their buffers go back to the
        // pool now, still in cache, and the next batch's copies are written into them (left
        // for the next reap, the pool would hold a batch more of them, each cold by then).
        let mut sent = std::mem::take(&mut self.sent);
        ring.reap_sent(&mut sent);
        let mut sends = Sends::default();
        for c in sent.drain(..) {
            if let Completion::Sent { result, buf, .. } = c {
                sends.note(&mut self.shard, result, buf);
            }
        }
        self.sent = sent;
        sends.count(self);
        if self.out.origin.is_empty() && dirty.is_empty() {
            self.put_back_dirty(dirty);
            return;
        }
        let done = Instant::now();
        record_relay_latency(&self.stats, done, self.out.origin.drain(..).flatten());
        for p in &dirty {
            if let Some(l) = self.legs.get_mut(p) {
                record_relay_latency(&self.stats, done, l.out.origin.drain(..).flatten());
            }
        }
        self.put_back_dirty(dirty);
    }

    /// Gives the dirty-leg list back emptied, its allocation kept for the next batch.
    fn put_back_dirty(&mut self, mut dirty: Vec<u16>) {
        dirty.clear();
        self.dirty_legs = dirty;
    }
}
