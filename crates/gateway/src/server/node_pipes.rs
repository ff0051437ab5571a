//! Rooms across nodes (`cluster_pipe`): the links between this node and the others, through
//! which a room's publishers on one node reach its viewers on another.
//!
//! A room spread over nodes lives at its owner (the directory's, where its publishers are);
//! a node that serves viewers of it keeps a *replica*, exactly as a worker does for a room
//! spread over workers (`secrelay_core::shard`'s pipe module): the replica's publishers are
//! mirrors, and each packet a publisher sends crosses to the node once, whatever the number of
//! viewers there. The shards do not know that a pipe leaves the node: another node's worker
//! is a worker index of its own here ([`remote_worker`]: the link and the worker there), and
//! what a shard tells or pipes to such a worker goes over the link.
//!
//! - **The link**: one TLS 1.3 connection per pair of nodes that need one (made by the node
//!   where a viewer of the other's room arrives), both ends authenticated by certificates the
//!   cluster's private CA issued to their node names (`cluster_pipe_ca`). It carries the
//!   control messages ([`Control`], JSON frames, in order), and each end's media key, drawn
//!   per link and never written elsewhere.
//! - **The media**: UDP datagrams between the nodes' `cluster_pipe` ports, each sealed with
//!   AES-128-GCM under the receiver's key for the link, its header authenticated, replays
//!   refused ([`datagram`]). A publisher's packet crosses as the home read it (plain, once
//!   unprotected), and is protected again at the replica for each viewer with its own keys.
//! - **Ordering**: everything a home's worker tells a replica goes over the one connection
//!   from that worker's thread, after the answer to the replica's attach, so the replica opens
//!   before it hears of new publishers. A link that breaks cuts its pipes at both ends
//!   ([`secrelay_core::shard::Shard::cut_pipes`]): the home stops sending, the replicas'
//!   mirrors go.

pub(crate) mod data;
pub(crate) mod datagram;

use std::collections::HashMap;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use secrelay_core::leg::{DataMessage, MirrorSpec, PipeKey};
use secrelay_wire::demux::Class;
use secrelay_wire::sdp::Offer;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};

use self::datagram::{Header, Kind, LinkKey, Replay, KEY_LEN};
use super::udp::RecvBatch;
use super::worker::{Command, Peer, PipeMsg, Worker};
use super::{ServeConfig, StartError};
use crate::shard::{JoinError, Joined, Piped, PipedPacket, Who};

/// Worker indices from here on name another node's workers ([`remote_worker`]).
const LINK_BASE: usize = 1 << 20;
/// Workers a node may have, as a link's index range counts them.
const WORKERS_PER_LINK: usize = 1 << 8;
/// The longest control frame taken (a room's publishers' specs).
const MAX_FRAME: usize = 1 << 20;
/// How long making a link (TCP, TLS, the hellos) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// How long after a failed try a link to the same node is not tried again (its viewers are
/// redirected to it meanwhile, at once).
const RETRY_AFTER: Duration = Duration::from_secs(5);
/// How long a viewer's attach waits for the home's answer.
const ATTACH_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest datagram read.
const MAX_DATAGRAM: usize = 2048;
/// Buffers the datagram reader keeps for reuse.
const SPARE_BUFFERS: usize = 4096;
/// Links being made at once on the listening side (TLS handshakes and hellos).
const HANDSHAKES: usize = 16;

/// The worker index the shards know worker `worker` of the node at the other end of link
/// `link` by.
pub(crate) fn remote_worker(link: u32, worker: u16) -> usize {
    LINK_BASE + link as usize * WORKERS_PER_LINK + usize::from(worker)
}

/// The link and the other node's worker a worker index names, if it names another node's.
pub(crate) fn split(index: usize) -> Option<(u32, u16)> {
    let v = index.checked_sub(LINK_BASE)?;
    let link = u32::try_from(v / WORKERS_PER_LINK).ok()?;
    let worker = u16::try_from(v % WORKERS_PER_LINK).ok()?;
    Some((link, worker))
}

/// What a room's admission refused, as the home tells a replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Refusal {
    /// The room is full ([`JoinError::RoomFull`]).
    Full { members: usize, reserved: bool },
    /// The home is shutting down.
    ShuttingDown,
}

impl From<&JoinError> for Refusal {
    fn from(e: &JoinError) -> Refusal {
        match e {
            JoinError::RoomFull { members, reserved } => Refusal::Full {
                members: *members,
                reserved: *reserved,
            },
            _ => Refusal::ShuttingDown,
        }
    }
}

impl From<Refusal> for JoinError {
    fn from(r: Refusal) -> JoinError {
        match r {
            Refusal::Full { members, reserved } => JoinError::RoomFull { members, reserved },
            Refusal::ShuttingDown => JoinError::ShuttingDown,
        }
    }
}

/// A control message between two nodes (one JSON frame on the link's connection). Workers
/// are named as their own node numbers them; keys are in their home's terms.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum Control {
    /// The first message each way: who sends it (checked against its certificate), its name
    /// for the link (put in the datagrams sent to it), the key the datagrams sent to it are
    /// sealed with (hex), and where it takes them.
    Hello {
        node: String,
        link: u32,
        key: String,
        media: SocketAddr,
    },
    /// A viewer of `room` joins at the sender's worker `worker`: the home attaches a pipe.
    Attach {
        req: u64,
        room: String,
        worker: u16,
        name: Option<String>,
        anonymous: bool,
    },
    /// The home's answer: the room's publishers (`None`: the room is not there yet, or mixes:
    /// the viewer goes to the home itself), or the refusal.
    Attached {
        req: u64,
        home: u16,
        specs: Option<Vec<MirrorSpec>>,
        refused: Option<Refusal>,
    },
    /// A publisher joined (or renegotiated) in `room`: the replica at `worker` mirrors it.
    Publisher {
        room: String,
        worker: u16,
        spec: MirrorSpec,
    },
    /// A publisher left: its mirror at `worker` goes.
    PublisherLeft { worker: u16, key: PipeKey },
    /// The last viewer of `room`'s replica at `worker` left: the replica closes.
    Closed { room: String, worker: u16 },
    /// A viewer of `room`'s replica at the sender's `worker` left (or its join failed): the
    /// home (its worker `home`) counts one fewer there.
    ViewerLeft {
        room: String,
        home: u16,
        worker: u16,
    },
    /// Data-channel messages of `room` for its home or replica at `worker`, from the sender's
    /// worker `from` ([`data`]).
    Data {
        room: String,
        worker: u16,
        from: u16,
        msgs: Vec<data::WireData>,
    },
}

/// Why a link could not be made.
#[derive(Debug)]
pub(crate) struct LinkError(String);

impl std::fmt::Display for LinkError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A viewer's join waiting for the home's answer to its attach.
struct PendingJoin {
    room: String,
    worker: usize,
    offer: Offer,
    who: Who,
    reply: oneshot::Sender<Result<Option<Joined>, JoinError>>,
}

/// One link to another node. See the [module documentation](self).
pub(crate) struct Link {
    /// This node's name for it (in worker indices, and in the datagrams the other sends).
    id: u32,
    /// The other node.
    node: String,
    /// The other's name for it (in the datagrams sent to it).
    peer_link: u32,
    /// Where the other takes datagrams.
    peer_media: SocketAddr,
    /// What the datagrams sent to it are sealed with.
    seal: LinkKey,
    /// What the datagrams it sends here are opened with.
    open: LinkKey,
    /// Datagrams sealed so far (each one's nonce).
    counter: AtomicU64,
    replay: Mutex<Replay>,
    /// The connection's writer (`None` closes it).
    control: mpsc::UnboundedSender<Option<Control>>,
    pending: Mutex<HashMap<u64, PendingJoin>>,
    next_req: AtomicU64,
    /// Made by this node (reused for its next viewers of the other's rooms).
    outbound: bool,
    /// When it was made.
    since: Instant,
    closed: AtomicBool,
}

impl Link {
    /// Sends `msg` on the connection (in order with what was sent before it).
    pub(crate) fn send(&self, msg: Control) {
        let _ = self.control.send(Some(msg));
    }
}

/// The links a thread sends or reads through, kept by that thread: found without taking
/// the links' lock per packet (one that closed is looked up again, and found gone).
#[derive(Default)]
pub(crate) struct LinkCache(HashMap<u32, Arc<Link>>);

impl std::fmt::Debug for LinkCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("LinkCache").field(&self.0.len()).finish()
    }
}

impl LinkCache {
    /// Link `id` of `pipes`, if it is up.
    fn get(&mut self, pipes: &NodePipes, id: u32) -> Option<&Link> {
        let open = self
            .0
            .get(&id)
            .is_some_and(|l| !l.closed.load(Ordering::Acquire));
        if !open {
            match pipes.link(id) {
                Some(l) => self.0.insert(id, l),
                None => self.0.remove(&id),
            };
        }
        self.0.get(&id).map(|l| &**l)
    }
}

/// What the links count, for `/metrics`.
#[derive(Debug, Default)]
pub(crate) struct PipeCounts {
    /// Datagrams sealed and sent.
    pub sent: AtomicU64,
    /// Datagrams opened and handed to a worker.
    pub received: AtomicU64,
    /// Datagrams dropped: unreadable or failing their tag.
    pub bad: AtomicU64,
    /// Datagrams dropped: seen before, or older than the window.
    pub replayed: AtomicU64,
    /// Datagrams dropped: for a link that is not (any more).
    pub unknown_link: AtomicU64,
    /// Datagrams not sent (the socket refused them) or not queued (a worker's queue full).
    pub lost: AtomicU64,
    /// Links that broke or closed.
    pub links_lost: AtomicU64,
    /// Tries to make a link that failed (TCP, TLS, the other's certificate or hello).
    pub link_failures: AtomicU64,
    /// Data-channel messages sent to other nodes, and taken from them.
    pub data_sent: AtomicU64,
    pub data_received: AtomicU64,
    /// Data-channel messages that did not cross: larger than a frame, or unreadable.
    pub data_dropped: AtomicU64,
}

/// This node's end of the node pipes. See the [module documentation](self).
pub(crate) struct NodePipes {
    node: String,
    addr: SocketAddr,
    udp: UdpSocket,
    server: Arc<rustls::ServerConfig>,
    client: Arc<rustls::ClientConfig>,
    peers: Vec<Peer>,
    links: Mutex<HashMap<u32, Arc<Link>>>,
    next_link: AtomicU32,
    /// Per node: one link made at a time (two viewers arriving at once share it), and when
    /// the last try failed (the next waits [`RETRY_AFTER`]: its viewers are redirected).
    connecting: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Option<Instant>>>>>,
    stopped: AtomicBool,
    /// Buffers of datagrams handed to workers, given back once taken (the reader reuses them:
    /// no allocation per datagram in steady state).
    spare: (
        crossbeam_channel::Sender<Vec<u8>>,
        crossbeam_channel::Receiver<Vec<u8>>,
    ),
    pub counts: PipeCounts,
}

impl std::fmt::Debug for NodePipes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodePipes")
            .field("node", &self.node)
            .field("addr", &self.addr)
            .finish()
    }
}

/// Reads a PEM file's certificates, naming the setting and the file at fault.
fn read_certs(
    what: &str,
    path: &std::path::Path,
) -> Result<Vec<CertificateDer<'static>>, StartError> {
    use rustls::pki_types::pem::PemObject as _;
    let at = |e: &dyn std::fmt::Display| StartError(format!("{what} {}: {e}", path.display()));
    let text = std::fs::read(path).map_err(|e| at(&e))?;
    let certs: Vec<_> = CertificateDer::pem_slice_iter(&text)
        .collect::<Result<_, _>>()
        .map_err(|e| at(&e))?;
    if certs.is_empty() {
        return Err(at(&"no CERTIFICATE block"));
    }
    Ok(certs)
}

/// The TLS configurations of the links' two ends: TLS 1.3, each end's certificate issued by
/// `cluster_pipe_ca` (the client's checked by the server, the server's name by the client).
fn tls_configs(
    config: &ServeConfig,
) -> Result<(Arc<rustls::ServerConfig>, Arc<rustls::ClientConfig>), StartError> {
    use rustls::pki_types::pem::PemObject as _;
    let (Some(ca), Some(cert), Some(key)) = (
        &config.cluster_pipe_ca,
        &config.cluster_pipe_cert,
        &config.cluster_pipe_key,
    ) else {
        return Err(StartError(
            "cluster_pipe needs its CA, certificate and key".into(),
        ));
    };
    let mut roots = rustls::RootCertStore::empty();
    for c in read_certs("cluster_pipe_ca", ca)? {
        roots
            .add(c)
            .map_err(|e| StartError(format!("cluster_pipe_ca {}: {e}", ca.display())))?;
    }
    let roots = Arc::new(roots);
    let chain = read_certs("cluster_pipe_cert", cert)?;
    let key_text = zeroize::Zeroizing::new(
        std::fs::read(key)
            .map_err(|e| StartError(format!("cluster_pipe_key {}: {e}", key.display())))?,
    );
    let key_der = PrivateKeyDer::from_pem_slice(&key_text)
        .map_err(|e| StartError(format!("cluster_pipe_key {}: {e}", key.display())))?;
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let bad = |e: rustls::Error| {
        StartError(format!(
            "cluster_pipe_cert {} / cluster_pipe_key {}: {e}",
            cert.display(),
            key.display()
        ))
    };
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        roots.clone(),
        provider.clone(),
    )
    .build()
    .map_err(|e| StartError(format!("cluster_pipe_ca {}: {e}", ca.display())))?;
    let server = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(bad)?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain.clone(), key_der.clone_key())
        .map_err(bad)?;
    let client = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(bad)?
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key_der)
        .map_err(bad)?;
    Ok((Arc::new(server), Arc::new(client)))
}

async fn read_frame<R: tokio::io::AsyncRead + Unpin>(r: &mut R) -> std::io::Result<Control> {
    let len = r.read_u32().await? as usize;
    if len > MAX_FRAME {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("a control frame of {len} bytes (at most {MAX_FRAME})"),
        ));
    }
    // A hello's frame holds a media key.
    let mut buf = zeroize::Zeroizing::new(vec![0u8; len]);
    r.read_exact(&mut buf).await?;
    parse_control(&buf).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

/// A control frame's message (its JSON), or why it is none.
pub(crate) fn parse_control(frame: &[u8]) -> Result<Control, String> {
    serde_json::from_slice(frame).map_err(|e| format!("a bad control frame: {e}"))
}

async fn write_frame<W: tokio::io::AsyncWrite + Unpin>(
    w: &mut W,
    msg: &Control,
) -> std::io::Result<()> {
    let json = zeroize::Zeroizing::new(serde_json::to_vec(msg)?);
    let len = u32::try_from(json.len()).map_err(|_| std::io::ErrorKind::InvalidData)?;
    w.write_u32(len).await?;
    w.write_all(&json).await?;
    w.flush().await
}

/// A media key (wiped when dropped).
type KeyBytes = zeroize::Zeroizing<[u8; KEY_LEN]>;

/// A fresh media key for one direction of a link, and its hex for the hello.
fn draw_key() -> (KeyBytes, zeroize::Zeroizing<String>) {
    let mut key = KeyBytes::new([0u8; KEY_LEN]);
    getrandom::fill(key.as_mut_slice()).expect("the system's random source");
    let hex = key.iter().map(|b| format!("{b:02x}")).collect::<String>();
    (key, zeroize::Zeroizing::new(hex))
}

fn key_of_hex(hex: &str) -> Option<KeyBytes> {
    if hex.len() != KEY_LEN * 2 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut key = KeyBytes::new([0u8; KEY_LEN]);
    for (i, k) in key.iter_mut().enumerate() {
        *k = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(key)
}

/// Runs `f` on `peer`'s worker thread after what is queued there (no reply).
fn post(peer: &Peer, f: impl FnOnce(&mut Worker, Instant) + Send + 'static) {
    if peer
        .commands
        .send(Command::Run(Box::new(move |w, now| {
            f(w, now);
            w.after_command();
        })))
        .is_ok()
    {
        let _ = peer.waker.wake();
    }
}

impl NodePipes {
    /// Binds `cluster_pipe` (TCP and UDP on one port) and reads the certificates; the TCP
    /// listener is served by [`NodePipes::serve`] on the signaling's runtime, the UDP socket
    /// read by a thread of its own.
    pub(crate) fn start(
        config: &ServeConfig,
        node: &str,
        peers: Vec<Peer>,
    ) -> Result<(Arc<NodePipes>, std::net::TcpListener), StartError> {
        let Some(want) = config.cluster_pipe else {
            return Err(StartError("cluster_pipe is not set".into()));
        };
        let (server, client) = tls_configs(config)?;
        let (tcp, addr) = super::bind_tcp("cluster_pipe", want)?;
        let udp = UdpSocket::bind(addr)
            .map_err(|e| StartError(format!("cluster_pipe {addr} (UDP): {e}")))?;
        udp.set_read_timeout(Some(Duration::from_millis(200)))
            .map_err(|e| StartError(format!("cluster_pipe {addr} (UDP): {e}")))?;
        let pipes = Arc::new(NodePipes {
            node: node.to_owned(),
            addr,
            udp,
            server,
            client,
            peers,
            links: Mutex::default(),
            next_link: AtomicU32::new(1),
            connecting: Mutex::default(),
            stopped: AtomicBool::new(false),
            spare: crossbeam_channel::bounded(SPARE_BUFFERS),
            counts: PipeCounts::default(),
        });
        let p = pipes.clone();
        std::thread::Builder::new()
            .name("secrelay-pipes".into())
            .spawn(move || p.read_datagrams())
            .map_err(|e| StartError(format!("cluster_pipe thread: {e}")))?;
        tracing::info!(%addr, "node pipes listening (cluster_pipe)");
        Ok((pipes, tcp))
    }

    /// Takes back the buffer of a datagram a worker took (kept for the next, while there is
    /// room).
    pub(crate) fn give_back(&self, buf: Vec<u8>) {
        let _ = self.spare.0.try_send(buf);
    }

    /// Where the pipes listen.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Links up now.
    pub(crate) fn links(&self) -> usize {
        self.links.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// The links up now, as `/api/cluster` shows them (by node).
    pub(crate) fn link_views(&self) -> Vec<super::cluster::LinkView> {
        let mut v: Vec<_> = self
            .links
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .map(|l| super::cluster::LinkView {
                node: l.node.clone(),
                made_here: l.outbound,
                up_secs: l.since.elapsed().as_secs(),
            })
            .collect();
        v.sort_by(|a, b| (&a.node, a.made_here).cmp(&(&b.node, b.made_here)));
        v
    }

    /// Stops reading datagrams and closes the links.
    pub(crate) fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
        for l in self
            .links
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
        {
            let _ = l.control.send(None);
        }
    }

    fn link(&self, id: u32) -> Option<Arc<Link>> {
        self.links
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&id)
            .cloned()
    }

    /// Accepts the other nodes' links.
    pub(crate) async fn serve(self: Arc<Self>, listener: std::net::TcpListener) {
        let listener = match tokio::net::TcpListener::from_std(listener) {
            Ok(l) => l,
            Err(e) => {
                tracing::error!(error = %e, "cluster_pipe listener");
                return;
            }
        };
        let acceptor = tokio_rustls::TlsAcceptor::from(self.server.clone());
        let handshakes = Arc::new(tokio::sync::Semaphore::new(HANDSHAKES));
        loop {
            let (tcp, from) = match listener.accept().await {
                Ok(a) => a,
                Err(e) => {
                    // Out of descriptors, say: not again at once.
                    tracing::warn!(error = %e, "cluster_pipe accept");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            if self.stopped.load(Ordering::Acquire) {
                return;
            }
            // Whoever reaches the port may start a handshake: a bounded number at once.
            let Ok(permit) = handshakes.clone().try_acquire_owned() else {
                tracing::debug!(%from, "a node link refused: too many handshakes at once");
                continue;
            };
            let (me, acceptor) = (self.clone(), acceptor.clone());
            tokio::spawn(async move {
                let _permit = permit;
                let made = tokio::time::timeout(CONNECT_TIMEOUT, async {
                    let tls = acceptor
                        .accept(tcp)
                        .await
                        .map_err(|e| LinkError(format!("TLS: {e}")))?;
                    me.hello(tokio_rustls::TlsStream::Server(tls), None, false)
                        .await
                })
                .await;
                match made {
                    Ok(Ok(link)) => tracing::info!(node = %link.node, %from, "node link accepted"),
                    Ok(Err(e)) => tracing::warn!(%from, error = %e, "node link refused"),
                    Err(_) => tracing::warn!(%from, "node link refused: it took too long"),
                }
            });
        }
    }

    /// The link to `node` (whose pipes listen at `addr`): the one this node made before, or a
    /// new one.
    pub(crate) async fn link_to(
        self: &Arc<Self>,
        node: &str,
        addr: SocketAddr,
    ) -> Result<Arc<Link>, LinkError> {
        let turn = self
            .connecting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(node.to_owned())
            .or_default()
            .clone();
        let mut failed = turn.lock().await;
        let made = self
            .links
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .find(|l| l.outbound && l.node == node && !l.closed.load(Ordering::Acquire))
            .cloned();
        if let Some(l) = made {
            return Ok(l);
        }
        if let Some(at) = failed.filter(|at| at.elapsed() < RETRY_AFTER) {
            return Err(LinkError(format!(
                "the last try failed {:?} ago",
                at.elapsed()
            )));
        }
        let r = self.connect(node, addr).await;
        *failed = r.is_err().then(Instant::now);
        if r.is_err() {
            self.counts.link_failures.fetch_add(1, Ordering::Relaxed);
        }
        r
    }

    /// Makes a link to `node` at `addr`: TCP, TLS, the hellos, within [`CONNECT_TIMEOUT`].
    async fn connect(
        self: &Arc<Self>,
        node: &str,
        addr: SocketAddr,
    ) -> Result<Arc<Link>, LinkError> {
        let name = ServerName::try_from(node.to_owned())
            .map_err(|_| LinkError(format!("{node:?} is no name a certificate can hold")))?;
        let connector = tokio_rustls::TlsConnector::from(self.client.clone());
        tokio::time::timeout(CONNECT_TIMEOUT, async {
            let tcp = tokio::net::TcpStream::connect(addr)
                .await
                .map_err(|e| LinkError(format!("{addr}: {e}")))?;
            let _ = tcp.set_nodelay(true);
            let tls = connector
                .connect(name, tcp)
                .await
                .map_err(|e| LinkError(format!("{addr}: TLS: {e}")))?;
            self.hello(tokio_rustls::TlsStream::Client(tls), Some(node), true)
                .await
        })
        .await
        .map_err(|_| LinkError(format!("{addr}: no link within {CONNECT_TIMEOUT:?}")))?
    }

    /// Exchanges the hellos on a connection whose TLS handshake is done (checking the other
    /// node's name against its certificate, and against `expect` when this end made it), and
    /// runs the link.
    async fn hello(
        self: &Arc<Self>,
        tls: tokio_rustls::TlsStream<tokio::net::TcpStream>,
        expect: Option<&str>,
        outbound: bool,
    ) -> Result<Arc<Link>, LinkError> {
        let leaf = tls
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|c| c.first())
            .map(|c| c.to_vec())
            .ok_or_else(|| LinkError("no certificate".into()))?;
        let (mut rd, mut wr) = tokio::io::split(tls);
        let id = self.next_link.fetch_add(1, Ordering::Relaxed);
        let (key, hex) = draw_key();
        let mine = Control::Hello {
            node: self.node.clone(),
            link: id,
            key: hex.to_string(),
            media: self.addr,
        };
        let io = |e: std::io::Error| LinkError(format!("hello: {e}"));
        let wrote = write_frame(&mut wr, &mine).await;
        if let Control::Hello { mut key, .. } = mine {
            zeroize::Zeroize::zeroize(&mut key);
        }
        wrote.map_err(io)?;
        let Control::Hello {
            node,
            link: peer_link,
            key: peer_hex,
            media,
        } = read_frame(&mut rd).await.map_err(io)?
        else {
            return Err(LinkError("the first message is no hello".into()));
        };
        let peer_hex = zeroize::Zeroizing::new(peer_hex);
        if expect.is_some_and(|n| n != node) {
            return Err(LinkError(format!("node {node:?} answered for {expect:?}")));
        }
        secrelay_dtls::ca::verify_name(&leaf, &node)
            .map_err(|e| LinkError(format!("node {node:?}: {e:?}")))?;
        let seal = key_of_hex(&peer_hex).ok_or_else(|| LinkError("a bad media key".into()))?;
        let (seal_key, open_key) = (LinkKey::new(&seal), LinkKey::new(&key));
        let (control, rx) = mpsc::unbounded_channel();
        let link = Arc::new(Link {
            id,
            node,
            peer_link,
            peer_media: media,
            seal: seal_key,
            open: open_key,
            counter: AtomicU64::new(0),
            replay: Mutex::default(),
            control,
            pending: Mutex::default(),
            next_req: AtomicU64::new(1),
            outbound,
            since: Instant::now(),
            closed: AtomicBool::new(false),
        });
        self.links
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, link.clone());
        tokio::spawn(write_loop(wr, rx));
        let (me, l) = (self.clone(), link.clone());
        tokio::spawn(async move {
            loop {
                match read_frame(&mut rd).await {
                    Ok(msg) => me.on_control(&l, msg),
                    Err(e) => {
                        tracing::info!(node = %l.node, error = %e, "node link closed");
                        break;
                    }
                }
            }
            me.lost(&l);
        });
        Ok(link)
    }

    /// Link `link` broke: it is forgotten, the viewers' joins waiting on it fail, and every
    /// worker cuts its pipes through it.
    fn lost(&self, link: &Arc<Link>) {
        link.closed.store(true, Ordering::Release);
        let _ = link.control.send(None);
        self.links
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&link.id);
        self.counts.links_lost.fetch_add(1, Ordering::Relaxed);
        for (_, p) in link
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain()
        {
            let _ = p.reply.send(Ok(None));
        }
        let id = link.id;
        for peer in &self.peers {
            post(peer, move |w, now| {
                w.shard_mut()
                    .cut_pipes(now, |v| split(v).is_some_and(|(l, _)| l == id));
            });
        }
    }

    /// A control message from the other end of `link`.
    fn on_control(self: &Arc<Self>, link: &Arc<Link>, msg: Control) {
        let id = link.id;
        let peer = |worker: u16| self.peers.get(usize::from(worker));
        match msg {
            Control::Hello { .. } => tracing::warn!(node = %link.node, "a second hello ignored"),
            Control::Attach {
                req,
                room,
                worker,
                name,
                anonymous,
            } => {
                let home = super::room_worker(&room, self.peers.len());
                let l = link.clone();
                post(&self.peers[home], move |w, _| {
                    let who = Who { name, anonymous };
                    let (home, r) = w.attach_remote(&room, remote_worker(id, worker), &who);
                    l.send(Control::Attached {
                        req,
                        home,
                        refused: r.as_ref().err().map(Refusal::from),
                        specs: r.ok().flatten(),
                    });
                });
            }
            Control::Attached {
                req,
                home,
                specs,
                refused,
            } => self.attached(link, req, home, specs, refused),
            Control::Publisher { room, worker, spec } => {
                if let Some(p) = peer(worker) {
                    let spec = rehomed(spec, id);
                    post(p, move |w, now| w.shard_mut().add_mirror(now, &room, &spec));
                }
            }
            Control::PublisherLeft { worker, key } => {
                if let Some(p) = peer(worker) {
                    let key = key.with_home(remote_worker(id, home_u16(key)));
                    post(p, move |w, now| w.shard_mut().remove_mirror(now, key));
                }
            }
            Control::Closed { room, worker } => {
                if let Some(p) = peer(worker) {
                    post(p, move |w, now| w.shard_mut().close_replica(now, &room));
                }
            }
            Control::ViewerLeft { room, home, worker } => {
                if let Some(p) = peer(home) {
                    let at = remote_worker(id, worker);
                    post(p, move |w, _| w.shard_mut().detach_pipe(&room, at));
                }
            }
            Control::Data {
                room,
                worker,
                from,
                msgs,
            } => {
                let (msgs, bad) = data::messages(msgs);
                let c = &self.counts;
                c.data_dropped.fetch_add(bad, Ordering::Relaxed);
                c.data_received
                    .fetch_add(msgs.len() as u64, Ordering::Relaxed);
                if let (Some(p), false) = (peer(worker), msgs.is_empty()) {
                    let from = remote_worker(id, from);
                    let msgs = msgs.into();
                    post(p, move |w, now| {
                        w.shard_mut().handle_piped_data(now, &room, from, msgs);
                    });
                }
            }
        }
    }

    /// The home's answer to the attach of the viewer's join `req`: the replica opens at the
    /// viewer's worker and the viewer joins there, in one command (so nothing the home says
    /// later overtakes them); a join that fails tells the home its viewer left.
    fn attached(
        &self,
        link: &Arc<Link>,
        req: u64,
        home: u16,
        specs: Option<Vec<MirrorSpec>>,
        refused: Option<Refusal>,
    ) {
        let Some(p) = link
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&req)
        else {
            return;
        };
        if p.reply.is_closed() {
            // Its viewer gave up waiting: the home counted it, and is told it left.
            if specs.is_some() {
                link.send(Control::ViewerLeft {
                    room: p.room,
                    home,
                    worker: u16::try_from(p.worker).unwrap_or(u16::MAX),
                });
            }
            return;
        }
        let Some(specs) = specs else {
            let _ = p.reply.send(refused.map_or(Ok(None), |r| Err(r.into())));
            return;
        };
        let id = link.id;
        let specs: Vec<MirrorSpec> = specs.into_iter().map(|s| rehomed(s, id)).collect();
        let l = link.clone();
        post(&self.peers[p.worker], move |w, now| {
            let r = w.join_replica(
                now,
                &p.room,
                remote_worker(id, home),
                &specs,
                (&p.offer, &p.who),
            );
            if r.is_err() {
                l.send(Control::ViewerLeft {
                    room: p.room.clone(),
                    home,
                    worker: u16::try_from(p.worker).unwrap_or(u16::MAX),
                });
            }
            let _ = p.reply.send(r.map(Some));
        });
    }

    /// Asks the home at the other end of `link` to attach a pipe for a viewer of `room` joining
    /// at this node's `worker`: the join's answer, `Ok(None)` when the home wants the viewer
    /// itself (the room is not there yet, or mixes) or did not answer in time.
    pub(crate) async fn attach(
        &self,
        link: &Arc<Link>,
        (room, worker): (&str, usize),
        offer: Offer,
        who: Who,
    ) -> Result<Option<Joined>, JoinError> {
        let (tx, rx) = oneshot::channel();
        let req = link.next_req.fetch_add(1, Ordering::Relaxed);
        let msg = Control::Attach {
            req,
            room: room.to_owned(),
            worker: u16::try_from(worker).unwrap_or(u16::MAX),
            name: who.name.clone(),
            anonymous: who.anonymous,
        };
        link.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(
                req,
                PendingJoin {
                    room: room.to_owned(),
                    worker,
                    offer,
                    who,
                    reply: tx,
                },
            );
        link.send(msg);
        match tokio::time::timeout(ATTACH_TIMEOUT, rx).await {
            Ok(Ok(r)) => r,
            Ok(Err(_)) => Ok(None),
            Err(_) => {
                // Given up: an answer that comes later finds nobody waiting, and the home is
                // told its viewer left ([`NodePipes::attached`]).
                tracing::warn!(node = %link.node, room, "the room's node did not answer an attach in time");
                Ok(None)
            }
        }
    }

    /// Seals into `d` what a worker's shard piped to another node's worker `to`
    /// ([`remote_worker`]): one datagram for the link (found in the worker's `links`); where it
    /// goes, or `None` when there is no such link (any more).
    pub(crate) fn seal(
        &self,
        (to, links): (usize, &mut LinkCache),
        (key, what): (PipeKey, Piped),
        packet: &[u8],
        d: &mut Vec<u8>,
    ) -> Option<SocketAddr> {
        let (id, worker) = split(to)?;
        let link = links.get(self, id)?;
        let (kind, layer) = match what {
            Piped::Media(p) => (
                Kind::Media,
                p.layer
                    .and_then(|(g, k)| Some((u8::try_from(g).ok()?, u8::try_from(k).ok()?))),
            ),
            Piped::Feedback => (Kind::Feedback, None),
        };
        // The key in its home's terms: a mirror's names the home as a worker of this node's.
        let key = match split(key.home()) {
            Some((_, w)) => key.with_home(usize::from(w)),
            None => key,
        };
        let header = Header {
            kind,
            link: link.peer_link,
            counter: link.counter.fetch_add(1, Ordering::Relaxed),
            worker,
            key,
            layer,
        };
        link.seal.seal(&header, packet, d);
        Some(link.peer_media)
    }

    /// The socket the sealed datagrams go out of.
    pub(crate) fn socket(&self) -> &UdpSocket {
        &self.udp
    }

    /// What a worker's batch of sealed datagrams came to: `sent`, and `failed` (the socket
    /// refused them).
    pub(crate) fn counted_sends(&self, sent: u64, failed: u64) {
        self.counts.sent.fetch_add(sent, Ordering::Relaxed);
        self.counts.lost.fetch_add(failed, Ordering::Relaxed);
    }

    /// Sends data-channel messages of `room` from this node's worker `from` to another node's
    /// worker `to`, in as many frames as they take ([`data::frames`]); counted.
    pub(crate) fn tell_data(&self, to: usize, room: &str, from: usize, msgs: &[DataMessage]) {
        let (frames, left_out) = data::frames(msgs);
        let c = &self.counts;
        c.data_dropped.fetch_add(left_out, Ordering::Relaxed);
        let from = u16::try_from(from).unwrap_or(u16::MAX);
        for msgs in frames {
            let n = msgs.len() as u64;
            let told = self.tell(to, |worker| Control::Data {
                room: room.to_owned(),
                worker,
                from,
                msgs,
            });
            match told {
                true => c.data_sent.fetch_add(n, Ordering::Relaxed),
                false => c.data_dropped.fetch_add(n, Ordering::Relaxed),
            };
        }
    }

    /// Tells the other node's worker `to` ([`remote_worker`]) what `msg` says (its worker
    /// fields are filled in here); `false` when there is no link to its node (any more).
    pub(crate) fn tell(&self, to: usize, msg: impl FnOnce(u16) -> Control) -> bool {
        let Some((link, worker)) = split(to).and_then(|(id, w)| Some((self.link(id)?, w))) else {
            return false;
        };
        link.send(msg(worker));
        true
    }

    /// The UDP socket's reader: waits for a datagram (200 ms at most, to see a stop), then
    /// reads what else waits in `recvmmsg` batches; each datagram opened, checked and handed to
    /// its worker, each worker woken once per batch.
    fn read_datagrams(&self) {
        let mut first = vec![0u8; MAX_DATAGRAM];
        let mut batch = RecvBatch::default();
        let mut woken = vec![false; self.peers.len()];
        let mut links = LinkCache::default();
        while !self.stopped.load(Ordering::Acquire) {
            let n = match self.udp.recv_from(&mut first) {
                Ok((n, _)) => n,
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock
                            | std::io::ErrorKind::TimedOut
                            | std::io::ErrorKind::Interrupted
                    ) =>
                {
                    continue
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cluster_pipe socket");
                    std::thread::sleep(Duration::from_millis(50));
                    continue;
                }
            };
            self.take_or_count(&first[..n], &mut woken, &mut links);
            loop {
                match batch.recv(&self.udp) {
                    Ok(0) => break,
                    Ok(n) => {
                        for i in 0..n {
                            self.take_or_count(batch.get(i).1, &mut woken, &mut links);
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "cluster_pipe socket");
                        break;
                    }
                }
            }
            for (w, woke) in woken.iter_mut().enumerate() {
                if std::mem::take(woke) {
                    let _ = self.peers[w].waker.wake();
                }
            }
        }
    }

    /// [`NodePipes::take_datagram`], its drop counted.
    fn take_or_count(&self, datagram: &[u8], woken: &mut [bool], links: &mut LinkCache) {
        let mut d = self.spare.1.try_recv().unwrap_or_default();
        d.clear();
        d.extend_from_slice(datagram);
        match self.take_datagram(&mut d, links) {
            Ok(w) => {
                woken[w] = true;
                self.counts.received.fetch_add(1, Ordering::Relaxed);
            }
            Err(c) => {
                c.fetch_add(1, Ordering::Relaxed);
                // Dropped: its buffer is kept for the next.
                self.give_back(d);
            }
        }
    }

    /// One datagram (`d`, taken from it when handed over): opened in place with its link's
    /// key and handed to its worker (which), or the counter of why not.
    fn take_datagram(&self, d: &mut Vec<u8>, links: &mut LinkCache) -> Result<usize, &AtomicU64> {
        let c = &self.counts;
        let h = Header::read(d).ok_or(&c.bad)?;
        let link = links.get(self, h.link).ok_or(&c.unknown_link)?;
        // Only this thread reads the window: its lock is never waited for.
        let mut replay = link.replay.lock().unwrap_or_else(|e| e.into_inner());
        if !replay.fresh(h.counter) {
            return Err(&c.replayed);
        }
        let range = link.open.open(&h, d).ok_or(&c.bad)?;
        replay.take(h.counter);
        drop(replay);
        d.truncate(range.end);
        d.drain(..range.start);
        let worker = usize::from(h.worker);
        let peer = self.peers.get(worker).ok_or(&c.bad)?;
        let (key, what) = match h.kind {
            Kind::Media => {
                let Class::Rtp(facts) = secrelay_wire::demux::demux(d) else {
                    return Err(&c.bad);
                };
                let key = h.key.with_home(remote_worker(link.id, home_u16(h.key)));
                let packet = PipedPacket {
                    facts,
                    layer: h.layer.map(|(g, k)| (usize::from(g), usize::from(k))),
                    received: Instant::now(),
                };
                (key, Piped::Media(packet))
            }
            // A mirror's feedback names a publisher here, at its home worker.
            Kind::Feedback if h.key.home() == worker => (h.key, Piped::Feedback),
            Kind::Feedback => return Err(&c.bad),
        };
        peer.pipes
            .try_send(PipeMsg::from_node(key, what, std::mem::take(d)))
            .map_err(|_| &c.lost)?;
        Ok(worker)
    }
}

impl super::Gateway {
    /// Joins here a WHEP viewer (of `offer`, for `who`) of `room`, which node `node` owns
    /// (its pipes at `addr`): through a link to it, the room's worker here opens a replica fed
    /// by its publishers there. `Ok(None)` when the viewer is better sent to the owner: no link
    /// could be made, the owner did not answer in time, or it serves the viewer itself (the
    /// room is not there yet, or mixes).
    pub(crate) async fn join_remote(
        &self,
        room: &str,
        (node, addr): (&str, SocketAddr),
        offer: Offer,
        who: Who,
    ) -> Result<Option<Joined>, JoinError> {
        if !self.admitting() {
            return Err(JoinError::ShuttingDown);
        }
        let Some(pipes) = self.shared.node_pipes.get() else {
            return Ok(None);
        };
        let link = match pipes.link_to(node, addr).await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(node, error = %e, "no link to the room's node: its viewer is sent there");
                return Ok(None);
            }
        };
        let at = self.worker_index(room);
        self.joining[at].fetch_add(1, Ordering::Relaxed);
        let r = pipes.attach(&link, (room, at), offer, who).await;
        self.joining[at].fetch_sub(1, Ordering::Relaxed);
        if matches!(r, Ok(Some(_))) {
            self.stats.joins.fetch_add(1, Ordering::Relaxed);
        }
        r
    }

    /// Whether a viewer of `room` may be served at another node: the room is here, has a
    /// publisher and does not mix.
    pub(crate) async fn pipes_viewers(&self, room: &str) -> bool {
        let name = room.to_owned();
        self.worker_for(room)
            .run(move |w, _| w.shard_mut().pipes_viewers(&name))
            .await
            .unwrap_or(false)
    }

    /// Whether this node has pipes to the others (`cluster_pipe`).
    pub(crate) fn has_node_pipes(&self) -> bool {
        self.shared.node_pipes.get().is_some()
    }
}

/// A key's home worker as its home numbers it (in 16 bits, as a datagram carries it).
fn home_u16(key: PipeKey) -> u16 {
    u16::try_from(key.home()).unwrap_or(u16::MAX)
}

/// A publisher's spec as the other end of link `link` sent it, its home named as this node's
/// shards know that node's worker.
fn rehomed(mut spec: MirrorSpec, link: u32) -> MirrorSpec {
    spec.key = spec.key.with_home(remote_worker(link, home_u16(spec.key)));
    spec
}

/// Writes the link's control messages in order until it closes.
async fn write_loop<W: tokio::io::AsyncWrite + Unpin>(
    mut w: W,
    mut rx: mpsc::UnboundedReceiver<Option<Control>>,
) {
    while let Some(Some(msg)) = rx.recv().await {
        if let Err(e) = write_frame(&mut w, &msg).await {
            tracing::info!(error = %e, "node link: a control message not sent");
            break;
        }
    }
    let _ = w.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_worker_indices_name_their_link_and_worker_and_never_a_local_one() {
        for (link, worker) in [(1, 0), (1, 255), (77, 3)] {
            let v = remote_worker(link, worker);
            assert!(v >= LINK_BASE);
            assert_eq!(split(v), Some((link, worker)));
        }
        for local in [0, 1, 15, 255, 4095] {
            assert_eq!(split(local), None);
        }
    }

    #[test]
    fn hex_keys_read_back_and_bad_ones_are_refused() {
        let (key, hex) = draw_key();
        assert_eq!(key_of_hex(&hex), Some(key));
        assert_eq!(key_of_hex(&hex[1..]), None);
        assert_eq!(key_of_hex(&"zz".repeat(KEY_LEN)), None);
        assert_eq!(key_of_hex(&"é".repeat(KEY_LEN)), None);
        assert_eq!(
            key_of_hex(&"+f".repeat(KEY_LEN)),
            None,
            "a sign is no hex digit"
        );
    }

    #[test]
    fn control_frames_parse_or_say_why_not() {
        let m = Control::Closed {
            room: "r".into(),
            worker: 2,
        };
        let json = serde_json::to_vec(&m).unwrap();
        assert!(matches!(
            parse_control(&json),
            Ok(Control::Closed { worker: 2, .. })
        ));
        assert!(parse_control(b"{\"type\":\"nope\"}").is_err());
        assert!(parse_control(b"\xff").is_err());
    }
}
