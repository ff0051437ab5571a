//! A packet worker: one thread, one SO_REUSEPORT socket on the shared media port, and the
//! [`Shard`] that decides everything about the rooms hashed to it. The worker itself does I/O
//! only.
//!
//! The loop: wait (mio) for the socket, a wake from the control plane or another worker, or
//! the shard's next deadline; then take commands (answered by the shard), then datagrams
//! handed over by other workers, then read the socket in `recvmmsg` batches. Each datagram is
//! classified once, here ([`Datagram::classify`]), and given to the shard; one the shard does
//! not own goes to the worker the directory names (with its class: nobody parses it again),
//! or is counted as from an unknown source. After each batch the shard runs its media (two
//! SRTP engine calls) and the worker sends what it queued in `sendmmsg` batches, writes the
//! routes it reports into the directory, and fires its timers. Nothing on the packet path
//! takes a lock or allocates in steady state: remote routes are cached per worker, and
//! handed-over buffers go back to the worker they came from.

use std::collections::HashMap;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, TryRecvError};
use mio::{Events, Interest, Poll, Token, Waker};
use secrelay_wire::demux::Class;
use tokio::sync::oneshot;

use super::config::MediaIo;
use super::directory::Directory;
use super::error::ApiError;
use super::ports::PortPool;
use super::stats::WorkerStats;
use super::udp::{Flushed, RecvBatch, SendBatch, BATCH};
use crate::admission::{Admission, AdmissionConfig, LoadMeter};
use crate::counters::DropReason;
use crate::leg::{Ports, Quarantine, RtpLegOptions, TransmitKind, Via};
use crate::shard::{
    Datagram, Event, Handled, JoinError, JoinedRtp, Lifecycle, Output, ParticipantSnapshot,
    RoomSnapshot, Shard,
};

mod ice_tcp;
mod pipes;
mod queue;
mod uring_io;
mod xsk_io;
use ice_tcp::IceTcp;
pub(crate) use ice_tcp::{bind_ice_tcp, TcpClose};
pub(crate) use pipes::PipeMsg;
use uring_io::MediaRing;

const SOCKET: Token = Token(0);
const WAKER: Token = Token(1);
/// The io_uring's descriptor (readable when completions wait), on that path.
const RING: Token = Token(1 << 19);
/// Tokens of telephony legs' sockets: this plus the port.
const LEG_TOKENS: usize = 2;
/// Socket batches read before the loop looks at commands and timers again.
const BATCHES_PER_TURN: usize = 16;
/// Ready leg sockets read before what they brought is processed and sent (a turn with many
/// ready legs sends as it goes, so a datagram's relay latency does not grow with their number).
const LEGS_PER_SEND: usize = 32;
/// How often the shard's counters are published for `/metrics` and the API.
const PUBLISH_EVERY: Duration = Duration::from_millis(200);
/// Copies a batch's routing makes before they are protected and sent, the next packets
/// routed after ([`Shard::flush_part`]; a packet's copies are never split). Small rooms'
/// batches stay whole (32 packets to three others each); a broadcast's batch to 500 viewers
/// goes two packets at a time (a copy counted per member), its copy buffers reused between
/// parts.
const COPIES_PER_PART: usize = 1024;
/// Datagrams queued at a worker by the others before new ones are dropped (memory is taken
/// only for those waiting: [`queue`]).
const HANDOFF_QUEUE: usize = 65_536;

/// A control operation on the rooms a worker owns, run on its thread with the worker and
/// the instant ([`Peer::run`]): it calls a [`Shard`] method and replies itself, after the
/// worker sent what the shard queued and wrote its routes into the directory.
pub(crate) type Work = Box<dyn FnOnce(&mut Worker, Instant) + Send>;

/// A request to a worker.
pub(crate) enum Command {
    /// A control operation ([`Peer::run`]: one shard method per operation, no variant of its
    /// own).
    Run(Work),
    /// A remote address a member here validated is another worker's member's now (its check
    /// authenticated there later): the member here gives it up.
    AddressTaken(SocketAddr),
    /// An ICE-TCP connection the listening worker accepted, whose first check names a
    /// participant of this worker: read here from now on.
    AdoptTcp(Box<ice_tcp::Conn>),
    /// End the thread.
    Stop,
}

impl std::fmt::Debug for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Command::Run(_) => f.write_str("Run"),
            Command::AddressTaken(a) => f.debug_tuple("AddressTaken").field(a).finish(),
            Command::AdoptTcp(c) => f.debug_tuple("AdoptTcp").field(c).finish(),
            Command::Stop => f.write_str("Stop"),
        }
    }
}

/// A datagram received by one worker for a member another worker's shard owns: its bytes and
/// the class it was given when it was read.
#[derive(Debug)]
pub(crate) struct Handoff {
    via: Via,
    from: SocketAddr,
    class: Class,
    buf: Vec<u8>,
    received: Instant,
    origin: usize,
}

/// How workers reach one another.
#[derive(Debug, Clone)]
pub(crate) struct Peer {
    pub commands: Sender<Command>,
    pub handoffs: queue::Bounded<Handoff>,
    /// Packets through the pipes of rooms spread over workers.
    pub pipes: queue::Bounded<PipeMsg>,
    pub returns: Sender<Vec<u8>>,
    pub waker: Arc<Waker>,
}

impl Peer {
    /// Runs `f` on this worker's thread with the worker; what it returned, once the worker has
    /// sent what its shard queued and written its routes (so that a participant's first check
    /// finds its route). `None` when the worker is gone, or `f` panicked (the worker goes on).
    pub(crate) async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Worker, Instant) -> T + Send + 'static,
    ) -> Option<T> {
        let (tx, rx) = oneshot::channel();
        let work: Work = Box::new(move |w, now| {
            let r = f(w, now);
            w.after_command();
            let _ = tx.send(r);
        });
        self.commands.send(Command::Run(work)).ok()?;
        let _ = self.waker.wake();
        rx.await.ok()
    }
}

/// What every worker shares.
pub(crate) struct Shared {
    /// Which worker owns what.
    pub directory: Directory,
    /// Telephony legs' local ports.
    pub ports: PortPool,
    /// The address telephony legs' sockets bind (the media port's).
    pub bind_ip: std::net::IpAddr,
    /// All the workers, by index.
    pub peers: Vec<Peer>,
    /// Ids of participants that ended (for any reason), for the HTTP side to forget their
    /// resources; appended on removal, taken by the control plane.
    pub ended: std::sync::Mutex<Vec<String>>,
    /// The events channels participants listen on (by id): our new offers go there.
    pub notices: std::sync::Mutex<HashMap<String, tokio::sync::mpsc::UnboundedSender<Notice>>>,
    /// When each worker sheds what (admission control).
    pub admission: AdmissionConfig,
    /// Where rooms' and members' lifecycle goes (the signaling's records, webhooks), once the
    /// server watches it.
    pub lifecycle: std::sync::OnceLock<tokio::sync::mpsc::Sender<Lifecycle>>,
    /// Lifecycle events dropped because the watcher's queue was full.
    pub lifecycle_dropped: std::sync::atomic::AtomicU64,
    /// Where recorded calls' packets go (`recording_dir`).
    pub recorder: Option<Arc<super::recording::Recorder>>,
    /// The audio files `play media` decoded, for the ng socket and the HTTP API alike.
    pub clips: tokio::sync::Mutex<super::ng_media::Clips>,
    /// ICE-TCP connections open, all workers together.
    pub ice_tcp_open: std::sync::atomic::AtomicUsize,
    /// The worker of each participant that joined on another worker than its room's (a
    /// spread room's viewers), by id: where operations on it go.
    pub placed: std::sync::Mutex<HashMap<String, usize>>,
    /// The XDP filter in front of the media ports, when one is attached (`xdp`).
    pub xdp: Option<Arc<super::xdp::Gate>>,
    /// The interfaces the workers bind their XDP sockets on (`media_io = "af_xdp"`; empty
    /// on the other paths).
    pub xsk_interfaces: Vec<String>,
    /// The links to the other nodes of a cluster (`cluster_pipe`), once they listen.
    pub node_pipes: std::sync::OnceLock<Arc<super::node_pipes::NodePipes>>,
}

/// A message for a participant's events channel (Server-Sent Events).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    /// The event's name (`offer`).
    pub event: &'static str,
    /// Its data: one JSON object.
    pub data: String,
}

impl Shared {
    /// Takes the ids of the participants that ended since the last call.
    pub fn take_ended(&self) -> Vec<String> {
        std::mem::take(&mut *self.ended.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// The receiving ends of a worker's channels.
pub(crate) struct Inbox {
    commands: Receiver<Command>,
    handoffs: Receiver<Handoff>,
    pipes: Receiver<PipeMsg>,
    returns: Receiver<Vec<u8>>,
}

/// A worker's channels and poll, made before the thread starts so that every worker can know
/// every other.
pub(crate) fn channels() -> std::io::Result<(Peer, Inbox, Poll)> {
    let poll = Poll::new()?;
    let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
    let (ctx, crx) = crossbeam_channel::unbounded();
    let (htx, hrx) = queue::bounded(HANDOFF_QUEUE);
    let (ptx, prx) = queue::bounded(HANDOFF_QUEUE);
    let (rtx, rrx) = crossbeam_channel::unbounded();
    Ok((
        Peer {
            commands: ctx,
            handoffs: htx,
            pipes: ptx,
            returns: rtx,
            waker,
        },
        Inbox {
            commands: crx,
            handoffs: hrx,
            pipes: prx,
            returns: rrx,
        },
        poll,
    ))
}

/// Datagrams queued for one socket, with the receive instant of each that is a media copy.
#[derive(Default)]
struct Outbox {
    batch: SendBatch,
    origin: Vec<Option<Instant>>,
    /// On the AF_XDP path: the XDP socket (interface) its last frame went through, asked first
    /// for the next (a socket's datagrams mostly go to one destination).
    xsk_hint: usize,
}

impl Outbox {
    fn for_socket(socket: &mio::net::UdpSocket) -> Outbox {
        Outbox {
            batch: SendBatch::for_socket(socket),
            origin: Vec::new(),
            xsk_hint: 0,
        }
    }
}

/// A telephony leg's socket and its queue.
struct LegSocket {
    socket: mio::net::UdpSocket,
    /// Its inode, by which the kernel's UDP tables name it (for its drops), where known.
    inode: Option<u64>,
    /// The address it is bound on.
    local: SocketAddr,
    out: Outbox,
}

/// A worker: its shard and its I/O. Built by the server, run with [`Worker::run`].
pub(crate) struct Worker {
    index: usize,
    socket: mio::net::UdpSocket,
    /// The address the shared socket is bound on.
    shared_local: SocketAddr,
    poll: Poll,
    shared: Arc<Shared>,
    stats: Arc<WorkerStats>,
    inbox: Inbox,
    shard: Shard,
    /// Which other worker owns an address, as far as this one knows (cleared when the
    /// directory's generation moves).
    remote: HashMap<SocketAddr, usize>,
    remote_gen: u64,
    recv: Option<RecvBatch>,
    /// What goes out of the shared socket.
    out: Outbox,
    /// Telephony legs' sockets, by local port.
    legs: HashMap<u16, LegSocket>,
    /// Leg sockets that may have datagrams waiting.
    ready_legs: Vec<u16>,
    /// Leg sockets with datagrams queued to send.
    dirty_legs: Vec<u16>,
    /// Handed-over datagram buffers to reuse.
    spare: Vec<Vec<u8>>,
    /// Workers handed a datagram in this batch, to wake once it is read.
    wake_pending: Vec<bool>,
    last_publish: Instant,
    /// The share of time this worker works, and what it sheds for it.
    load: LoadMeter,
    admission: Admission,
    /// ICE-TCP: the listener (the first worker's) and the connections read here.
    tcp: IceTcp,
    /// The io_uring every UDP socket of this worker is read and written through, on that
    /// path (`None`: `recvmmsg`/`sendmmsg`, woken by epoll).
    ring: Option<MediaRing>,
    /// Completions being handled (kept for its allocation).
    completions: Vec<secrelay_uring::Completion<()>>,
    /// Sends completed right after a submit (kept for its allocation).
    sent: Vec<secrelay_uring::Completion<()>>,
    /// The XDP sockets this worker reads and writes frames through, one per `xdp` interface,
    /// on the AF_XDP path (empty on the others).
    xsk: Vec<xsk_io::XskPath>,
    /// What goes to other nodes through the node pipes, sealed, sent once per turn.
    node_out: pipes::NodeOut,
}

impl Worker {
    /// A worker on `socket` driving `shard`, its sockets read and written the way `io` says;
    /// the one given `ice_tcp` accepts ICE-TCP connections. Built on the worker's own thread
    /// (an io_uring's receives complete on the thread that armed them).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        index: usize,
        socket: UdpSocket,
        ice_tcp: Option<std::net::TcpListener>,
        poll: Poll,
        inbox: Inbox,
        shared: Arc<Shared>,
        stats: Arc<WorkerStats>,
        shard: Shard,
        io: MediaIo,
    ) -> std::io::Result<Worker> {
        let mut socket = mio::net::UdpSocket::from_std(socket);
        let shared_local = socket.local_addr()?;
        let ring = match io {
            MediaIo::IoUring => uring_io::ring_for(index, &socket),
            MediaIo::Mmsg | MediaIo::AfXdp => None,
        };
        let xsk = match (io, &shared.xdp) {
            (MediaIo::AfXdp, Some(gate)) => xsk_io::open_all(index, &shared.xsk_interfaces, gate),
            _ => Vec::new(),
        };
        for (i, x) in xsk.iter().enumerate() {
            poll.registry().register(
                &mut mio::unix::SourceFd(&x.as_raw_fd()),
                Token(xsk_io::XSK + i),
                Interest::READABLE,
            )?;
        }
        match &ring {
            Some(r) => poll.registry().register(
                &mut mio::unix::SourceFd(&std::os::fd::AsRawFd::as_raw_fd(r)),
                RING,
                Interest::READABLE,
            )?,
            None => poll
                .registry()
                .register(&mut socket, SOCKET, Interest::READABLE)?,
        }
        stats.set_media_io(match (&ring, xsk.is_empty()) {
            (Some(_), _) => MediaIo::IoUring,
            (None, false) => MediaIo::AfXdp,
            (None, true) => MediaIo::Mmsg,
        });
        let mut tcp = IceTcp::new(ice_tcp.map(mio::net::TcpListener::from_std));
        if let Some(l) = tcp.listener_mut() {
            poll.registry()
                .register(l, ice_tcp::LISTENER, Interest::READABLE)?;
        }
        let out = Outbox::for_socket(&socket);
        let peers = shared.peers.len();
        let admission = Admission::new(shared.admission);
        Ok(Worker {
            index,
            socket,
            shared_local,
            poll,
            shared,
            stats,
            inbox,
            shard,
            remote: HashMap::new(),
            remote_gen: 0,
            recv: Some(RecvBatch::default()),
            out,
            legs: HashMap::new(),
            ready_legs: Vec::new(),
            dirty_legs: Vec::new(),
            spare: Vec::new(),
            wake_pending: vec![false; peers],
            node_out: pipes::NodeOut::default(),
            last_publish: Instant::now(),
            load: LoadMeter::new(Instant::now(), thread_cpu()),
            admission,
            tcp,
            ring,
            completions: Vec::with_capacity(BATCH),
            sent: Vec::new(),
            xsk,
        })
    }

    /// Runs until [`Command::Stop`].
    pub fn run(mut self) {
        // Room for every leg socket that a busy turn finds ready (each is read once per turn).
        let mut events = Events::with_capacity(1024);
        // On the io_uring path the socket is never read directly: completions bring its data.
        let mut socket_ready = self.ring.is_none();
        // Bit i: the XDP socket on the worker's ith interface may have frames waiting.
        let mut xsk_ready: u32 = (1u32 << self.xsk.len()) - 1;
        loop {
            let now = Instant::now();
            let timeout = if socket_ready
                || xsk_ready != 0
                || !self.ready_legs.is_empty()
                || self.tcp.busy()
                || self.ring.as_mut().is_some_and(|r| r.pending())
            {
                Duration::ZERO
            } else {
                let publish = self.last_publish + PUBLISH_EVERY;
                self.shard
                    .poll_timeout()
                    .map_or(publish, |t| t.min(publish))
                    .saturating_duration_since(now)
            };
            if let Err(e) = self.poll.poll(&mut events, Some(timeout)) {
                if e.kind() != std::io::ErrorKind::Interrupted {
                    tracing::error!(worker = self.index, error = %e, "poll failed");
                }
            }
            for ev in events.iter() {
                match ev.token() {
                    SOCKET => socket_ready = true,
                    Token(t) if (xsk_io::XSK..xsk_io::XSK + self.xsk.len()).contains(&t) => {
                        xsk_ready |= 1 << (t - xsk_io::XSK);
                    }
                    WAKER | RING => {}
                    _ if self.tcp.on_event(ev) => {}
                    Token(t) => {
                        if let Ok(port) = u16::try_from(t - LEG_TOKENS) {
                            if !self.ready_legs.contains(&port) {
                                self.ready_legs.push(port);
                            }
                        }
                    }
                }
            }
            if self.take_commands() {
                return;
            }
            self.take_handoffs();
            self.take_pipes();
            // The interfaces with frames waiting share a turn's batches, as one socket would
            // have them.
            let share = (BATCHES_PER_TURN / xsk_ready.count_ones().max(1) as usize).max(1);
            for i in 0..self.xsk.len() {
                if xsk_ready & (1 << i) != 0 && !self.read_xsk(i, share) {
                    xsk_ready &= !(1 << i);
                }
            }
            if self.ring.is_some() {
                self.read_ring();
            } else if socket_ready {
                socket_ready = self.read_socket();
            }
            if !self.ready_legs.is_empty() {
                // What the shared socket brought goes out before the legs are read: with
                // hundreds of leg sockets ready, reading them all is a long part of a turn.
                self.send_outputs();
                self.read_legs();
            }
            if self.tcp.busy() {
                self.tcp_turn();
            }
            let now = Instant::now();
            if self.shard.poll_timeout().is_some_and(|t| t <= now) {
                self.shard.handle_timeout(now);
            }
            self.send_outputs();
            if self.last_publish.elapsed() >= PUBLISH_EVERY {
                self.publish();
            }
        }
    }

    /// Handles the queued commands; `true` to stop.
    fn take_commands(&mut self) -> bool {
        loop {
            match self.inbox.commands.try_recv() {
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
                    }
                }
                Err(TryRecvError::Empty) => return false,
                Err(TryRecvError::Disconnected) => return true,
            }
        }
    }

    /// Answers a command.
    fn command(&mut self, cmd: Command) {
        match cmd {
            Command::Run(work) => work(self, Instant::now()),
            Command::AdoptTcp(conn) => self.tcp_adopt(*conn),
            Command::AddressTaken(addr) => {
                // Unless one of ours took it back since.
                if self.shared.directory.by_addr(&addr) != Some(self.index) {
                    self.shard.yield_address(addr);
                }
            }
            Command::Stop => unreachable!("handled by take_commands"),
        }
    }

    /// Its shard, for a control operation ([`Peer::run`]).
    pub(crate) fn shard_mut(&mut self) -> &mut Shard {
        &mut self.shard
    }

    /// The rooms (one room, or all of this worker's), their figures just published, and
    /// which participants' media goes over TCP.
    pub(crate) fn snapshot(&mut self, now: Instant, room: Option<&str>) -> Vec<RoomSnapshot> {
        self.publish();
        let mut rooms = self.shard.snapshot(now, room);
        self.tcp_mark_paths(&mut rooms);
        rooms
    }

    /// Ends every member of `room`; their figures just before.
    pub(crate) fn end_room(&mut self, now: Instant, room: &str) -> Vec<ParticipantSnapshot> {
        let members: Vec<ParticipantSnapshot> = self
            .shard
            .snapshot(now, Some(room))
            .into_iter()
            .flat_map(|r| r.participants)
            .collect();
        for p in &members {
            self.shard.leave(now, room, &p.id);
        }
        members
    }

    /// A telephony leg made by `make` on a port pair of its own ([`Worker::with_ports`]), with
    /// `options`'s interface and the pair's quarantine.
    pub(crate) fn with_leg_ports(
        &mut self,
        now: Instant,
        options: RtpLegOptions,
        make: impl FnOnce(&mut Shard, Ports, &RtpLegOptions) -> Result<JoinedRtp, JoinError>,
    ) -> Result<JoinedRtp, ApiError> {
        let at = options.at.ok_or(options.bind);
        self.with_ports(at, now, |shard, ports, quarantine| {
            let options = RtpLegOptions {
                quarantine,
                ..options
            };
            make(shard, ports, &options)
        })
    }

    /// Binds a port pair for a telephony leg (`Ok`: exactly there; `Err`: from the range, on
    /// that address, else the gateway's UDP address), makes the leg with `make` (given the
    /// pair's previous peers to refuse), and keeps the sockets it uses.
    fn with_ports(
        &mut self,
        at: Result<SocketAddr, Option<std::net::IpAddr>>,
        now: Instant,
        make: impl FnOnce(&mut Shard, Ports, Quarantine) -> Result<JoinedRtp, JoinError>,
    ) -> Result<JoinedRtp, ApiError> {
        let pair = match at {
            Ok(exact) => self.shared.ports.bind_at(exact),
            Err(bind) => self
                .shared
                .ports
                .bind_pair(bind.unwrap_or(self.shared.bind_ip), now),
        }?;
        let ports = Ports {
            rtp: pair.rtp_addr,
            rtcp: pair.rtcp_addr,
        };
        // A leg that was not made leaves the pair's previous peers remembered, as they were.
        let remembered = pair.quarantine.sources.clone();
        let r = make(&mut self.shard, ports, pair.quarantine);
        let (used, peers): (&[u16], &[SocketAddr]) = match &r {
            Ok(j) => (&j.ports, &[]),
            Err(_) => (&[], &remembered),
        };
        for (addr, socket) in [(pair.rtp_addr, pair.rtp), (pair.rtcp_addr, pair.rtcp)] {
            let port = addr.port();
            if !used.contains(&port) {
                drop(socket);
                self.shared.ports.release(port, peers, now);
                continue;
            }
            let inode = super::udp::inode(&socket);
            if let Some(i) = inode {
                self.stats.socket_opened(i);
            }
            let mut socket = mio::net::UdpSocket::from_std(socket);
            match &self.shared.xdp {
                Some(gate) if !self.shared.xsk_interfaces.is_empty() => {
                    gate.own_ports(&[port], self.xsk.first().map(|x| x.queue()));
                }
                _ => {}
            }
            if let Some(ring) = self.ring.as_mut() {
                // Armed at the worker's next submit (after this command).
                ring.arm(u32::from(port), &socket);
            } else {
                if let Err(e) = self.poll.registry().register(
                    &mut socket,
                    Token(LEG_TOKENS + usize::from(port)),
                    Interest::READABLE,
                ) {
                    tracing::error!(worker = self.index, error = %e, "registering a leg socket");
                }
                // Anything that arrived before the registration is read on the next turn.
                self.ready_legs.push(port);
            }
            self.legs.insert(
                port,
                LegSocket {
                    inode,
                    out: Outbox::for_socket(&socket),
                    local: addr,
                    socket,
                },
            );
        }
        Ok(r?)
    }

    /// Closes a leg's sockets and gives its ports back, with the remote addresses it used
    /// them with (`peers`: refused by the ports' next leg for a while).
    fn close_leg_ports(&mut self, ports: &[u16], peers: &[SocketAddr]) {
        let now = Instant::now();
        if let Some(ring) = self.ring.as_mut() {
            for p in ports {
                ring.disarm(u32::from(*p));
            }
            // Returns once the kernel let go of the sockets: their ports can be bound again.
            if let Err(e) = ring.submit() {
                tracing::error!(worker = self.index, error = %e, "io_uring submit");
            }
        }
        for p in ports {
            if let Some(mut l) = self.legs.remove(p) {
                if let Some(i) = l.inode {
                    self.stats.socket_closed(i);
                }
                if self.ring.is_none() {
                    let _ = self.poll.registry().deregister(&mut l.socket);
                }
            }
            self.ready_legs.retain(|r| r != p);
            self.dirty_legs.retain(|r| r != p);
            self.shared.ports.release(*p, peers, now);
        }
        if let Some(g) = &self.shared.xdp {
            g.close_ports(ports);
        }
    }

    /// What follows a control command: its outputs sent, the load sampled (admission sheds
    /// by it), and the census it changed published (participants, rooms, members by kind,
    /// sessions ended, handshakes: what the API counts and places joins by). The rest of the
    /// counters wait for the next [`PUBLISH_EVERY`]: summing them walks every member, and
    /// after each of thousands of joins that walk was most of the worker's time while they
    /// came in (its socket overflowed with media meanwhile).
    pub(crate) fn after_command(&mut self) {
        self.send_outputs();
        self.publish_load();
        self.stats.publish_census(self.shard.census());
    }

    fn take_handoffs(&mut self) {
        while let Ok(buf) = self.inbox.returns.try_recv() {
            // Hand-offs' buffers are the worker's; pipes' the shard's (either does for either).
            if self.spare.len() < 1024 {
                self.spare.push(buf);
            } else {
                self.shard.recycle(buf);
            }
        }
        let mut n: usize = 0;
        while let Ok(mut h) = self.inbox.handoffs.try_recv() {
            // SRTP the shard stages keeps the handed-over buffer (one of the shard's goes back
            // in its place): its bytes are not copied again.
            let head = (h.via, h.from, h.class);
            if self
                .shard
                .handle_owned(Instant::now(), head, &mut h.buf, h.received)
                == Handled::NotOurs
            {
                // The member left between the hand-off and now.
                self.shard.count_drop(DropReason::UnknownSource);
            }
            let _ = self.shared.peers[h.origin].returns.send(h.buf);
            n += 1;
            if n.is_multiple_of(BATCH) {
                self.send_outputs();
            }
        }
        if n > 0 {
            self.send_outputs();
        }
    }

    /// Reads up to `BATCHES_PER_TURN` batches; `true` when the socket may have more.
    fn read_socket(&mut self) -> bool {
        // The batch is taken out of `self` while its datagrams go to the shard (which needs
        // `&mut self`), and put back after: no copy of the datagrams.
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
            self.refresh_routes();
            let mut bytes = 0;
            for i in 0..n {
                let (from, d) = recv.get(i);
                bytes += d.len() as u64;
                self.take(Via::Shared, from, d, received);
            }
            self.stats.bytes_in.fetch_add(bytes, Ordering::Relaxed);
            self.wake_peers();
            self.send_outputs();
            if n < BATCH {
                return false;
            }
        }
        true
    }

    /// Reads the leg sockets that are ready, up to `BATCHES_PER_TURN` batches each; those that
    /// may have more stay ready.
    fn read_legs(&mut self) {
        let mut recv = self
            .recv
            .take()
            .expect("the batch is in place between reads");
        let ready = std::mem::take(&mut self.ready_legs);
        for (k, port) in ready.into_iter().enumerate() {
            // A datagram waits for the legs read after it only up to a few dozen sockets.
            if k > 0 && k % LEGS_PER_SEND == 0 {
                self.send_outputs();
            }
            if self.read_leg(&mut recv, port) {
                self.ready_legs.push(port);
            }
        }
        self.recv = Some(recv);
    }

    /// `true` when the socket may have more.
    fn read_leg(&mut self, recv: &mut RecvBatch, port: u16) -> bool {
        for _ in 0..BATCHES_PER_TURN {
            let Some(leg) = self.legs.get(&port) else {
                return false;
            };
            let n = match recv.recv(&leg.socket) {
                Ok(0) => return false,
                Ok(n) => n,
                Err(e) => {
                    tracing::debug!(worker = self.index, error = %e, "recvmmsg on a leg port");
                    return true;
                }
            };
            let received = Instant::now();
            self.stats
                .datagrams_in
                .fetch_add(n as u64, Ordering::Relaxed);
            let mut bytes = 0;
            for i in 0..n {
                let (from, d) = recv.get(i);
                bytes += d.len() as u64;
                self.take(Via::Port(port), from, d, received);
            }
            self.stats.bytes_in.fetch_add(bytes, Ordering::Relaxed);
            // What every ready leg brought in this turn is staged, and runs through the SRTP
            // engine together in the turn's `send_outputs` (one leg's socket seldom holds more
            // than a packet or two: a flush per leg would make batches of one).
            if n < BATCH {
                return false;
            }
        }
        true
    }

    /// Forgets the cached routes when the directory changed.
    fn refresh_routes(&mut self) {
        if self.shared.directory.generation() != self.remote_gen {
            self.remote.clear();
            self.remote_gen = self.shared.directory.generation();
        }
    }

    /// Wakes the workers handed datagrams since the last wake (one wake per batch and peer).
    fn wake_peers(&mut self) {
        for (w, pending) in self.wake_pending.iter_mut().enumerate() {
            if std::mem::take(pending) {
                let _ = self.shared.peers[w].waker.wake();
            }
        }
    }

    /// A datagram read on the socket `via`, classified once: from the shared socket to this
    /// worker's shard or the one that owns it; from a telephony leg's own port to that leg, or
    /// counted as from an unknown source. (Its bytes are counted by the caller, per batch.)
    fn take(&mut self, via: Via, from: Option<SocketAddr>, d: &[u8], received: Instant) {
        let Some(from) = from else {
            self.shard.count_drop(DropReason::UnknownSource);
            return;
        };
        let d = Datagram::classify_on(via, from, d, received);
        match via {
            Via::Shared => {
                if let Some(w) = self.named_elsewhere(&d) {
                    self.hand_to(w, d);
                } else if self.shard.handle(received, d) == Handled::NotOurs {
                    self.hand_over(d);
                }
            }
            Via::Port(_) | Via::Pipe => {
                if self.shard.handle(received, d) == Handled::NotOurs {
                    self.shard.count_drop(DropReason::UnknownSource);
                }
            }
        }
    }

    /// The other worker whose member a STUN check names, when none of this worker's has the
    /// ufrag it names: the check goes to its member, whoever owns its source address.
    fn named_elsewhere(&self, d: &Datagram<'_>) -> Option<usize> {
        let Class::Stun(facts) = d.class else {
            return None;
        };
        let ufrag = facts.target_ufrag(d.bytes)?;
        if self.shard.owns_ufrag(ufrag) {
            return None;
        }
        self.shared
            .directory
            .by_ufrag(ufrag)
            .filter(|w| *w != self.index)
    }

    /// A datagram this worker's shard does not own: to the worker that does, or counted.
    fn hand_over(&mut self, d: Datagram<'_>) {
        let owner = match self.remote.get(&d.from) {
            Some(w) => Some(*w),
            None => match self.shared.directory.by_addr(&d.from) {
                Some(w) => {
                    self.remote.insert(d.from, w);
                    Some(w)
                }
                None => match d.class {
                    Class::Stun(facts) => facts
                        .target_ufrag(d.bytes)
                        .and_then(|u| self.shared.directory.by_ufrag(u)),
                    _ => None,
                },
            },
        };
        match owner.filter(|w| *w != self.index) {
            Some(worker) => self.hand_to(worker, d),
            None => self.shard.count_drop(DropReason::UnknownSource),
        }
    }

    /// Queues `d` for `worker`'s shard (woken once the batch is read).
    fn hand_to(&mut self, worker: usize, d: Datagram<'_>) {
        let mut buf = self.spare.pop().unwrap_or_else(|| Vec::with_capacity(1600));
        buf.clear();
        crate::copy_count::count();
        buf.extend_from_slice(d.bytes);
        let h = Handoff {
            via: d.via,
            from: d.from,
            class: d.class,
            buf,
            received: d.received,
            origin: self.index,
        };
        match self.shared.peers[worker].handoffs.try_send(h) {
            Ok(()) => {
                self.stats.handed_off.fetch_add(1, Ordering::Relaxed);
                // One wake per batch and peer, not one per datagram.
                self.wake_pending[worker] = true;
            }
            Err(h) => {
                self.spare.push(h.buf);
                self.shard.count_drop(DropReason::HandoffQueueFull);
            }
        }
    }

    /// Runs the shard's staged media and sends everything it queued; writes the routes it
    /// reports into the directory. A batch whose packets make many copies (a broadcast's) is
    /// routed and sent a part at a time ([`COPIES_PER_PART`]), so that its copies' buffers
    /// come back between parts instead of all being held at once.
    fn send_outputs(&mut self) {
        let staged = self.shard.staged();
        if staged == 0 {
            return self.take_outputs();
        }
        let mut spent = Duration::ZERO;
        loop {
            let started = Instant::now();
            let more = self.shard.flush_part(COPIES_PER_PART);
            spent += started.elapsed();
            if !more {
                break;
            }
            self.take_outputs();
        }
        let per = spent / staged as u32;
        self.stats.media_processing.record_n(per, staged as u64);
        self.take_outputs();
    }

    /// Takes everything the shard queued and sends it; writes the routes it reports into the
    /// directory.
    fn take_outputs(&mut self) {
        while let Some(out) = self.shard.poll_output() {
            match out {
                Output::Transmit(t) => {
                    let origin = match t.kind {
                        TransmitKind::Media => t.received,
                        _ => None,
                    };
                    let (destination, via) = (t.destination, t.via);
                    // Sent from the shard's buffer itself (given back once sent).
                    let Some(buf) = self.shard.take_sent_buffer() else {
                        continue;
                    };
                    let out = match via {
                        // A browser reached over ICE-TCP: framed on its connection.
                        Via::Shared if self.tcp_send(destination, &buf, origin) => {
                            self.shard.recycle(buf);
                            continue;
                        }
                        Via::Shared => &mut self.out,
                        Via::Port(p) => match self.legs.get_mut(&p) {
                            Some(l) => {
                                if l.out.batch.is_empty() {
                                    self.dirty_legs.push(p);
                                }
                                &mut l.out
                            }
                            None => {
                                // The leg's socket closed after the copy was made.
                                self.shard.count_drop(DropReason::SendFailed);
                                self.shard.recycle(buf);
                                continue;
                            }
                        },
                        // The shard hands pipes' packets over as `Output::Pipe`, never so.
                        Via::Pipe => {
                            self.shard.count_drop(DropReason::InternalError);
                            self.shard.recycle(buf);
                            continue;
                        }
                    };
                    out.batch.push(destination, buf);
                    out.origin.push(origin);
                }
                Output::Pipe(t) => {
                    let (worker, key, what) = (t.worker, t.key, t.what);
                    if let Some(buf) = self.shard.take_sent_buffer() {
                        self.pipe_to(worker, key, what, buf);
                    }
                }
                Output::Event(e) => self.on_event(e),
                Output::Timeout(_) => break,
            }
        }
        self.flush_send();
        self.wake_peers();
    }

    fn on_event(&mut self, e: Event) {
        let dir = &self.shared.directory;
        match e {
            Event::AddressOwned(addr) => {
                if let Some(old) = dir.add_addr(addr, self.index) {
                    let peer = &self.shared.peers[old];
                    if peer.commands.send(Command::AddressTaken(addr)).is_ok() {
                        let _ = peer.waker.wake();
                    }
                }
                self.tcp_validated(addr);
            }
            Event::UfragOwned(u) => dir.add_ufrag(&u, self.index),
            Event::Pipe(e) => self.on_pipe_event(e),
            Event::MemberLeft {
                id,
                ufrags,
                addrs,
                ports,
                peers,
                ..
            } => {
                {
                    let mut placed = self.shared.placed.lock().unwrap_or_else(|e| e.into_inner());
                    if placed.get(&id) == Some(&self.index) {
                        placed.remove(&id);
                    }
                }
                dir.remove(&ufrags, &addrs, self.index);
                self.close_leg_ports(&ports, &peers);
                self.tcp_ended(&addrs);
                // Its events channel ends with it.
                self.shared
                    .notices
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&id);
                self.shared
                    .ended
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(id);
            }
            Event::Connected { handshake } => self.stats.handshake_time.record(handshake),
            Event::Recorded { key, at, packet } => {
                if let Some(r) = &self.shared.recorder {
                    r.packet(key, at, packet);
                }
            }
            Event::Sources(ports) => {
                if let Some(g) = &self.shared.xdp {
                    g.leg_sources(&ports);
                }
            }
            Event::Lifecycle(l) => {
                if let Some(tx) = self.shared.lifecycle.get() {
                    if tx.try_send(l).is_err() {
                        self.shared
                            .lifecycle_dropped
                            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                }
            }
            Event::Offer { id, revision, sdp } => {
                let notices = self
                    .shared
                    .notices
                    .lock()
                    .unwrap_or_else(|e| e.into_inner());
                if let Some(tx) = notices.get(&id) {
                    let data = serde_json::json!({ "revision": revision, "sdp": sdp }).to_string();
                    let _ = tx.send(Notice {
                        event: "offer",
                        data,
                    });
                }
            }
        }
    }

    fn flush_send(&mut self) {
        self.node_flush();
        self.tcp_flush();
        // The AF_XDP path takes what it can; the sockets below send the rest.
        self.xsk_flush();
        if self.ring.is_some() {
            self.ring_flush();
            return;
        }
        if !self.out.batch.is_empty() {
            flush_outbox(&mut self.out, &self.socket, &self.stats, &mut self.shard);
        }
        // The list is put back emptied, its allocation kept.
        let mut dirty = std::mem::take(&mut self.dirty_legs);
        for p in dirty.drain(..) {
            if let Some(l) = self.legs.get_mut(&p) {
                flush_outbox(&mut l.out, &l.socket, &self.stats, &mut self.shard);
            }
        }
        self.dirty_legs = dirty;
    }

    /// Publishes the shard's counters for `/metrics`, the API and the demo.
    fn publish(&mut self) {
        self.last_publish = Instant::now();
        self.publish_load();
        self.publish_xsk();
        self.stats.publish(self.shard.counters());
    }

    /// Samples the worker's load, sheds by it ([`secrelay_core::admission::Shed`]), and
    /// publishes both; ICE-TCP connections past their time closed.
    fn publish_load(&mut self) {
        let now = Instant::now();
        let load = self.load.sample(now, thread_cpu());
        self.tcp_expire(now);
        let shed = self.admission.update(load);
        self.shard.set_shed(shed);
        self.stats.set_load(load, shed);
    }
}

/// CPU time the calling thread has used (zero where the clock cannot be read: the load then
/// reads 0 and nothing is shed).
fn thread_cpu() -> Duration {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID)
        .map(Duration::from)
        .unwrap_or_default()
}

/// Sends what an outbox holds (`sendmmsg`), counts it, and records each media copy's relay
/// latency (one histogram update per distinct receive instant: a batch shares one).
fn flush_outbox(
    out: &mut Outbox,
    socket: &mio::net::UdpSocket,
    st: &WorkerStats,
    shard: &mut Shard,
) {
    let Flushed {
        sent,
        bytes,
        failed,
    } = out.batch.flush(socket, |buf| shard.recycle(buf));
    let done = Instant::now();
    st.datagrams_out.fetch_add(sent as u64, Ordering::Relaxed);
    st.bytes_out.fetch_add(bytes as u64, Ordering::Relaxed);
    if failed > 0 {
        shard.count_drops(DropReason::SendFailed, failed as u64);
    }
    record_relay_latency(st, done, out.origin.drain(..).flatten());
}

/// Records the relay latency of copies sent at `done` that came in at `origins` (one
/// histogram update per run of equal instants: a batch shares one).
fn record_relay_latency(st: &WorkerStats, done: Instant, origins: impl Iterator<Item = Instant>) {
    let mut run: Option<(Instant, u64)> = None;
    for origin in origins {
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
