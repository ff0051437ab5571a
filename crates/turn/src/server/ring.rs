//! The io_uring path of a shard's UDP sockets ([`secrelay_uring`]): the listener and every
//! relay socket each have one multishot receive armed on the shard's ring, so a wake-up reads
//! what all of them brought from one completion queue, with no system call per socket or per
//! datagram and no epoll readiness per relay socket; what the datagrams make the shard send
//! (replies, ChannelData to clients, datagrams to peers) goes to the kernel in one submission.
//!
//! The ring lives on a thread of its own beside the shard's runtime (the ring's completions are
//! the task work of the thread that armed it); the thread waits in the ring itself, so one
//! system call both waits and brings the datagrams, and another hands over what they made it
//! send. Other threads wake it with a datagram to a loopback socket armed on the ring. It
//! takes the shard's core for each datagram, as the runtime's tasks do, and queues what the
//! datagram made it send once it has let the core go (a send may wait for a free slot).
//! Relay sockets are opened wherever a client's request is handled (this thread for UDP
//! clients, another runtime for stream clients): their opening and their closing reach the
//! ring's thread as [`Change`]s, in order, so a socket is armed before it can be disarmed, and
//! stays open until the kernel let go of it.

use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use std::sync::atomic::AtomicBool;
use std::thread::JoinHandle;

use secrelay_uring::{Completion, Ring};

use super::{Inner, Shard, Sink, UdpOut};
use crate::core::{Client, ClientKey, Now, Out};
use crate::proto::HEADROOM;
use crate::stats::{Dropped, Stats};

/// The key the listener's receive is armed with. Relay sockets take keys below [`RESERVED`]:
/// the ones above are the listener's, the waker's and `Ring::probe`'s (whose cancelled
/// receive must never be mistaken for one of ours).
const LISTENER: u32 = u32::MAX - 2;
/// The first key no relay socket takes.
const RESERVED: u32 = u32::MAX - 2;
/// Completions taken at once.
const BATCH: usize = 64;
/// Batches handled before the ring's thread hands what they made to the kernel.
const BATCHES_PER_WAKE: usize = 16;
/// Spare send buffers kept for reuse.
const SPARE: usize = 1024;

/// The key the waker socket's receive is armed with.
const WAKER: u32 = u32::MAX - 1;
/// The longest wait in the ring (a stop also wakes it).
const WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// The keys relay sockets are armed with: each names one socket at a time, and is handed out
/// again only after the ring's thread let it go ([`RingTask::release_keys`]), so a datagram
/// one relay socket received can never come out of the ring under another's key (a counter
/// would wrap after 2^32 relays and name two live sockets alike).
#[derive(Debug, Default)]
struct Keys {
    /// The next key never handed out.
    next: u32,
    /// Keys let go, for reuse.
    free: Vec<u32>,
}

impl Keys {
    /// A key no armed socket has; `None` when every key below [`RESERVED`] names one.
    fn take(&mut self) -> Option<u32> {
        if let Some(k) = self.free.pop() {
            return Some(k);
        }
        let k = self.next;
        if k >= RESERVED {
            return None;
        }
        self.next = k + 1;
        Some(k)
    }
}

/// What the rest of the server tells a shard's ring thread.
enum Change {
    /// A relay socket to read.
    Arm {
        key: u32,
        fd: RawFd,
        client: ClientKey,
        relay_id: u64,
    },
    /// A relay socket no longer read: closed once its receive is cancelled.
    Retire {
        key: u32,
        socket: std::net::UdpSocket,
    },
}

/// A shard's ring thread, as the threads that open relay sockets see it.
pub(super) struct RingShared {
    changes: Mutex<Vec<Change>>,
    /// A loopback socket armed on the ring: a datagram to itself (at `waker_addr`) wakes the
    /// ring's thread.
    waker: std::net::UdpSocket,
    waker_addr: SocketAddr,
    stop: AtomicBool,
    keys: Mutex<Keys>,
}

impl std::fmt::Debug for RingShared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RingShared").finish_non_exhaustive()
    }
}

impl RingShared {
    fn push(&self, change: Change) {
        self.changes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(change);
        self.wake();
    }

    fn wake(&self) {
        // A full buffer means wake-ups already wait to be read: this one is not needed.
        let _ = self.waker.send_to(&[0], self.waker_addr);
    }

    /// Ends the ring's thread (its receives cancelled, its sockets closed).
    pub(super) fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
        self.wake();
    }

    /// A relay socket read by this ring from now on, for `client`'s relay `relay_id`; `None`
    /// (the allocation refused) if every key is taken.
    pub(super) fn open(
        self: &Arc<Self>,
        socket: std::net::UdpSocket,
        client: ClientKey,
        relay_id: u64,
    ) -> Option<RingRelay> {
        let key = self.keys.lock().unwrap_or_else(|e| e.into_inner()).take()?;
        self.push(Change::Arm {
            key,
            fd: socket.as_raw_fd(),
            client,
            relay_id,
        });
        Some(RingRelay {
            key,
            socket: Some(socket),
            ring: self.clone(),
        })
    }
}

/// A relay socket read through a shard's ring; dropping it hands the socket to the ring's thread,
/// which cancels its receive, then closes it.
#[derive(Debug)]
pub(super) struct RingRelay {
    key: u32,
    socket: Option<std::net::UdpSocket>,
    ring: Arc<RingShared>,
}

impl RingRelay {
    pub(super) fn fd(&self) -> BorrowedFd<'_> {
        self.socket
            .as_ref()
            .expect("the socket is taken only when the relay drops")
            .as_fd()
    }
}

impl Drop for RingRelay {
    fn drop(&mut self) {
        if let Some(socket) = self.socket.take() {
            self.ring.push(Change::Retire {
                key: self.key,
                socket,
            });
        }
    }
}

/// Where the kernel refuses a shard a ring: why, and the listener back.
pub(super) type Refused = (std::io::Error, std::net::UdpSocket);

/// Starts `shard`'s ring thread (`index`) with `listener` armed on it: `Ok(Err(_))`, with the
/// listener back, where the kernel refuses the ring (checked end to end: a datagram through a
/// loopback socket armed on it); `Err` where no thread starts.
pub(super) fn start(
    index: usize,
    inner: &Arc<Inner>,
    shard: &Arc<Shard>,
    listener: std::net::UdpSocket,
) -> std::io::Result<Result<JoinHandle<()>, Refused>> {
    let (tx, rx) = std::sync::mpsc::channel::<Result<(), Refused>>();
    let (inner, shard2) = (inner.clone(), shard.clone());
    let thread = std::thread::Builder::new()
        .name(format!("secrelay-turn-ring-{index}"))
        .spawn(move || {
            // Made on this thread: its completions are this thread's task work.
            let made = RingTask::new(inner, shard2, listener);
            match made {
                Ok(task) => {
                    let _ = tx.send(Ok(()));
                    task.run();
                }
                Err(refused) => {
                    let _ = tx.send(Err(refused));
                }
            }
        })?;
    let started = rx
        .recv()
        .map_err(|_| std::io::Error::other("the TURN io_uring thread ended"))?;
    Ok(started.map(|()| thread))
}

/// A shard's ring and what its datagrams need.
struct RingTask {
    ring: Ring<()>,
    /// How long a wait lets datagrams gather ([`super::TurnConfig::gather`]).
    gather: std::time::Duration,
    /// When a failed system call was last logged (at most one a second).
    failed_at: Option<std::time::Instant>,
    inner: Arc<Inner>,
    shard: Arc<Shard>,
    shared: Arc<RingShared>,
    stats: Arc<Stats>,
    listener: Arc<std::net::UdpSocket>,
    listener_v6: bool,
    local: Option<SocketAddr>,
    /// Armed relay sockets by key: whose relay each is.
    relays: Vec<Option<(ClientKey, u64)>>,
    /// Relay sockets whose receive is cancelled at the next submit, closed after it.
    retired: Vec<std::net::UdpSocket>,
    /// Keys of relay sockets disarmed since the last submit.
    disarmed: Vec<u32>,
    /// Keys whose receive's cancel was submitted: free again once the ring let go of them
    /// and what they received was handled ([`RingTask::release_keys`]).
    settling: Vec<u32>,
    /// Send buffers back from the kernel, for the next sends.
    spare: Vec<Vec<u8>>,
    /// What a datagram made the core send, copied out while the shard's core was locked and
    /// queued on the ring once it is not (a ring with every send slot in flight waits for one,
    /// which must not hold up the shard's other clients).
    outgoing: Vec<Outgoing>,
    /// A received datagram, with room before it for a ChannelData header.
    buf: Vec<u8>,
    /// The core's reply.
    out: Vec<u8>,
}

impl RingTask {
    /// The ring with `listener` and a waker socket armed, and the shard's [`RingShared`] set;
    /// `Err` with the listener back where any of it fails.
    fn new(
        inner: Arc<Inner>,
        shard: Arc<Shard>,
        listener: std::net::UdpSocket,
    ) -> Result<RingTask, Refused> {
        let made = (|| {
            // Completions made only when this thread waits for them, so that a wait gathers a
            // batch; a kernel before 6.1 has no such rings, and gets the other kind.
            let deferred = secrelay_uring::Config {
                defer_taskrun: true,
                ..secrelay_uring::Config::default()
            };
            let (mut ring, deferred) = match Ring::<()>::probe(deferred) {
                Ok(r) => (r, true),
                Err(_) => (Ring::<()>::probe(secrelay_uring::Config::default())?, false),
            };
            let waker = std::net::UdpSocket::bind((std::net::Ipv4Addr::LOCALHOST, 0))
                .or_else(|_| std::net::UdpSocket::bind((std::net::Ipv6Addr::LOCALHOST, 0)))?;
            waker.set_nonblocking(true)?;
            let waker_addr = waker.local_addr()?;
            ring.arm(LISTENER, &listener);
            ring.arm(WAKER, &waker);
            ring.submit()?;
            Ok::<_, std::io::Error>((ring, (waker, waker_addr), deferred))
        })();
        let (ring, (waker, waker_addr), deferred) = match made {
            Ok(x) => x,
            Err(e) => return Err((e, listener)),
        };
        let shared = Arc::new(RingShared {
            changes: Mutex::new(Vec::new()),
            waker,
            waker_addr,
            stop: AtomicBool::new(false),
            keys: Mutex::new(Keys::default()),
        });
        let _ = shard.ring.set(shared.clone());
        let local = listener.local_addr().ok();
        Ok(RingTask {
            ring,
            // A ring whose completions each wake the thread gathers nothing: a wait for many
            // on it could last until they all came, whatever the minimum wait.
            gather: if deferred {
                inner.gather
            } else {
                std::time::Duration::ZERO
            },
            failed_at: None,
            stats: inner.shared.stats.clone(),
            inner,
            shard,
            shared,
            local,
            listener_v6: local.is_some_and(|a| a.is_ipv6()),
            listener: Arc::new(listener),
            relays: Vec::new(),
            retired: Vec::new(),
            disarmed: Vec::new(),
            settling: Vec::new(),
            spare: Vec::new(),
            outgoing: Vec::new(),
            buf: vec![0; HEADROOM + super::MAX_DATAGRAM + crate::proto::TAILROOM],
            out: vec![0; 1500],
        })
    }

    /// Until [`RingShared::stop`]: what the ring brought through the core, what that sends
    /// handed to the kernel in one submission, then a wait in the ring for more.
    fn run(mut self) {
        let mut done = Vec::with_capacity(BATCH);
        while !self.shared.stop.load(Ordering::Relaxed) {
            for _ in 0..BATCHES_PER_WAKE {
                done.clear();
                self.ring.reap(&mut done, BATCH);
                if done.is_empty() {
                    break;
                }
                for c in done.drain(..) {
                    self.complete(c);
                }
            }
            // Every completion reaped so far is handled: a settled key has nothing left.
            self.release_keys();
            // After the datagrams: changes they made (this thread's own allocations) or that
            // came with them (the waker's datagram, reaped above) go in this submit, not after
            // the next wait.
            self.apply_changes();
            match self.ring.submit() {
                // The retired sockets' receives are cancelled: they can close, and their keys
                // settle.
                Ok(()) => {
                    self.retired.clear();
                    self.settling.append(&mut self.disarmed);
                }
                Err(e) => self.failed("submit", &e),
            }
            // Stopped meanwhile (its wake-up maybe reaped above), or sends that completed in
            // the submit: no wait.
            if self.shared.stop.load(Ordering::Relaxed) || self.ring.pending() {
                continue;
            }
            if let Err(e) = self.ring.wait_batch(BATCH, self.gather, WAIT) {
                self.failed("wait", &e);
            }
        }
    }

    /// A system call on the ring failed: logged (at most once a second), and after a moment
    /// the thread goes on, since its sockets have no other reader.
    fn failed(&mut self, what: &str, e: &std::io::Error) {
        let now = std::time::Instant::now();
        if self
            .failed_at
            .is_none_or(|t| now.duration_since(t) >= std::time::Duration::from_secs(1))
        {
            self.failed_at = Some(now);
            tracing::error!(error = %e, "TURN: io_uring {what} failed");
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }

    /// Arms the relay sockets opened since the last turn and disarms the closed ones.
    fn apply_changes(&mut self) {
        let changes = std::mem::take(
            &mut *self
                .shared
                .changes
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        );
        for c in changes {
            match c {
                Change::Arm {
                    key,
                    fd,
                    client,
                    relay_id,
                } => {
                    self.ring.arm(key, &fd);
                    let k = key as usize;
                    if self.relays.len() <= k {
                        self.relays.resize(k + 1, None);
                    }
                    self.relays[k] = Some((client, relay_id));
                }
                Change::Retire { key, socket } => {
                    self.ring.disarm(key);
                    if let Some(r) = self.relays.get_mut(key as usize) {
                        *r = None;
                    }
                    self.retired.push(socket);
                    self.disarmed.push(key);
                }
            }
        }
    }

    /// Hands the settling keys the ring has settled ([`Ring::settled`]) back for new relay
    /// sockets: called with every reaped completion handled, so what their sockets received
    /// before the cancel has come out and found no relay; a key whose receive has not ended,
    /// or whose datagrams still wait in the ring's queue, waits for a later turn.
    fn release_keys(&mut self) {
        if self.settling.is_empty() {
            return;
        }
        let ring = &self.ring;
        let mut keys = self.shared.keys.lock().unwrap_or_else(|e| e.into_inner());
        self.settling.retain(|&k| {
            let settled = ring.settled(k);
            if settled {
                keys.free.push(k);
            }
            !settled
        });
    }

    fn complete(&mut self, c: Completion<()>) {
        match c {
            Completion::Sent { result, buf, .. } => {
                if result.is_err() {
                    self.stats.dropped(Dropped::SendFailed);
                }
                if self.spare.len() < SPARE {
                    self.spare.push(buf);
                }
            }
            Completion::Received(r) => {
                let payload = self.ring.payload(&r);
                let n = payload.len();
                let whole = !r.truncated && HEADROOM + n <= self.buf.len();
                if whole {
                    self.buf[HEADROOM..HEADROOM + n].copy_from_slice(payload);
                }
                self.ring.recycle(&r);
                match r.from {
                    _ if r.key == WAKER => {}
                    _ if r.truncated => self.stats.dropped(Dropped::TooLarge),
                    Some(from) if whole && r.key == LISTENER => self.client_datagram(from, n),
                    Some(from) if whole => self.peer_datagram(r.key, from, n),
                    _ => self.stats.dropped(Dropped::Malformed),
                }
            }
        }
    }

    /// A datagram from a client, through the core.
    fn client_datagram(&mut self, from: SocketAddr, n: usize) {
        let client = Client {
            key: ClientKey::Udp {
                client: from,
                local: self.local.unwrap_or(from),
            },
            addr: from,
        };
        let listener = &self.listener;
        let sink = |c: &Client| Sink::Udp {
            socket: UdpOut::Ring(listener.clone()),
            to: c.addr,
        };
        let (spare, outgoing, v6) = (&mut self.spare, &mut self.outgoing, self.listener_v6);
        let data = &self.buf[HEADROOM..HEADROOM + n];
        self.inner.on_client(
            &self.shard,
            client,
            data,
            &mut self.out,
            sink,
            |o| match o {
                Out::Reply(bytes) => {
                    outgoing.push(Outgoing::of(spare, listener.as_raw_fd(), from, v6, bytes))
                }
                Out::ToPeer { relay, to, payload } => {
                    let fd = relay.fd().as_raw_fd();
                    outgoing.push(Outgoing::of(spare, fd, to, to.is_ipv6(), payload))
                }
                Out::Nothing => {}
            },
        );
        self.send_outgoing();
    }

    /// Queues on the ring what the last datagram made the core send (the core unlocked); one
    /// the ring cannot take is dropped and counted.
    fn send_outgoing(&mut self) {
        for o in self.outgoing.drain(..) {
            if let Err((buf, ())) = self.ring.send(&o.fd, o.to, o.v6, o.buf, ()) {
                self.stats.dropped(Dropped::SendFailed);
                self.spare.push(buf);
            }
        }
    }

    /// A datagram from a peer to relay socket `key`, through the core to its client.
    fn peer_datagram(&mut self, key: u32, from: SocketAddr, n: usize) {
        // A socket disarmed in this turn may still deliver what it had: its relay is gone.
        let Some(&Some((client, relay_id))) = self.relays.get(key as usize) else {
            return;
        };
        {
            let mut core = self.shard.lock();
            let payload = HEADROOM..HEADROOM + n;
            let Some((sink, bytes)) = core.from_peer(
                Now::current(),
                &client,
                relay_id,
                from,
                &mut self.buf,
                payload,
            ) else {
                return;
            };
            match sink {
                Sink::Udp { to, .. } => self.outgoing.push(Outgoing::of(
                    &mut self.spare,
                    self.listener.as_raw_fd(),
                    *to,
                    self.listener_v6,
                    bytes,
                )),
                // A stream client's queue takes it without waiting.
                Sink::Stream(_) => sink.send(bytes, &self.stats),
            }
        }
        self.send_outgoing();
    }
}

/// A datagram to send from one of the ring's sockets. Its socket stays open until after the
/// ring's next submit: relay sockets are closed by the ring's thread, after the submit that
/// cancels their receive, and the listener lives as long as the ring.
struct Outgoing {
    fd: RawFd,
    to: SocketAddr,
    /// The socket is IPv6 (an IPv4 peer is sent to by its IPv4-mapped address).
    v6: bool,
    buf: Vec<u8>,
}

impl Outgoing {
    /// `bytes` for `to` out of socket `fd`, copied into a spare send buffer.
    fn of(spare: &mut Vec<Vec<u8>>, fd: RawFd, to: SocketAddr, v6: bool, bytes: &[u8]) -> Self {
        let mut buf = spare.pop().unwrap_or_default();
        buf.clear();
        buf.extend_from_slice(bytes);
        Outgoing { fd, to, v6, buf }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_handed_out_again_only_once_let_go() {
        let mut keys = Keys::default();
        let (a, b) = (keys.take(), keys.take());
        assert_eq!((a, b), (Some(0), Some(1)));
        keys.free.push(0);
        assert_eq!(keys.take(), Some(0));
        assert_eq!(keys.take(), Some(2));
    }

    #[test]
    fn keys_never_reach_the_reserved_ones_and_run_out_without_wrapping() {
        let mut keys = Keys {
            next: RESERVED - 1,
            free: Vec::new(),
        };
        assert_eq!(keys.take(), Some(RESERVED - 1));
        assert_eq!(keys.take(), None);
        assert_eq!(keys.take(), None, "no wrap to a key a live socket may hold");
        keys.free.push(7);
        assert_eq!(keys.take(), Some(7));
    }
}
