//! ICE over TCP (RFC 6544), passive: the browsers that can send no UDP connect to the
//! `ice_tcp` port and send the same datagrams (STUN checks, DTLS, SRTP) framed as RFC 4571
//! says. A datagram read from a connection takes the walk a UDP one does: classified once,
//! handed to the shard with the connection's remote address as its source; what the shard
//! sends to that address goes back framed on the connection instead of `sendmmsg`.
//!
//! One worker (the first) listens. A new connection stays with it until its first datagram:
//! a STUN check naming, by its USERNAME, a participant's ICE ufrag. The connection then goes
//! to the worker that owns that participant (the stream itself, with what was read of it),
//! so every later datagram is read where its member is. Anything else first, or silence, and
//! the connection is closed.
//!
//! Nothing here blocks a worker: sockets are non-blocking, each connection is read a bounded
//! amount per turn, and what it is sent waits in a bounded queue. A browser that reads slower
//! than its media comes has datagrams dropped whole (`tcp_queue_full`, counted at the shard),
//! so the stream stays framed and its RTCP reports the loss. Connections are bounded in all
//! (`MAX_CONNECTIONS`), those not validated yet per listener and per source address, and
//! closed when their check is not validated within 10 s, when nothing comes for 30 s, and when
//! their participant ends.

use std::collections::{HashMap, VecDeque};
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use mio::{Interest, Token};
use secrelay_wire::demux::Class;
use secrelay_wire::framing::{next_frame, write_frame};

use super::{Command, Worker};
use crate::counters::DropReason;
use crate::shard::{Datagram, Handled, RoomSnapshot};

/// The listener's token (in the first worker's poll).
pub(super) const LISTENER: Token = Token(1 << 20);
/// Connections' tokens: this plus the connection's number.
const CONN_TOKENS: usize = (1 << 20) + 1;
/// Bytes waiting to be sent on one connection before datagrams for it are dropped: about a
/// second of a 2 Mbit/s video.
const MAX_QUEUED: usize = 256 * 1024;
/// The longest a datagram waits in a connection's queue: real-time media older than this is
/// dropped before it is written (`tcp_queue_stale`), so a slow reader gets what is recent.
const MAX_QUEUE_AGE: Duration = Duration::from_millis(500);
/// Unsent bytes the kernel holds for a connection (`TCP_NOTSENT_LOWAT`): beyond what is in
/// flight, what the browser has not taken waits in our queue, where its age is seen, not in
/// an autotuned socket buffer of seconds.
const NOTSENT_LOWAT: u32 = 16 * 1024;
/// Bytes read from one connection per turn before the others get theirs.
const READ_PER_TURN: usize = 64 * 1024;
/// Connections accepted per turn (the rest wait for the next).
const ACCEPTS_PER_TURN: usize = 64;
/// Time a connection has to get a check validated.
const UNVALIDATED_FOR: Duration = Duration::from_secs(10);
/// Time without a datagram from the browser (its consent checks come every few seconds)
/// after which its connection is closed.
const IDLE_FOR: Duration = Duration::from_secs(30);
/// How long sends to the remote address of a closed connection are dropped rather than sent
/// over UDP to the browser's TCP port (until its member's consent expires).
const GONE_FOR: Duration = Duration::from_secs(60);
/// Connections whose first check has not been seen yet, at most, and per source address.
const MAX_UNCLAIMED: usize = 256;
const MAX_UNCLAIMED_PER_IP: usize = 8;
/// Connections open in the whole gateway at most.
pub(crate) const MAX_CONNECTIONS: usize = 16_384;

/// Why a connection was closed (`secrelay_ice_tcp_connections_closed_total{reason}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TcpClose {
    /// The browser closed it, or it failed.
    Peer,
    /// Its first datagram was not a STUN check naming a participant.
    NoCheck,
    /// No check of it validated within 10 s.
    Unvalidated,
    /// Nothing came on it for 30 s.
    Idle,
    /// Its participant ended.
    Ended,
    /// Refused at accept: too many connections open, or waiting for their first check.
    Refused,
}

/// The non-blocking listener for `addr` (on `[::]` dual-stack: IPv4 browsers too) and its port.
pub(crate) fn bind_ice_tcp(addr: SocketAddr) -> io::Result<(std::net::TcpListener, u16)> {
    let s = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        Some(socket2::Protocol::TCP),
    )?;
    if addr.is_ipv6() && addr.ip().is_unspecified() {
        s.set_only_v6(false)?;
    }
    // A restarted gateway binds again at once, its old connections in TIME_WAIT or not.
    s.set_reuse_address(true)?;
    s.set_nonblocking(true)?;
    s.bind(&addr.into())?;
    s.listen(1024)?;
    let l = std::net::TcpListener::from(s);
    let port = l.local_addr()?.port();
    Ok((l, port))
}

impl TcpClose {
    /// Every reason, in the order the metrics list them.
    pub(crate) const ALL: [TcpClose; 6] = [
        TcpClose::Peer,
        TcpClose::NoCheck,
        TcpClose::Unvalidated,
        TcpClose::Idle,
        TcpClose::Ended,
        TcpClose::Refused,
    ];

    /// Its place in [`TcpClose::ALL`] (the declaration order; a test checks).
    pub(crate) fn index(self) -> usize {
        self as usize
    }

    /// Its label.
    pub(crate) fn name(self) -> &'static str {
        match self {
            TcpClose::Peer => "peer",
            TcpClose::NoCheck => "no_check",
            TcpClose::Unvalidated => "unvalidated",
            TcpClose::Idle => "idle",
            TcpClose::Ended => "ended",
            TcpClose::Refused => "refused",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Accepted; its first datagram not read yet.
    Unclaimed,
    /// With the worker of the participant its first check named.
    Claimed,
    /// A check on it validated: its address is its participant's.
    Validated,
}

/// One browser's connection.
#[derive(Debug)]
pub(crate) struct Conn {
    stream: mio::net::TcpStream,
    peer: SocketAddr,
    /// What was read and not yet taken as frames.
    rbuf: Vec<u8>,
    /// Frames waiting to be written, from `written` on.
    wbuf: Vec<u8>,
    written: usize,
    /// The frames not yet wholly written: where each ends in `wbuf` and when it was queued,
    /// oldest first; the first starts at `frame_start`.
    frames: VecDeque<(usize, Instant)>,
    frame_start: usize,
    state: State,
    opened: Instant,
    last_in: Instant,
    /// Registered for writable events (a write found the socket full).
    want_write: bool,
    /// Listed in `IceTcp::dirty`.
    dirty: bool,
}

/// How a read of a connection ended.
enum ReadEnd {
    /// Nothing more now.
    Drained,
    /// It may have more (its share of the turn was read).
    More,
    /// The browser closed it, or it failed.
    Closed,
}

impl Conn {
    fn new(stream: mio::net::TcpStream, peer: SocketAddr, now: Instant) -> Conn {
        if let Err(e) = socket2::SockRef::from(&stream).set_tcp_notsent_lowat(NOTSENT_LOWAT) {
            tracing::debug!(error = %e, "TCP_NOTSENT_LOWAT on an ICE-TCP connection");
        }
        Conn {
            stream,
            peer,
            rbuf: Vec::new(),
            wbuf: Vec::new(),
            written: 0,
            frames: VecDeque::new(),
            frame_start: 0,
            state: State::Unclaimed,
            opened: now,
            last_in: now,
            want_write: false,
            dirty: false,
        }
    }

    /// Reads up to its share of the turn into `rbuf` (appended without zeroing the room
    /// first: `read_to_end` on a bounded reader, which stops at the limit, at the end of the
    /// stream, or when the socket has nothing more now).
    fn read(&mut self) -> ReadEnd {
        let limit = READ_PER_TURN as u64;
        match (&mut self.stream).take(limit).read_to_end(&mut self.rbuf) {
            Ok(n) if n as u64 == limit => ReadEnd::More,
            // Short of the limit without an error: the browser closed its side.
            Ok(_) => ReadEnd::Closed,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => ReadEnd::Drained,
            Err(_) => ReadEnd::Closed,
        }
    }

    /// Queues `datagram`, framed, at `now`; `false` when the queue has no room for it
    /// (dropped whole).
    fn queue(&mut self, datagram: &[u8], now: Instant) -> bool {
        if self.wbuf.len() - self.written + 2 + datagram.len() > MAX_QUEUED {
            return false;
        }
        let queued = write_frame(&mut self.wbuf, datagram).is_ok();
        if queued {
            self.frames.push_back((self.wbuf.len(), now));
        }
        queued
    }

    /// Forgets the frames wholly written, then drops, whole, the frames that waited longer
    /// than [`MAX_QUEUE_AGE`] at `now` and of which nothing was written; how many it dropped.
    fn drop_stale(&mut self, now: Instant) -> u64 {
        let mut dropped = 0;
        while let Some(&(end, at)) = self.frames.front() {
            if self.written >= end {
                self.frames.pop_front();
                self.frame_start = end;
            } else if self.written == self.frame_start && now.duration_since(at) > MAX_QUEUE_AGE {
                self.frames.pop_front();
                self.written = end;
                self.frame_start = end;
                dropped += 1;
            } else {
                break;
            }
        }
        dropped
    }

    /// Writes what is queued until the socket is full, having dropped what waited too long;
    /// how many datagrams it dropped so.
    fn flush(&mut self, now: Instant) -> io::Result<u64> {
        let mut dropped = 0;
        loop {
            dropped += self.drop_stale(now);
            if self.written >= self.wbuf.len() {
                break;
            }
            // A frame partly written is finished alone: what follows it may be stale by then.
            let until = match self.frames.front() {
                Some(&(end, _)) if self.written > self.frame_start => end,
                _ => self.wbuf.len(),
            };
            match self.stream.write(&self.wbuf[self.written..until]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.written += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        if self.written == self.wbuf.len() {
            self.wbuf.clear();
            self.frames.clear();
            (self.written, self.frame_start) = (0, 0);
        } else if self.frame_start >= MAX_QUEUED / 4 {
            // What is before the first frame not wholly written goes (a frame partly written
            // stays whole in the buffer: the part not written yet is still to go).
            let shift = self.frame_start;
            self.wbuf.drain(..shift);
            for f in &mut self.frames {
                f.0 -= shift;
            }
            self.written -= shift;
            self.frame_start = 0;
        }
        Ok(dropped)
    }

    fn waiting(&self) -> bool {
        self.written < self.wbuf.len()
    }
}

/// A worker's ICE-TCP side: the listener (first worker only) and its connections.
#[derive(Debug, Default)]
pub(super) struct IceTcp {
    listener: Option<mio::net::TcpListener>,
    listener_ready: bool,
    conns: HashMap<usize, Conn>,
    by_peer: HashMap<SocketAddr, usize>,
    /// Remote addresses of connections closed lately, and when.
    gone: HashMap<SocketAddr, Instant>,
    next: usize,
    /// Connections that may have bytes to read.
    ready: Vec<usize>,
    /// Connections with frames to write.
    dirty: Vec<usize>,
    /// Connections waiting for their first check, in all and by source address.
    unclaimed: usize,
    unclaimed_by_ip: HashMap<IpAddr, usize>,
}

impl IceTcp {
    /// With `listener` (registered in the worker's poll by [`Worker::new`]).
    pub(super) fn new(listener: Option<mio::net::TcpListener>) -> IceTcp {
        IceTcp {
            listener_ready: listener.is_some(),
            listener,
            ..IceTcp::default()
        }
    }

    /// The listener, to register.
    pub(super) fn listener_mut(&mut self) -> Option<&mut mio::net::TcpListener> {
        self.listener.as_mut()
    }

    /// Whether this turn has ICE-TCP work waiting (the poll must not sleep).
    pub(super) fn busy(&self) -> bool {
        self.listener_ready || !self.ready.is_empty()
    }

    /// A connection from `ip` waits for its first check.
    fn unclaimed_added(&mut self, ip: IpAddr) {
        self.unclaimed += 1;
        *self.unclaimed_by_ip.entry(ip).or_default() += 1;
    }

    /// A connection from `ip` waits no more (claimed, handed over or closed).
    fn unclaimed_gone(&mut self, ip: IpAddr) {
        self.unclaimed = self.unclaimed.saturating_sub(1);
        if let std::collections::hash_map::Entry::Occupied(mut e) = self.unclaimed_by_ip.entry(ip) {
            *e.get_mut() -= 1;
            if *e.get() == 0 {
                e.remove();
            }
        }
    }

    /// Marks a poll event's connection (or the listener) ready; `false` for another token.
    pub(super) fn on_event(&mut self, ev: &mio::event::Event) -> bool {
        let Token(t) = ev.token();
        if ev.token() == LISTENER {
            self.listener_ready = true;
            return true;
        }
        let Some(id) = t.checked_sub(CONN_TOKENS) else {
            return false;
        };
        if let Some(c) = self.conns.get_mut(&id) {
            if ev.is_readable() || ev.is_read_closed() || ev.is_error() {
                self.ready.push(id);
            }
            if ev.is_writable() && !c.dirty {
                c.dirty = true;
                self.dirty.push(id);
            }
        }
        true
    }
}

impl Worker {
    /// Accepts new connections and reads the ready ones.
    pub(super) fn tcp_turn(&mut self) {
        if self.tcp.listener_ready {
            self.tcp_accept();
        }
        let ready = std::mem::take(&mut self.tcp.ready);
        for id in ready {
            self.tcp_read(id);
        }
    }

    fn tcp_accept(&mut self) {
        let now = Instant::now();
        for _ in 0..ACCEPTS_PER_TURN {
            let Some(listener) = self.tcp.listener.as_ref() else {
                return;
            };
            let (stream, peer) = match listener.accept() {
                // An IPv4 browser on a dual-stack listener: by its IPv4 address, as over UDP.
                Ok((stream, peer)) => (stream, super::super::udp::canonical(peer)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.tcp.listener_ready = false;
                    return;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // Out of descriptors and the like: the next readiness tries again.
                    tracing::warn!(worker = self.index, error = %e, "ICE-TCP accept");
                    self.tcp.listener_ready = false;
                    return;
                }
            };
            if !self.tcp_admits(peer) {
                self.stats.ice_tcp_closed(TcpClose::Refused);
                continue;
            }
            let _ = stream.set_nodelay(true);
            self.shared.ice_tcp_open.fetch_add(1, Ordering::Relaxed);
            self.stats.ice_tcp_accepted.fetch_add(1, Ordering::Relaxed);
            self.tcp.unclaimed_added(peer.ip());
            self.tcp_insert(Conn::new(stream, peer, now));
        }
    }

    /// Whether a new connection from `peer` is within the limits.
    fn tcp_admits(&self, peer: SocketAddr) -> bool {
        let same_ip = self
            .tcp
            .unclaimed_by_ip
            .get(&peer.ip())
            .copied()
            .unwrap_or(0);
        self.shared.ice_tcp_open.load(Ordering::Relaxed) < MAX_CONNECTIONS
            && self.tcp.unclaimed < MAX_UNCLAIMED
            && same_ip < MAX_UNCLAIMED_PER_IP
    }

    /// Takes `conn` into this worker's poll; it is read this turn (what it holds first).
    fn tcp_insert(&mut self, mut conn: Conn) {
        let id = self.tcp.next;
        self.tcp.next += 1;
        if let Err(e) = self.poll.registry().register(
            &mut conn.stream,
            Token(CONN_TOKENS + id),
            Interest::READABLE,
        ) {
            tracing::error!(worker = self.index, error = %e, "registering an ICE-TCP connection");
            self.tcp_closed(conn, TcpClose::Peer);
            return;
        }
        self.tcp.gone.remove(&conn.peer);
        self.tcp.by_peer.insert(conn.peer, id);
        let dirty = conn.waiting();
        self.tcp.conns.insert(id, conn);
        self.tcp.ready.push(id);
        if dirty {
            self.tcp_mark_dirty(id);
        }
    }

    /// A connection another worker accepted, for a participant of this one.
    pub(super) fn tcp_adopt(&mut self, mut conn: Conn) {
        conn.state = State::Claimed;
        self.tcp_insert(conn);
    }

    fn tcp_read(&mut self, id: usize) {
        let Some(conn) = self.tcp.conns.get_mut(&id) else {
            return;
        };
        let end = conn.read();
        // The frames are read out of the connection's buffer while the shard takes them.
        let (peer, was, rbuf) = (conn.peer, conn.state, std::mem::take(&mut conn.rbuf));
        let now = Instant::now();
        let mut state = was;
        let (taken, next) = self.tcp_frames(peer, &mut state, &rbuf, now);
        if was == State::Unclaimed && state != was {
            self.tcp.unclaimed_gone(peer.ip());
        }
        if let Some(conn) = self.tcp.conns.get_mut(&id) {
            conn.state = state;
            if taken > 0 {
                conn.last_in = now;
            }
            conn.rbuf = rbuf;
            conn.rbuf.drain(..taken);
        }
        match (next, end) {
            (Some(Next::HandTo(w)), _) => self.tcp_hand_to(id, w),
            (Some(Next::Close(why)), _) => self.tcp_close(id, why),
            (None, ReadEnd::Closed) => self.tcp_close(id, TcpClose::Peer),
            (None, ReadEnd::More) => self.tcp.ready.push(id),
            (None, ReadEnd::Drained) => {}
        }
    }

    /// Hands each complete frame at the start of `rbuf` (read from the connection of `peer`,
    /// in `state`) to the shard: the bytes taken, and what becomes of the connection when it is
    /// not kept here as it is.
    fn tcp_frames(
        &mut self,
        peer: SocketAddr,
        state: &mut State,
        rbuf: &[u8],
        now: Instant,
    ) -> (usize, Option<Next>) {
        let mut taken = 0;
        let mut next = None;
        while let Some((frame, n)) = next_frame(&rbuf[taken..]) {
            let d = Datagram::classify(peer, frame, now);
            if *state == State::Unclaimed {
                match self.tcp_owner(&d) {
                    Some(w) if w == self.index => *state = State::Claimed,
                    // Read again there, first frame included.
                    Some(w) => {
                        next = Some(Next::HandTo(w));
                        break;
                    }
                    None => {
                        next = Some(Next::Close(TcpClose::NoCheck));
                        break;
                    }
                }
            }
            taken += n;
            self.stats.datagrams_in.fetch_add(1, Ordering::Relaxed);
            self.stats
                .bytes_in
                .fetch_add(frame.len() as u64, Ordering::Relaxed);
            if self.shard.handle(now, d) == Handled::NotOurs {
                self.shard.count_drop(DropReason::UnknownSource);
            }
        }
        (taken, next)
    }

    /// The worker whose participant a connection's first datagram names, if it is a check.
    fn tcp_owner(&self, d: &Datagram<'_>) -> Option<usize> {
        let Class::Stun(facts) = d.class else {
            return None;
        };
        let ufrag = facts.target_ufrag(d.bytes)?;
        if self.shard.owns_ufrag(ufrag) {
            return Some(self.index);
        }
        self.shared.directory.by_ufrag(ufrag)
    }

    /// Moves connection `id` to `worker`, with what was read of it.
    fn tcp_hand_to(&mut self, id: usize, worker: usize) {
        let Some(mut conn) = self.tcp_forget(id) else {
            return;
        };
        let _ = self.poll.registry().deregister(&mut conn.stream);
        let peer = &self.shared.peers[worker];
        match peer.commands.send(Command::AdoptTcp(Box::new(conn))) {
            Ok(()) => {
                let _ = peer.waker.wake();
            }
            Err(e) => {
                if let Command::AdoptTcp(conn) = e.into_inner() {
                    self.tcp_closed(*conn, TcpClose::Peer);
                }
            }
        }
    }

    /// Removes connection `id` from the tables (still open).
    fn tcp_forget(&mut self, id: usize) -> Option<Conn> {
        let conn = self.tcp.conns.remove(&id)?;
        if conn.state == State::Unclaimed {
            self.tcp.unclaimed_gone(conn.peer.ip());
        }
        self.tcp.by_peer.remove(&conn.peer);
        self.tcp.ready.retain(|r| *r != id);
        self.tcp.dirty.retain(|r| *r != id);
        Some(conn)
    }

    /// Closes connection `id`, counted under `why`.
    fn tcp_close(&mut self, id: usize, why: TcpClose) {
        if let Some(mut conn) = self.tcp_forget(id) {
            let _ = self.poll.registry().deregister(&mut conn.stream);
            if conn.state == State::Validated {
                self.tcp.gone.insert(conn.peer, Instant::now());
            }
            self.tcp_closed(conn, why);
        }
    }

    /// Counts the close before the socket closes, so that whoever sees the connection end
    /// (the browser, a test reading `/metrics` after it) finds it counted.
    fn tcp_closed(&self, conn: Conn, why: TcpClose) {
        self.stats.ice_tcp_closed(why);
        self.shared.ice_tcp_open.fetch_sub(1, Ordering::Relaxed);
        drop(conn);
    }

    /// Queues a datagram for `destination` if this worker reaches it over TCP: `false` when it
    /// goes over UDP. One that finds its queue full, or its connection closed, is dropped and
    /// counted. A media copy's relay latency (from `origin`, when its packet was read) is
    /// recorded as it is queued: the connection is written before the worker polls again.
    pub(super) fn tcp_send(
        &mut self,
        destination: SocketAddr,
        datagram: &[u8],
        origin: Option<Instant>,
    ) -> bool {
        // Most workers have no connection: no hashing for their UDP copies.
        let found = match self.tcp.by_peer.is_empty() {
            true => None,
            false => self.tcp.by_peer.get(&destination).copied(),
        };
        let id = match found {
            Some(id) => id,
            None => {
                // Its connection closed lately: dropped, not sent over UDP to its TCP port.
                let gone = !self.tcp.gone.is_empty() && self.tcp.gone.contains_key(&destination);
                if gone {
                    self.shard.count_drop(DropReason::SendFailed);
                }
                return gone;
            }
        };
        let queued = self
            .tcp
            .conns
            .get_mut(&id)
            .is_some_and(|c| c.queue(datagram, origin.unwrap_or_else(Instant::now)));
        if queued {
            if let Some(t) = origin {
                self.stats.relay_latency.record(t.elapsed());
            }
            self.stats.datagrams_out.fetch_add(1, Ordering::Relaxed);
            self.stats
                .bytes_out
                .fetch_add(datagram.len() as u64, Ordering::Relaxed);
            self.tcp_mark_dirty(id);
        } else {
            self.shard.count_drop(DropReason::TcpQueueFull);
        }
        true
    }

    fn tcp_mark_dirty(&mut self, id: usize) {
        if let Some(c) = self.tcp.conns.get_mut(&id) {
            if !c.dirty {
                c.dirty = true;
                self.tcp.dirty.push(id);
            }
        }
    }

    /// Writes what the connections have queued, as far as their sockets take it.
    pub(super) fn tcp_flush(&mut self) {
        let now = Instant::now();
        for id in std::mem::take(&mut self.tcp.dirty) {
            let Some(c) = self.tcp.conns.get_mut(&id) else {
                continue;
            };
            c.dirty = false;
            let Ok(stale) = c.flush(now) else {
                self.tcp_close(id, TcpClose::Peer);
                continue;
            };
            if stale > 0 {
                self.shard.count_drops(DropReason::TcpQueueStale, stale);
            }
            let Some(c) = self.tcp.conns.get_mut(&id) else {
                continue;
            };
            let want = c.waiting();
            if want != c.want_write {
                c.want_write = want;
                let interest = if want {
                    Interest::READABLE | Interest::WRITABLE
                } else {
                    Interest::READABLE
                };
                let token = Token(CONN_TOKENS + id);
                if self
                    .poll
                    .registry()
                    .reregister(&mut c.stream, token, interest)
                    .is_err()
                {
                    self.tcp_close(id, TcpClose::Peer);
                }
            }
        }
    }

    /// A check from `addr` validated: if it came over a connection of ours, the connection is
    /// its participant's.
    pub(super) fn tcp_validated(&mut self, addr: SocketAddr) {
        if let Some(c) = self
            .tcp
            .by_peer
            .get(&addr)
            .and_then(|id| self.tcp.conns.get_mut(id))
        {
            c.state = State::Validated;
        }
    }

    /// A participant ended: the connections from the addresses it used are closed, after
    /// what was queued for them (its close_notify) is written as far as it goes.
    pub(super) fn tcp_ended(&mut self, addrs: &[SocketAddr]) {
        if self.tcp.by_peer.is_empty() {
            return;
        }
        for a in addrs {
            if let Some(&id) = self.tcp.by_peer.get(a) {
                if let Some(c) = self.tcp.conns.get_mut(&id) {
                    let _ = c.flush(Instant::now());
                }
                self.tcp_close(id, TcpClose::Ended);
            }
        }
    }

    /// Closes the connections that waited too long for a validated check or went silent.
    pub(super) fn tcp_expire(&mut self, now: Instant) {
        let expired: Vec<(usize, TcpClose)> = self
            .tcp
            .conns
            .iter()
            .filter_map(|(id, c)| match c.state {
                State::Validated if now.saturating_duration_since(c.last_in) >= IDLE_FOR => {
                    Some((*id, TcpClose::Idle))
                }
                State::Unclaimed | State::Claimed
                    if now.saturating_duration_since(c.opened) >= UNVALIDATED_FOR =>
                {
                    Some((*id, TcpClose::Unvalidated))
                }
                _ => None,
            })
            .collect();
        for (id, why) in expired {
            self.tcp_close(id, why);
        }
        self.tcp
            .gone
            .retain(|_, t| now.saturating_duration_since(*t) < GONE_FOR);
    }

    /// Says `tcp` for the participants whose media goes over a connection of this worker.
    pub(super) fn tcp_mark_paths(&self, rooms: &mut [RoomSnapshot]) {
        if self.tcp.by_peer.is_empty() {
            return;
        }
        let paths = rooms
            .iter_mut()
            .flat_map(|r| r.participants.iter_mut())
            .filter_map(|p| p.path.as_mut());
        for path in paths {
            if self.tcp.by_peer.contains_key(&path.remote) {
                path.transport = "tcp";
            }
        }
    }
}

/// What becomes of a connection after its frames were read.
enum Next {
    /// It goes to this worker.
    HandTo(usize),
    /// It is closed.
    Close(TcpClose),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn close_reasons_are_listed_in_declaration_order_with_distinct_names() {
        for (i, why) in TcpClose::ALL.iter().enumerate() {
            assert_eq!(why.index(), i, "{why:?}");
        }
        let mut names: Vec<&str> = TcpClose::ALL.iter().map(|w| w.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), TcpClose::ALL.len());
    }

    /// A browser that reads nothing: once the socket takes no more, what waits past
    /// [`MAX_QUEUE_AGE`] is dropped whole, a frame partly written is finished first, and what
    /// the browser then reads is every frame it was sent, whole, in order.
    #[test]
    fn a_slow_readers_stale_datagrams_are_dropped_whole_and_the_stream_stays_framed() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut browser = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (ours, peer) = listener.accept().unwrap();
        ours.set_nonblocking(true).unwrap();
        let t0 = Instant::now();
        let mut c = Conn::new(mio::net::TcpStream::from_std(ours), peer, t0);
        // Datagrams numbered in their first 4 bytes, until the socket takes no more.
        let datagram = |n: u32| {
            let mut d = vec![0x5a; 1200];
            d[..4].copy_from_slice(&n.to_be_bytes());
            d
        };
        let mut n = 0u32;
        while !c.waiting() {
            assert!(c.queue(&datagram(n), t0));
            n += 1;
            assert_eq!(c.flush(t0).unwrap(), 0);
        }
        let stuck = n;
        for _ in 0..20 {
            assert!(c.queue(&datagram(n), t0));
            n += 1;
        }
        assert_eq!(c.flush(t0 + MAX_QUEUE_AGE / 2).unwrap(), 0, "not stale yet");
        // Past the age, a fresh one comes; then the browser reads everything. The frame partly
        // written (if any) is finished; the 20 behind it, stale, are never written.
        let fresh = t0 + MAX_QUEUE_AGE * 2;
        assert!(c.queue(&datagram(n), fresh));
        let last = n;
        browser
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let (mut got, mut dropped) = (Vec::new(), 0);
        let mut buf = vec![0u8; 1 << 16];
        loop {
            dropped += c.flush(fresh).unwrap();
            match browser.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(k) => got.extend_from_slice(&buf[..k]),
            }
        }
        assert_eq!(dropped, 20, "the stale ones");
        let mut at = 0;
        let mut seen = Vec::new();
        while let Some((d, k)) = next_frame(&got[at..]) {
            assert_eq!(d.len(), 1200, "a frame cut");
            seen.push(u32::from_be_bytes([d[0], d[1], d[2], d[3]]));
            at += k;
        }
        assert_eq!(at, got.len(), "bytes after the last whole frame");
        assert!(seen.windows(2).all(|w| w[0] < w[1]), "{seen:?}");
        assert_eq!(seen.last(), Some(&last));
        assert_eq!(
            seen.len() as u32,
            stuck + 1,
            "what was written, then the fresh one"
        );
        assert!(
            seen[..seen.len() - 1].iter().all(|&k| k < stuck),
            "{seen:?}"
        );
    }
}
