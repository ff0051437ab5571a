//! `secrelay lab turn`: secrelay's TURN server and coturn's `turnserver` side by side on this
//! machine, in the same run, one relay thread each, each a process of its own whose CPU is
//! read from `/proc` (the sum of its threads' run time, coturn's listener and authentication
//! threads included):
//!
//! - allocations per CPU-second: clients, each from a loopback address of its own, each with a
//!   REST-API credential of its own minted from the secret both servers are given, make an
//!   allocation: the unauthenticated Allocate, its 401 challenge, the signed Allocate, its
//!   success;
//! - relayed packets per CPU-second: clients with an allocation and a channel bound to an echo
//!   peer on loopback send ChannelData at a fixed total rate; the server relays each packet to
//!   the peer and the peer's echo back, two relayed packets per round trip, counted where they
//!   arrive (at the peer, back at the client).
//!
//! Both servers get the same load from the same generator, the same credentials, payloads and
//! rates, one after the other; the echo peer is the only peer secrelay's server allows (as
//! the gateway allows only its media socket), and coturn is told to allow loopback peers.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _};
use mio::{Events, Interest, Poll, Token};
use secrelay_turn::auth::Credentials;
use secrelay_turn::client::{self, Reply, Signer};
use secrelay_turn::proto::method;
use secrelay_turn::{CoreConfig, Now, Peer, QuotaLimits, TurnConfig, TurnServer};
use serde::Serialize;

use super::credentials::cpu_ns;

/// The realm both servers are given.
pub const REALM: &str = "lab";
/// The channel every relay client binds to the echo peer.
const CHANNEL: u16 = 0x4000;
/// A request unanswered this long is sent again, up to [`ATTEMPTS`] times.
const RETRY: Duration = Duration::from_millis(500);
const ATTEMPTS: u32 = 6;

/// What `secrelay lab turn` runs.
#[derive(Debug, Clone)]
pub struct TurnOptions {
    /// Allocations made per server in the allocation part.
    pub allocations: usize,
    /// Allocations in flight at once.
    pub window: usize,
    /// Clients relaying in the relay part.
    pub clients: usize,
    /// ChannelData packets per second the clients send in all.
    pub rate: u64,
    /// Seconds the clients send.
    pub secs: f64,
    /// Bytes of payload per packet.
    pub payload: usize,
    /// secrelay's io_uring gather time (`turn_gather_us`), in µs.
    pub gather_us: u64,
    /// Relay ports, split in three: coturn's, secrelay's (io_uring), secrelay's (epoll).
    pub relay_ports: (u16, u16),
    /// coturn's `turnserver`.
    pub coturn: PathBuf,
    /// This binary (`lab __turn-server` starts secrelay's server).
    pub exe: PathBuf,
}

/// One server's figures.
#[derive(Debug, Clone, Serialize)]
pub struct TurnRow {
    /// `coturn` or `secrelay`.
    pub server: &'static str,
    /// Allocations made.
    pub allocations: usize,
    /// Allocations refused or never answered.
    pub allocation_failures: usize,
    /// Seconds the allocations took.
    pub allocation_secs: f64,
    /// The server's CPU seconds over them.
    pub allocation_cpu_secs: f64,
    /// Allocations per second of wall time (the generator's pace, not the server's limit).
    pub allocations_per_sec: f64,
    /// Allocations per CPU-second of the server.
    pub allocations_per_cpu_sec: f64,
    /// Clients relaying (each with an allocation and a channel).
    pub relay_clients: usize,
    /// ChannelData packets per second offered.
    pub offered_pps: u64,
    /// Seconds sent.
    pub relay_secs: f64,
    /// Packets sent to the server.
    pub sent: u64,
    /// Packets the server relayed: those the peer got, and their echoes the clients got.
    pub relayed: u64,
    /// Of `2 × sent`, those that never arrived.
    pub lost: u64,
    /// The server's CPU seconds over the relay part.
    pub relay_cpu_secs: f64,
    /// Relayed packets per CPU-second of the server.
    pub relayed_per_cpu_sec: f64,
}

/// secrelay's default `turn_gather_us`, in µs.
pub use secrelay_turn::server::GATHER_US;

/// The run: a row per server and secrelay's figures over coturn's.
#[derive(Debug, Clone, Serialize)]
pub struct TurnReport {
    /// coturn's, secrelay's (its UDP sockets through an io_uring, as it runs by default), then
    /// secrelay's with epoll and a system call per datagram (as where the kernel refuses
    /// io_uring).
    pub rows: Vec<TurnRow>,
    /// secrelay's allocations per CPU-second ÷ coturn's.
    pub allocations_ratio: f64,
    /// secrelay's relayed packets per CPU-second ÷ coturn's.
    pub relayed_ratio: f64,
    /// secrelay's relayed packets per CPU-second with epoll ÷ coturn's.
    pub relayed_ratio_epoll: f64,
    /// How long secrelay's io_uring thread let datagrams gather (`turn_gather_us`), in µs.
    pub gather_us: u64,
    /// coturn's version, as it prints it.
    pub coturn_version: String,
}

/// A TURN server under test, in a process of its own (ended when dropped).
pub struct Target {
    /// `secrelay` or `coturn`.
    pub name: &'static str,
    /// Its UDP listener.
    pub addr: SocketAddr,
    secret: String,
    child: Child,
    // secrelay's server ends when its stdin closes (also if the lab dies).
    _stdin: Option<ChildStdin>,
}

impl Target {
    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn cpu(&self) -> anyhow::Result<Duration> {
        cpu_ns(self.pid())
            .map(Duration::from_nanos)
            .ok_or_else(|| anyhow!("{}: no /proc/{}/task", self.name, self.pid()))
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_udp_port() -> anyhow::Result<u16> {
    Ok(UdpSocket::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Starts coturn's `turnserver` on loopback: REST API credentials from `secret`, one relay
/// thread, loopback peers allowed, no TLS, DTLS, TCP relay, CLI or log.
pub fn start_coturn(bin: &Path, secret: &str, relay_ports: (u16, u16)) -> anyhow::Result<Target> {
    let port = free_udp_port()?;
    let child = Command::new(bin)
        .args([
            "-n",
            "--no-cli",
            "--no-tls",
            "--no-dtls",
            "--no-tcp-relay",
            "--no-tcp",
        ])
        .args(["--listening-ip", "127.0.0.1", "--relay-ip", "127.0.0.1"])
        .args(["--listening-port", &port.to_string()])
        .args(["--min-port", &relay_ports.0.to_string()])
        .args(["--max-port", &relay_ports.1.to_string()])
        .args(["--use-auth-secret", "--static-auth-secret", secret])
        .args([
            "--realm",
            REALM,
            "--allow-loopback-peers",
            "--relay-threads",
            "1",
        ])
        .args(["--no-stdout-log", "--log-file", "/dev/null", "--simple-log"])
        .args(["--pidfile", "/dev/null"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))?;
    let target = Target {
        name: "coturn",
        addr: SocketAddr::from(([127, 0, 0, 1], port)),
        secret: secret.into(),
        child,
        _stdin: None,
    };
    wait_until_answers(&target)?;
    Ok(target)
}

/// Starts secrelay's TURN server (`exe lab __turn-server`), its only peer `peer`, its UDP
/// sockets through an io_uring or (`io_uring` false) epoll, and reads the UDP address it
/// prints.
pub fn start_secrelay(
    exe: &Path,
    secret: &str,
    peer: SocketAddr,
    relay_ports: (u16, u16),
    io_uring: bool,
    gather_us: u64,
) -> anyhow::Result<Target> {
    let mut child = Command::new(exe)
        .args(["lab", "__turn-server", "--udp", "127.0.0.1:0"])
        .args((!io_uring).then_some("--epoll"))
        .args(["--gather-us", &gather_us.to_string()])
        .args(["--peer", &peer.to_string(), "--secret", secret])
        .args([
            "--relay-ports",
            &format!("{}-{}", relay_ports.0, relay_ports.1),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("starting {} lab __turn-server", exe.display()))?;
    let stdin = child.stdin.take();
    let stdout = child.stdout.take().context("the TURN server's stdout")?;
    let line = BufReader::new(stdout)
        .lines()
        .next()
        .ok_or_else(|| anyhow!("the TURN server printed nothing"))??;
    let addr = line
        .strip_prefix("udp ")
        .and_then(|a| a.trim().parse().ok())
        .ok_or_else(|| anyhow!("the TURN server printed {line:?}"))?;
    let target = Target {
        name: if io_uring {
            "secrelay"
        } else {
            "secrelay (epoll)"
        },
        addr,
        secret: secret.into(),
        child,
        _stdin: stdin,
    };
    wait_until_answers(&target)?;
    Ok(target)
}

/// `secrelay lab __turn-server`: secrelay's TURN server on `udp`, one thread, relaying only
/// to `peer`, quotas out of the way of a one-host load, its UDP sockets through an io_uring
/// or epoll; prints `udp ADDR`, serves until its stdin closes. Fails where io_uring is asked
/// for and refused (the figures would be epoll's under io_uring's name).
pub fn serve_child(
    udp: SocketAddr,
    peer: SocketAddr,
    secret: &str,
    relay_ports: (u16, u16),
    io_uring: bool,
    gather: Duration,
) -> anyhow::Result<()> {
    let server = TurnServer::start(TurnConfig {
        udp: Some(udp),
        tcp: None,
        threads: 1,
        relay_ports,
        core: CoreConfig {
            peers: vec![Peer {
                advertised: peer,
                local: peer,
            }],
            relayed_ip: None,
            max_lifetime: Duration::from_secs(3600),
            max_permissions: 8,
            max_channels: 8,
        },
        quotas: QuotaLimits {
            total: 1_000_000,
            per_identity: 1_000,
            per_source: 1_000,
        },
        secret: secret.as_bytes().to_vec().into(),
        realm: REALM.into(),
        stream_queue: 256,
        io_uring,
        gather,
    })
    .context("starting the TURN server")?;
    if io_uring && server.io_uring_shards() == 0 {
        bail!("io_uring was refused here (the server log says why): run with --epoll");
    }
    let addr = server.udp_addr().context("no UDP listener")?;
    println!("udp {addr}");
    std::io::Write::flush(&mut std::io::stdout())?;
    let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
    server.stop();
    Ok(())
}

/// Waits until the server answers a Binding request.
fn wait_until_answers(t: &Target) -> anyhow::Result<()> {
    let s = UdpSocket::bind("127.0.0.1:0")?;
    s.set_read_timeout(Some(Duration::from_millis(100)))?;
    let mut buf = [0u8; 512];
    let n = client::bare_request(&mut buf, method::BINDING, [7; 12], |b| b)
        .context("a Binding request")?;
    let until = Instant::now() + Duration::from_secs(10);
    while Instant::now() < until {
        s.send_to(&buf[..n], t.addr)?;
        if s.recv(&mut [0u8; 512]).is_ok() {
            return Ok(());
        }
    }
    bail!("{} did not answer on {}", t.name, t.addr)
}

/// A UDP echo peer on loopback: what it receives goes back where it came from.
pub struct Echo {
    /// Its address.
    pub addr: SocketAddr,
    /// Datagrams it received.
    pub received: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Echo {
    /// Starts one.
    pub fn start() -> anyhow::Result<Echo> {
        let s = UdpSocket::bind("127.0.0.1:0")?;
        s.set_read_timeout(Some(Duration::from_millis(100)))?;
        let addr = s.local_addr()?;
        let received = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (r, st) = (received.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut b = [0u8; 2048];
            while !st.load(Ordering::Relaxed) {
                if let Ok((n, from)) = s.recv_from(&mut b) {
                    r.fetch_add(1, Ordering::Relaxed);
                    let _ = s.send_to(&b[..n], from);
                }
            }
        });
        Ok(Echo {
            addr,
            received,
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Echo {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The `n`-th client address of a part: 127.`part`.x.y, one address per client, so that no
/// two clients share a 5-tuple however the sockets' ports fall (a socket closed after its
/// allocation leaves the allocation on the server).
fn source(part: u8, n: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(
        127,
        part,
        (n / 250 % 250) as u8,
        (n % 250 + 1) as u8,
    ))
}

/// Where one client is in setting up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// The unauthenticated Allocate is out.
    Challenge,
    /// The signed Allocate is out.
    Allocate,
    /// The ChannelBind is out.
    Bind,
}

/// One client setting up its allocation (and channel).
struct Setup {
    socket: mio::net::UdpSocket,
    identity: String,
    signer: Option<Signer>,
    stage: Stage,
    sent: Instant,
    attempts: u32,
}

fn txid(n: usize, stage: Stage) -> [u8; 12] {
    let mut t = [stage as u8; 12];
    t[..8].copy_from_slice(&(n as u64).to_be_bytes());
    t
}

impl Setup {
    fn new(poll: &Poll, n: usize, ip: IpAddr) -> anyhow::Result<Setup> {
        let std = UdpSocket::bind(SocketAddr::new(ip, 0)).with_context(|| format!("bind {ip}"))?;
        std.set_nonblocking(true)?;
        let mut socket = mio::net::UdpSocket::from_std(std);
        poll.registry()
            .register(&mut socket, Token(n), Interest::READABLE)?;
        Ok(Setup {
            socket,
            identity: format!("lab-{n}"),
            signer: None,
            stage: Stage::Challenge,
            sent: Instant::now(),
            attempts: 0,
        })
    }

    /// Sends the request of its stage.
    fn send(&mut self, to: SocketAddr, n: usize, peer: SocketAddr) {
        let mut buf = [0u8; 512];
        let id = txid(n, self.stage);
        let len = match (&self.signer, self.stage) {
            (None, _) => {
                client::bare_request(&mut buf, method::ALLOCATE, id, client::allocate_body)
            }
            (Some(s), Stage::Bind) => s.request(
                &mut buf,
                method::CHANNEL_BIND,
                id,
                client::channel_bind_body(CHANNEL, peer),
            ),
            (Some(s), _) => s.request(&mut buf, method::ALLOCATE, id, client::allocate_body),
        };
        if let Some(len) = len {
            let _ = self.socket.send_to(&buf[..len], to);
        }
        self.sent = Instant::now();
        self.attempts += 1;
    }
}

/// What became of a client after a reply.
enum Step {
    /// Sent the next request (or nothing changed).
    Going,
    /// Set up.
    Done,
    /// Refused.
    Failed,
}

/// Clients set up against a server.
struct SetUp {
    made: usize,
    /// Their sockets, when the plan binds channels.
    ready: Vec<mio::net::UdpSocket>,
    failed: usize,
    took: Duration,
}

/// How a part sets clients up.
struct Plan {
    /// The second octet of the clients' addresses.
    part: u8,
    count: usize,
    window: usize,
    /// Bind a channel to this peer after allocating, and keep the sockets.
    bind: Option<SocketAddr>,
}

/// Takes one reply `r` to client `n`.
fn step(t: &Target, creds: &Credentials, plan: &Plan, n: usize, c: &mut Setup, r: Reply) -> Step {
    let peer = plan.bind.unwrap_or(t.addr);
    match r {
        Reply::Error {
            code: 401,
            realm: Some(realm),
            nonce: Some(nonce),
            ..
        } if c.stage == Stage::Challenge => {
            let m = creds.mint(&c.identity, Now::current().unix + 3600);
            c.signer = Some(Signer::new(&m.username, &m.password, &realm, &nonce));
            c.stage = Stage::Allocate;
            c.attempts = 0;
            c.send(t.addr, n, peer);
            Step::Going
        }
        Reply::Error {
            code: 438,
            nonce: Some(nonce),
            ..
        } if c.attempts < ATTEMPTS => {
            if let Some(s) = &mut c.signer {
                s.renew(&nonce);
            }
            c.send(t.addr, n, peer);
            Step::Going
        }
        Reply::Success { txid: id, .. } if id == txid(n, c.stage) => {
            if c.stage == Stage::Allocate && plan.bind.is_some() {
                c.stage = Stage::Bind;
                c.attempts = 0;
                c.send(t.addr, n, peer);
                Step::Going
            } else {
                Step::Done
            }
        }
        Reply::Error { .. } => Step::Failed,
        _ => Step::Going,
    }
}

/// Sets `plan.count` clients up against `t`, `plan.window` at a time.
fn set_up(t: &Target, plan: &Plan) -> anyhow::Result<SetUp> {
    let creds = Credentials::new(t.secret.as_bytes(), REALM);
    let mut poll = Poll::new()?;
    let mut events = Events::with_capacity(1024);
    let mut flying: HashMap<usize, Setup> = HashMap::new();
    let mut done = SetUp {
        made: 0,
        ready: Vec::new(),
        failed: 0,
        took: Duration::ZERO,
    };
    let peer = plan.bind.unwrap_or(t.addr);
    let (started, mut next) = (Instant::now(), 0usize);
    let mut buf = [0u8; 1500];
    while next < plan.count || !flying.is_empty() {
        while flying.len() < plan.window && next < plan.count {
            let mut c = Setup::new(&poll, next, source(plan.part, next))?;
            c.send(t.addr, next, peer);
            flying.insert(next, c);
            next += 1;
        }
        poll.poll(&mut events, Some(Duration::from_millis(20)))?;
        for ev in events.iter() {
            let n = ev.token().0;
            let Some(c) = flying.get_mut(&n) else {
                continue;
            };
            let mut outcome = Step::Going;
            while let Ok(len) = c.socket.recv(&mut buf) {
                let key = c.signer.as_ref().map(|s| s.key().to_vec());
                if let Some(r) = client::read(&buf[..len], key.as_deref()) {
                    outcome = step(t, &creds, plan, n, c, r);
                }
                if !matches!(outcome, Step::Going) {
                    break;
                }
            }
            match outcome {
                Step::Going => {}
                Step::Done => {
                    let mut c = flying.remove(&n).expect("in flight");
                    done.made += 1;
                    poll.registry().deregister(&mut c.socket)?;
                    if plan.bind.is_some() {
                        done.ready.push(c.socket);
                    }
                }
                Step::Failed => {
                    flying.remove(&n);
                    done.failed += 1;
                }
            }
        }
        done.failed += retry(&mut flying, t.addr, peer);
    }
    done.took = started.elapsed();
    Ok(done)
}

/// Sends again what went unanswered; drops (and counts) clients out of attempts.
fn retry(flying: &mut HashMap<usize, Setup>, to: SocketAddr, peer: SocketAddr) -> usize {
    let stale: Vec<usize> = flying
        .iter()
        .filter(|(_, c)| c.sent.elapsed() > RETRY)
        .map(|(k, _)| *k)
        .collect();
    let mut gone = 0;
    for k in stale {
        let c = flying.get_mut(&k).expect("listed");
        if c.attempts >= ATTEMPTS {
            flying.remove(&k);
            gone += 1;
        } else {
            c.send(to, k, peer);
        }
    }
    gone
}

/// What the relay part counted.
struct Relayed {
    sent: u64,
    relayed: u64,
    secs: f64,
    cpu: Duration,
}

/// Reads every datagram waiting on the sockets `events` names; counts the ChannelData on
/// [`CHANNEL`].
fn drain(events: &Events, clients: &[mio::net::UdpSocket], buf: &mut [u8]) -> u64 {
    let mut got = 0;
    for ev in events.iter() {
        let Some(c) = clients.get(ev.token().0) else {
            continue;
        };
        while let Ok(n) = c.recv(buf) {
            if n >= 4 && buf[..2] == CHANNEL.to_be_bytes() {
                got += 1;
            }
        }
    }
    got
}

/// The clients send ChannelData to `t` at `o.rate` in all for `o.secs`, round robin; counts
/// what the peer and the clients got back, and `t`'s CPU meanwhile (until 300 ms pass with
/// nothing more arriving).
fn relay(
    t: &Target,
    echo: &Echo,
    mut clients: Vec<mio::net::UdpSocket>,
    o: &TurnOptions,
) -> anyhow::Result<Relayed> {
    let mut poll = Poll::new()?;
    for (i, c) in clients.iter_mut().enumerate() {
        poll.registry().register(c, Token(i), Interest::READABLE)?;
    }
    let mut events = Events::with_capacity(1024);
    let mut pkt = vec![0u8; o.payload + 8];
    let len = client::channel_data(&mut pkt, CHANNEL, &vec![0x5a; o.payload], false)
        .context("--payload: too large for a ChannelData message")?;
    let mut buf = [0u8; 2048];
    let (echo0, cpu0) = (echo.received.load(Ordering::Relaxed), t.cpu()?);
    let (started, secs) = (Instant::now(), Duration::from_secs_f64(o.secs));
    let (mut offered, mut sent, mut back) = (0u64, 0u64, 0u64);
    while started.elapsed() < secs {
        let due = (started.elapsed().as_secs_f64() * o.rate as f64) as u64;
        while offered < due {
            let c = &clients[offered as usize % clients.len()];
            sent += u64::from(c.send_to(&pkt[..len], t.addr).is_ok());
            offered += 1;
        }
        poll.poll(&mut events, Some(Duration::from_millis(1)))?;
        back += drain(&events, &clients, &mut buf);
    }
    let secs = started.elapsed().as_secs_f64();
    let mut quiet = Instant::now();
    while quiet.elapsed() < Duration::from_millis(300) {
        poll.poll(&mut events, Some(Duration::from_millis(50)))?;
        let got = drain(&events, &clients, &mut buf);
        if got > 0 {
            back += got;
            quiet = Instant::now();
        }
    }
    let cpu = t.cpu()?.saturating_sub(cpu0);
    let to_peer = echo.received.load(Ordering::Relaxed) - echo0;
    Ok(Relayed {
        sent,
        relayed: to_peer + back,
        secs,
        cpu,
    })
}

/// `n / d`, 0 when `d` is 0.
fn per(n: f64, d: f64) -> f64 {
    if d > 0.0 {
        n / d
    } else {
        0.0
    }
}

/// The allocation part, then the relay part, against `t`.
fn measure(t: &Target, echo: &Echo, o: &TurnOptions) -> anyhow::Result<TurnRow> {
    eprintln!("lab turn: {}: {} allocations …", t.name, o.allocations);
    let cpu0 = t.cpu()?;
    let plan = Plan {
        part: 20,
        count: o.allocations,
        window: o.window,
        bind: None,
    };
    let a = set_up(t, &plan)?;
    let alloc_cpu = t.cpu()?.saturating_sub(cpu0).as_secs_f64();
    eprintln!(
        "lab turn: {}: {} clients relaying {} packets/s for {} s …",
        t.name, o.clients, o.rate, o.secs
    );
    let plan = Plan {
        part: 21,
        count: o.clients,
        window: o.window,
        bind: Some(echo.addr),
    };
    let clients = set_up(t, &plan)?;
    let relay_clients = clients.ready.len();
    if relay_clients == 0 {
        bail!(
            "{}: no relay client got an allocation and a channel",
            t.name
        );
    }
    let r = relay(t, echo, clients.ready, o)?;
    let secs = a.took.as_secs_f64();
    Ok(TurnRow {
        server: t.name,
        allocations: a.made,
        allocation_failures: a.failed,
        allocation_secs: secs,
        allocation_cpu_secs: alloc_cpu,
        allocations_per_sec: per(a.made as f64, secs),
        allocations_per_cpu_sec: per(a.made as f64, alloc_cpu),
        relay_clients,
        offered_pps: o.rate,
        relay_secs: r.secs,
        sent: r.sent,
        relayed: r.relayed,
        lost: (2 * r.sent).saturating_sub(r.relayed),
        relay_cpu_secs: r.cpu.as_secs_f64(),
        relayed_per_cpu_sec: per(r.relayed as f64, r.cpu.as_secs_f64()),
    })
}

/// `--relay-ports` in three, one part per server, each with room for every allocation of the
/// run.
fn split_ports(o: &TurnOptions) -> anyhow::Result<[(u16, u16); 3]> {
    let (low, high) = o.relay_ports;
    let need = o.allocations + o.clients;
    if low == 0 || high < low || usize::from(high - low) + 1 < 3 * need {
        bail!(
            "--relay-ports {low}-{high}: {need} ports for each of the three servers needed ({} \
             allocations and {} clients), {} in all",
            o.allocations,
            o.clients,
            3 * need
        );
    }
    let third = (high - low + 1) / 3;
    let part = |i: u16| (low + i * third, low + (i + 1) * third - 1);
    Ok([part(0), part(1), part(2)])
}

fn coturn_version(bin: &Path) -> String {
    Command::new(bin)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.lines().last().map(|l| l.trim().to_owned()))
        .unwrap_or_default()
}

/// Runs both servers, coturn first, and compares.
pub fn run(o: &TurnOptions) -> anyhow::Result<TurnReport> {
    if o.allocations == 0 || o.clients == 0 || o.window == 0 || o.rate == 0 || o.secs <= 0.0 {
        bail!("--allocations, --clients, --window, --rate and --duration must be above 0");
    }
    if o.clients > 62_500 || o.allocations > 62_500 {
        bail!("--allocations and --clients: at most 62500 (one loopback address each)");
    }
    let [coturn_ports, our_ports, epoll_ports] = split_ports(o)?;
    let mut key = [0u8; 24];
    aws_lc_rs::rand::fill(&mut key).map_err(|_| anyhow!("no randomness for the secret"))?;
    let secret: String = key.iter().map(|b| format!("{b:02x}")).collect();
    let echoes = [Echo::start()?, Echo::start()?, Echo::start()?];
    let coturn = start_coturn(&o.coturn, &secret, coturn_ports)?;
    let ours = start_secrelay(
        &o.exe,
        &secret,
        echoes[1].addr,
        our_ports,
        true,
        o.gather_us,
    )?;
    let epoll = start_secrelay(&o.exe, &secret, echoes[2].addr, epoll_ports, false, 0)?;
    let theirs = measure(&coturn, &echoes[0], o)?;
    let mine = measure(&ours, &echoes[1], o)?;
    let mine_epoll = measure(&epoll, &echoes[2], o)?;
    Ok(TurnReport {
        allocations_ratio: per(mine.allocations_per_cpu_sec, theirs.allocations_per_cpu_sec),
        relayed_ratio: per(mine.relayed_per_cpu_sec, theirs.relayed_per_cpu_sec),
        relayed_ratio_epoll: per(mine_epoll.relayed_per_cpu_sec, theirs.relayed_per_cpu_sec),
        gather_us: o.gather_us,
        rows: vec![theirs, mine, mine_epoll],
        coturn_version: coturn_version(&o.coturn),
    })
}
