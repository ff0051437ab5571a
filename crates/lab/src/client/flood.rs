//! `secrelay lab flood`: hostile traffic at a running gateway while established calls relay
//! and new participants join, with the gateway's own figures read before and after.
//!
//! Each scenario runs two windows of the same length in one run: `unloaded` (the established
//! rooms relay, and in the handshake scenario legitimate participants join one after another)
//! and `flood` (the same, with the flood on). The gateway's relay latency histogram, drop
//! counters by reason, participant and room gauges, joins and DTLS handshake counters come from
//! its `/metrics`; its CPU time and resident memory from `/proc/PID` (given its pid); the
//! datagrams its socket lost in the kernel (receive buffer full) from `/proc/net/udp`.
//!
//! * [`Scenario::Handshake`]: DTLS ClientHellos (real ones, from the DTLS engine), STUN Binding
//!   requests naming unknown ufrags, and STUN Binding requests naming a room member's USERNAME
//!   with the wrong MESSAGE-INTEGRITY, from many source ports at the shared media port.
//!   ICE-lite takes no DTLS before a check with the right password, so none of it may create
//!   a participant, a session or a handshake.
//! * [`Scenario::Srtp`]: forged, replayed and garbage SRTP into a live room: from a WebRTC
//!   member's own (latched) address and from other addresses at the shared port, and at an
//!   SDES-SRTP leg's and a plain RTP leg's own ports. Every bad packet must be dropped and
//!   counted under its reason; the gateway's CPU per dropped packet is measured.

use std::io::{BufRead, BufReader};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _};
use serde::Serialize;

use super::load::{metrics_text, parse_metrics, proc_sample, relay_quantile, ProcSample, Scrape};
use secrelay_dtls::{
    Certificate, Endpoint, EndpointConfig, Fingerprint, HashAlgorithm, KeyType, LocalCertificate,
    Output as DtlsOutput, Role,
};
use secrelay_gateway::server::process::udp_table;
use secrelay_testkit::fleet::{self, FleetConfig, FleetProgress};
use secrelay_testkit::{Leg, Media, Phase, Signaling, SimParticipant};
use secrelay_wire::stun::{attr, Class as StunClass, MessageBuilder, BINDING};

/// A flood scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Scenario {
    /// DTLS ClientHellos and STUN Binding requests from many source ports.
    Handshake,
    /// Forged, replayed and garbage SRTP into a live room and onto SDES and plain legs.
    Srtp,
}

impl Scenario {
    /// Its name on the command line and in the report.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Handshake => "handshake",
            Scenario::Srtp => "srtp",
        }
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct FloodOptions {
    /// The scenario.
    pub scenario: Scenario,
    /// The gateway's signaling (base URL, token, CA).
    pub signaling: Signaling,
    /// The gateway's process id, for CPU and memory.
    pub server_pid: Option<u32>,
    /// Established participants (rooms of `per_room`).
    pub participants: usize,
    /// Participants per room.
    pub per_room: usize,
    /// Flood packets per second (0: as fast as one sending thread can).
    pub rate: u64,
    /// Flooding sockets (source ports).
    pub sources: usize,
    /// Seconds per window.
    pub secs: f64,
    /// Legitimate participants joining at once (handshake scenario).
    pub joiners: usize,
    /// Address the participants' and the flood's sockets bind to.
    pub bind_ip: IpAddr,
    /// CPUs the flooding thread runs on.
    pub flood_cpus: Option<Vec<usize>>,
    /// Threads driving the established participants.
    pub threads: usize,
}

/// Packets sent by one kind of flood traffic.
#[derive(Debug, Clone, Serialize)]
pub struct SentRow {
    /// The kind (`client_hello`, `stun_unknown_ufrag`, `forged_srtp_member`, …).
    pub kind: &'static str,
    /// What the gateway should count it as (its drop reason).
    pub expect: &'static str,
    /// Datagrams sent.
    pub sent: u64,
    /// Send calls that failed (a full socket buffer): not sent.
    pub send_errors: u64,
}

/// One measurement window.
#[derive(Debug, Clone, Serialize)]
pub struct WindowRow {
    /// `unloaded` or `flood`.
    pub name: &'static str,
    /// Seconds measured.
    pub secs: f64,
    /// Relay latency p50, p90, p99, p99.9 in µs (gateway histogram, bucket upper bounds).
    pub relay_latency_us: Option<[f64; 4]>,
    /// Media copies the gateway forwarded.
    pub forwarded: f64,
    /// Drops by reason during the window (non-zero only).
    pub drops: Vec<(String, f64)>,
    /// Datagrams the gateway read (all its sockets).
    pub datagrams_in: f64,
    /// Datagrams it sent.
    pub datagrams_out: f64,
    /// Datagrams the kernel dropped at the gateway's sockets (receive buffer full), from
    /// `/proc/net/udp`.
    pub kernel_drops: Option<u64>,
    /// Legitimate joins (HTTP 201) during the window.
    pub joins_ok: u64,
    /// Of them, connected (ICE + DTLS-SRTP done).
    pub handshakes_completed: u64,
    /// Joins that failed (HTTP error, or no connection within 10 s), with the first reasons.
    pub join_failures: u64,
    /// Completed handshakes per second.
    pub handshakes_per_sec: f64,
    /// Join-to-keys time, p50 and p99, ms.
    pub setup_ms: Option<[f64; 2]>,
    /// The gateway's `secrelay_joins_total` during the window.
    pub gateway_joins: f64,
    /// Its DTLS handshakes (`ok`, `failed`) during the window.
    pub gateway_handshakes: [f64; 2],
    /// Participants (gauge) at the start, the most seen while sampling, and at the end.
    pub participants: [f64; 3],
    /// Rooms (gauge) at the start and at the end.
    pub rooms: [f64; 2],
    /// Gateway CPU seconds (user + system), user, system.
    pub cpu_secs: Option<[f64; 3]>,
    /// Gateway resident memory at the start, the most seen while sampling, and at the end.
    pub rss_bytes: Option<[u64; 3]>,
    /// What the flood sent (empty in the unloaded window).
    pub flood: Vec<SentRow>,
    /// Flood packets per second achieved.
    pub flood_pps: f64,
}

/// The report of a flood run.
#[derive(Debug, Clone, Serialize)]
pub struct FloodReport {
    /// The scenario.
    pub scenario: Scenario,
    /// Flood packets per second asked for (0: as fast as possible).
    pub rate: u64,
    /// Flooding sockets.
    pub sources: usize,
    /// Established participants and how many connected.
    pub participants: usize,
    /// Of them, connected.
    pub connected: usize,
    /// Participants per room.
    pub per_room: usize,
    /// Members the lab joined to the first room to attack from (SRTP scenario: a WebRTC
    /// member, an SDES phone, a plain phone), beside the established participants.
    pub attackers: usize,
    /// The load average when the run started (1, 5, 15 minutes).
    pub load_average: Option<[f64; 3]>,
    /// The two windows: `unloaded`, then `flood`.
    pub windows: Vec<WindowRow>,
    /// Flood relay p99 / unloaded relay p99.
    pub relay_p99_ratio: Option<f64>,
    /// Flood handshakes per second / unloaded (handshake scenario).
    pub handshake_ratio: Option<f64>,
    /// Flood datagrams the gateway read and counted as drops of the expected reasons, per
    /// kind: (kind, expected reason, sent, counted under the reason during the flood minus
    /// during the unloaded window).
    pub accounted: Vec<(String, String, u64, f64)>,
    /// Gateway CPU µs per flood datagram it read, net of the unloaded window's CPU rate (SRTP
    /// scenario: per dropped packet).
    pub cpu_us_per_flood_datagram: Option<f64>,
    /// Of that, user and system µs.
    pub cpu_us_per_flood_datagram_split: Option<[f64; 2]>,
    /// Flood datagrams per second one core of the gateway drops at that cost.
    pub drops_per_core_sec: Option<f64>,
    /// The established participants: packets sent, received, lost over both windows.
    pub established: [u64; 3],
    /// Failures and notes.
    pub failures: Vec<String>,
}

/// One kind of flood traffic: datagrams from a pool, sent from sockets in turn to one target.
pub struct FloodStream {
    /// Its kind.
    pub kind: &'static str,
    /// The drop reason the gateway should count it under.
    pub expect: &'static str,
    /// Where to.
    pub target: SocketAddr,
    /// The datagrams, sent in turn.
    pub packets: Vec<Vec<u8>>,
    /// The sockets, used in turn.
    pub sockets: Arc<Vec<UdpSocket>>,
}

/// A running flood: one thread sending every stream in turn at the rate.
pub struct Flood {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<(Vec<SentRow>, f64)>,
}

impl Flood {
    /// Starts sending at `rate` datagrams per second in all (0: as fast as it can), on
    /// `cpus` if given.
    pub fn start(
        streams: Vec<FloodStream>,
        rate: u64,
        cpus: Option<Vec<usize>>,
    ) -> anyhow::Result<Flood> {
        if streams.is_empty()
            || streams
                .iter()
                .any(|s| s.packets.is_empty() || s.sockets.is_empty())
        {
            bail!("a flood needs at least one stream, each with packets and sockets");
        }
        let stop = Arc::new(AtomicBool::new(false));
        let s2 = stop.clone();
        let handle = std::thread::Builder::new()
            .name("flood".into())
            .spawn(move || {
                if let Some(cpus) = cpus {
                    pin_current_thread(&cpus);
                }
                send_loop(&streams, rate, &s2)
            })
            .context("starting the flood thread")?;
        Ok(Flood { stop, handle })
    }

    /// Stops it: what each stream sent, and the seconds it ran.
    pub fn stop(self) -> anyhow::Result<(Vec<SentRow>, f64)> {
        self.stop.store(true, Ordering::Relaxed);
        self.handle
            .join()
            .map_err(|_| anyhow!("the flood thread panicked"))
    }
}

/// Pins the calling thread to `cpus` (best effort: a CPU the machine lacks is reported).
pub fn pin_current_thread(cpus: &[usize]) {
    let mut set = nix::sched::CpuSet::new();
    for c in cpus {
        if set.set(*c).is_err() {
            eprintln!("flood: CPU {c} does not exist here; not pinned");
            return;
        }
    }
    if let Err(e) = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set) {
        eprintln!("flood: pinning to CPUs {cpus:?}: {e}");
    }
}

fn send_loop(streams: &[FloodStream], rate: u64, stop: &AtomicBool) -> (Vec<SentRow>, f64) {
    let mut sent = vec![0u64; streams.len()];
    let mut errors = vec![0u64; streams.len()];
    let start = Instant::now();
    let mut attempts: u64 = 0;
    let mut turn = vec![0usize; streams.len()];
    let mut next = 0usize;
    while !stop.load(Ordering::Relaxed) {
        let due = if rate == 0 {
            attempts + 256
        } else {
            (start.elapsed().as_secs_f64() * rate as f64) as u64
        };
        if due <= attempts {
            std::thread::sleep(Duration::from_micros(200));
            continue;
        }
        for _ in 0..(due - attempts).min(256) {
            let i = next % streams.len();
            next = next.wrapping_add(1);
            let s = &streams[i];
            let k = turn[i];
            turn[i] = k.wrapping_add(1);
            let pkt = &s.packets[k % s.packets.len()];
            let sock = &s.sockets[k % s.sockets.len()];
            match sock.send_to(pkt, s.target) {
                Ok(_) => sent[i] += 1,
                Err(_) => errors[i] += 1,
            }
            attempts += 1;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let rows = streams
        .iter()
        .enumerate()
        .map(|(i, s)| SentRow {
            kind: s.kind,
            expect: s.expect,
            sent: sent[i],
            send_errors: errors[i],
        })
        .collect();
    (rows, secs)
}

/// `n` non-blocking UDP sockets bound on `ip` (ports chosen by the OS): the flood's sources.
pub fn source_sockets(ip: IpAddr, n: usize) -> anyhow::Result<Vec<UdpSocket>> {
    (0..n.max(1))
        .map(|_| {
            let s = UdpSocket::bind(SocketAddr::new(ip, 0))
                .with_context(|| format!("binding a flood socket on {ip}"))?;
            s.set_nonblocking(true)?;
            Ok(s)
        })
        .collect()
}

/// `n` DTLS ClientHellos as the DTLS engine's client endpoint sends them (each from a fresh
/// endpoint with its own certificate: fresh randoms and cookies-to-be).
pub fn client_hellos(n: usize) -> anyhow::Result<Vec<Vec<u8>>> {
    let peer = Fingerprint::from_digest(HashAlgorithm::Sha256, &[0x5a; 32])
        .map_err(|e| anyhow!("a fingerprint: {e}"))?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let cert = Certificate::self_signed(KeyType::EcdsaP256, "flood")
            .map_err(|e| anyhow!("a certificate: {e}"))?;
        let cfg = EndpointConfig::new(Role::Client, LocalCertificate::from(&cert), peer.clone());
        let mut ep =
            Endpoint::new(cfg, Instant::now()).map_err(|e| anyhow!("DTLS endpoint: {e}"))?;
        while let Some(o) = ep.poll_output() {
            match o {
                DtlsOutput::Transmit(d) => {
                    out.push(d);
                    break;
                }
                DtlsOutput::Timeout(_) => break,
                _ => {}
            }
        }
    }
    if out.len() < n {
        bail!("the DTLS client endpoint sent no ClientHello");
    }
    // A ClientHello is a handshake record (content type 22) of DTLS 1.0 or 1.2.
    if out.iter().any(|d| d.first() != Some(&22)) {
        bail!("what the DTLS client sent first is not a handshake record");
    }
    Ok(out)
}

/// `n` STUN Binding requests as a controlling agent sends them, under `username` (random when
/// `None`), with MESSAGE-INTEGRITY under a random password (wrong for any gateway) and a
/// FINGERPRINT.
pub fn binding_requests(n: usize, username: Option<&str>) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            let user = match username {
                Some(u) => u.to_owned(),
                None => format!("{}:{}", token(8), token(4)),
            };
            let mut tid = [0u8; 12];
            getrandom_fill(&mut tid);
            tid[..4].copy_from_slice(&(i as u32).to_be_bytes());
            let mut buf = [0u8; 512];
            let n = MessageBuilder::new(&mut buf, StunClass::Request, BINDING, tid)
                .attribute(attr::USERNAME, user.as_bytes())
                .attribute(attr::PRIORITY, &1_845_501_695u32.to_be_bytes())
                .attribute(attr::ICE_CONTROLLING, &rand_u64().to_be_bytes())
                .attribute(attr::USE_CANDIDATE, &[])
                .integrity(token(24).as_bytes())
                .fingerprint()
                .expect("a Binding request of fixed small size fits 512 bytes");
            buf[..n].to_vec()
        })
        .collect()
}

fn getrandom_fill(b: &mut [u8]) {
    getrandom_04::fill(b).expect("the OS random source works");
}

fn rand_u64() -> u64 {
    let mut b = [0u8; 8];
    getrandom_fill(&mut b);
    u64::from_be_bytes(b)
}

fn token(n: usize) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut b = vec![0u8; n];
    getrandom_fill(&mut b);
    b.iter()
        .map(|x| ALPHABET[usize::from(*x) % ALPHABET.len()] as char)
        .collect()
}

/// Copies of a real SRTP packet under other sequence numbers (5,000 and more ahead of the
/// sender's, so the replay check passes for the length of a run: 100 s of 20 ms packets) with the tag left as it was: forgeries that only the tag check
/// refuses.
pub fn forged_from(real: &[u8], n: usize) -> Vec<Vec<u8>> {
    let seq = real
        .get(2..4)
        .map_or(0, |s| u16::from_be_bytes([s[0], s[1]]));
    (0..n)
        .map(|i| {
            let mut p = real.to_vec();
            let s = seq.wrapping_add(5000 + i as u16);
            if p.len() >= 4 {
                p[2..4].copy_from_slice(&s.to_be_bytes());
            }
            p
        })
        .collect()
}

/// Garbage: random bytes of random lengths (12 to 200), half of them with an RTP version
/// (first byte 0x80: classified as RTP and unprotected or refused as too short), half of them
/// starting with a byte no demultiplexer takes (RFC 7983: 64–127).
pub fn garbage(n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            let mut len = [0u8; 1];
            getrandom_fill(&mut len);
            let mut p = vec![0u8; 12 + usize::from(len[0]) % 189];
            getrandom_fill(&mut p);
            p[0] = if i % 2 == 0 { 0x80 } else { 64 + (p[0] & 63) };
            if i % 2 == 0 {
                // A payload type outside RTCP's range, so that it stays RTP.
                p[1] &= 0x7f;
                if (64..96).contains(&p[1]) {
                    p[1] = 0;
                }
            }
            p
        })
        .collect()
}

/// The gateway's metrics text and its parse.
pub(crate) struct Metrics {
    text: String,
    scrape: Scrape,
}

impl Metrics {
    pub(crate) fn get(&self, name: &str) -> f64 {
        self.text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .find_map(|l| {
                let (n, v) = l.rsplit_once(' ')?;
                (n == name).then(|| v.trim().parse().ok()).flatten()
            })
            .unwrap_or(0.0)
    }

    fn drop(&self, reason: &str) -> f64 {
        self.scrape.drops_of(reason)
    }
}

pub(crate) fn metrics(s: &Signaling) -> anyhow::Result<Metrics> {
    let text = metrics_text(s)?;
    let scrape = parse_metrics(&text);
    Ok(Metrics { text, scrape })
}

/// Datagrams the kernel dropped at the UDP sockets bound to `ports` (receive buffer full),
/// summed from `/proc/net/udp` and `/proc/net/udp6`; `None` when none is found (a gateway on
/// another machine). The kernel walks its socket table afresh as those files are read, so a
/// socket can be passed over while others are opened and closed meanwhile (another program's,
/// on a busy machine: up to 15 % of searches missed it with two threads churning sockets): a
/// search that finds none is made again, up to 20 times (a few milliseconds where there truly
/// is none).
pub fn kernel_udp_drops(ports: &[u16]) -> Option<u64> {
    (0..20).find_map(|_| udp_drops_once(ports))
}

fn udp_drops_once(ports: &[u16]) -> Option<u64> {
    let mut total = None;
    for f in ["/proc/net/udp", "/proc/net/udp6"] {
        let Ok(text) = std::fs::read_to_string(f) else {
            continue;
        };
        for row in udp_table(&text).filter(|r| ports.contains(&r.port)) {
            *total.get_or_insert(0) += row.drops;
        }
    }
    total
}

pub(crate) fn load_average() -> Option<[f64; 3]> {
    let t = std::fs::read_to_string("/proc/loadavg").ok()?;
    let mut it = t.split_whitespace().map(|v| v.parse::<f64>().ok());
    Some([it.next()??, it.next()??, it.next()??])
}

/// A gateway this lab started (`secrelay serve` on loopback), stopped when dropped.
pub struct SpawnedGateway {
    child: Child,
    /// Its HTTP base URL.
    pub url: String,
    /// Its HTTPS address, when it serves HTTPS too.
    pub https: Option<SocketAddr>,
    /// Its admin key (for `/metrics`).
    pub admin: secrelay_testkit::AdminKeyFile,
}

impl SpawnedGateway {
    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for SpawnedGateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `exe serve` on loopback with `workers` workers, quiet, on `cpus` if given (the
/// child inherits the affinity of the thread that starts it: set here, then put back), with
/// `extra` arguments.
pub fn spawn_gateway(
    exe: &Path,
    workers: usize,
    cpus: Option<&[usize]>,
    extra: &[String],
) -> anyhow::Result<SpawnedGateway> {
    let me = nix::unistd::Pid::from_raw(0);
    let saved = nix::sched::sched_getaffinity(me).ok();
    if let Some(c) = cpus {
        pin_current_thread(c);
    }
    let admin = secrelay_testkit::AdminKeyFile::new()?;
    let spawned = Command::new(exe)
        .args(["serve", "--http", "127.0.0.1:0", "--udp", "127.0.0.1:0"])
        .arg("--admin-key-file")
        .arg(admin.path())
        .args(["--workers", &workers.to_string(), "--log", "warn"])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn();
    if let (Some(set), Some(_)) = (saved, cpus) {
        let _ = nix::sched::sched_setaffinity(me, &set);
    }
    let mut child = spawned.with_context(|| format!("starting {} serve", exe.display()))?;
    let stderr = child.stderr.take().context("serve's stderr")?;
    let mut g = SpawnedGateway {
        child,
        url: String::new(),
        https: None,
        admin,
    };
    let mut lines = BufReader::new(stderr).lines();
    let banner = secrelay_gateway::server::BannerReader::read(&mut lines, |_| {});
    match banner.as_ref().and_then(|b| b.http) {
        Some(a) => g.url = format!("http://{a}"),
        None => bail!("secrelay serve did not print its HTTP address"),
    }
    g.https = banner.and_then(|b| b.https);
    // Keep reading its log so that it never blocks on a full pipe.
    std::thread::spawn(move || lines.for_each(drop));
    Ok(g)
}

/// Joins legitimate participants one after another on `threads` threads until `until`: each
/// joins its own room, runs ICE and DTLS-SRTP to the keys, closes and leaves.
fn run_joiners(
    signaling: &Signaling,
    bind_ip: IpAddr,
    threads: usize,
    until: Instant,
    tag: &str,
) -> (u64, u64, Vec<String>, Vec<Duration>) {
    let handles: Vec<_> = (0..threads.max(1))
        .map(|t| {
            let s = signaling.clone();
            let room = format!("flood-joiners-{tag}-{t}");
            std::thread::spawn(move || {
                let (mut ok, mut done) = (0u64, 0u64);
                let mut failures = Vec::new();
                let mut setup = Vec::new();
                while Instant::now() < until {
                    let started = Instant::now();
                    let mut p = match SimParticipant::join(&s, &room, Leg::Join, bind_ip, started) {
                        Ok(p) => p,
                        Err(e) => {
                            failures.push(format!("join: {e:#}"));
                            std::thread::sleep(Duration::from_millis(50));
                            continue;
                        }
                    };
                    ok += 1;
                    let connected = SimParticipant::drive_until(
                        std::slice::from_mut(&mut p),
                        Duration::from_secs(10),
                        |g| matches!(g[0].phase, Phase::Connected | Phase::Failed(_)),
                    );
                    match (&connected, &p.phase) {
                        (Ok(true), Phase::Connected) => {
                            done += 1;
                            setup.push(started.elapsed());
                        }
                        (Err(e), _) => failures.push(format!("socket: {e}")),
                        (_, phase) => failures.push(format!("not connected: {phase:?}")),
                    }
                    p.close(Instant::now());
                    let _ = s.delete(&p.location);
                }
                (ok, done, failures, setup)
            })
        })
        .collect();
    let (mut ok, mut done, mut failures, mut setup) = (0, 0, Vec::new(), Vec::new());
    for h in handles {
        if let Ok((o, d, f, s)) = h.join() {
            ok += o;
            done += d;
            failures.extend(f);
            setup.extend(s);
        }
    }
    (ok, done, failures, setup)
}

fn quantile_ms(v: &mut [Duration], q: f64) -> f64 {
    v.sort();
    let i = ((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1;
    v[i].as_secs_f64() * 1e3
}

/// How long the gateway may take to show a datagram it read in `/metrics`: its workers publish
/// their counters every 200 ms.
const PUBLISHED_WITHIN: Duration = Duration::from_millis(450);

/// What a window runs beside the established calls.
struct WindowWork<'a> {
    name: &'static str,
    flood: Option<Vec<FloodStream>>,
    joiners: usize,
    /// Participants the lab holds itself (attackers), stepped while the window runs so that
    /// their ICE consent stays fresh.
    held: &'a mut [SimParticipant],
}

fn window(o: &FloodOptions, w: WindowWork<'_>, ports: &[u16]) -> anyhow::Result<WindowRow> {
    let m0 = metrics(&o.signaling)?;
    let p0 = o.server_pid.map(proc_sample).transpose()?;
    let k0 = kernel_udp_drops(ports);
    let started = Instant::now();
    let until = started + Duration::from_secs_f64(o.secs);
    let flood = w
        .flood
        .map(|s| Flood::start(s, o.rate, o.flood_cpus.clone()))
        .transpose()?;
    let joiners = (w.joiners > 0).then(|| {
        let s = o.signaling.clone();
        let (ip, n, name) = (o.bind_ip, w.joiners, w.name);
        std::thread::spawn(move || run_joiners(&s, ip, n, until, name))
    });
    let (mut max_participants, mut max_rss) =
        (m0.get("secrelay_participants"), p0.map(|p| p.rss_bytes));
    let mut next_sample = Instant::now();
    while Instant::now() < until {
        let now = Instant::now();
        for p in w.held.iter_mut() {
            let _ = p.on_readable(now);
            if p.deadline() <= now {
                p.on_timer(now);
            }
        }
        if now >= next_sample {
            next_sample = now + Duration::from_millis(250);
            if let Ok(m) = metrics(&o.signaling) {
                max_participants = max_participants.max(m.get("secrelay_participants"));
            }
            if let Some(s) = o.server_pid.and_then(|p| proc_sample(p).ok()) {
                max_rss = max_rss.map(|r| r.max(s.rss_bytes));
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let joined = joiners
        .map(|h| h.join().map_err(|_| anyhow!("a joiner thread panicked")))
        .transpose()?;
    // The flood stops before the end figures, which are read once the gateway has read what
    // is in its sockets and published its counters (a worker publishes every 200 ms): every
    // datagram sent is in them, or in the kernel's drops.
    let (flood_rows, flood_secs) = match flood {
        Some(f) => f.stop()?,
        None => (Vec::new(), 0.0),
    };
    std::thread::sleep(PUBLISHED_WITHIN);
    // The last joiner's DELETE is answered before the gateway's shard has removed it: wait
    // for the gauge to come back down (up to 2 s) so that the end figures are the fleet's.
    let baseline = m0.get("secrelay_participants");
    let settle = Instant::now() + Duration::from_secs(2);
    let mut m1 = metrics(&o.signaling)?;
    while m1.get("secrelay_participants") > baseline && Instant::now() < settle {
        std::thread::sleep(Duration::from_millis(20));
        m1 = metrics(&o.signaling)?;
    }
    let p1 = o.server_pid.map(proc_sample).transpose()?;
    let k1 = kernel_udp_drops(ports);
    let secs = started.elapsed().as_secs_f64();
    let (joins_ok, done, failures, mut setup) = joined.unwrap_or_default();
    let q = |p| relay_quantile(&m0.scrape, &m1.scrape, p).map(|s| s * 1e6);
    let relay = match (q(0.5), q(0.9), q(0.99), q(0.999)) {
        (Some(a), Some(b), Some(c), Some(d)) => Some([a, b, c, d]),
        _ => None,
    };
    let drops = m1
        .scrape
        .drops
        .iter()
        .map(|(k, v)| (k.clone(), v - m0.drop(k)))
        .filter(|e| e.1 > 0.0)
        .collect();
    let d = |n: &str| m1.get(n) - m0.get(n);
    let flood_sent: u64 = flood_rows.iter().map(|r| r.sent).sum();
    if !failures.is_empty() {
        eprintln!(
            "flood: {} join failures in the {} window, first: {}",
            failures.len(),
            w.name,
            failures[0]
        );
    }
    Ok(WindowRow {
        name: w.name,
        secs,
        relay_latency_us: relay,
        forwarded: m1.scrape.forwarded - m0.scrape.forwarded,
        drops,
        datagrams_in: d("secrelay_datagrams_total{direction=\"in\"}"),
        datagrams_out: d("secrelay_datagrams_total{direction=\"out\"}"),
        kernel_drops: k0.zip(k1).map(|(a, b)| b.saturating_sub(a)),
        joins_ok,
        handshakes_completed: done,
        join_failures: failures.len() as u64,
        handshakes_per_sec: done as f64 / secs,
        setup_ms: (!setup.is_empty())
            .then(|| [quantile_ms(&mut setup, 0.5), quantile_ms(&mut setup, 0.99)]),
        gateway_joins: d("secrelay_joins_total"),
        gateway_handshakes: [
            d("secrelay_handshakes_total{result=\"ok\"}"),
            d("secrelay_handshakes_total{result=\"failed\"}"),
        ],
        participants: [
            m0.get("secrelay_participants"),
            max_participants.max(m1.get("secrelay_participants")),
            m1.get("secrelay_participants"),
        ],
        rooms: [m0.get("secrelay_rooms"), m1.get("secrelay_rooms")],
        cpu_secs: p0.zip(p1).map(|(a, b): (ProcSample, ProcSample)| {
            [
                b.cpu_secs - a.cpu_secs,
                b.user_secs - a.user_secs,
                b.system_secs - a.system_secs,
            ]
        }),
        rss_bytes: p0.zip(p1).map(|(a, b)| {
            [
                a.rss_bytes,
                max_rss.unwrap_or(0).max(b.rss_bytes),
                b.rss_bytes,
            ]
        }),
        flood: flood_rows,
        flood_pps: if flood_secs > 0.0 {
            flood_sent as f64 / flood_secs
        } else {
            0.0
        },
    })
}

/// Runs the scenario: the established rooms, then the unloaded and the flood windows.
pub fn run(o: &FloodOptions) -> anyhow::Result<FloodReport> {
    if o.per_room < 2 || o.participants < o.per_room {
        bail!("--per-room must be at least 2 and --participants at least --per-room");
    }
    if o.secs <= 0.0 {
        bail!("--secs must be positive");
    }
    metrics(&o.signaling).context("the gateway's /metrics (is --target a secrelay gateway?)")?;
    let load_average = load_average();
    let legs = match o.scenario {
        Scenario::Handshake => vec![Leg::Join],
        // Established rooms of every kind of leg.
        Scenario::Srtp => vec![Leg::Join, Leg::Join, Leg::Sdes, Leg::Plain],
    };
    let fleet_cfg = FleetConfig {
        signaling: o.signaling.clone(),
        rooms: o.participants / o.per_room,
        per_room: o.per_room,
        legs,
        room_prefix: "flood-room-".into(),
        // Stopped by the flag once both windows are done.
        duration: Duration::from_secs(24 * 3600),
        threads: o.threads,
        bind_ip: o.bind_ip,
        connect_timeout: Duration::from_secs(60),
        inject_bad: false,
        media: Media::Pcmu,
        transcode: false,
        mix: None,
        ice_tcp: false,
        publish_at: None,
    };
    let progress = Arc::new(FleetProgress::default());
    let epoch = Instant::now();
    let group = fleet::join_all(&fleet_cfg, &progress, epoch)?;
    let total = group.len() as u64;
    let media_addr = group
        .iter()
        .find(|p| p.leg == Leg::Join)
        .map(SimParticipant::gateway_addr)
        .context("no WebRTC participant in the fleet")?;
    let usernames: Vec<String> = group
        .iter()
        .filter_map(SimParticipant::ice_username)
        .collect();
    let cfg2 = fleet_cfg.clone();
    let p2 = progress.clone();
    let media = std::thread::spawn(move || fleet::run_media(&cfg2, group, p2));
    let stop_media = |media: JoinHandle<anyhow::Result<(Vec<SimParticipant>, f64)>>| {
        progress.stop.store(true, Ordering::Relaxed);
        media
            .join()
            .map_err(|_| anyhow!("the fleet thread panicked"))?
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while progress.connected.load(Ordering::Relaxed) + progress.failed.load(Ordering::Relaxed)
        < total
        && Instant::now() < deadline
        && !media.is_finished()
    {
        std::thread::sleep(Duration::from_millis(10));
    }
    // And the gateway's side of every handshake (see `load::run`), up to 2 s.
    let want = progress.connected.load(Ordering::Relaxed) as f64;
    let until = Instant::now() + Duration::from_secs(2);
    while metrics(&o.signaling)?.scrape.connected < want && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    let result = (|| -> anyhow::Result<(Vec<WindowRow>, Vec<String>, Vec<SimParticipant>)> {
        let mut notes = Vec::new();
        let mut ports = vec![media_addr.port()];
        let sources = Arc::new(source_sockets(o.bind_ip, o.sources)?);
        let (streams, mut held) = match o.scenario {
            Scenario::Handshake => (
                handshake_streams(media_addr, &usernames, &sources)?,
                Vec::new(),
            ),
            Scenario::Srtp => {
                let (s, held, leg_ports, n) = srtp_streams(o, media_addr, &sources)?;
                ports.extend(leg_ports);
                notes.extend(n);
                (s, held)
            }
        };
        let joiners = match o.scenario {
            Scenario::Handshake => o.joiners,
            Scenario::Srtp => 0,
        };
        let unloaded = window(
            o,
            WindowWork {
                name: "unloaded",
                flood: None,
                joiners,
                held: &mut held,
            },
            &ports,
        )?;
        let flood = window(
            o,
            WindowWork {
                name: "flood",
                flood: Some(streams),
                joiners,
                held: &mut held,
            },
            &ports,
        )?;
        Ok((vec![unloaded, flood], notes, held))
    })();
    let stopped = stop_media(media);
    let (windows, mut failures, held) = result?;
    let (done, media_secs) = stopped?;
    fleet::leave_all(&fleet_cfg, &done);
    for p in &held {
        let _ = o.signaling.delete(&p.location);
    }
    let fr = fleet::summarize(&done, media_secs);
    failures.extend(fr.failures.iter().cloned());
    let mut r = report(
        o,
        windows,
        fr.participants,
        fr.connected,
        [fr.sent, fr.received, fr.lost],
        load_average,
        failures,
    );
    r.attackers = held.len();
    Ok(r)
}

fn report(
    o: &FloodOptions,
    windows: Vec<WindowRow>,
    participants: usize,
    connected: usize,
    established: [u64; 3],
    load_average: Option<[f64; 3]>,
    failures: Vec<String>,
) -> FloodReport {
    let (u, f) = (&windows[0], &windows[1]);
    let p99 = |w: &WindowRow| w.relay_latency_us.map(|l| l[2]);
    let relay_p99_ratio = p99(u).zip(p99(f)).map(|(a, b)| b / a);
    let handshake_ratio = (o.scenario == Scenario::Handshake && u.handshakes_per_sec > 0.0)
        .then(|| f.handshakes_per_sec / u.handshakes_per_sec);
    // Per expected reason: what was counted under it in the flood window beyond the unloaded
    // window's rate.
    let reason_delta = |reason: &str| {
        let get = |w: &WindowRow| {
            w.drops
                .iter()
                .find(|(r, _)| r == reason)
                .map_or(0.0, |e| e.1)
        };
        get(f) - get(u) * f.secs / u.secs.max(1e-9)
    };
    let mut accounted: Vec<(String, String, u64, f64)> = Vec::new();
    for row in &f.flood {
        match accounted.iter_mut().find(|a| a.1 == row.expect) {
            Some(a) => {
                a.0 = format!("{}+{}", a.0, row.kind);
                a.2 += row.sent;
            }
            None => accounted.push((
                row.kind.to_string(),
                row.expect.to_string(),
                row.sent,
                reason_delta(row.expect),
            )),
        }
    }
    let flood_read: f64 = accounted.iter().map(|a| a.3).sum();
    let net = |i: usize| {
        u.cpu_secs
            .zip(f.cpu_secs)
            .map(|(a, b)| b[i] - a[i] * f.secs / u.secs.max(1e-9))
    };
    let per = |c: Option<f64>| {
        c.filter(|_| flood_read > 0.0)
            .map(|c| c.max(0.0) * 1e6 / flood_read)
    };
    let cpu_us = per(net(0));
    FloodReport {
        scenario: o.scenario,
        rate: o.rate,
        sources: o.sources,
        participants,
        connected,
        per_room: o.per_room,
        attackers: 0,
        load_average,
        relay_p99_ratio,
        handshake_ratio,
        accounted,
        cpu_us_per_flood_datagram: cpu_us,
        cpu_us_per_flood_datagram_split: per(net(1)).zip(per(net(2))).map(|(a, b)| [a, b]),
        drops_per_core_sec: cpu_us.filter(|c| *c > 0.0).map(|c| 1e6 / c),
        established,
        windows,
        failures,
    }
}

/// The handshake flood: ClientHellos, checks naming unknown ufrags, checks naming members
/// with the wrong password, in equal shares.
fn handshake_streams(
    media: SocketAddr,
    usernames: &[String],
    sources: &Arc<Vec<UdpSocket>>,
) -> anyhow::Result<Vec<FloodStream>> {
    let mut wrong = Vec::new();
    for u in usernames.iter().take(64) {
        wrong.extend(binding_requests(4, Some(u)));
    }
    if wrong.is_empty() {
        bail!("no room member's ICE USERNAME to forge checks under");
    }
    Ok(vec![
        FloodStream {
            kind: "client_hello",
            expect: "unknown_source",
            target: media,
            packets: client_hellos(16)?,
            sockets: sources.clone(),
        },
        FloodStream {
            kind: "stun_unknown_ufrag",
            expect: "unknown_source",
            target: media,
            packets: binding_requests(256, None),
            sockets: sources.clone(),
        },
        FloodStream {
            kind: "stun_wrong_integrity",
            expect: "stun_rejected",
            target: media,
            packets: wrong,
            sockets: sources.clone(),
        },
    ])
}

/// The SRTP flood's attackers: a WebRTC member, an SDES phone and a plain phone joined to the
/// first established room, whose keys the lab holds. Each sends a few real packets (so the
/// gateway latches and authenticates them), then the flood sends, for each, forgeries and
/// replays from its own address and from other addresses. Returns the streams, the attackers
/// (to keep their ICE consent), the legs' ports and notes.
#[allow(clippy::type_complexity)]
fn srtp_streams(
    o: &FloodOptions,
    media: SocketAddr,
    sources: &Arc<Vec<UdpSocket>>,
) -> anyhow::Result<(Vec<FloodStream>, Vec<SimParticipant>, Vec<u16>, Vec<String>)> {
    let room = "flood-room-1";
    let epoch = Instant::now();
    let mut held = Vec::new();
    for leg in [Leg::Join, Leg::Sdes, Leg::Plain] {
        held.push(
            SimParticipant::join(&o.signaling, room, leg, o.bind_ip, epoch)
                .with_context(|| format!("the attacking {} member", leg.name()))?,
        );
    }
    // The WebRTC one has a handshake to do.
    let up = SimParticipant::drive_until(&mut held[..1], Duration::from_secs(15), |g| {
        matches!(g[0].phase, Phase::Connected | Phase::Failed(_))
    })?;
    if !up || held[0].phase != Phase::Connected {
        bail!(
            "the attacking WebRTC member did not connect: {:?}",
            held[0].phase
        );
    }
    let mut streams = Vec::new();
    let mut ports = Vec::new();
    let mut notes = Vec::new();
    for p in held.iter_mut() {
        let own = Arc::new(vec![p.send_socket()?]);
        let target = p.gateway_addr();
        // A few real packets first: the SDES leg authenticates and latches, the plain leg
        // latches; then they are replayed.
        let mut real = Vec::new();
        for _ in 0..8 {
            let pkt = p
                .next_audio_packet()
                .ok_or_else(|| anyhow!("the attacking {} member has no keys", p.leg.name()))?;
            own[0].send_to(&pkt, target)?;
            real.push(pkt);
            std::thread::sleep(Duration::from_millis(2));
        }
        let forged = forged_from(&real[real.len() - 1], 1024);
        match p.leg {
            Leg::Join => {
                streams.push(FloodStream {
                    kind: "forged_srtp_member_address",
                    expect: "auth_failed",
                    target,
                    packets: forged.clone(),
                    sockets: own.clone(),
                });
                streams.push(FloodStream {
                    kind: "replayed_srtp_member_address",
                    expect: "replayed",
                    target,
                    packets: real.clone(),
                    sockets: own.clone(),
                });
                streams.push(FloodStream {
                    kind: "forged_srtp_other_address",
                    expect: "unknown_source",
                    target,
                    packets: forged,
                    sockets: sources.clone(),
                });
                streams.push(FloodStream {
                    kind: "garbage_other_address",
                    expect: "unknown_source",
                    target,
                    packets: garbage(512),
                    sockets: sources.clone(),
                });
            }
            Leg::Sdes => {
                ports.push(target.port());
                streams.push(FloodStream {
                    kind: "forged_sdes_other_address",
                    expect: "auth_failed",
                    target,
                    packets: forged,
                    sockets: sources.clone(),
                });
                streams.push(FloodStream {
                    kind: "replayed_sdes_other_address",
                    expect: "replayed",
                    target,
                    packets: real,
                    sockets: sources.clone(),
                });
            }
            _ => {
                ports.push(target.port());
                streams.push(FloodStream {
                    kind: "rtp_plain_other_address",
                    expect: "unlatched_source",
                    target,
                    packets: forged,
                    sockets: sources.clone(),
                });
                notes.push(
                    "plain RTP from the phone's own latched address cannot be told from the phone's: not flooded"
                        .to_string(),
                );
            }
        }
    }
    if media != held[0].gateway_addr() {
        notes.push(format!(
            "the attacking member's gateway address {} is not the fleet's {media}",
            held[0].gateway_addr()
        ));
    }
    Ok((streams, held, ports, notes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use secrelay_wire::stun::Message;

    #[test]
    fn client_hellos_are_fresh_dtls_handshake_records() {
        let h = client_hellos(2).unwrap();
        assert_eq!(h.len(), 2);
        assert!(h.iter().all(|d| d[0] == 22 && d.len() > 60));
        assert_ne!(
            h[0], h[1],
            "each from its own endpoint, with its own random"
        );
    }

    #[test]
    fn binding_requests_name_the_username_and_fail_its_password() {
        let r = binding_requests(3, Some("gw:us"));
        assert_eq!(r.len(), 3);
        let m = Message::parse(&r[0]).unwrap();
        assert_eq!(m.username(), Some(&b"gw:us"[..]));
        assert!(m.has_fingerprint());
        assert!(m.check_integrity(b"the-gateway-password").is_err());
        let random = binding_requests(2, None);
        let u = |d: &[u8]| Message::parse(d).unwrap().username().map(<[u8]>::to_vec);
        assert_ne!(u(&random[0]), u(&random[1]));
    }

    #[test]
    fn forgeries_move_the_sequence_number_and_keep_the_tag() {
        let real: Vec<u8> = (0..40).collect();
        let f = forged_from(&real, 2);
        assert_eq!(&f[0][4..], &real[4..]);
        assert_ne!(f[0][2..4], real[2..4]);
        assert_ne!(f[0][2..4], f[1][2..4]);
        let g = garbage(4);
        assert_eq!(g[0][0], 0x80);
        assert!((64..128).contains(&g[1][0]));
    }

    #[test]
    fn kernel_drops_are_found_for_a_bound_port() {
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = s.local_addr().unwrap().port();
        assert_eq!(kernel_udp_drops(&[port]), Some(0));
    }

    #[test]
    fn kernel_drops_are_found_while_other_sockets_come_and_go() {
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = s.local_addr().unwrap().port();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let churn: Vec<_> = (0..2)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        let v: Vec<UdpSocket> = (0..300)
                            .map(|_| UdpSocket::bind("127.0.0.1:0").unwrap())
                            .collect();
                        drop(v);
                    }
                })
            })
            .collect();
        let missed = (0..300)
            .filter(|_| kernel_udp_drops(&[port]).is_none())
            .count();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        churn.into_iter().for_each(|t| t.join().unwrap());
        assert_eq!(
            missed, 0,
            "the bound socket was not found in {missed} of 300 searches"
        );
    }
}
