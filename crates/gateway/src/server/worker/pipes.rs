//! Rooms spread over workers: the pipes between this worker's shard and the others'
//! (`secrelay_core::shard`'s pipe module says what each side does). A piped packet travels
//! in the shard's own buffer on a queue of the receiving worker's (no copy on the way; the
//! buffer goes back to the worker it came from), woken once per batch like a hand-off; what
//! the shard asks of another worker's shard ([`PipeEvent`]) is posted to that worker's
//! command queue, which keeps the order this worker decided it in.

use std::sync::atomic::Ordering;
use std::time::Instant;

use secrelay_wire::sdp::Offer;
use tokio::sync::oneshot;

use super::{Command, SendBatch, Work, Worker, BATCH};
use crate::counters::DropReason;
use crate::leg::MirrorSpec;
use crate::server::node_pipes::{self, Control};
use crate::shard::{Handled, JoinError, JoinKind, Joined, PipeEvent, PipeKey, Piped, Who};

/// A packet through a pipe, in the sending shard's buffer (or, from another node, in one of
/// its own).
#[derive(Debug)]
pub(crate) struct PipeMsg {
    key: PipeKey,
    what: Piped,
    buf: Vec<u8>,
    /// The worker whose buffer it is (it goes back there), if one of this node's.
    origin: Option<usize>,
}

impl PipeMsg {
    /// What another node piped here (`key` as this node's shards know it).
    pub(crate) fn from_node(key: PipeKey, what: Piped, buf: Vec<u8>) -> PipeMsg {
        PipeMsg {
            key,
            what,
            buf,
            origin: None,
        }
    }
}

/// A worker's datagrams for other nodes: sealed as the shard pipes them, sent together
/// (`sendmmsg`) when the worker sends the rest of its turn's output; their buffers kept.
#[derive(Debug, Default)]
pub(crate) struct NodeOut {
    batch: Option<SendBatch>,
    spare: Vec<Vec<u8>>,
    links: node_pipes::LinkCache,
}

impl Worker {
    /// Queues what the shard piped (`key`, `what`, in `buf`, the shard's buffer) for
    /// `worker`'s shard (woken once the batch is out), or sends it over the link when
    /// `worker` is another node's; a full queue, or a link that is gone, drops it, counted.
    pub(super) fn pipe_to(&mut self, worker: usize, key: PipeKey, what: Piped, buf: Vec<u8>) {
        if node_pipes::split(worker).is_some() {
            self.pipe_to_node(worker, (key, what), &buf);
            self.shard.recycle(buf);
            return;
        }
        let m = PipeMsg {
            key,
            what,
            buf,
            origin: Some(self.index),
        };
        match self.shared.peers[worker].pipes.try_send(m) {
            Ok(()) => {
                self.stats.piped.fetch_add(1, Ordering::Relaxed);
                self.wake_pending[worker] = true;
            }
            Err(m) => {
                self.shard.recycle(m.buf);
                self.shard.count_drop(DropReason::HandoffQueueFull);
            }
        }
    }

    /// Seals what the shard piped for another node's worker `to` into the node batch (sent
    /// with the turn's output, [`Worker::node_flush`]); a link that is gone drops it, counted.
    fn pipe_to_node(&mut self, to: usize, (key, what): (PipeKey, Piped), packet: &[u8]) {
        let Some(p) = self.shared.node_pipes.get() else {
            return self.shard.count_drop(DropReason::SendFailed);
        };
        let out = &mut self.node_out;
        let mut d = out.spare.pop().unwrap_or_default();
        match p.seal((to, &mut out.links), (key, what), packet, &mut d) {
            Some(dest) => {
                out.batch
                    .get_or_insert_with(|| SendBatch::for_socket(p.socket()))
                    .push(dest, d);
                self.stats.piped.fetch_add(1, Ordering::Relaxed);
            }
            None => {
                out.spare.push(d);
                self.shard.count_drop(DropReason::SendFailed);
            }
        }
    }

    /// Sends the datagrams sealed for other nodes this turn, together.
    pub(super) fn node_flush(&mut self) {
        let out = &mut self.node_out;
        let (Some(batch), Some(p)) = (out.batch.as_mut(), self.shared.node_pipes.get()) else {
            return;
        };
        if batch.is_empty() {
            return;
        }
        let spare = &mut out.spare;
        let done = batch.flush(p.socket(), |d| spare.push(d));
        p.counted_sends(done.sent as u64, done.failed as u64);
    }

    /// Takes what other workers' shards piped here: packets for the replicas' mirrors, and
    /// mirrors' feedback for the publishers of the rooms whose home this is.
    pub(super) fn take_pipes(&mut self) {
        let mut n: usize = 0;
        while let Ok(mut m) = self.inbox.pipes.try_recv() {
            let now = Instant::now();
            let handled = match m.what {
                Piped::Media(packet) => self.shard.handle_piped(now, m.key, packet, &mut m.buf),
                Piped::Feedback => self.shard.handle_pipe_feedback(now, m.key, &m.buf),
            };
            if handled == Handled::NotOurs {
                // The mirror (or the publisher) went between the two workers.
                self.shard.count_drop(DropReason::UnknownSource);
            }
            match m.origin {
                Some(o) => {
                    let _ = self.shared.peers[o].returns.send(m.buf);
                }
                // Another node's, read by the pipes' reader: back there.
                None => match self.shared.node_pipes.get() {
                    Some(p) => p.give_back(m.buf),
                    None => self.shard.recycle(m.buf),
                },
            }
            n += 1;
            if n.is_multiple_of(BATCH) {
                self.send_outputs();
            }
        }
        if n > 0 {
            self.send_outputs();
        }
    }

    /// Posts what the shard asked of another worker's shard there (over the link, when that
    /// worker is another node's).
    pub(super) fn on_pipe_event(&mut self, e: PipeEvent) {
        let me = self.index;
        match e {
            PipeEvent::Publisher { room, to, spec } => {
                for w in to {
                    if self.tell_node(w, |worker| Control::Publisher {
                        room: room.clone(),
                        worker,
                        spec: spec.clone(),
                    }) {
                        continue;
                    }
                    let (room, spec) = (room.clone(), spec.clone());
                    self.post(w, move |w, now| w.shard.add_mirror(now, &room, &spec));
                }
            }
            PipeEvent::PublisherLeft { to, key } => {
                for w in to {
                    if !self.tell_node(w, |worker| Control::PublisherLeft { worker, key }) {
                        self.post(w, move |w, now| w.shard.remove_mirror(now, key));
                    }
                }
            }
            PipeEvent::Closed { room, to } => {
                if !self.tell_node(to, |worker| Control::Closed {
                    room: room.clone(),
                    worker,
                }) {
                    self.post(to, move |w, now| w.shard.close_replica(now, &room));
                }
            }
            PipeEvent::Data { room, to, msgs } => {
                for w in to {
                    if node_pipes::split(w).is_some() {
                        if let Some(p) = self.shared.node_pipes.get() {
                            p.tell_data(w, &room, me, &msgs);
                        }
                        continue;
                    }
                    let (room, msgs) = (room.clone(), msgs.clone());
                    self.post(w, move |w, now| {
                        w.shard.handle_piped_data(now, &room, me, msgs);
                    });
                }
            }
            PipeEvent::ViewerLeft { room, home } => {
                let worker = u16::try_from(me).unwrap_or(u16::MAX);
                if !self.tell_node(home, |home| Control::ViewerLeft {
                    room: room.clone(),
                    home,
                    worker,
                }) {
                    self.post(home, move |w, _| w.shard.detach_pipe(&room, me));
                }
            }
        }
    }

    /// Tells another node's worker `to` the message `msg` makes of its number there; `false`
    /// when `to` is this node's.
    fn tell_node(&self, to: usize, msg: impl FnOnce(u16) -> Control) -> bool {
        if node_pipes::split(to).is_none() {
            return false;
        }
        if let Some(p) = self.shared.node_pipes.get() {
            p.tell(to, msg);
        }
        true
    }

    /// Another node's viewer of `room` joins at its worker `remote` (an index of
    /// [`node_pipes::remote_worker`]'s), asked of this, the room's worker: this worker's
    /// number (the home's, as the other node names it) and the room's publishers, as
    /// [`crate::shard::Shard::attach_pipe`] answers.
    pub(crate) fn attach_remote(
        &mut self,
        room: &str,
        remote: usize,
        who: &Who,
    ) -> (u16, Result<Option<Vec<MirrorSpec>>, JoinError>) {
        let home = u16::try_from(self.index).unwrap_or(u16::MAX);
        (home, self.shard.attach_pipe(room, remote, who))
    }

    /// Opens the replica of `room` whose home is another node's worker `home` with the
    /// publishers `specs`, and joins the viewer of `offer` there (its answer).
    pub(crate) fn join_replica(
        &mut self,
        now: Instant,
        room: &str,
        home: usize,
        specs: &[MirrorSpec],
        (offer, who): (&Offer, &Who),
    ) -> Result<Joined, JoinError> {
        self.shard.open_replica(now, room, home, specs);
        self.shard.join(now, room, offer, JoinKind::Whep, who)
    }

    /// A viewer of `room` (its offer and who it is) joins on worker `at`, asked of this, the
    /// room's worker: a pipe is attached to `at`, and `at` is told to open its replica with
    /// the room's publishers and make the viewer there, in one command (the join's answer on
    /// `reply`). When the room is not here yet or mixes, the viewer joins here.
    pub(crate) fn join_viewer(
        &mut self,
        now: Instant,
        room: &str,
        at: usize,
        (offer, who): (Offer, Who),
        reply: oneshot::Sender<Result<Joined, JoinError>>,
    ) {
        let specs = match self.shard.attach_pipe(room, at, &who) {
            Ok(Some(specs)) => specs,
            Ok(None) => {
                let r = self.shard.join(now, room, &offer, JoinKind::Whep, &who);
                // Its routes are written before the answer (its first check finds them).
                self.after_command();
                let _ = reply.send(r);
                return;
            }
            Err(e) => {
                let _ = reply.send(Err(e));
                return;
            }
        };
        let (home, room) = (self.index, room.to_owned());
        self.post(at, move |w, now| {
            w.shard.open_replica(now, &room, home, &specs);
            let r = w.shard.join(now, &room, &offer, JoinKind::Whep, &who);
            match &r {
                Ok(j) => {
                    w.shared
                        .placed
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(j.id.clone(), w.index);
                }
                Err(_) => {
                    let me = w.index;
                    w.post(home, move |w, _| w.shard.detach_pipe(&room, me));
                }
            }
            w.after_command();
            let _ = reply.send(r);
        });
    }

    /// Runs `f` on `worker`'s thread after what is queued there already (no reply).
    pub(crate) fn post(
        &self,
        worker: usize,
        f: impl FnOnce(&mut Worker, Instant) + Send + 'static,
    ) {
        let work: Work = Box::new(move |w, now| {
            f(w, now);
            w.after_command();
        });
        let peer = &self.shared.peers[worker];
        if peer.commands.send(Command::Run(work)).is_ok() {
            let _ = peer.waker.wake();
        }
    }
}
