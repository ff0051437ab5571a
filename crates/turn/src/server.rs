//! The I/O around [`Core`]: shards, each a thread with a current-thread tokio runtime that owns
//! a UDP listener socket (all of them SO_REUSEPORT on one address, so the kernel keeps each
//! client on one shard), the relay sockets of its allocations, and a sweep of expired ones;
//! a TCP listener whose connections are spread over the shards; and byte streams handed over
//! by others ([`TurnServer::serve_stream`]: the gateway's HTTPS port gives it TLS connections
//! that turn out to speak TURN).
//!
//! A shard's core sits behind a mutex taken once per packet: its own runtime's tasks take it,
//! and so do the stream connections running on another runtime, whose allocations live there.
//! Relay sockets are bound to the peers' host address (the gateway's media socket's, reached
//! over loopback when it listens on every address), in `relay_ports`, one per allocation.
//!
//! A shard's UDP sockets (its listener and every relay socket) are read and written through an
//! io_uring where the kernel allows one ([`TurnConfig::io_uring`], `ring`): one multishot
//! receive per socket, what a turn sends handed to the kernel in one submission. Elsewhere each
//! socket is a task of the runtime, woken by epoll, with a system call per datagram.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::net::{TcpListener, UdpSocket};
use tokio::sync::{mpsc, oneshot, watch};
use zeroize::Zeroizing;

use crate::auth::{Credentials, Nonces};
use crate::core::{Client, ClientKey, Core, CoreConfig, Io, Now, Out, Shared};
use crate::framing::Framer;
use crate::proto::{HEADROOM, TAILROOM};
use crate::quota::{QuotaLimits, Quotas};
use crate::stats::{Dropped, Stats};

mod ring;

/// How the server runs.
#[derive(Clone)]
pub struct TurnConfig {
    /// TURN over UDP on this address.
    pub udp: Option<SocketAddr>,
    /// TURN over TCP on this address.
    pub tcp: Option<SocketAddr>,
    /// Shards (threads).
    pub threads: usize,
    /// The ports relay sockets take (inclusive).
    pub relay_ports: (u16, u16),
    /// The core's settings (the peers among them).
    pub core: CoreConfig,
    /// The allocation quotas (also the bounds on open TCP connections: in all, per source).
    pub quotas: QuotaLimits,
    /// The shared secret credentials are minted with.
    pub secret: Zeroizing<Vec<u8>>,
    /// The realm.
    pub realm: String,
    /// Frames queued to one stream client at most (a slow reader's excess is dropped).
    pub stream_queue: usize,
    /// Read and write the UDP sockets through an io_uring per shard where the kernel allows
    /// one (checked end to end at start; a shard refused one uses epoll and logs why); false:
    /// epoll and a system call per datagram.
    pub io_uring: bool,
    /// On the io_uring path, how long a busy shard lets datagrams gather before it wakes for
    /// fewer than a batch (an idle one wakes for the first at once): the most it adds to a
    /// relayed packet's delay, against fewer wake-ups per packet ([`GATHER`] is the default;
    /// zero wakes for every datagram). Kernels before 6.12 wake for every datagram.
    pub gather: Duration,
}

/// The default [`TurnConfig::gather`]: 200 µs, a fraction of any jitter buffer, and on a busy
/// relay several datagrams per wake-up.
pub const GATHER: Duration = Duration::from_micros(GATHER_US);

/// [`GATHER`] in µs, as configuration files and flags give it.
pub const GATHER_US: u64 = 200;

impl std::fmt::Debug for TurnConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TurnConfig")
            .field("udp", &self.udp)
            .field("tcp", &self.tcp)
            .field("threads", &self.threads)
            .field("relay_ports", &self.relay_ports)
            .field("core", &self.core)
            .field("quotas", &self.quotas)
            .field("realm", &self.realm)
            .field("io_uring", &self.io_uring)
            .field("gather", &self.gather)
            .finish_non_exhaustive()
    }
}

/// A stream connection without an allocation is closed after this long without a byte.
pub const STREAM_IDLE: Duration = Duration::from_secs(30);
use crate::core::MAX_DATAGRAM;
// The io_uring path's receive buffers hold the largest datagram taken, and flag a longer one.
const _: () = assert!(MAX_DATAGRAM == secrelay_uring::DATAGRAM_MAX);

/// An allocation's relay socket; dropping it ends its receive and closes it.
#[derive(Debug)]
pub struct Relay(RelayIo);

#[derive(Debug)]
enum RelayIo {
    /// Read by a task of the shard's runtime, which ends when `_stop` drops.
    Task {
        socket: Arc<UdpSocket>,
        _stop: oneshot::Sender<()>,
    },
    /// Read through the shard's io_uring.
    Ring(ring::RingRelay),
}

impl Relay {
    fn fd(&self) -> BorrowedFd<'_> {
        match &self.0 {
            RelayIo::Task { socket, .. } => socket.as_fd(),
            RelayIo::Ring(r) => r.fd(),
        }
    }
}

/// A shard's UDP listener, as its clients' sinks name it.
#[derive(Debug, Clone)]
pub enum UdpOut {
    /// Read by a task of the shard's runtime.
    Task(Arc<UdpSocket>),
    /// Read through the shard's io_uring (which also sends what goes out of it).
    Ring(Arc<std::net::UdpSocket>),
}

impl UdpOut {
    fn fd(&self) -> BorrowedFd<'_> {
        match self {
            UdpOut::Task(s) => s.as_fd(),
            UdpOut::Ring(s) => s.as_fd(),
        }
    }
}

/// Where a client is sent what its peers send.
#[derive(Debug)]
pub enum Sink {
    /// A UDP client, through the shard's listener socket.
    Udp {
        /// The listener socket.
        socket: UdpOut,
        /// The client.
        to: SocketAddr,
    },
    /// A stream client's write queue.
    Stream(mpsc::Sender<Vec<u8>>),
}

impl Sink {
    fn send(&self, bytes: &[u8], stats: &Stats) {
        let ok = match self {
            Sink::Udp { socket, to } => send_now(&socket.fd(), bytes, *to),
            Sink::Stream(tx) => match tx.try_send(bytes.to_vec()) {
                Ok(()) | Err(mpsc::error::TrySendError::Closed(_)) => true,
                Err(mpsc::error::TrySendError::Full(_)) => {
                    stats.dropped(Dropped::QueueFull);
                    return;
                }
            },
        };
        if !ok {
            stats.dropped(Dropped::SendFailed);
        }
    }
}

/// The relay port range, taken round-robin from a random start.
struct Ports {
    low: u16,
    high: u16,
    next: AtomicU32,
}

impl Ports {
    fn bind(&self, ip: IpAddr, even: bool) -> Option<std::net::UdpSocket> {
        let span = u32::from(self.high - self.low) + 1;
        for _ in 0..span {
            let port = self.low + (self.next.fetch_add(1, Ordering::Relaxed) % span) as u16;
            if even && port % 2 == 1 {
                continue;
            }
            if let Ok(s) = std::net::UdpSocket::bind((ip, port)) {
                return Some(s);
            }
        }
        None
    }
}

struct Shard {
    core: Mutex<Core<Relay, Sink>>,
    handle: tokio::runtime::Handle,
    /// The shard's io_uring, once its loop runs: relay sockets are armed there.
    ring: std::sync::OnceLock<Arc<ring::RingShared>>,
}

/// What the shards and the connections share.
struct Inner {
    shared: Arc<Shared>,
    shards: Vec<Arc<Shard>>,
    ports: Ports,
    /// The relay sockets' addresses: IPv4, IPv6 (from the peers' local addresses).
    relay_ips: (Option<IpAddr>, Option<IpAddr>),
    connections: Arc<Quotas>,
    next_shard: AtomicUsize,
    next_stream: AtomicU64,
    stream_queue: usize,
    /// [`TurnConfig::gather`].
    gather: Duration,
}

/// The running server.
pub struct TurnServer {
    inner: Arc<Inner>,
    stop: watch::Sender<bool>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    udp_addr: Option<SocketAddr>,
    tcp_addr: Option<SocketAddr>,
}

impl std::fmt::Debug for TurnServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TurnServer")
            .field("udp", &self.udp_addr)
            .field("tcp", &self.tcp_addr)
            .field("shards", &self.inner.shards.len())
            .finish()
    }
}

impl Shard {
    fn lock(&self) -> std::sync::MutexGuard<'_, Core<Relay, Sink>> {
        self.core.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The [`Io`] of one message: opens relays on its shard, makes its client's sink.
struct ShardIo<'s, F: FnMut(&Client) -> Sink> {
    inner: &'s Arc<Inner>,
    shard: &'s Arc<Shard>,
    sink: F,
}

impl<F: FnMut(&Client) -> Sink> Io<Relay, Sink> for ShardIo<'_, F> {
    fn open_relay(
        &mut self,
        v6: bool,
        even: bool,
        client: ClientKey,
        relay_id: u64,
    ) -> Option<(Relay, SocketAddr)> {
        let ip = if v6 {
            self.inner.relay_ips.1
        } else {
            self.inner.relay_ips.0
        }?;
        let std = self.inner.ports.bind(ip, even)?;
        std.set_nonblocking(true).ok()?;
        let local = std.local_addr().ok()?;
        if let Some(r) = self.shard.ring.get() {
            return Some((Relay(RelayIo::Ring(r.open(std, client, relay_id)?)), local));
        }
        let socket = {
            let _in = self.shard.handle.enter();
            Arc::new(UdpSocket::from_std(std).ok()?)
        };
        let (tx, rx) = oneshot::channel();
        self.shard.handle.spawn(relay_loop(
            self.shard.clone(),
            self.inner.shared.stats.clone(),
            socket.clone(),
            client,
            relay_id,
            rx,
        ));
        Some((Relay(RelayIo::Task { socket, _stop: tx }), local))
    }

    fn sink(&mut self, client: &Client) -> Sink {
        (self.sink)(client)
    }
}

impl Inner {
    /// One client message through `shard`'s core; what it sends (a reply, a datagram to a
    /// peer) goes to `emit`.
    fn on_client(
        self: &Arc<Self>,
        shard: &Arc<Shard>,
        client: Client,
        data: &[u8],
        out: &mut [u8],
        sink: impl FnMut(&Client) -> Sink,
        emit: impl FnOnce(Out<'_, Relay>),
    ) {
        let mut io = ShardIo {
            inner: self,
            shard,
            sink,
        };
        let mut core = shard.lock();
        emit(core.handle_client(Now::current(), client, data, out, &mut io));
    }

    /// Sends what [`Inner::on_client`] emitted by a system call each: the reply through
    /// `reply`, a peer's datagram from its relay socket.
    fn send_direct(&self, out: Out<'_, Relay>, reply: impl FnOnce(&[u8])) {
        match out {
            Out::Reply(bytes) => reply(bytes),
            Out::ToPeer { relay, to, payload } => {
                if !send_now(&relay.fd(), payload, to) {
                    self.shared.stats.dropped(Dropped::SendFailed);
                }
            }
            Out::Nothing => {}
        }
    }

    fn pick(&self) -> &Arc<Shard> {
        let i = self.next_shard.fetch_add(1, Ordering::Relaxed) % self.shards.len();
        &self.shards[i]
    }
}

thread_local! {
    /// A shard thread's buffer for what its relays receive (its tasks run one at a time).
    static RELAY_BUF: std::cell::RefCell<Vec<u8>> =
        std::cell::RefCell::new(vec![0; HEADROOM + MAX_DATAGRAM + 1 + TAILROOM]);
}

/// What one relay socket receives, until its allocation drops it.
async fn relay_loop(
    shard: Arc<Shard>,
    stats: Arc<Stats>,
    socket: Arc<UdpSocket>,
    key: ClientKey,
    relay_id: u64,
    mut stop: oneshot::Receiver<()>,
) {
    loop {
        tokio::select! {
            biased;
            _ = &mut stop => return,
            r = socket.readable() => if r.is_err() { return },
        }
        RELAY_BUF.with_borrow_mut(|buf| loop {
            let room = HEADROOM..HEADROOM + MAX_DATAGRAM + 1;
            match socket.try_recv_from(&mut buf[room]) {
                Ok((n, _)) if n > MAX_DATAGRAM => stats.dropped(Dropped::TooLarge),
                Ok((n, from)) => {
                    let mut core = shard.lock();
                    let payload = HEADROOM..HEADROOM + n;
                    if let Some((sink, bytes)) =
                        core.from_peer(Now::current(), &key, relay_id, from, buf, payload)
                    {
                        sink.send(bytes, &stats);
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                // An ICMP error for an earlier send (the peer's port closed): next datagram.
                Err(_) => {}
            }
        });
    }
}

/// Sends a datagram now, or drops it (false) when the socket's buffer is full. The system call
/// is made whatever tokio last saw of the socket's writability: `try_send_to` refuses until
/// the reactor has reported a new socket writable, which dropped the first packet relayed
/// through an allocation made a moment before.
fn send_now(socket: &BorrowedFd<'_>, bytes: &[u8], to: SocketAddr) -> bool {
    socket2::SockRef::from(socket)
        .send_to(bytes, &to.into())
        .is_ok()
}

/// A shard's UDP listener: every datagram through the core.
async fn udp_loop(
    inner: Arc<Inner>,
    shard: Arc<Shard>,
    socket: Arc<UdpSocket>,
    mut stop: watch::Receiver<bool>,
) {
    let local = socket.local_addr().ok();
    // One byte more than the largest taken, so that a longer datagram shows.
    let mut buf = vec![0u8; MAX_DATAGRAM + 1];
    let mut out = vec![0u8; 1500];
    loop {
        tokio::select! {
            biased;
            _ = stop.changed() => return,
            r = socket.readable() => if r.is_err() { return },
        }
        loop {
            let (n, from) = match socket.try_recv_from(&mut buf) {
                Ok((n, _)) if n > MAX_DATAGRAM => {
                    inner.shared.stats.dropped(Dropped::TooLarge);
                    continue;
                }
                Ok(x) => x,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(_) => continue,
            };
            let client = Client {
                key: ClientKey::Udp {
                    client: from,
                    local: local.unwrap_or(from),
                },
                addr: from,
            };
            let sink = |c: &Client| Sink::Udp {
                socket: UdpOut::Task(socket.clone()),
                to: c.addr,
            };
            inner.on_client(&shard, client, &buf[..n], &mut out, sink, |o| {
                inner.send_direct(o, |reply| {
                    let _ = send_now(&socket.as_fd(), reply, from);
                })
            });
        }
    }
}

/// Ends allocations past their lifetime, every second.
async fn sweep_loop(shard: Arc<Shard>, mut stop: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            _ = tick.tick() => shard.lock().sweep(Now::current()),
        }
    }
}

/// A UDP socket with SO_REUSEPORT (one per shard on the same address).
fn reuseport_udp(addr: SocketAddr) -> std::io::Result<std::net::UdpSocket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    s.set_reuse_port(true)?;
    if addr.is_ipv6() {
        s.set_only_v6(false)?;
    }
    s.set_nonblocking(true)?;
    s.bind(&addr.into())?;
    Ok(s.into())
}

/// The host address of the first peer of each family: where relay sockets are bound.
fn relay_ips(core: &CoreConfig) -> (Option<IpAddr>, Option<IpAddr>) {
    let of = |v6: bool| {
        core.peers
            .iter()
            .find(|p| p.local.is_ipv6() == v6)
            .map(|p| p.local.ip())
    };
    (of(false), of(true))
}

/// Starts one shard's thread; returns its runtime's handle.
fn shard_thread(
    i: usize,
    mut stop: watch::Receiver<bool>,
) -> std::io::Result<(tokio::runtime::Handle, JoinHandle<()>)> {
    let (tx, rx) = std::sync::mpsc::channel();
    let t = std::thread::Builder::new()
        .name(format!("secrelay-turn-{i}"))
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return;
                }
            };
            let _ = tx.send(Ok(rt.handle().clone()));
            rt.block_on(async move {
                let _ = stop.wait_for(|s| *s).await;
            });
        })?;
    let handle = rx
        .recv()
        .map_err(|_| std::io::Error::other("the TURN shard thread ended"))??;
    Ok((handle, t))
}

impl TurnServer {
    /// Binds the listeners and starts the shards.
    pub fn start(config: TurnConfig) -> std::io::Result<TurnServer> {
        let (low, high) = config.relay_ports;
        if low == 0 || high < low {
            return Err(std::io::Error::other(format!(
                "relay ports {low}-{high}: not a range"
            )));
        }
        let stats = Arc::new(Stats::default());
        let shared = Arc::new(Shared {
            credentials: Credentials::new(&config.secret, &config.realm),
            nonces: Nonces::new(),
            quotas: Quotas::new(config.quotas),
            stats,
            config: config.core.clone(),
        });
        let (stop, stop_rx) = watch::channel(false);
        let mut threads = Vec::new();
        let mut shards = Vec::new();
        for i in 0..config.threads.max(1) {
            let (handle, t) = shard_thread(i, stop_rx.clone())?;
            threads.push(t);
            shards.push(Arc::new(Shard {
                core: Mutex::new(Core::new(shared.clone())),
                handle,
                ring: std::sync::OnceLock::new(),
            }));
        }
        let mut seed = [0u8; 4];
        let _ = getrandom::fill(&mut seed);
        let inner = Arc::new(Inner {
            relay_ips: relay_ips(&config.core),
            shared,
            shards,
            ports: Ports {
                low,
                high,
                next: AtomicU32::new(u32::from_ne_bytes(seed)),
            },
            connections: Quotas::new(QuotaLimits {
                per_identity: usize::MAX,
                ..config.quotas
            }),
            next_shard: AtomicUsize::new(0),
            next_stream: AtomicU64::new(0),
            stream_queue: config.stream_queue.max(1),
            gather: config.gather,
        });
        let server = TurnServer {
            udp_addr: None,
            tcp_addr: None,
            inner,
            stop,
            threads: Mutex::new(threads),
        };
        server.listen(&config, stop_rx)
    }

    fn listen(mut self, config: &TurnConfig, stop: watch::Receiver<bool>) -> std::io::Result<Self> {
        if let Some(mut addr) = config.udp {
            for (i, shard) in self.inner.shards.iter().enumerate() {
                let mut std = reuseport_udp(addr)?;
                addr = std.local_addr()?;
                if config.io_uring {
                    match ring::start(i, &self.inner, shard, std)? {
                        Ok(thread) => {
                            self.threads
                                .get_mut()
                                .unwrap_or_else(|e| e.into_inner())
                                .push(thread);
                            continue;
                        }
                        Err((e, back)) => {
                            tracing::warn!(shard = i, error = %e, "TURN: io_uring refused: this shard uses epoll");
                            std = back;
                        }
                    }
                }
                let socket = {
                    let _in = shard.handle.enter();
                    Arc::new(UdpSocket::from_std(std)?)
                };
                shard.handle.spawn(udp_loop(
                    self.inner.clone(),
                    shard.clone(),
                    socket,
                    stop.clone(),
                ));
            }
            self.udp_addr = Some(addr);
        }
        for shard in &self.inner.shards {
            shard.handle.spawn(sweep_loop(shard.clone(), stop.clone()));
        }
        if let Some(addr) = config.tcp {
            let std = std::net::TcpListener::bind(addr)?;
            std.set_nonblocking(true)?;
            self.tcp_addr = Some(std.local_addr()?);
            let shard = &self.inner.shards[0];
            let listener = {
                let _in = shard.handle.enter();
                TcpListener::from_std(std)?
            };
            shard
                .handle
                .spawn(tcp_accept(self.inner.clone(), listener, stop));
        }
        Ok(self)
    }

    /// The UDP listener's address.
    pub fn udp_addr(&self) -> Option<SocketAddr> {
        self.udp_addr
    }

    /// The TCP listener's address.
    pub fn tcp_addr(&self) -> Option<SocketAddr> {
        self.tcp_addr
    }

    /// Shards whose UDP sockets go through an io_uring (the others use epoll).
    pub fn io_uring_shards(&self) -> usize {
        self.inner
            .shards
            .iter()
            .filter(|s| s.ring.get().is_some())
            .count()
    }

    /// The counters.
    pub fn stats(&self) -> &Arc<Stats> {
        &self.inner.shared.stats
    }

    /// Allocations held now (all shards).
    pub fn allocations(&self) -> usize {
        self.inner.shared.quotas.held()
    }

    /// The credentials (for minting).
    pub fn credentials(&self) -> &Credentials {
        &self.inner.shared.credentials
    }

    /// Serves one byte stream (a TCP or TLS connection accepted elsewhere) from `peer`, whose
    /// first `prefix` bytes were already read, on the caller's runtime, until it closes; its
    /// allocation ends with it.
    pub async fn serve_stream<S>(&self, stream: S, peer: SocketAddr, prefix: &[u8])
    where
        S: AsyncRead + AsyncWrite + Send + 'static,
    {
        let shard = self.inner.pick().clone();
        serve_stream(self.inner.clone(), shard, stream, peer, prefix).await;
    }

    /// Stops the shards (their allocations end, their sockets close).
    pub fn stop(&self) {
        let _ = self.stop.send(true);
        for shard in &self.inner.shards {
            if let Some(r) = shard.ring.get() {
                r.stop();
            }
        }
        let threads = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|e| e.into_inner()));
        for t in threads {
            let _ = t.join();
        }
    }
}

impl Drop for TurnServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Accepts TCP connections, each within the connection bounds, spread over the shards.
async fn tcp_accept(inner: Arc<Inner>, listener: TcpListener, mut stop: watch::Receiver<bool>) {
    loop {
        let (tcp, peer) = tokio::select! {
            biased;
            _ = stop.changed() => return,
            a = listener.accept() => match a {
                Ok(a) => a,
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            },
        };
        let Ok(ticket) = inner.connections.take(b"", peer.ip()) else {
            inner.shared.stats.dropped(Dropped::ConnectionLimit);
            continue;
        };
        let _ = tcp.set_nodelay(true);
        let Ok(std) = tcp.into_std() else { continue };
        let shard = inner.pick().clone();
        let inner = inner.clone();
        shard.clone().handle.spawn(async move {
            let _ticket = ticket;
            if let Ok(tcp) = tokio::net::TcpStream::from_std(std) {
                serve_stream(inner, shard, tcp, peer, &[]).await;
            }
        });
    }
}

/// Counts an open stream while it lives.
struct StreamOpen(Arc<Stats>);

impl Drop for StreamOpen {
    fn drop(&mut self) {
        self.0.streams_open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// One stream client: frames read through the core, replies and peers' data written back
/// through a bounded queue; its allocation ends when it closes.
async fn serve_stream<S>(
    inner: Arc<Inner>,
    shard: Arc<Shard>,
    stream: S,
    peer: SocketAddr,
    prefix: &[u8],
) where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let stats = inner.shared.stats.clone();
    stats.streams_open.fetch_add(1, Ordering::Relaxed);
    let _open = StreamOpen(stats);
    let key = ClientKey::Stream(inner.next_stream.fetch_add(1, Ordering::Relaxed));
    let (rd, wr) = tokio::io::split(stream);
    let (tx, rx) = mpsc::channel::<Vec<u8>>(inner.stream_queue);
    let reader = read_frames(&inner, &shard, rd, key, peer, prefix, tx);
    tokio::select! {
        _ = reader => {}
        _ = write_frames(wr, rx) => {}
    }
    shard.lock().close(&key);
}

async fn read_frames<R: AsyncRead>(
    inner: &Arc<Inner>,
    shard: &Arc<Shard>,
    rd: R,
    key: ClientKey,
    peer: SocketAddr,
    prefix: &[u8],
    tx: mpsc::Sender<Vec<u8>>,
) {
    let mut rd = std::pin::pin!(rd);
    let mut framer = Framer::with_prefix(prefix);
    let mut out = vec![0u8; 1500];
    let idle_with_allocation = inner.shared.config.max_lifetime + STREAM_IDLE;
    loop {
        loop {
            let frame = match framer.next_frame() {
                Ok(Some(r)) => r,
                Ok(None) => break,
                Err(_) => {
                    inner.shared.stats.dropped(Dropped::Malformed);
                    return;
                }
            };
            let client = Client { key, addr: peer };
            let sink = |_: &Client| Sink::Stream(tx.clone());
            let data = &framer.bytes()[frame];
            inner.on_client(shard, client, data, &mut out, sink, |o| {
                inner.send_direct(o, |reply| {
                    Sink::Stream(tx.clone()).send(reply, &inner.shared.stats);
                })
            });
        }
        let idle = if shard.lock().has_allocation(&key) {
            idle_with_allocation
        } else {
            STREAM_IDLE
        };
        match tokio::time::timeout(idle, rd.read(framer.spare())).await {
            Ok(Ok(n)) if n > 0 => framer.filled(n),
            _ => return,
        }
    }
}

/// Writes what is queued for a stream client, coalescing what is waiting into one write.
async fn write_frames<W: AsyncWrite>(wr: W, mut rx: mpsc::Receiver<Vec<u8>>) {
    let mut wr = std::pin::pin!(wr);
    let mut batch = Vec::with_capacity(16 * 1024);
    while let Some(first) = rx.recv().await {
        batch.clear();
        batch.extend_from_slice(&first);
        while batch.len() < 16 * 1024 {
            match rx.try_recv() {
                Ok(more) => batch.extend_from_slice(&more),
                Err(_) => break,
            }
        }
        if wr.write_all(&batch).await.is_err() || wr.flush().await.is_err() {
            return;
        }
    }
}

/// The loopback address of `ip`'s family (where a relay reaches a media socket that listens
/// on every address).
pub fn loopback_of(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::LOCALHOST),
    }
}
