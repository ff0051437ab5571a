//! `secrelay lab handshake-server`: a DTLS-SRTP server on one UDP socket that serves many
//! clients at once.
//!
//! Datagrams are demultiplexed by source address, one [`Endpoint`] per peer, on one thread
//! driven by `mio` (the handshake is CPU-bound; one core serves it). Memory stays bounded:
//! - a ClientHello from an address without an endpoint goes to a stateless
//!   [`CookieResponder`]: without a valid cookie it is answered with a HelloVerifyRequest and
//!   nothing is kept; an endpoint is made only for a ClientHello that returns a valid cookie
//!   (proof that the peer receives at its address), with [`Endpoint::new_admitted`], which
//!   takes the handshake over from the responder. A spoofed ClientHello costs one HMAC and one
//!   small datagram, no state; the secret is rotated every [`COOKIE_ROTATION`] (a cookie stays
//!   good for one rotation);
//! - at most `max_in_flight` handshakes exist at once; an admitted ClientHello beyond that is
//!   refused (dropped and counted; the client retransmits);
//! - a handshake that hears nothing from its peer for `idle_timeout` is dropped;
//! - a finished handshake's endpoint stays only to answer retransmissions of the client's
//!   last flight: until the client's close_notify, a new ClientHello from the same address,
//!   or `linger`, whichever comes first;
//! - a failed endpoint is dropped at once.
//!
//! Every finished handshake appends a line to the keylog (see [`super::keylog`]). Counters go
//! to stderr every second; SIGINT or SIGTERM (or `duration`) ends the run cleanly.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::io::{ErrorKind, Write as _};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use mio::net::UdpSocket;
use mio::{Events, Interest, Poll, Token};
use secrelay_dtls::cookie::{CookieResponder, CookieVerdict};
use secrelay_dtls::{
    Certificate, Endpoint, EndpointConfig, EngineChoice, Event, KeyType, LocalCertificate, Output,
    PeerAuth, Role,
};
use secrelay_srtp::Profile;
use serde::Serialize;

use super::keylog::Keylog;

/// How often the cookie secret changes (a cookie is accepted under the current secret and the
/// previous one, so for 30–60 s).
pub const COOKIE_ROTATION: Duration = Duration::from_secs(30);

/// Settings of the handshake server.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// Address to bind (port 0 picks one; the bound address is printed first on stdout).
    pub listen: SocketAddr,
    /// Which DTLS engine the server runs on (`Auto`: OpenSSL for an RSA certificate, dimpl
    /// otherwise).
    pub engine: EngineChoice,
    /// Our certificate's key type (ECDSA P-256 or P-384 on dimpl; RSA too on OpenSSL).
    pub cert_type: KeyType,
    /// SRTP profiles accepted, most preferred first.
    pub srtp_profiles: Vec<Profile>,
    /// Where finished handshakes are logged.
    pub keylog: Option<PathBuf>,
    /// How client certificates are checked (any self-signed one by default).
    pub peer_auth: PeerAuth,
    /// Handshakes in progress at most.
    pub max_in_flight: usize,
    /// A handshake silent this long is dropped.
    pub idle_timeout: Duration,
    /// How long a finished handshake's endpoint stays to answer retransmissions.
    pub linger: Duration,
    /// Overall deadline of one handshake.
    pub handshake_timeout: Duration,
    /// Stop after this long (None: until SIGINT/SIGTERM).
    pub duration: Option<Duration>,
    /// Print counters to stderr every second.
    pub print_stats: bool,
    /// ECDHE groups accepted, most preferred first; empty for the engine's own list.
    pub groups: Vec<secrelay_dtls::EcdheGroup>,
}

impl ServerOptions {
    /// Defaults for `listen`: ECDSA P-256, every DTLS-SRTP profile dimpl negotiates, any
    /// client certificate, 1,000 handshakes in flight, 5 s idle timeout, 1 s linger, 10 s
    /// handshake deadline.
    pub fn new(listen: SocketAddr) -> ServerOptions {
        ServerOptions {
            listen,
            engine: EngineChoice::Auto,
            cert_type: KeyType::EcdsaP256,
            srtp_profiles: secrelay_dtls::endpoint::DEFAULT_SRTP_PROFILES.to_vec(),
            keylog: None,
            peer_auth: PeerAuth::AnyCertificate,
            max_in_flight: 1000,
            idle_timeout: Duration::from_secs(5),
            linger: Duration::from_secs(1),
            handshake_timeout: Duration::from_secs(10),
            duration: None,
            print_stats: true,
            groups: Vec::new(),
        }
    }
}

/// What the server counted.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ServerCounters {
    /// Handshakes that finished (keys exported).
    pub completed: u64,
    /// Failed handshakes by reason.
    pub failed: BTreeMap<String, u64>,
    /// Admitted ClientHellos dropped because `max_in_flight` handshakes were running.
    pub refused_at_cap: u64,
    /// Datagrams from addresses without an endpoint that were no (unfragmented) DTLS
    /// ClientHello.
    pub dropped_not_dtls: u64,
    /// ClientHellos without a valid cookie, answered statelessly with a HelloVerifyRequest.
    pub hello_verify_requests: u64,
    /// Endpoints made (one per admitted ClientHello).
    pub endpoints_made: u64,
    /// Datagrams that could not be sent (socket buffer full, unreachable).
    pub send_errors: u64,
    /// Endpoints alive now.
    pub endpoints: usize,
    /// Handshakes in progress now.
    pub in_flight: usize,
    /// Most endpoints alive at once.
    pub peak_endpoints: usize,
    /// Datagrams received.
    pub datagrams_in: u64,
    /// Datagrams sent.
    pub datagrams_out: u64,
}

impl ServerCounters {
    /// All failures.
    pub fn total_failed(&self) -> u64 {
        self.failed.values().sum()
    }

    fn fail(&mut self, reason: impl Into<String>) {
        *self.failed.entry(reason.into()).or_default() += 1;
    }
}

struct Peer {
    ep: Endpoint,
    id: u64,
    /// The endpoint's timer.
    timer: Option<Instant>,
    last_heard: Instant,
    /// When the handshake finished (keys exported), if it did.
    connected_at: Option<Instant>,
}

/// Whether `d` is a DTLS handshake record.
fn is_handshake_record(d: &[u8]) -> bool {
    d.len() > 13 && d[0] == 22 && d[1] == 0xfe
}

/// Whether `d` starts with an epoch-0 ClientHello (a new handshake from this address).
fn is_client_hello(d: &[u8]) -> bool {
    is_handshake_record(d) && d[3..5] == [0, 0] && d.len() > 25 && d[13] == 1
}

struct Server {
    socket: UdpSocket,
    config: EndpointConfig,
    responder: CookieResponder,
    peers: HashMap<SocketAddr, Peer>,
    timers: BinaryHeap<Reverse<(Instant, u64, SocketAddr)>>,
    next_id: u64,
    keylog: Option<Keylog>,
    c: ServerCounters,
    opts: ServerOptions,
}

impl Server {
    fn in_flight(&self) -> usize {
        self.peers
            .values()
            .filter(|p| p.connected_at.is_none())
            .count()
    }

    fn datagram(&mut self, now: Instant, from: SocketAddr, d: &[u8]) -> anyhow::Result<()> {
        self.c.datagrams_in += 1;
        if let Some(p) = self.peers.get(&from) {
            if p.connected_at.is_some() && is_client_hello(d) {
                // The same address starts a new handshake: the old one is done.
                self.peers.remove(&from);
            }
        }
        if !self.peers.contains_key(&from) {
            // Only a ClientHello starts a handshake; anything else from an unknown address
            // (a retransmission after we dropped its endpoint, stray traffic) is dropped
            // without state.
            if !is_client_hello(d) {
                self.c.dropped_not_dtls += 1;
                return Ok(());
            }
            let admission = match self.responder.check(from, d) {
                CookieVerdict::Admit(a) => a,
                CookieVerdict::HelloVerifyRequest(hvr) => {
                    self.c.hello_verify_requests += 1;
                    self.send(&hvr, from);
                    return Ok(());
                }
                _ => {
                    self.c.dropped_not_dtls += 1;
                    return Ok(());
                }
            };
            if self.c.in_flight >= self.opts.max_in_flight {
                self.c.refused_at_cap += 1;
                return Ok(());
            }
            let ep = Endpoint::new_admitted(self.config.clone(), now, &admission)
                .map_err(|e| anyhow::anyhow!("server endpoint: {e}"))?;
            self.c.endpoints_made += 1;
            self.next_id += 1;
            self.peers.insert(
                from,
                Peer {
                    ep,
                    id: self.next_id,
                    timer: None,
                    last_heard: now,
                    connected_at: None,
                },
            );
            self.c.in_flight += 1;
            self.c.endpoints = self.peers.len();
            self.c.peak_endpoints = self.c.peak_endpoints.max(self.peers.len());
            // The admitted ClientHello is in already.
            return self.drain(now, from);
        }
        let p = self.peers.get_mut(&from).expect("present");
        p.last_heard = now;
        p.ep.handle_datagram(now, d);
        self.drain(now, from)
    }

    fn send(&mut self, d: &[u8], to: SocketAddr) {
        match self.socket.send_to(d, to) {
            Ok(_) => self.c.datagrams_out += 1,
            // Loss, as far as the peer can tell; it retransmits.
            Err(_) => self.c.send_errors += 1,
        }
    }

    fn timeout(
        &mut self,
        now: Instant,
        at: Instant,
        id: u64,
        addr: SocketAddr,
    ) -> anyhow::Result<()> {
        match self.peers.get_mut(&addr) {
            Some(p) if p.id == id && p.timer == Some(at) => {
                p.timer = None;
                p.ep.handle_timeout(now);
                self.drain(now, addr)
            }
            _ => Ok(()),
        }
    }

    /// Drains `addr`'s endpoint per the drive contract.
    fn drain(&mut self, now: Instant, addr: SocketAddr) -> anyhow::Result<()> {
        let mut remove = false;
        let Some(p) = self.peers.get_mut(&addr) else {
            return Ok(());
        };
        while let Some(out) = p.ep.poll_output() {
            match out {
                Output::Transmit(d) => match self.socket.send_to(&d, addr) {
                    Ok(_) => self.c.datagrams_out += 1,
                    // Loss, as far as the peer can tell; the endpoint retransmits.
                    Err(_) => self.c.send_errors += 1,
                },
                Output::Timeout(at) => {
                    p.timer = Some(at);
                    self.timers.push(Reverse((at, p.id, addr)));
                    break;
                }
                Output::Event(Event::Connected { profile, keys, .. }) => {
                    self.c.completed += 1;
                    self.c.in_flight -= 1;
                    p.connected_at = Some(now);
                    if let Some(k) = self.keylog.as_mut() {
                        k.write(
                            addr,
                            None,
                            super::dtls_name(profile),
                            keys.exported().as_bytes(),
                        )?;
                    }
                }
                Output::Event(Event::Failed(reason)) => {
                    if p.connected_at.is_none() {
                        self.c.fail(reason.to_string());
                    }
                    remove = true;
                }
                Output::Event(Event::Closed) => {
                    if p.connected_at.is_none() {
                        self.c
                            .fail("closed by the peer before the handshake finished");
                    }
                    remove = true;
                }
                Output::Event(_) => {}
            }
        }
        if remove || p.ep.state() == secrelay_dtls::State::Finished {
            self.remove(&addr);
        }
        Ok(())
    }

    fn remove(&mut self, addr: &SocketAddr) {
        if let Some(p) = self.peers.remove(addr) {
            if p.connected_at.is_none() {
                self.c.in_flight -= 1;
            }
        }
        self.c.endpoints = self.peers.len();
    }

    /// Drops silent handshakes and lingering finished ones.
    fn sweep(&mut self, now: Instant) {
        let (idle, linger) = (self.opts.idle_timeout, self.opts.linger);
        let expired: Vec<(SocketAddr, bool)> = self
            .peers
            .iter()
            .filter_map(|(a, p)| match p.connected_at {
                Some(t) if now.duration_since(t) >= linger => Some((*a, false)),
                None if now.duration_since(p.last_heard) >= idle => Some((*a, true)),
                _ => None,
            })
            .collect();
        for (a, failed) in expired {
            if failed {
                self.c.fail(format!(
                    "peer silent for {:.1} s (idle timeout)",
                    idle.as_secs_f64()
                ));
            }
            self.remove(&a);
        }
        debug_assert_eq!(self.c.in_flight, self.in_flight());
        // Stale timer entries of removed endpoints are skipped when popped; rebuild the heap
        // when they pile up.
        if self.timers.len() > 4 * self.peers.len() + 1024 {
            let live: Vec<_> = self
                .peers
                .iter()
                .filter_map(|(a, p)| p.timer.map(|t| Reverse((t, p.id, *a))))
                .collect();
            self.timers = live.into();
        }
    }
}

fn stats_line(elapsed: Duration, c: &ServerCounters, per_s: f64) -> String {
    let failed = if c.failed.is_empty() {
        "0".to_string()
    } else {
        let parts: Vec<String> = c.failed.iter().map(|(r, n)| format!("{r}: {n}")).collect();
        format!("{} ({})", c.total_failed(), parts.join("; "))
    };
    format!(
        "[{:7.1} s] completed {} ({per_s:.0}/s)  failed {failed}  in flight {}  endpoints {}  refused at cap {}  send errors {}  hello-verify {}  endpoints made {}",
        elapsed.as_secs_f64(),
        c.completed,
        c.in_flight,
        c.endpoints,
        c.refused_at_cap,
        c.send_errors,
        c.hello_verify_requests,
        c.endpoints_made
    )
}

/// Runs the server until `stop` is set, SIGINT/SIGTERM arrive, or `duration` passes.
/// `on_bound` gets the bound address before the first datagram is read. Returns the counters.
pub fn run(
    opts: ServerOptions,
    stop: Arc<AtomicBool>,
    on_bound: impl FnOnce(SocketAddr),
) -> anyhow::Result<ServerCounters> {
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone())
            .context("installing the SIGINT/SIGTERM handler")?;
    }
    let cert = super::engine_certificate(opts.engine, opts.cert_type, "secrelay-handshake-server")?;
    let mut config = EndpointConfig::new(
        Role::Server,
        LocalCertificate::from(&cert),
        opts.peer_auth.clone(),
    );
    config.srtp_profiles = opts.srtp_profiles.clone();
    config.timers.handshake_timeout = opts.handshake_timeout;
    // Endpoints are made for ClientHellos the responder admitted; `new_admitted` runs the
    // engine's cookie exchange (replaying the responder's) whatever this says.
    config.server_cookies = true;
    config.engine = opts.engine;
    config.ecdhe_groups = opts.groups.clone();
    if opts.max_in_flight == 0 {
        anyhow::bail!("--max-in-flight must be at least 1");
    }
    let keylog = opts.keylog.as_deref().map(Keylog::open).transpose()?;
    let mut socket = UdpSocket::bind(opts.listen)
        .with_context(|| format!("--listen {}: cannot bind", opts.listen))?;
    let bound = socket.local_addr()?;
    let mut poll = Poll::new().context("creating the poller")?;
    poll.registry()
        .register(&mut socket, Token(0), Interest::READABLE)?;
    on_bound(bound);
    log_identity(&cert);

    let mut s = Server {
        socket,
        config,
        responder: CookieResponder::random()
            .map_err(|_| anyhow::anyhow!("no randomness for the cookie secret"))?,
        peers: HashMap::new(),
        timers: BinaryHeap::new(),
        next_id: 0,
        keylog,
        c: ServerCounters::default(),
        opts: opts.clone(),
    };
    let start = Instant::now();
    let end = opts.duration.map(|d| start + d);
    let mut next_stats = start + Duration::from_secs(1);
    let mut last_completed = 0;
    let mut next_sweep = start + Duration::from_millis(100);
    let mut next_rotation = start + COOKIE_ROTATION;
    let mut events = Events::with_capacity(64);
    let mut buf = vec![0u8; 65_536];
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        if end.is_some_and(|e| now >= e) {
            break;
        }
        let mut wake = next_sweep.min(next_stats);
        if let Some(Reverse((t, _, _))) = s.timers.peek() {
            wake = wake.min(*t);
        }
        if let Some(e) = end {
            wake = wake.min(e);
        }
        match poll.poll(&mut events, Some(wake.saturating_duration_since(now))) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(e).context("waiting for datagrams"),
        }
        if !events.is_empty() {
            loop {
                match s.socket.recv_from(&mut buf) {
                    Ok((n, from)) => s.datagram(Instant::now(), from, &buf[..n])?,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    // ICMP errors from earlier sends, interrupted reads: nothing to do.
                    Err(e)
                        if matches!(
                            e.kind(),
                            ErrorKind::ConnectionRefused
                                | ErrorKind::Interrupted
                                | ErrorKind::ConnectionReset
                        ) => {}
                    Err(e) => return Err(e).context("receiving"),
                }
            }
        }
        let now = Instant::now();
        while let Some(Reverse((t, id, addr))) = s.timers.peek().copied() {
            if t > now {
                break;
            }
            s.timers.pop();
            s.timeout(now, t, id, addr)?;
        }
        if now >= next_sweep {
            s.sweep(now);
            next_sweep = now + Duration::from_millis(100);
        }
        if now >= next_rotation {
            s.responder
                .rotate_random()
                .map_err(|_| anyhow::anyhow!("no randomness for the cookie secret"))?;
            next_rotation = now + COOKIE_ROTATION;
        }
        if now >= next_stats {
            let per_s = (s.c.completed - last_completed) as f64
                / (now - next_stats + Duration::from_secs(1)).as_secs_f64();
            last_completed = s.c.completed;
            if opts.print_stats {
                eprintln!("{}", stats_line(now - start, &s.c, per_s));
            }
            next_stats = now + Duration::from_secs(1);
        }
    }
    let elapsed = start.elapsed();
    if opts.print_stats {
        eprintln!(
            "{}",
            stats_line(elapsed, &s.c, s.c.completed as f64 / elapsed.as_secs_f64())
        );
        eprintln!(
            "stopped after {:.1} s: {} completed, {} failed",
            elapsed.as_secs_f64(),
            s.c.completed,
            s.c.total_failed()
        );
    }
    Ok(s.c)
}

fn log_identity(cert: &Certificate) {
    let mut err = std::io::stderr().lock();
    let _ = writeln!(
        err,
        "server certificate {} fingerprint {}",
        cert.key_type(),
        cert.fingerprint()
    );
}
