//! `secrelay lab flood SCENARIO`: hostile traffic at a gateway while established rooms relay
//! (and, in the handshake scenario, legitimate participants join), the same run measured
//! without and with the flood.

use std::net::IpAddr;
use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::{Args, ValueEnum};
use secrelay_lab::client::control_flood::{self, ControlOptions, ControlReport};
use secrelay_lab::client::flood::{self, FloodOptions, FloodReport, Scenario};
use secrelay_testkit::Signaling;

/// The scenarios.
#[derive(ValueEnum, Clone, Copy, Debug)]
pub enum ScenarioArg {
    /// DTLS ClientHellos and STUN Binding requests (unknown ufrags; a member's USERNAME with the
    /// wrong MESSAGE-INTEGRITY) from many source ports at the shared media port, while
    /// legitimate participants keep joining.
    Handshake,
    /// Forged, replayed and garbage SRTP into a live room (from a member's own address and from
    /// others) and at an SDES-SRTP and a plain RTP leg's ports.
    Srtp,
    /// The control surfaces: huge SDP bodies, slowloris headers and bodies, idle connections
    /// past max_connections, half-open TLS, and bencode garbage, huge dictionaries and deep
    /// nesting at the ng socket while a client pings it.
    Control,
}

/// Flags of `secrelay lab flood`.
#[derive(Args, Debug)]
pub struct FloodArgs {
    /// Which flood.
    #[arg(value_enum)]
    pub scenario: ScenarioArg,
    /// The gateway's signaling base URL (http://… or https://…). Without it the lab starts
    /// `secrelay serve` itself on loopback (this executable, `--workers` workers).
    #[arg(long)]
    pub target: Option<String>,
    /// The private CA's certificate (PEM) for an HTTPS --target.
    #[arg(long, value_name = "FILE")]
    pub ca: Option<PathBuf>,
    /// Bearer token for the rooms.
    #[arg(long)]
    pub token: Option<String>,
    /// With --target: the gateway's admin key.
    #[command(flatten)]
    pub admin: crate::lab_gateway::AdminKeyArg,
    /// The gateway's process id, for its CPU time and memory (/proc); known when the lab
    /// starts it.
    #[arg(long)]
    pub server_pid: Option<u32>,
    /// Workers of the gateway the lab starts (without --target).
    #[arg(long, default_value_t = 1)]
    pub workers: usize,
    /// CPUs the gateway the lab starts runs on (comma-separated, e.g. `0`).
    #[arg(long, value_delimiter = ',', value_name = "CPUS")]
    pub gateway_cpus: Option<Vec<usize>>,
    /// CPUs the flooding thread runs on (comma-separated, e.g. `1`).
    #[arg(long, value_delimiter = ',', value_name = "CPUS")]
    pub flood_cpus: Option<Vec<usize>>,
    /// Flood datagrams per second, all kinds together (0: as fast as one thread can send).
    /// Default 50,000 (3,000 with --quick).
    #[arg(long)]
    pub rate: Option<u64>,
    /// Flooding sockets (source ports). Default 512 (64 with --quick).
    #[arg(long)]
    pub sources: Option<usize>,
    /// Established participants, in rooms of --per-room. Default 100 (8 with --quick).
    #[arg(long)]
    pub participants: Option<usize>,
    /// Participants per room.
    #[arg(long, default_value_t = 4)]
    pub per_room: usize,
    /// Seconds of each window (unloaded, then flood). Default 10 (2 with --quick).
    #[arg(long)]
    pub secs: Option<f64>,
    /// Legitimate participants joining at once, one after another (handshake scenario).
    /// Default 2 (1 with --quick).
    #[arg(long)]
    pub joiners: Option<usize>,
    /// Threads driving the established participants.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Address the participants' and the flood's sockets bind to.
    #[arg(long, default_value = "127.0.0.1")]
    pub bind: IpAddr,
    /// A short run for tests: smaller defaults (flags given explicitly still win).
    #[arg(long)]
    pub quick: bool,
    /// Control scenario: the gateway's ng control socket (with --target; the gateway the lab
    /// starts has one).
    #[arg(long, value_name = "ADDR")]
    pub ng: Option<std::net::SocketAddr>,
    /// Control scenario: the gateway's HTTPS address, for half-open TLS (with --target; the
    /// gateway the lab starts serves HTTPS too).
    #[arg(long, value_name = "ADDR")]
    pub https: Option<std::net::SocketAddr>,
    /// Control scenario: the gateway's http_request_timeout_secs and
    /// tls_handshake_timeout_secs (the lab's own gateway is started with them). Default 10
    /// (1 with --quick).
    #[arg(long)]
    pub timeout_secs: Option<f64>,
    /// Control scenario: the gateway's max_connections (the lab's own gateway is started with
    /// it); the idle part opens this many plus --connections. Default 256 (32 with --quick).
    #[arg(long)]
    pub max_connections: Option<usize>,
    /// Control scenario: slow clients of each kind. Default 100 (10 with --quick).
    #[arg(long)]
    pub connections: Option<usize>,
    /// Write the report as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// The limits the lab's own gateway runs with, and its probes are sized by.
struct Limits {
    timeout_secs: f64,
    max_connections: usize,
    /// Half the connections for one source.
    per_source_connections: usize,
    /// A request rate its probes stay well under.
    requests_per_source: f64,
    request_burst: u32,
}

impl Limits {
    fn of(a: &FloodArgs) -> Result<Limits> {
        let timeout_secs = a.timeout_secs.unwrap_or(if a.quick { 1.0 } else { 10.0 });
        if !(timeout_secs > 0.0 && timeout_secs <= 600.0) {
            bail!("--timeout-secs {timeout_secs}: give seconds between 0 and 600");
        }
        let max_connections = a.max_connections.unwrap_or(if a.quick { 32 } else { 256 });
        let (requests_per_source, request_burst) = if a.quick { (20.0, 20) } else { (50.0, 50) };
        Ok(Limits {
            timeout_secs,
            max_connections,
            per_source_connections: (max_connections / 2).max(1),
            requests_per_source,
            request_burst,
        })
    }
}

/// The lab's own gateway for the control scenario: an ng socket, HTTPS beside HTTP, the
/// limits the slow clients are measured against, its rooms closed with `lab_key` bar one open
/// room. Its ng address, the flags it is started with, and its configuration's folder (removed
/// when dropped).
fn control_gateway(
    limits: &Limits,
    lab_key: &secrelay_lab::client::credentials::ApiKey,
) -> Result<(std::net::SocketAddr, Vec<String>, RemoveOnDrop)> {
    let Limits {
        timeout_secs,
        max_connections,
        per_source_connections,
        requests_per_source,
        request_burst,
    } = limits;
    let port = std::net::UdpSocket::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let dir = tempfile_dir()?;
    let config = dir.join("gateway.toml");
    std::fs::write(
        &config,
        format!(
            "http_request_timeout_secs = {timeout_secs:?}\ntls_handshake_timeout_secs = {timeout_secs:?}\nmax_connections = {max_connections}\nmax_connections_per_source = {per_source_connections}\nrequests_per_source = {requests_per_source:?}\nrequest_burst_per_source = {request_burst}\nng_allow = [\"127.0.0.1\"]\n[api_keys]\n{} = \"{}\"\n[rooms.flood-open]\nopen = true\n",
            lab_key.id, lab_key.secret
        ),
    )?;
    let extra = vec![
        "--ng".to_string(),
        addr.to_string(),
        "--https".to_string(),
        "127.0.0.1:0".to_string(),
        "--config".to_string(),
        config.display().to_string(),
    ];
    Ok((addr, extra, RemoveOnDrop(dir)))
}

/// The signaling of the gateway flooded: `--target`'s (with `--ca` for HTTPS) or the one the
/// lab started, with the token and admin key to use.
fn signaling_of(a: &FloodArgs, spawned: Option<&flood::SpawnedGateway>) -> Result<Signaling> {
    let target = match (&a.target, spawned) {
        (Some(t), _) => t.trim_end_matches('/').to_string(),
        (None, Some(g)) => g.url.clone(),
        (None, None) => unreachable!("a gateway is spawned without --target"),
    };
    let https = target.starts_with("https://");
    if !(https || target.starts_with("http://")) {
        bail!("--target {target:?}: give the gateway's signaling base URL, https://host:port (or http://host:port)");
    }
    if https && a.ca.is_none() {
        bail!("--target {target}: HTTPS needs --ca FILE, the CA certificate to trust");
    }
    let mut signaling = Signaling::new(target.as_str());
    signaling.token = a.token.clone();
    signaling.admin = match spawned {
        Some(g) => Some(g.admin.key().to_owned()),
        None => a.admin.key()?,
    };
    if let Some(ca) = &a.ca {
        signaling = signaling.with_ca_file(ca)?;
    }
    Ok(signaling)
}

/// The control scenario's options. Against a `--target` gateway the lab does not know its
/// limits: those parts are sized from the defaults and the request flood and `ng_allow` parts
/// left out.
fn control_options(
    a: &FloodArgs,
    limits: &Limits,
    (signaling, spawned, ng): (
        Signaling,
        Option<&flood::SpawnedGateway>,
        Option<std::net::SocketAddr>,
    ),
    lab_key: &secrelay_lab::client::credentials::ApiKey,
) -> ControlOptions {
    // An address the lab's gateway takes no ng commands from (ng_allow is 127.0.0.1).
    let ng_outsider: std::net::IpAddr = [127, 0, 0, 50].into();
    let own = a.target.is_none();
    ControlOptions {
        signaling,
        https: a.https.or(spawned.and_then(|g| g.https)),
        ng,
        server_pid: a.server_pid.or(spawned.map(|g| g.pid())),
        timeout_secs: limits.timeout_secs,
        connections: a.connections.unwrap_or(if a.quick { 10 } else { 100 }),
        idle_connections: limits.max_connections,
        per_source_connections: if own {
            limits.per_source_connections
        } else {
            secrelay_gateway::server::ServeConfig::default().max_connections_per_source
        },
        requests_per_source: if own { limits.requests_per_source } else { 0.0 },
        request_burst: limits.request_burst,
        ng_outsider: own.then_some(ng_outsider),
        big_requests: if a.quick { 4 } else { 50 },
        big_body_bytes: 1024 * 1024,
        ng_rate: a.rate.unwrap_or(if a.quick { 2000 } else { 20_000 }),
        ng_secs: a.secs.unwrap_or(if a.quick { 1.5 } else { 10.0 }),
        credentials: Some(secrelay_lab::client::credentials::CredentialOptions {
            requests: if a.quick { 200 } else { 10_000 },
            per_source: limits.request_burst as usize,
            key: own.then(|| lab_key.clone()),
            rooms: own.then(|| ("flood-open".to_owned(), "flood-closed".to_owned())),
            joins: if a.quick { 20 } else { 200 },
        }),
    }
}

/// The handshake or SRTP flood's options.
fn flood_options(
    a: &FloodArgs,
    signaling: Signaling,
    spawned: Option<&flood::SpawnedGateway>,
) -> FloodOptions {
    let scenario = match a.scenario {
        ScenarioArg::Handshake => Scenario::Handshake,
        ScenarioArg::Srtp => Scenario::Srtp,
        ScenarioArg::Control => unreachable!("the control scenario is run apart"),
    };
    FloodOptions {
        scenario,
        signaling,
        server_pid: a.server_pid.or(spawned.map(|g| g.pid())),
        participants: a.participants.unwrap_or(if a.quick { 8 } else { 100 }),
        per_room: a.per_room,
        rate: a.rate.unwrap_or(if a.quick { 3000 } else { 50_000 }),
        sources: a.sources.unwrap_or(if a.quick { 64 } else { 512 }),
        secs: a.secs.unwrap_or(if a.quick { 2.0 } else { 10.0 }),
        joiners: a.joiners.unwrap_or(if a.quick { 1 } else { 2 }),
        bind_ip: a.bind,
        flood_cpus: a.flood_cpus.clone(),
        threads: a.threads,
    }
}

/// Writes `r` as JSON to `--json`'s file, when given.
fn write_json(path: Option<&PathBuf>, r: &impl serde::Serialize) -> Result<()> {
    if let Some(p) = path {
        std::fs::write(p, serde_json::to_string_pretty(r)?)
            .map_err(|e| anyhow::anyhow!("--json {}: {e}", p.display()))?;
    }
    Ok(())
}

/// Runs the flood and prints the report.
pub fn run(a: &FloodArgs) -> Result<()> {
    if a.workers == 0 {
        bail!("--workers must be at least 1");
    }
    let limits = Limits::of(a)?;
    let control = matches!(a.scenario, ScenarioArg::Control);
    let lab_key = secrelay_lab::client::credentials::ApiKey {
        id: "lab".into(),
        secret: secrelay_gateway::server::auth::Secret::random()
            .expose()
            .to_owned(),
    };
    let mut ng = a.ng;
    let mut extra = Vec::new();
    let mut _config_dir = None;
    if control && a.target.is_none() {
        let (addr, flags, dir) = control_gateway(&limits, &lab_key)?;
        ng = Some(addr);
        extra = flags;
        _config_dir = Some(dir);
    }
    let spawned = match &a.target {
        Some(_) => None,
        None => {
            let exe = std::env::current_exe()?;
            Some(flood::spawn_gateway(
                &exe,
                a.workers,
                a.gateway_cpus.as_deref(),
                &extra,
            )?)
        }
    };
    let signaling = signaling_of(a, spawned.as_ref())?;
    if control {
        let o = control_options(a, &limits, (signaling, spawned.as_ref(), ng), &lab_key);
        let r = control_flood::run(&o)?;
        print_control(&r);
        return write_json(a.json.as_ref(), &r);
    }
    let r = flood::run(&flood_options(a, signaling, spawned.as_ref()))?;
    print(&r);
    write_json(a.json.as_ref(), &r)?;
    drop(spawned);
    Ok(())
}

fn print(r: &FloodReport) {
    println!(
        "flood {}: {} established participants in rooms of {} ({} connected); flood at {} datagrams/s from {} sockets{}",
        r.scenario.name(),
        r.participants,
        r.per_room,
        r.connected,
        if r.rate == 0 { "max".to_string() } else { r.rate.to_string() },
        r.sources,
        r.load_average
            .map(|l| format!("; load average {:.2} {:.2} {:.2}", l[0], l[1], l[2]))
            .unwrap_or_default()
    );
    for w in &r.windows {
        println!("  window {:<8}     {:.1} s", w.name, w.secs);
        if !w.flood.is_empty() {
            println!("    flood sent       {:.0} datagrams/s", w.flood_pps);
            for f in &w.flood {
                println!(
                    "      {:<30} {:>9} sent ({} send errors), expected as {}",
                    f.kind, f.sent, f.send_errors, f.expect
                );
            }
        }
        if let Some([p50, p90, p99, p999]) = w.relay_latency_us {
            println!("    relay latency    p50 ≤{p50:.0} µs, p90 ≤{p90:.0} µs, p99 ≤{p99:.0} µs, p99.9 ≤{p999:.0} µs ({:.0} copies forwarded)", w.forwarded);
        }
        if w.joins_ok + w.join_failures > 0 {
            println!(
                "    joins            {} joined, {} handshakes completed ({:.1}/s), {} failed{}",
                w.joins_ok,
                w.handshakes_completed,
                w.handshakes_per_sec,
                w.join_failures,
                w.setup_ms
                    .map(|[a, b]| format!("; join to keys p50 {a:.0} ms, p99 {b:.0} ms"))
                    .unwrap_or_default()
            );
        }
        println!(
            "    gateway          joins {:.0}, handshakes ok {:.0} failed {:.0}; participants {:.0} → {:.0} (most {:.0}), rooms {:.0} → {:.0}",
            w.gateway_joins,
            w.gateway_handshakes[0],
            w.gateway_handshakes[1],
            w.participants[0],
            w.participants[2],
            w.participants[1],
            w.rooms[0],
            w.rooms[1]
        );
        println!(
            "    datagrams        in {:.0}, out {:.0}{}",
            w.datagrams_in,
            w.datagrams_out,
            w.kernel_drops
                .map(|k| format!("; {k} dropped by the kernel at the gateway's sockets"))
                .unwrap_or_default()
        );
        if let Some([c, u, s]) = w.cpu_secs {
            println!("    gateway CPU      {c:.2} s (user {u:.2}, system {s:.2})");
        }
        if let Some([a, m, b]) = w.rss_bytes {
            let mib = |x: u64| x as f64 / 1048576.0;
            println!(
                "    gateway memory   {:.1} MiB → {:.1} MiB (most {:.1} MiB)",
                mib(a),
                mib(b),
                mib(m)
            );
        }
        println!("    drops            {:?}", w.drops);
    }
    for (kind, reason, sent, counted) in &r.accounted {
        println!(
            "  counted            {kind}: {sent} sent, {counted:.0} more {reason} than unloaded"
        );
    }
    if let Some(x) = r.relay_p99_ratio {
        println!("  relay p99          flood / unloaded = {x:.2}");
    }
    if let Some(x) = r.handshake_ratio {
        println!("  handshakes/s       flood / unloaded = {x:.2}");
    }
    if let (Some(c), Some(d)) = (r.cpu_us_per_flood_datagram, r.drops_per_core_sec) {
        println!(
            "  gateway CPU        {c:.2} µs per flood datagram counted ({}), net of the unloaded rate: {d:.0} per core-second",
            r.cpu_us_per_flood_datagram_split
                .map(|[u, s]| format!("user {u:.2}, system {s:.2}"))
                .unwrap_or_default()
        );
    }
    println!(
        "  established        sent {}, received {}, lost {}",
        r.established[0], r.established[1], r.established[2]
    );
    for f in &r.failures {
        println!("  note               {f}");
    }
}

/// A temporary directory of our own (the gateway's configuration), removed when dropped.
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn tempfile_dir() -> Result<PathBuf> {
    let mut r = [0u8; 8];
    getrandom::fill(&mut r).map_err(|e| anyhow::anyhow!("random: {e}"))?;
    let dir = std::env::temp_dir().join(format!(
        "secrelay-flood-{}",
        r.iter().map(|b| format!("{b:02x}")).collect::<String>()
    ));
    std::fs::create_dir_all(&dir)
        .map_err(|e| anyhow::anyhow!("creating {}: {e}", dir.display()))?;
    Ok(dir)
}

fn print_credentials(c: &secrelay_lab::client::credentials::CredentialReport) {
    let us = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.1} µs"));
    for r in &c.costs {
        println!(
            "  credential {:<17} {} requests {:?}; gateway CPU {} each (the check {}); counted {} {:.0}",
            r.kind,
            r.requests,
            r.statuses,
            us(r.gateway_us_per_request),
            us(r.check_us_per_request),
            r.counted.0,
            r.counted.1
        );
    }
    if let Some(j) = &c.joins {
        println!(
            "  joins              {} each: anonymous p50 {:.0} µs p99 {:.0} µs; with a token p50 {:.0} µs p99 {:.0} µs (p99 × {:.2}){}",
            j.joins,
            j.anonymous_us[0],
            j.anonymous_us[1],
            j.token_us[0],
            j.token_us[1],
            j.p99_ratio,
            if j.refused.is_empty() {
                String::new()
            } else {
                format!("; refused {:?}", j.refused)
            }
        );
    }
}

fn print_control(r: &ControlReport) {
    println!(
        "flood control: slow clients measured against a {:.1} s timeout{}",
        r.timeout_secs,
        r.load_average
            .map(|l| format!("; load average {:.2} {:.2} {:.2}", l[0], l[1], l[2]))
            .unwrap_or_default()
    );
    for (kind, t) in &r.big_bodies {
        println!("  huge body ({kind:<8})  {t:?}");
    }
    for s in &r.slow {
        println!(
            "  {:<18} {} connections ended {:?}{}",
            s.kind,
            s.connections,
            s.ended,
            s.ended_after_secs
                .map(|[a, m, b]| format!(" after {a:.2} / {m:.2} / {b:.2} s (min / median / max)"))
                .unwrap_or_default()
        );
        if !s.healthz.is_empty() {
            println!(
                "  {:<18} GET /healthz meanwhile: {:?}; after: {}",
                "",
                s.healthz,
                s.healthz_after.as_deref().unwrap_or("-")
            );
        }
    }
    println!("  gateway refused    {:?}", r.gateway_refused);
    if let Some(q) = &r.request_flood {
        println!(
            "  request flood      from {} for {:.1} s (limit {}/s, burst {}): {:?}, {} of the 429s with Retry-After; GET /healthz from elsewhere meanwhile: {:?}",
            q.source, q.secs, q.limit[0], q.limit[1], q.answers, q.retry_after, q.healthz
        );
    }
    for n in &r.ng {
        println!(
            "  ng {:<8}        {:.1} s: pings {} answered of {}{}; gateway requests ok {:.0}, error {:.0}{}",
            n.name,
            n.secs,
            n.pings[1],
            n.pings[0],
            n.ping_rtt_us
                .map(|[a, b]| format!(" (p50 {a:.0} µs, p99 {b:.0} µs)"))
                .unwrap_or_default(),
            n.gateway_requests[0],
            n.gateway_requests[1],
            n.kernel_drops
                .map(|k| format!("; {k} dropped by the kernel at the ng socket"))
                .unwrap_or_default()
        );
        if !n.flood.is_empty() {
            println!(
                "    flood answered   {:.0} ({:.0} errors computed afresh, the rest repeats answered from the reply cache)",
                n.flood_answered[0], n.flood_answered[1]
            );
        }
        for f in &n.flood {
            println!(
                "    flood            {}: {} sent ({} send errors)",
                f.kind, f.sent, f.send_errors
            );
        }
        if let Some([a, b]) = n.rss_bytes {
            println!(
                "    gateway memory   {:.1} MiB → {:.1} MiB",
                a as f64 / 1048576.0,
                b as f64 / 1048576.0
            );
        }
    }
    if let Some(x) = &r.ng_outsider {
        println!(
            "  ng from {}     {} pings from outside ng_allow: {} answered, {:.0} counted not_allowed",
            x.source, x.sent, x.answered, x.not_allowed
        );
    }
    if let Some(c) = &r.credentials {
        print_credentials(c);
    }
    if let Some([a, b]) = r.rss_bytes {
        println!(
            "  gateway memory     {:.1} MiB before, {:.1} MiB after",
            a as f64 / 1048576.0,
            b as f64 / 1048576.0
        );
    }
}
