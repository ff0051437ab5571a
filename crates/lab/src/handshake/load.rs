//! `secrelay lab handshake --target ADDR`: a DTLS-SRTP handshake load generator in the spirit
//! of tls-perf.
//!
//! `connections` handshakes are kept in flight, spread over `threads` threads. Every handshake
//! gets its own UDP socket on a fresh ephemeral port (so a server that demultiplexes by source
//! address, as secrelay's and OpenSSL's do, sees a new peer each time), connected to the
//! target; each thread drives its sockets with one `mio` poller. A handshake runs from the
//! first ClientHello to the exported keys (the server's certificate accepted, any by default);
//! then the client sends close_notify (which lets a one-at-a-time server such as
//! `openssl s_server` take the next client) and closes its socket.
//!
//! Reported, as tls-perf does: handshakes/s sampled every second (max, average, 95th
//! percentile — the rate reached in 95 % of the seconds — and min), latency percentiles of the
//! whole handshake (p50, p95, p99, max), completed and failed counts by reason.

use std::collections::BTreeMap;
use std::io::ErrorKind;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use mio::net::UdpSocket;
use mio::{Events, Interest, Poll, Token};
use secrelay_dtls::{
    Endpoint, EndpointConfig, EngineChoice, Event, KeyType, LocalCertificate, Output, PeerAuth,
    Role,
};
use serde::Serialize;

use super::keylog::Keylog;
use crate::frame::{Cell, Table};

/// What resumption is, here: dimpl has none, so every handshake is a full one.
pub const RESUMPTION_NOT_OFFERED: &str =
    "not offered by the engine: dimpl 0.9 has no session resumption (no session IDs, tickets or PSK in DTLS 1.2); every handshake is a full one";

/// Settings of a load run.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// The server.
    pub target: SocketAddr,
    /// Stop after this many handshakes (finished or failed)...
    pub handshakes: Option<u64>,
    /// ...or after this long.
    pub duration: Option<Duration>,
    /// Handshakes in flight at once.
    pub connections: usize,
    /// Threads driving them.
    pub threads: usize,
    /// Which DTLS engine our client runs on (`Auto`: OpenSSL for an RSA certificate, dimpl
    /// otherwise).
    pub engine: EngineChoice,
    /// Our client certificate's key type (a fresh self-signed one per run)...
    pub cert_type: KeyType,
    /// ...or this certificate (e.g. issued by a private CA).
    pub certificate: Option<secrelay_dtls::Certificate>,
    /// How the server's certificate is checked (any by default).
    pub peer_auth: PeerAuth,
    /// Deadline of one handshake.
    pub timeout: Duration,
    /// Where finished handshakes are logged.
    pub keylog: Option<PathBuf>,
    /// Whether resumption was asked for (reported as not offered).
    pub resume: bool,
    /// Print a line every second to stderr.
    pub progress: bool,
    /// ECDHE groups offered, most preferred first; empty for the engine's own list.
    pub groups: Vec<secrelay_dtls::EcdheGroup>,
}

impl LoadOptions {
    /// `handshakes` handshakes against `target`, 1 connection, 1 thread, ECDSA P-256, 10 s
    /// per handshake.
    pub fn new(target: SocketAddr) -> LoadOptions {
        LoadOptions {
            target,
            handshakes: None,
            duration: None,
            connections: 1,
            threads: 1,
            engine: EngineChoice::Auto,
            cert_type: KeyType::EcdsaP256,
            certificate: None,
            peer_auth: PeerAuth::AnyCertificate,
            timeout: Duration::from_secs(10),
            keylog: None,
            resume: false,
            progress: true,
            groups: Vec::new(),
        }
    }
}

/// Handshakes/s over the one-second samples.
#[derive(Debug, Clone, Serialize)]
pub struct RateStats {
    /// Best second.
    pub max: f64,
    /// Completed handshakes over the whole run's time.
    pub avg: f64,
    /// The rate reached or beaten in 95 % of the samples.
    pub p95: f64,
    /// Worst second.
    pub min: f64,
    /// The samples, handshakes/s, in order.
    pub samples: Vec<f64>,
}

/// Latency of completed handshakes, first ClientHello to exported keys, in milliseconds.
#[derive(Debug, Clone, Serialize)]
pub struct LatencyStats {
    /// Median.
    pub p50: f64,
    /// 95th percentile.
    pub p95: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Slowest.
    pub max: f64,
    /// Mean.
    pub mean: f64,
}

impl LatencyStats {
    /// Every figure not a number: no handshake finished.
    pub const NONE: LatencyStats = LatencyStats {
        p50: f64::NAN,
        p95: f64::NAN,
        p99: f64::NAN,
        max: f64::NAN,
        mean: f64::NAN,
    };

    /// The figures of these latencies (ms); none when there are none.
    pub fn of(mut v: Vec<f64>) -> Option<LatencyStats> {
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        Some(LatencyStats {
            p50: super::quantile(&v, 0.50),
            p95: super::quantile(&v, 0.95),
            p99: super::quantile(&v, 0.99),
            max: v[v.len() - 1],
            mean: v.iter().sum::<f64>() / v.len() as f64,
        })
    }
}

/// Samples a load run's completed count every second until all its `threads` are done, and
/// sets `stop` once `duration` has passed; `line(seconds since start, rate, completed)` is
/// called with each sample (for a progress line). The rates (the last, partial second included
/// when it lasted ≥ 0.2 s; average = completed / elapsed) and the run's wall time.
pub(crate) fn sample_rates(
    start: Instant,
    duration: Option<Duration>,
    (threads, threads_done): (usize, &AtomicUsize),
    completed: &AtomicU64,
    stop: &AtomicBool,
    mut line: impl FnMut(f64, f64, u64),
) -> (RateStats, Duration) {
    let mut samples = Vec::new();
    let mut last = (start, 0u64);
    let mut next = start + Duration::from_secs(1);
    let end = duration.map(|d| start + d);
    while threads_done.load(Ordering::Acquire) < threads {
        let now = Instant::now();
        if end.is_some_and(|e| now >= e) {
            stop.store(true, Ordering::Relaxed);
        }
        if now >= next {
            let done = completed.load(Ordering::Relaxed);
            let rate = (done - last.1) as f64 / now.duration_since(last.0).as_secs_f64();
            samples.push(rate);
            line(now.duration_since(start).as_secs_f64(), rate, done);
            last = (now, done);
            next += Duration::from_secs(1);
        }
        let wake = end.map_or(next, |e| e.min(next));
        std::thread::sleep(
            wake.saturating_duration_since(Instant::now())
                .min(Duration::from_millis(10)),
        );
    }
    let elapsed = start.elapsed();
    // Every thread is done: the count is final.
    let completed = completed.load(Ordering::Acquire);
    let tail = elapsed.saturating_sub(last.0.duration_since(start));
    if tail >= Duration::from_millis(200) || samples.is_empty() {
        samples.push((completed - last.1) as f64 / tail.as_secs_f64().max(1e-3));
    }
    let mut sorted = samples.clone();
    sorted.sort_by(f64::total_cmp);
    let rates = RateStats {
        max: sorted[sorted.len() - 1],
        avg: completed as f64 / elapsed.as_secs_f64(),
        p95: super::quantile(&sorted, 0.05),
        min: sorted[0],
        samples,
    };
    (rates, elapsed)
}

/// The table of handshake rates and latencies that the DTLS and TLS load runs print, one
/// row per kind of handshake ([`rate_row`]).
pub(crate) fn rate_table(id: &str, title: String) -> Table {
    Table::new(id, title)
        .col("kind", "handshakes")
        .col_unit("max", "max", "/s")
        .col_unit("avg", "avg", "/s")
        .col_unit("p95", "95P", "/s")
        .col_unit("min", "min", "/s")
        .col_unit("p50_ms", "latency p50", "ms")
        .col_unit("p95_ms", "p95", "ms")
        .col_unit("p99_ms", "p99", "ms")
        .col_unit("max_ms", "max", "ms")
        .col("completed", "completed")
        .col("failed", "failed")
}

/// A row of [`rate_table`].
pub(crate) fn rate_row(
    kind: Cell,
    r: &RateStats,
    l: &LatencyStats,
    completed: u64,
    failed: u64,
) -> [(&'static str, Cell); 11] {
    [
        ("kind", kind),
        ("max", Cell::num(r.max)),
        ("avg", Cell::num(r.avg)),
        ("p95", Cell::num(r.p95)),
        ("min", Cell::num(r.min)),
        ("p50_ms", Cell::num(l.p50)),
        ("p95_ms", Cell::num(l.p95)),
        ("p99_ms", Cell::num(l.p99)),
        ("max_ms", Cell::num(l.max)),
        ("completed", Cell::text(completed.to_string())),
        ("failed", Cell::text(failed.to_string())),
    ]
}

/// How the run was measured.
#[derive(Debug, Clone, Serialize)]
pub struct LoadMethod {
    /// What one handshake is and what was timed.
    pub timed: String,
    /// The machine.
    pub machine: crate::machine::Machine,
    /// Library versions.
    pub versions: BTreeMap<String, String>,
    /// When (RFC 3339, UTC).
    pub date: String,
}

/// Everything a load run measured.
#[derive(Debug, Clone, Serialize)]
pub struct LoadReport {
    /// `secrelay lab handshake`.
    pub tool: String,
    /// The server.
    pub target: String,
    /// Handshakes in flight at once.
    pub connections: usize,
    /// Threads.
    pub threads: usize,
    /// Our certificate's key type.
    pub cert_type: String,
    /// The DTLS engine our client ran on (`dimpl` or `openssl`).
    pub engine: String,
    /// Handshakes asked for, if a count was given.
    pub requested_handshakes: Option<u64>,
    /// Duration asked for, if one was given (s).
    pub requested_duration_s: Option<f64>,
    /// Wall time of the run (s).
    pub elapsed_s: f64,
    /// Handshakes that finished with keys.
    pub completed: u64,
    /// Handshakes that failed.
    pub failed: u64,
    /// Failures by reason.
    pub failures: BTreeMap<String, u64>,
    /// Handshakes still in flight when the duration ended (neither completed nor failed).
    pub unfinished_at_end: u64,
    /// Negotiated SRTP profiles, by name.
    pub srtp_profiles: BTreeMap<String, u64>,
    /// Full handshakes/s.
    pub handshakes_per_s: RateStats,
    /// Full-handshake latency.
    pub latency_ms: LatencyStats,
    /// Resumed handshakes: not offered by the engine.
    pub resumption: String,
    /// How it was measured.
    pub method: LoadMethod,
}

impl LoadReport {
    /// The summary as tables for a terminal.
    pub fn tables(&self) -> Vec<Table> {
        let mut rate = rate_table(
            "handshake_rate",
            format!(
                "DTLS-SRTP handshakes against {} ({} connections in flight, {} threads)",
                self.target, self.connections, self.threads
            ),
        );
        rate.push(rate_row(
            Cell::text("full"),
            &self.handshakes_per_s,
            &self.latency_ms,
            self.completed,
            self.failed,
        ));
        let no = || Cell::not_offered(RESUMPTION_NOT_OFFERED);
        rate.push([
            ("kind", Cell::text("resumed")),
            ("max", no()),
            ("avg", no()),
            ("p95", no()),
            ("min", no()),
            ("p50_ms", no()),
        ]);
        let mut tables = vec![rate];
        if !self.failures.is_empty() || self.unfinished_at_end > 0 {
            let mut f = Table::new("handshake_failures", "Failed handshakes by reason")
                .col("reason", "reason")
                .col("count", "count");
            for (reason, n) in &self.failures {
                f.push([
                    ("reason", Cell::text(reason.clone())),
                    ("count", Cell::text(n.to_string())),
                ]);
            }
            if self.unfinished_at_end > 0 {
                f.push([
                    (
                        "reason",
                        Cell::text("unfinished when the duration ended (not counted as failed)"),
                    ),
                    ("count", Cell::text(self.unfinished_at_end.to_string())),
                ]);
            }
            tables.push(f);
        }
        tables
    }

    /// The summary as text.
    pub fn render_text(&self) -> String {
        let mut out = String::new();
        for t in self.tables() {
            out.push_str(&t.render_text());
            out.push('\n');
        }
        let profiles: Vec<String> = self
            .srtp_profiles
            .iter()
            .map(|(p, n)| format!("{p} ×{n}"))
            .collect();
        out.push_str(&format!(
            "* negotiated SRTP profiles: {}\n",
            if profiles.is_empty() {
                "none".into()
            } else {
                profiles.join(", ")
            }
        ));
        out.push_str(&format!("* resumption: {}\n", self.resumption));
        out.push_str(&format!("* method: {}\n", self.method.timed));
        out
    }
}

struct Shared {
    opts: LoadOptions,
    config: EndpointConfig,
    started: AtomicU64,
    completed: AtomicU64,
    failed: AtomicU64,
    stop: Arc<AtomicBool>,
    threads_done: AtomicUsize,
    keylog: Option<Mutex<Keylog>>,
}

impl Shared {
    /// Claims the right to start one more handshake.
    fn claim(&self) -> bool {
        if self.stop.load(Ordering::Relaxed) {
            return false;
        }
        match self.opts.handshakes {
            Some(n) => self.started.fetch_add(1, Ordering::Relaxed) < n,
            None => {
                self.started.fetch_add(1, Ordering::Relaxed);
                true
            }
        }
    }
}

#[derive(Default)]
struct ThreadResult {
    latencies_ms: Vec<f64>,
    failures: BTreeMap<String, u64>,
    profiles: BTreeMap<String, u64>,
    unfinished: u64,
}

impl ThreadResult {
    fn fail(&mut self, shared: &Shared, reason: impl Into<String>) {
        *self.failures.entry(reason.into()).or_default() += 1;
        shared.failed.fetch_add(1, Ordering::Relaxed);
    }
}

struct Conn {
    sock: UdpSocket,
    local: SocketAddr,
    ep: Endpoint,
    timer: Option<Instant>,
    started: Instant,
    connected: bool,
}

enum Drained {
    Waiting,
    Finished,
}

fn new_conn(shared: &Shared, poll: &Poll, token: Token) -> anyhow::Result<Conn> {
    let target = shared.opts.target;
    let any: SocketAddr = if target.is_ipv4() {
        "0.0.0.0:0".parse()?
    } else {
        "[::]:0".parse()?
    };
    let mut sock = UdpSocket::bind(any).context("binding a client socket")?;
    sock.connect(target)
        .with_context(|| format!("connecting a client socket to {target}"))?;
    let local = sock.local_addr()?;
    poll.registry()
        .register(&mut sock, token, Interest::READABLE)?;
    let now = Instant::now();
    let ep = Endpoint::new(shared.config.clone(), now)
        .map_err(|e| anyhow::anyhow!("client endpoint: {e}"))?;
    Ok(Conn {
        sock,
        local,
        ep,
        timer: None,
        started: now,
        connected: false,
    })
}

fn drain(c: &mut Conn, shared: &Shared, res: &mut ThreadResult) -> anyhow::Result<Drained> {
    while let Some(out) = c.ep.poll_output() {
        match out {
            // A failed send is loss to the endpoint, which retransmits.
            Output::Transmit(d) => drop(c.sock.send(&d)),
            Output::Timeout(at) => {
                c.timer = Some(at);
                return Ok(Drained::Waiting);
            }
            Output::Event(Event::Connected { profile, keys, .. }) => {
                let now = Instant::now();
                res.latencies_ms
                    .push(now.duration_since(c.started).as_secs_f64() * 1e3);
                let name = super::dtls_name(profile);
                *res.profiles.entry(name.to_string()).or_default() += 1;
                if let Some(k) = &shared.keylog {
                    k.lock().unwrap_or_else(|e| e.into_inner()).write(
                        shared.opts.target,
                        Some(c.local),
                        name,
                        keys.exported().as_bytes(),
                    )?;
                }
                shared.completed.fetch_add(1, Ordering::Relaxed);
                c.connected = true;
                // close_notify, then the endpoint reports Closed.
                c.ep.close(now);
            }
            Output::Event(Event::Failed(reason)) => {
                if !c.connected {
                    res.fail(shared, reason.to_string());
                }
                return Ok(Drained::Finished);
            }
            Output::Event(Event::Closed) => {
                if !c.connected {
                    res.fail(shared, "closed by the server before the handshake finished");
                }
                return Ok(Drained::Finished);
            }
            Output::Event(_) => {}
        }
    }
    Ok(Drained::Finished)
}

fn worker(shared: &Shared, slots: usize) -> anyhow::Result<ThreadResult> {
    let mut res = ThreadResult::default();
    let mut poll = Poll::new()?;
    let mut events = Events::with_capacity(slots.max(16));
    let mut conns: Vec<Option<Conn>> = (0..slots).map(|_| None).collect();
    let mut buf = vec![0u8; 65_536];
    let mut out_of_tickets = false;
    loop {
        // Fill free slots.
        if !out_of_tickets {
            for (i, slot) in conns.iter_mut().enumerate() {
                if slot.is_some() {
                    continue;
                }
                if !shared.claim() {
                    out_of_tickets = true;
                    break;
                }
                match new_conn(shared, &poll, Token(i)) {
                    Ok(mut c) => match drain(&mut c, shared, &mut res)? {
                        Drained::Waiting => *slot = Some(c),
                        Drained::Finished => {}
                    },
                    Err(e) => {
                        res.fail(shared, format!("local socket: {e:#}"));
                        // Out of sockets or ports: give the system a moment.
                        std::thread::sleep(Duration::from_millis(10));
                    }
                }
            }
        }
        if shared.stop.load(Ordering::Relaxed) {
            res.unfinished += conns.iter().filter(|c| c.is_some()).count() as u64;
            return Ok(res);
        }
        if conns.iter().all(Option::is_none) {
            if out_of_tickets {
                return Ok(res);
            }
            continue;
        }
        let now = Instant::now();
        let next_timer = conns.iter().flatten().filter_map(|c| c.timer).min();
        let wait = next_timer
            .map_or(Duration::from_millis(50), |t| {
                t.saturating_duration_since(now)
            })
            .min(Duration::from_millis(50));
        match poll.poll(&mut events, Some(wait)) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(e).context("waiting for datagrams"),
        }
        for ev in events.iter() {
            let i = ev.token().0;
            let Some(c) = conns[i].as_mut() else { continue };
            let mut finished = false;
            loop {
                match c.sock.recv(&mut buf) {
                    Ok(n) => {
                        c.ep.handle_datagram(Instant::now(), &buf[..n]);
                        if let Drained::Finished = drain(c, shared, &mut res)? {
                            finished = true;
                            break;
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    // ICMP port unreachable (nobody listens yet) or an interrupted read: the
                    // endpoint's retransmission timer keeps going.
                    Err(e)
                        if matches!(
                            e.kind(),
                            ErrorKind::ConnectionRefused
                                | ErrorKind::Interrupted
                                | ErrorKind::ConnectionReset
                        ) =>
                    {
                        break
                    }
                    Err(e) => return Err(e).context("receiving"),
                }
            }
            if finished {
                if let Some(mut c) = conns[i].take() {
                    let _ = poll.registry().deregister(&mut c.sock);
                }
            }
        }
        let now = Instant::now();
        for slot in conns.iter_mut() {
            let Some(c) = slot.as_mut() else { continue };
            if c.timer.is_some_and(|t| t <= now) {
                c.timer = None;
                c.ep.handle_timeout(now);
                if let Drained::Finished = drain(c, shared, &mut res)? {
                    if let Some(mut c) = slot.take() {
                        let _ = poll.registry().deregister(&mut c.sock);
                    }
                }
            }
        }
    }
}

/// Runs a load test; prints a progress line each second (if asked) and returns the report.
pub fn run(opts: LoadOptions, stop: Arc<AtomicBool>) -> anyhow::Result<LoadReport> {
    if opts.handshakes.is_none() == opts.duration.is_none() {
        bail!("give either --handshakes N or --duration S");
    }
    if opts.handshakes == Some(0) {
        bail!("--handshakes must be at least 1");
    }
    if opts.connections == 0 || opts.threads == 0 {
        bail!("--connections and --threads must be at least 1");
    }
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone())
            .context("installing the SIGINT/SIGTERM handler")?;
    }
    let threads = opts.threads.min(opts.connections);
    let cert = match &opts.certificate {
        Some(c) => {
            super::check_engine_takes(opts.engine, c)?;
            c.clone()
        }
        None => super::engine_certificate(opts.engine, opts.cert_type, "secrelay-handshake-load")?,
    };
    let mut opts = opts;
    opts.cert_type = cert.key_type();
    let mut config = EndpointConfig::new(
        Role::Client,
        LocalCertificate::from(&cert),
        opts.peer_auth.clone(),
    );
    config.timers.handshake_timeout = opts.timeout;
    config.engine = opts.engine;
    config.ecdhe_groups = opts.groups.clone();
    let engine_used = config.resolved_engine();
    let keylog = opts
        .keylog
        .as_deref()
        .map(Keylog::open)
        .transpose()?
        .map(Mutex::new);
    let shared = Arc::new(Shared {
        opts: opts.clone(),
        config,
        started: AtomicU64::new(0),
        completed: AtomicU64::new(0),
        failed: AtomicU64::new(0),
        stop,
        threads_done: AtomicUsize::new(0),
        keylog,
    });
    let start = Instant::now();
    let mut handles = Vec::new();
    for t in 0..threads {
        let slots = opts.connections / threads + usize::from(t < opts.connections % threads);
        let shared = shared.clone();
        handles.push(
            std::thread::Builder::new()
                .name(format!("handshake-load-{t}"))
                .spawn(move || {
                    let r = worker(&shared, slots);
                    shared.threads_done.fetch_add(1, Ordering::Release);
                    r
                })?,
        );
    }
    let (rates, elapsed) = sample_rates(
        start,
        opts.duration,
        (threads, &shared.threads_done),
        &shared.completed,
        &shared.stop,
        |at, rate, done| {
            if opts.progress {
                eprintln!(
                    "[{at:6.1} s] {rate:8.0} handshakes/s  completed {done}  failed {}",
                    shared.failed.load(Ordering::Relaxed)
                );
            }
        },
    );
    let mut total = ThreadResult::default();
    for h in handles {
        let r = h
            .join()
            .map_err(|_| anyhow::anyhow!("a load thread panicked"))??;
        total.latencies_ms.extend(r.latencies_ms);
        total.unfinished += r.unfinished;
        for (k, v) in r.failures {
            *total.failures.entry(k).or_default() += v;
        }
        for (k, v) in r.profiles {
            *total.profiles.entry(k).or_default() += v;
        }
    }
    let completed = shared.completed.load(Ordering::Relaxed);
    let latency = LatencyStats::of(total.latencies_ms).unwrap_or(LatencyStats::NONE);
    let failed = total.failures.values().sum();
    Ok(LoadReport {
        tool: "secrelay lab handshake".into(),
        target: opts.target.to_string(),
        connections: opts.connections,
        threads,
        cert_type: opts.cert_type.name().into(),
        engine: super::engine_name(engine_used).into(),
        requested_handshakes: opts.handshakes,
        requested_duration_s: opts.duration.map(|d| d.as_secs_f64()),
        elapsed_s: elapsed.as_secs_f64(),
        completed,
        failed,
        failures: total.failures,
        unfinished_at_end: total.unfinished,
        srtp_profiles: total.profiles,
        handshakes_per_s: rates,
        latency_ms: latency,
        resumption: if opts.resume {
            format!("asked for with --resume: {RESUMPTION_NOT_OFFERED}")
        } else {
            RESUMPTION_NOT_OFFERED.into()
        },
        method: LoadMethod {
            timed: format!(
                "full DTLS 1.2 handshakes, secrelay's client ({}, {} client certificate, ECDHE, use_srtp) against {}: \
                 each on its own UDP socket and ephemeral port, latency from the first ClientHello to the exported keys; \
                 handshakes/s sampled every second (the last partial second included when ≥ 0.2 s), average = completed / elapsed; \
                 95P = the rate reached or beaten in 95 % of the samples; a handshake fails after {:.0} s",
                match engine_used {
                    EngineChoice::Openssl => "OpenSSL engine",
                    _ => "dimpl + aws-lc-rs",
                },
                opts.cert_type,
                opts.target,
                opts.timeout.as_secs_f64()
            ),
            machine: crate::machine::Machine::detect(),
            versions: crate::versions(),
            date: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        },
    })
}
