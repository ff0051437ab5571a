//! A packet worker: one thread, one SO_REUSEPORT socket on the shared media port, the rooms
//! hashed to it, and the timers of their participants.
//!
//! The loop: wait (mio) for the socket, a wake from the control plane or another worker, or
//! the earliest participant deadline; then take commands, then datagrams handed over by other
//! workers, then read the socket in `recvmmsg` batches, hand each datagram to its room (or to
//! the worker that owns it), send what the rooms queued in `sendmmsg` batches, and fire timers.
//! Nothing on the packet path takes a lock or allocates in steady state: routes are cached per
//! worker, handed-over buffers go back to the worker they came from, and the rooms and
//! participants recycle their own buffers.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, TryRecvError};
use mio::{Events, Interest, Poll, Token, Waker};
use secrelay_dtls::LocalCertificate;
use secrelay_srtp::{Engine, Profile};
use secrelay_wire::rtp::{classify, PacketKind};
use secrelay_wire::sdp::Offer;
use tokio::sync::oneshot;

use super::directory::{stun_target_ufrag, Directory, Route};
use super::stats::WorkerStats;
use super::udp::{Flushed, RecvBatch, SendBatch, BATCH};
use crate::ice_lite::Credentials;
use crate::media_batch::{walk, MediaBatch, Rooms, Staged};
use crate::participant::{
    CloseReason, Event, Output, Participant, ParticipantConfig, ParticipantCounters,
};
use crate::room::{MemberId, MemberRole, Room, RoomOutput};

const SOCKET: Token = Token(0);
const WAKER: Token = Token(1);
/// Socket batches read before the loop looks at commands and timers again.
const BATCHES_PER_TURN: usize = 16;
/// How often the per-participant counters are summed into the worker's stats.
const PUBLISH_EVERY: Duration = Duration::from_millis(200);
/// Datagrams queued at a worker by the others before new ones are dropped.
pub const HANDOFF_QUEUE: usize = 65_536;

/// What kind of leg a participant is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LegKind {
    /// Publishes with WHIP.
    Whip,
    /// Subscribes with WHEP.
    Whep,
    /// Joined a conference: sends and receives.
    Join,
}

impl LegKind {
    fn role(self) -> MemberRole {
        match self {
            LegKind::Whip => MemberRole::PUBLISHER,
            LegKind::Whep => MemberRole::SUBSCRIBER,
            LegKind::Join => MemberRole::BOTH,
        }
    }
}

/// A participant as the API shows it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ParticipantSnapshot {
    /// Its id (the last segment of its resource URL).
    pub id: String,
    /// WHIP, WHEP or join.
    pub kind: LegKind,
    /// `new`, `connected` or the reason it is closing.
    pub state: String,
    /// The negotiated SRTP profile, once connected.
    pub srtp_profile: Option<String>,
    /// SRTP/SRTCP packets received and unprotected.
    pub packets_in: u64,
    /// Their bytes.
    pub bytes_in: u64,
    /// SRTP/SRTCP packets protected and sent.
    pub packets_out: u64,
    /// Their bytes.
    pub bytes_out: u64,
    /// Packets dropped for a wrong authentication tag.
    pub auth_failures: u64,
    /// Packets dropped as replays.
    pub replays: u64,
    /// DTLS handshake time in milliseconds, once connected.
    pub handshake_ms: Option<f64>,
    /// Seconds since it joined.
    pub age_secs: f64,
}

/// A room as the API shows it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RoomSnapshot {
    /// Its name.
    pub name: String,
    /// Media packets received from publishers.
    pub routed_in: u64,
    /// Copies sent to receivers.
    pub forwarded: u64,
    /// Its participants.
    pub participants: Vec<ParticipantSnapshot>,
}

/// A participant made from an offer.
#[derive(Debug, Clone)]
pub struct Joined {
    /// Its id.
    pub id: String,
    /// The answer SDP.
    pub answer: String,
    /// Our ICE credentials (the answer's), for ICE restarts and ETags.
    pub ice: Credentials,
}

/// Why an offer was not taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JoinError {
    /// The offer cannot be answered (the reason).
    Unacceptable(String),
    /// The gateway is shutting down.
    ShuttingDown,
}

/// A request from the control plane.
#[derive(Debug)]
pub enum Command {
    /// Make a participant for an offer in a room.
    Join {
        /// The room.
        room: String,
        /// The parsed offer.
        offer: Box<Offer>,
        /// What kind of leg.
        kind: LegKind,
        /// The answer.
        reply: oneshot::Sender<Result<Joined, JoinError>>,
    },
    /// End a participant (close_notify); replies whether it existed.
    Leave {
        /// The room.
        room: String,
        /// The participant.
        id: String,
        /// The answer.
        reply: oneshot::Sender<bool>,
    },
    /// ICE restart with the peer's new credentials; replies our new ones.
    IceRestart {
        /// The room.
        room: String,
        /// The participant.
        id: String,
        /// The peer's new credentials.
        remote: Credentials,
        /// Our new credentials, `None` for an unknown participant.
        reply: oneshot::Sender<Option<Credentials>>,
    },
    /// The rooms (one room, or all of them).
    Snapshot {
        /// Only this room.
        room: Option<String>,
        /// The answer.
        reply: oneshot::Sender<Vec<RoomSnapshot>>,
    },
    /// Stop admitting, close every participant with close_notify, send what is queued.
    Drain {
        /// Sent when done.
        reply: oneshot::Sender<()>,
    },
    /// End the thread.
    Stop,
}

/// A datagram received by one worker for a participant another worker owns.
#[derive(Debug)]
pub struct Handoff {
    from: SocketAddr,
    route: Route,
    buf: Vec<u8>,
    received: Instant,
    origin: usize,
}

/// How workers reach one another.
#[derive(Debug, Clone)]
pub struct Peer {
    /// Commands.
    pub commands: Sender<Command>,
    /// Datagrams handed over.
    pub handoffs: Sender<Handoff>,
    /// Buffers coming back after a handoff.
    pub returns: Sender<Vec<u8>>,
    /// Wakes the worker's poll.
    pub waker: Arc<Waker>,
}

/// What every worker shares.
pub struct Shared {
    /// Our certificate.
    pub certificate: LocalCertificate,
    /// The participants' configuration.
    pub participant: ParticipantConfig,
    /// Who owns what.
    pub directory: Directory,
    /// All the workers, by index.
    pub peers: Vec<Peer>,
    /// Ids of participants that ended (for any reason), for the HTTP side to forget their
    /// resources; appended on removal, taken by the control plane.
    pub ended: std::sync::Mutex<Vec<String>>,
}

impl Shared {
    fn ended(&self, id: &str) {
        self.ended
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(id.to_owned());
    }

    /// Takes the ids of the participants that ended since the last call.
    pub fn take_ended(&self) -> Vec<String> {
        std::mem::take(&mut *self.ended.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

struct Meta {
    id: String,
    kind: LegKind,
    ufrags: Vec<String>,
    addrs: Vec<SocketAddr>,
    profile: Option<Profile>,
    connected: bool,
    closing: Option<String>,
    created: Instant,
}

struct RoomSlot {
    name: String,
    room_gen: u64,
    room: Room,
    members: HashMap<MemberId, Meta>,
    deadline: Option<Instant>,
}

/// A worker's state. Built by the server, run with [`Worker::run`].
pub struct Worker {
    index: usize,
    socket: mio::net::UdpSocket,
    poll: Poll,
    shared: Arc<Shared>,
    stats: Arc<WorkerStats>,
    commands: Receiver<Command>,
    handoffs: Receiver<Handoff>,
    returns: Receiver<Vec<u8>>,
    rooms: Vec<Option<RoomSlot>>,
    room_index: HashMap<String, usize>,
    ids: HashMap<String, (usize, MemberId)>,
    next_gen: u64,
    heap: BinaryHeap<Reverse<(Instant, usize, u64)>>,
    routes: HashMap<SocketAddr, Route>,
    routes_gen: u64,
    recv: Option<RecvBatch>,
    send: SendBatch,
    /// The receive instant of the media copies queued in `send`, one per queued datagram
    /// (`None` for datagrams that are not forwarded media).
    send_origin: Vec<Option<Instant>>,
    /// Handed-over datagram buffers to reuse.
    spare: Vec<Vec<u8>>,
    /// Counters of participants that have left, so totals never go down.
    retired: ParticipantCounters,
    retired_routed: u64,
    retired_forwarded: u64,
    retired_no_codec: u64,
    retired_unslotted: u64,
    retired_not_ready: u64,
    draining: bool,
    last_publish: Instant,
    /// Members that closed, to remove once their last datagrams are queued.
    to_remove: Vec<(usize, MemberId)>,
    /// Workers handed a datagram in this batch, to wake once it is read.
    wake_pending: Vec<bool>,
    /// The receive batch's SRTP media, unprotected in one engine call, and the copies routed
    /// from it, protected in another (see `crate::media_batch`).
    media: MediaBatch,
    /// Copies taken from a room, on their way into `media`.
    copies: Vec<(MemberId, Vec<u8>)>,
}

/// The worker's rooms as the media batch sees them.
struct SlotRooms<'r>(&'r mut [Option<RoomSlot>]);

impl Rooms for SlotRooms<'_> {
    fn rooms_at<'a>(&'a mut self, slots: &[usize], out: &mut Vec<Option<&'a mut Room>>) {
        walk(self.0.iter_mut(), slots, out, |s| {
            s.as_mut().map(|s| &mut s.room)
        });
    }
}

/// The receiving ends of a worker's channels.
pub struct Inbox {
    /// Commands.
    pub commands: Receiver<Command>,
    /// Handoffs.
    pub handoffs: Receiver<Handoff>,
    /// Returned buffers.
    pub returns: Receiver<Vec<u8>>,
}

/// A worker's channels and poll, made before the thread starts so that every worker can know
/// every other.
pub fn channels() -> std::io::Result<(Peer, Inbox, Poll)> {
    let poll = Poll::new()?;
    let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
    let (ctx, crx) = crossbeam_channel::unbounded();
    let (htx, hrx) = crossbeam_channel::bounded(HANDOFF_QUEUE);
    let (rtx, rrx) = crossbeam_channel::unbounded();
    Ok((
        Peer {
            commands: ctx,
            handoffs: htx,
            returns: rtx,
            waker,
        },
        Inbox {
            commands: crx,
            handoffs: hrx,
            returns: rrx,
        },
        poll,
    ))
}

fn route_to(worker: usize, slot: usize, room_gen: u64, member: MemberId) -> Route {
    Route {
        worker,
        slot,
        room_gen,
        member,
    }
}

fn random_id() -> String {
    let mut b = [0u8; 9];
    getrandom::fill(&mut b).expect("the OS random source works");
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn close_label(r: &CloseReason) -> &'static str {
    match r {
        CloseReason::ConsentExpired => "consent_expired",
        CloseReason::DtlsFailed(_) => "dtls_failed",
        CloseReason::FingerprintMismatch => "fingerprint_mismatch",
        _ => "close_notify",
    }
}

fn add_counters(into: &mut ParticipantCounters, c: &ParticipantCounters) {
    into.packets_in += c.packets_in;
    into.bytes_in += c.bytes_in;
    into.packets_out += c.packets_out;
    into.bytes_out += c.bytes_out;
    into.stun_in += c.stun_in;
    into.stun_rejected += c.stun_rejected;
    into.dtls_in += c.dtls_in;
    into.auth_failures += c.auth_failures;
    into.replays += c.replays;
    into.malformed += c.malformed;
    into.unknown += c.unknown;
    into.unvalidated_source += c.unvalidated_source;
    into.before_keys += c.before_keys;
    into.after_close += c.after_close;
    into.send_refused += c.send_refused;
}

impl Worker {
    /// A worker on `socket`.
    pub fn new(
        index: usize,
        socket: UdpSocket,
        poll: Poll,
        inbox: Inbox,
        shared: Arc<Shared>,
        stats: Arc<WorkerStats>,
        engine: Box<dyn Engine>,
    ) -> std::io::Result<Worker> {
        let mut socket = mio::net::UdpSocket::from_std(socket);
        poll.registry()
            .register(&mut socket, SOCKET, Interest::READABLE)?;
        let now = Instant::now();
        let peers = shared.peers.len();
        Ok(Worker {
            index,
            socket,
            poll,
            shared,
            stats,
            commands: inbox.commands,
            handoffs: inbox.handoffs,
            returns: inbox.returns,
            rooms: Vec::new(),
            room_index: HashMap::new(),
            ids: HashMap::new(),
            next_gen: 1,
            heap: BinaryHeap::new(),
            routes: HashMap::new(),
            routes_gen: 0,
            recv: Some(RecvBatch::default()),
            send: SendBatch::default(),
            send_origin: Vec::with_capacity(BATCH * 4),
            spare: Vec::new(),
            retired: ParticipantCounters::default(),
            retired_routed: 0,
            retired_forwarded: 0,
            retired_no_codec: 0,
            retired_unslotted: 0,
            retired_not_ready: 0,
            draining: false,
            last_publish: now,
            to_remove: Vec::new(),
            wake_pending: vec![false; peers],
            media: MediaBatch::new(engine),
            copies: Vec::new(),
        })
    }

    /// Runs until [`Command::Stop`].
    pub fn run(mut self) {
        let mut events = Events::with_capacity(64);
        let mut socket_ready = true;
        loop {
            let now = Instant::now();
            let timeout = if socket_ready {
                Some(Duration::ZERO)
            } else {
                let next = self.heap.peek().map(|Reverse((t, _, _))| *t);
                let publish = self.last_publish + PUBLISH_EVERY;
                Some(
                    next.map_or(publish, |t| t.min(publish))
                        .saturating_duration_since(now),
                )
            };
            if let Err(e) = self.poll.poll(&mut events, timeout) {
                if e.kind() != std::io::ErrorKind::Interrupted {
                    tracing::error!(worker = self.index, error = %e, "poll failed");
                }
            }
            for ev in events.iter() {
                if ev.token() == SOCKET {
                    socket_ready = true;
                }
            }
            if self.take_commands() {
                return;
            }
            self.take_handoffs();
            if socket_ready {
                socket_ready = self.read_socket();
            }
            self.fire_timers(Instant::now());
            self.flush();
            if self.last_publish.elapsed() >= PUBLISH_EVERY {
                self.publish();
            }
        }
    }

    /// Handles the queued commands; `true` to stop.
    fn take_commands(&mut self) -> bool {
        loop {
            match self.commands.try_recv() {
                Ok(Command::Stop) => {
                    self.publish();
                    return true;
                }
                Ok(cmd) => {
                    // A panic while answering an offer or closing a session (a bug) must not
                    // take the worker and its other rooms with it; the caller's reply channel
                    // is dropped, so the HTTP side answers 503.
                    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        self.command(cmd)
                    }));
                    if r.is_err() {
                        tracing::error!(worker = self.index, "a control command panicked");
                        self.send_origin.clear();
                        self.send.clear();
                    }
                }
                Err(TryRecvError::Empty) => return false,
                Err(TryRecvError::Disconnected) => return true,
            }
        }
    }

    fn command(&mut self, cmd: Command) {
        let now = Instant::now();
        match cmd {
            Command::Join {
                room,
                offer,
                kind,
                reply,
            } => {
                let r = self.join(now, room, &offer, kind);
                let _ = reply.send(r);
            }
            Command::Leave { room, id, reply } => {
                let found = self.leave(now, &room, &id);
                let _ = reply.send(found);
            }
            Command::IceRestart {
                room,
                id,
                remote,
                reply,
            } => {
                let r = self.ids.get(&id).copied().and_then(|(slot, member)| {
                    let s = self.rooms[slot].as_mut()?;
                    if s.name != room {
                        return None;
                    }
                    let local = s.room.participant_mut(member)?.restart_ice(remote, now);
                    let meta = s.members.get_mut(&member)?;
                    meta.ufrags.push(local.ufrag.clone());
                    let route = route_to(self.index, slot, s.room_gen, member);
                    self.shared.directory.add_ufrag(&local.ufrag, route);
                    Some(local)
                });
                let _ = reply.send(r);
            }
            Command::Snapshot { room, reply } => {
                let _ = reply.send(self.snapshot(now, room.as_deref()));
            }
            Command::Drain { reply } => {
                self.draining = true;
                let all: Vec<(usize, MemberId)> = self
                    .rooms
                    .iter()
                    .enumerate()
                    .filter_map(|(i, s)| s.as_ref().map(|s| (i, s)))
                    .flat_map(|(i, s)| s.members.keys().map(move |m| (i, *m)))
                    .collect();
                for (slot, member) in all {
                    self.close_member(now, slot, member, "shutdown");
                }
                self.flush();
                self.publish();
                let _ = reply.send(());
            }
            Command::Stop => unreachable!("handled by take_commands"),
        }
    }

    fn join(
        &mut self,
        now: Instant,
        room: String,
        offer: &Offer,
        kind: LegKind,
    ) -> Result<Joined, JoinError> {
        if self.draining {
            return Err(JoinError::ShuttingDown);
        }
        let participant = Participant::new(
            offer,
            self.shared.certificate.clone(),
            self.shared.participant.clone(),
            now,
        )
        .map_err(|e| JoinError::Unacceptable(e.to_string()))?;
        let ice = participant.ice_credentials().clone();
        let answer = participant.answer_sdp().to_owned();
        let slot = match self.room_index.get(&room) {
            Some(&s) => s,
            None => {
                let gen = self.next_gen;
                self.next_gen += 1;
                let s = RoomSlot {
                    name: room.clone(),
                    room_gen: gen,
                    room: {
                        let mut r = Room::new();
                        // Copies are protected by the worker's media batch.
                        r.defer_media_copies(true);
                        r
                    },
                    members: HashMap::new(),
                    deadline: None,
                };
                let slot = match self.rooms.iter().position(Option::is_none) {
                    Some(i) => {
                        self.rooms[i] = Some(s);
                        i
                    }
                    None => {
                        self.rooms.push(Some(s));
                        self.rooms.len() - 1
                    }
                };
                self.room_index.insert(room, slot);
                self.stats.rooms.fetch_add(1, Ordering::Relaxed);
                slot
            }
        };
        let s = self.rooms[slot].as_mut().expect("slot just found or made");
        let member = s.room.add(participant, kind.role());
        let id = random_id();
        let route = route_to(self.index, slot, s.room_gen, member);
        self.shared.directory.add_ufrag(&ice.ufrag, route);
        s.members.insert(
            member,
            Meta {
                id: id.clone(),
                kind,
                ufrags: vec![ice.ufrag.clone()],
                addrs: Vec::new(),
                profile: None,
                connected: false,
                closing: None,
                created: now,
            },
        );
        self.ids.insert(id.clone(), (slot, member));
        self.stats.participants.fetch_add(1, Ordering::Relaxed);
        self.drain_room(slot, None);
        self.remove_closed();
        Ok(Joined { id, answer, ice })
    }

    fn leave(&mut self, now: Instant, room: &str, id: &str) -> bool {
        let Some(&(slot, member)) = self.ids.get(id) else {
            return false;
        };
        if self.rooms[slot].as_ref().is_none_or(|s| s.name != room) {
            return false;
        }
        self.close_member(now, slot, member, "deleted");
        self.flush();
        true
    }

    /// Closes a member with close_notify, counts why, and removes it.
    fn close_member(&mut self, now: Instant, slot: usize, member: MemberId, why: &'static str) {
        let Some(s) = self.rooms[slot].as_mut() else {
            return;
        };
        if let Some(meta) = s.members.get_mut(&member) {
            if meta.closing.is_none() {
                meta.closing = Some(why.into());
                match why {
                    "shutdown" => self.stats.closed.shutdown.fetch_add(1, Ordering::Relaxed),
                    _ => self.stats.closed.deleted.fetch_add(1, Ordering::Relaxed),
                };
            }
        }
        if let Some(p) = s.room.participant_mut(member) {
            p.close(now);
        }
        self.drain_room(slot, None);
        self.to_remove.push((slot, member));
        self.remove_closed();
    }

    fn take_handoffs(&mut self) {
        while let Ok(buf) = self.returns.try_recv() {
            if self.spare.len() < 1024 {
                self.spare.push(buf);
            }
        }
        let mut n: usize = 0;
        while let Ok(h) = self.handoffs.try_recv() {
            self.deliver_or_stage(Instant::now(), h.route, h.from, &h.buf, h.received);
            let _ = self.shared.peers[h.origin].returns.send(h.buf);
            n += 1;
            if n.is_multiple_of(BATCH) {
                self.run_media_inbound();
                self.flush();
            }
        }
        self.run_media_inbound();
        self.remove_closed();
    }

    /// Reads up to `BATCHES_PER_TURN` batches; `true` when the socket may have more.
    fn read_socket(&mut self) -> bool {
        // The batch is taken out of `self` while its datagrams are handed to the rooms (which
        // need `&mut self`), and put back after: no copy of the datagrams.
        let mut recv = self
            .recv
            .take()
            .expect("the batch is in place between reads");
        let more = self.read_batches(&mut recv);
        self.recv = Some(recv);
        more
    }

    fn read_batches(&mut self, recv: &mut RecvBatch) -> bool {
        for _ in 0..BATCHES_PER_TURN {
            let n = match recv.recv(&self.socket) {
                Ok(0) => return false,
                Ok(n) => n,
                Err(e) => {
                    // ECONNREFUSED and the like report an earlier send's ICMP error: go on.
                    tracing::debug!(worker = self.index, error = %e, "recvmmsg");
                    return true;
                }
            };
            let received = Instant::now();
            self.stats
                .datagrams_in
                .fetch_add(n as u64, Ordering::Relaxed);
            if self.shared.directory.generation() != self.routes_gen {
                self.routes.clear();
                self.routes_gen = self.shared.directory.generation();
            }
            for i in 0..n {
                let (from, d) = recv.get(i);
                self.stats
                    .bytes_in
                    .fetch_add(d.len() as u64, Ordering::Relaxed);
                let Some(from) = from else {
                    self.stats
                        .drops
                        .unknown_source
                        .fetch_add(1, Ordering::Relaxed);
                    continue;
                };
                self.dispatch(received, from, d);
            }
            self.run_media_inbound();
            for (w, pending) in self.wake_pending.iter_mut().enumerate() {
                if std::mem::take(pending) {
                    let _ = self.shared.peers[w].waker.wake();
                }
            }
            self.remove_closed();
            self.flush();
            if n < BATCH {
                return false;
            }
        }
        true
    }

    /// Finds the owner of a datagram and hands it there.
    fn dispatch(&mut self, received: Instant, from: SocketAddr, d: &[u8]) {
        let route = match self.routes.get(&from) {
            Some(r) => Some(*r),
            None => match self.shared.directory.by_addr(&from) {
                Some(r) => {
                    self.routes.insert(from, r);
                    Some(r)
                }
                None => stun_target_ufrag(d).and_then(|u| self.shared.directory.by_ufrag(u)),
            },
        };
        let Some(route) = route else {
            self.stats
                .drops
                .unknown_source
                .fetch_add(1, Ordering::Relaxed);
            return;
        };
        if route.worker == self.index {
            self.deliver_or_stage(received, route, from, d, received);
            return;
        }
        let mut buf = self.spare.pop().unwrap_or_else(|| Vec::with_capacity(1600));
        buf.clear();
        buf.extend_from_slice(d);
        let h = Handoff {
            from,
            route,
            buf,
            received,
            origin: self.index,
        };
        let peer = &self.shared.peers[route.worker];
        match peer.handoffs.try_send(h) {
            Ok(()) => {
                self.stats.handed_off.fetch_add(1, Ordering::Relaxed);
                // One wake per batch and peer, not one per datagram.
                self.wake_pending[route.worker] = true;
            }
            Err(e) => {
                self.spare.push(e.into_inner().buf);
                self.stats
                    .drops
                    .handoff_queue_full
                    .fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// A datagram for one of our participants: SRTP media its member would unprotect now is
    /// staged for the batch's engine call ([`Worker::run_media_inbound`]); anything else is
    /// handled at once (a DTLS record after the sender's staged media).
    fn deliver_or_stage(
        &mut self,
        now: Instant,
        route: Route,
        from: SocketAddr,
        d: &[u8],
        received: Instant,
    ) {
        let kind = classify(d);
        if kind == PacketKind::Rtp {
            let takes = self
                .rooms
                .get(route.slot)
                .and_then(Option::as_ref)
                .is_some_and(|s| {
                    s.room_gen == route.room_gen && s.room.takes_srtp(route.member, from)
                });
            if takes {
                self.media
                    .stage_inbound(route.slot, route.room_gen, route.member, received, d);
                return;
            }
        }
        // A DTLS record (close_notify, an alert) comes after the media its sender sent before
        // it in this batch: that media is relayed first, not counted as arriving after a close.
        if kind == PacketKind::Dtls && self.media.has_inbound_from(route.slot, route.member) {
            self.run_media_inbound();
        }
        self.deliver(now, route, from, d, received);
    }

    /// Unprotects the staged media in one engine call, hands each result to its room in
    /// arrival order and drains the room (whose copies are staged for [`Worker::flush`]).
    fn run_media_inbound(&mut self) {
        let n = self.media.inbound.len();
        if n == 0 {
            return;
        }
        let started = Instant::now();
        let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.media.unprotect(&mut SlotRooms(&mut self.rooms))
        }));
        let mut staged = std::mem::take(&mut self.media.inbound);
        if ran.is_err() {
            // Our SRTP code panicked: the batch's datagrams are dropped and counted.
            tracing::error!(
                worker = self.index,
                packets = n,
                "SRTP batch panicked; its datagrams are dropped"
            );
            self.stats
                .drops
                .internal_error
                .fetch_add(n as u64, Ordering::Relaxed);
            for st in staged.drain(..) {
                self.media.recycle(st.buf);
            }
            self.media.inbound = staged;
            return;
        }
        for st in staged.drain(..) {
            let Staged {
                slot,
                room_gen,
                member,
                received,
                mut buf,
                len,
                result,
                ..
            } = st;
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let Some(s) = self
                    .rooms
                    .get_mut(slot)
                    .and_then(Option::as_mut)
                    .filter(|s| s.room_gen == room_gen)
                else {
                    return false;
                };
                // The room's clock moves on from the batch's start (a handed-over datagram's
                // receive instant can be older than what the room has seen).
                let now = started;
                if !s
                    .room
                    .accept_unprotected_rtp(now, member, len, result, &mut buf)
                {
                    return false;
                }
                self.drain_room(slot, received);
                true
            }));
            match r {
                Ok(true) => {}
                Ok(false) => {
                    self.stats
                        .drops
                        .unknown_source
                        .fetch_add(1, Ordering::Relaxed);
                }
                Err(_) => self.abandon_room(slot, room_gen),
            }
            self.media.recycle(buf);
        }
        self.media.inbound = staged;
        let per = started.elapsed() / n as u32;
        self.stats.media_processing.record_n(per, n as u64);
        self.stats.srtp_batches.fetch_add(1, Ordering::Relaxed);
        self.stats
            .srtp_batched
            .fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Protects the staged copies in one engine call and queues each to its receiver.
    fn run_media_outbound(&mut self) {
        let n = self.media.outbound.len();
        if n == 0 {
            return;
        }
        let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.media.protect(&mut SlotRooms(&mut self.rooms))
        }));
        let mut staged = std::mem::take(&mut self.media.outbound);
        for st in staged.drain(..) {
            let room = self
                .rooms
                .get_mut(st.slot)
                .and_then(Option::as_mut)
                .filter(|s| s.room_gen == st.room_gen)
                .map(|s| &mut s.room);
            match room {
                Some(room) if ran.is_ok() => {
                    room.count_protected(st.member, &st.result);
                    if let (Ok(len), Some(dest)) = (st.result, room.media_destination(st.member)) {
                        self.send.push(dest, &st.buf[..len]);
                        self.send_origin.push(st.received);
                    }
                    room.recycle_copy(st.buf);
                }
                Some(_) => {
                    // Our SRTP code panicked on the batch: every copy is dropped and counted.
                    self.stats
                        .drops
                        .internal_error
                        .fetch_add(1, Ordering::Relaxed);
                    self.media.recycle(st.buf);
                }
                None => {
                    // The room went (abandoned) after the copy was routed.
                    self.stats
                        .drops
                        .unknown_source
                        .fetch_add(1, Ordering::Relaxed);
                    self.media.recycle(st.buf);
                }
            }
        }
        self.media.outbound = staged;
    }

    /// A datagram for one of our participants.
    /// [`Worker::deliver_inner`], with a panic in the room's code contained: the room is
    /// abandoned (its state is suspect), the worker and its other rooms go on.
    fn deliver(
        &mut self,
        now: Instant,
        route: Route,
        from: SocketAddr,
        datagram: &[u8],
        received: Instant,
    ) {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.deliver_inner(now, route, from, datagram, received)
        }));
        if r.is_err() {
            self.abandon_room(route.slot, route.room_gen);
        }
    }

    /// Tears down a room whose code panicked: every member is removed from the directory and
    /// counted as closed by `internal_error`; nothing of it is driven again.
    fn abandon_room(&mut self, slot: usize, room_gen: u64) {
        let Some(s) = self.rooms.get_mut(slot).and_then(Option::take) else {
            return;
        };
        if s.room_gen != room_gen {
            self.rooms[slot] = Some(s);
            return;
        }
        tracing::error!(room = %s.name, members = s.members.len(), "room abandoned after a panic in its code");
        for meta in s.members.values() {
            self.shared.directory.remove(&meta.ufrags, &meta.addrs);
            self.shared.ended(&meta.id);
            self.ids.remove(&meta.id);
            if meta.connected {
                self.stats.connected.fetch_sub(1, Ordering::Relaxed);
            }
            self.stats.participants.fetch_sub(1, Ordering::Relaxed);
            self.stats
                .closed
                .internal_error
                .fetch_add(1, Ordering::Relaxed);
        }
        self.room_index.remove(&s.name);
        self.stats.rooms.fetch_sub(1, Ordering::Relaxed);
        self.to_remove.retain(|(sl, _)| *sl != slot);
        // What the room had queued for sending may be half-built: drop it.
        self.send_origin.clear();
        self.send.clear();
    }

    fn deliver_inner(
        &mut self,
        now: Instant,
        route: Route,
        from: SocketAddr,
        datagram: &[u8],
        received: Instant,
    ) {
        let Some(s) = self.rooms.get_mut(route.slot).and_then(Option::as_mut) else {
            self.stats
                .drops
                .unknown_source
                .fetch_add(1, Ordering::Relaxed);
            return;
        };
        if s.room_gen != route.room_gen {
            self.stats
                .drops
                .unknown_source
                .fetch_add(1, Ordering::Relaxed);
            return;
        }
        let kind = classify(datagram);
        let started = Instant::now();
        if !s.room.handle_datagram(now, route.member, from, datagram) {
            self.stats
                .drops
                .unknown_source
                .fetch_add(1, Ordering::Relaxed);
            return;
        }
        if kind == PacketKind::Stun {
            // A check that validated a new address: route that address here from now on.
            let validated = s
                .room
                .participant(route.member)
                .is_some_and(|p| p.ice_validated(from));
            if validated {
                if let Some(meta) = s.members.get_mut(&route.member) {
                    if !meta.addrs.contains(&from) {
                        meta.addrs.push(from);
                        self.shared.directory.add_addr(from, route);
                    }
                }
            }
        }
        let media = matches!(kind, PacketKind::Rtp);
        self.drain_room(route.slot, media.then_some(received));
        if media {
            self.stats.media_processing.record(started.elapsed());
        }
    }

    /// Drains a room's outputs: transmits into the send batch (tagged with `received` when they
    /// are media copies), events handled, the room's next deadline noted.
    fn drain_room(&mut self, slot: usize, received: Option<Instant>) {
        let Some(s) = self.rooms[slot].as_mut() else {
            return;
        };
        let route_of = |member| route_to(self.index, slot, s.room_gen, member);
        let mut next = None;
        while let Some(out) = s.room.poll_output() {
            match out {
                RoomOutput::Timeout(t) => {
                    next = Some(t);
                    break;
                }
                RoomOutput::Member(member, o) => match o {
                    Output::Transmit {
                        destination,
                        contents,
                    } => {
                        let is_media = matches!(classify(contents), PacketKind::Rtp);
                        self.send.push(destination, contents);
                        self.send_origin
                            .push(if is_media { received } else { None });
                    }
                    Output::Event(Event::IceSelected(addr)) => {
                        if let Some(meta) = s.members.get_mut(&member) {
                            if !meta.addrs.contains(&addr) {
                                meta.addrs.push(addr);
                            }
                        }
                        self.shared.directory.add_addr(addr, route_of(member));
                    }
                    Output::Event(Event::Connected { profile, handshake }) => {
                        if let Some(meta) = s.members.get_mut(&member) {
                            meta.profile = Some(profile);
                            meta.connected = true;
                        }
                        self.stats.handshakes_ok.fetch_add(1, Ordering::Relaxed);
                        self.stats.connected.fetch_add(1, Ordering::Relaxed);
                        self.stats.handshake_time.record(handshake);
                        tracing::info!(
                            room = %s.name,
                            profile = %profile,
                            handshake_ms = handshake.as_secs_f64() * 1e3,
                            "participant connected"
                        );
                    }
                    Output::Event(Event::Closed(reason)) => {
                        if let Some(meta) = s.members.get_mut(&member) {
                            if meta.closing.is_none() {
                                let label = close_label(&reason);
                                meta.closing = Some(label.into());
                                let c = &self.stats.closed;
                                match label {
                                    "consent_expired" => &c.consent_expired,
                                    "dtls_failed" => &c.dtls_failed,
                                    "fingerprint_mismatch" => &c.fingerprint_mismatch,
                                    _ => &c.close_notify,
                                }
                                .fetch_add(1, Ordering::Relaxed);
                                if !meta.connected
                                    && matches!(
                                        reason,
                                        CloseReason::DtlsFailed(_)
                                            | CloseReason::FingerprintMismatch
                                    )
                                {
                                    self.stats.handshakes_failed.fetch_add(1, Ordering::Relaxed);
                                }
                                tracing::info!(room = %s.name, reason = %reason, "participant closed");
                            }
                        }
                        self.to_remove.push((slot, member));
                    }
                    Output::Event(_) => {}
                    Output::Timeout(_) => {}
                },
            }
        }
        if next != s.deadline {
            s.deadline = next;
            if let Some(t) = next {
                self.heap.push(Reverse((t, slot, s.room_gen)));
            }
        }
        // The media copies the room routed, for the batch's protect call.
        s.room.take_media_copies(&mut self.copies);
        for (member, buf) in self.copies.drain(..) {
            self.media
                .stage_outbound(slot, s.room_gen, member, received, buf);
        }
    }

    /// Removes the members that closed, and rooms left empty.
    fn remove_closed(&mut self) {
        while let Some((slot, member)) = self.to_remove.pop() {
            let Some(s) = self.rooms[slot].as_mut() else {
                continue;
            };
            let Some(p) = s.room.remove(member) else {
                continue;
            };
            add_counters(&mut self.retired, p.counters());
            if let Some(meta) = s.members.remove(&member) {
                self.shared.directory.remove(&meta.ufrags, &meta.addrs);
                self.shared.ended(&meta.id);
                self.ids.remove(&meta.id);
                if meta.connected {
                    self.stats.connected.fetch_sub(1, Ordering::Relaxed);
                }
            }
            self.stats.participants.fetch_sub(1, Ordering::Relaxed);
            if s.room.is_empty() {
                let c = s.room.counters();
                self.retired_routed += c.routed_in;
                self.retired_forwarded += c.forwarded;
                self.retired_no_codec += c.dropped_no_codec;
                self.retired_unslotted += c.unslotted;
                self.retired_not_ready += c.dropped_not_ready;
                self.room_index.remove(&s.name);
                self.rooms[slot] = None;
                self.stats.rooms.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }

    fn fire_timers(&mut self, now: Instant) {
        while let Some(Reverse((t, slot, gen))) = self.heap.peek().copied() {
            if t > now {
                break;
            }
            self.heap.pop();
            let current = self.rooms[slot]
                .as_ref()
                .is_some_and(|s| s.room_gen == gen && s.deadline == Some(t));
            if !current {
                continue;
            }
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                if let Some(s) = self.rooms[slot].as_mut() {
                    s.deadline = None;
                    s.room.handle_timeout(now);
                }
                self.drain_room(slot, None);
            }));
            if r.is_err() {
                self.abandon_room(slot, gen);
            }
        }
        self.remove_closed();
    }

    fn flush(&mut self) {
        self.run_media_outbound();
        if self.send.is_empty() {
            return;
        }
        let Flushed {
            sent,
            bytes,
            failed,
        } = self.send.flush(&self.socket);
        let done = Instant::now();
        let st = &self.stats;
        st.datagrams_out.fetch_add(sent as u64, Ordering::Relaxed);
        st.bytes_out.fetch_add(bytes as u64, Ordering::Relaxed);
        st.drops
            .send_failed
            .fetch_add(failed as u64, Ordering::Relaxed);
        // One histogram update per distinct receive instant (a batch shares one).
        let mut run: Option<(Instant, u64)> = None;
        for origin in self.send_origin.drain(..).flatten() {
            match &mut run {
                Some((t, n)) if *t == origin => *n += 1,
                _ => {
                    if let Some((t, n)) = run {
                        st.relay_latency.record_n(done.duration_since(t), n);
                    }
                    run = Some((origin, 1));
                }
            }
        }
        if let Some((t, n)) = run {
            st.relay_latency.record_n(done.duration_since(t), n);
        }
    }

    /// Sums the participants' and rooms' counters into the worker's stats.
    fn publish(&mut self) {
        self.last_publish = Instant::now();
        let mut c = self.retired.clone();
        let mut routed = self.retired_routed;
        let mut forwarded = self.retired_forwarded;
        let mut no_codec = self.retired_no_codec;
        let mut unslotted = self.retired_unslotted;
        let mut not_ready = self.retired_not_ready;
        for s in self.rooms.iter().flatten() {
            for m in s.room.members() {
                if let Some(p) = s.room.participant(m) {
                    add_counters(&mut c, p.counters());
                }
            }
            let rc = s.room.counters();
            routed += rc.routed_in;
            forwarded += rc.forwarded;
            no_codec += rc.dropped_no_codec;
            unslotted += rc.unslotted;
            not_ready += rc.dropped_not_ready;
        }
        let st = &self.stats;
        let set = |a: &std::sync::atomic::AtomicU64, v: u64| a.store(v, Ordering::Relaxed);
        set(&st.srtp_in, c.packets_in);
        set(&st.srtp_out, c.packets_out);
        set(&st.media_routed, routed);
        set(&st.media_forwarded, forwarded);
        set(&st.media_unslotted, unslotted);
        set(&st.drops.auth_failed, c.auth_failures);
        set(&st.drops.replayed, c.replays);
        set(&st.drops.malformed, c.malformed);
        set(&st.drops.unvalidated_source, c.unvalidated_source);
        set(&st.drops.before_keys, c.before_keys);
        set(&st.drops.stun_rejected, c.stun_rejected);
        set(&st.drops.unknown_kind, c.unknown);
        set(&st.drops.after_close, c.after_close);
        set(&st.drops.no_codec, no_codec);
        set(&st.drops.receiver_not_ready, not_ready);
    }

    fn snapshot(&mut self, now: Instant, only: Option<&str>) -> Vec<RoomSnapshot> {
        self.publish();
        let mut out = Vec::new();
        for s in self.rooms.iter().flatten() {
            if only.is_some_and(|n| n != s.name) {
                continue;
            }
            let mut participants = Vec::new();
            for m in s.room.members() {
                let (Some(p), Some(meta)) = (s.room.participant(m), s.members.get(&m)) else {
                    continue;
                };
                let c = p.counters();
                participants.push(ParticipantSnapshot {
                    id: meta.id.clone(),
                    kind: meta.kind,
                    state: match (&meta.closing, meta.connected) {
                        (Some(why), _) => why.clone(),
                        (None, true) => "connected".into(),
                        (None, false) => "new".into(),
                    },
                    srtp_profile: meta.profile.map(|p| p.to_string()),
                    packets_in: c.packets_in,
                    bytes_in: c.bytes_in,
                    packets_out: c.packets_out,
                    bytes_out: c.bytes_out,
                    auth_failures: c.auth_failures,
                    replays: c.replays,
                    handshake_ms: c.handshake_time.map(|d| d.as_secs_f64() * 1e3),
                    age_secs: now.duration_since(meta.created).as_secs_f64(),
                });
            }
            let rc = s.room.counters();
            out.push(RoomSnapshot {
                name: s.name.clone(),
                routed_in: rc.routed_in,
                forwarded: rc.forwarded,
                participants,
            });
        }
        out
    }
}
