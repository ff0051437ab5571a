//! `secrelay lab flood SCENARIO`: hostile traffic at a gateway while established rooms relay
//! (and, in the handshake scenario, legitimate participants join), the same run measured
//! without and with the flood.

use std::net::IpAddr;
use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::{Args, ValueEnum};
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
    /// Write the report as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// Runs the flood and prints the report.
pub fn run(a: &FloodArgs) -> Result<()> {
    let scenario = match a.scenario {
        ScenarioArg::Handshake => Scenario::Handshake,
        ScenarioArg::Srtp => Scenario::Srtp,
    };
    if a.workers == 0 {
        bail!("--workers must be at least 1");
    }
    let spawned = match &a.target {
        Some(_) => None,
        None => {
            let exe = std::env::current_exe()?;
            Some(flood::spawn_gateway(
                &exe,
                a.workers,
                a.gateway_cpus.as_deref(),
            )?)
        }
    };
    let target = match (&a.target, &spawned) {
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
    if let Some(ca) = &a.ca {
        signaling = signaling.with_ca_file(ca)?;
    }
    let o = FloodOptions {
        scenario,
        signaling,
        server_pid: a.server_pid.or(spawned.as_ref().map(|g| g.pid())),
        participants: a.participants.unwrap_or(if a.quick { 8 } else { 100 }),
        per_room: a.per_room,
        rate: a.rate.unwrap_or(if a.quick { 3000 } else { 50_000 }),
        sources: a.sources.unwrap_or(if a.quick { 64 } else { 512 }),
        secs: a.secs.unwrap_or(if a.quick { 2.0 } else { 10.0 }),
        joiners: a.joiners.unwrap_or(if a.quick { 1 } else { 2 }),
        bind_ip: a.bind,
        flood_cpus: a.flood_cpus.clone(),
        threads: a.threads,
    };
    let r = flood::run(&o)?;
    print(&r);
    if let Some(p) = &a.json {
        std::fs::write(p, serde_json::to_string_pretty(&r)?)
            .map_err(|e| anyhow::anyhow!("--json {}: {e}", p.display()))?;
    }
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
