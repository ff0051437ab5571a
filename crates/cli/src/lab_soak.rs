//! `secrelay lab soak`: calls of every kind of leg joining and leaving a gateway for a while,
//! its memory, descriptors and state sampled, and the verdict that nothing remains; the work is
//! `secrelay_lab::soak`'s.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use clap::Args;
use secrelay_lab::soak::{self, ChildGateway, SoakOptions, SoakOutput};
use secrelay_lab::LabOutput;
use secrelay_testkit::Signaling;

/// Flags of `secrelay lab soak`.
#[derive(Args, Debug)]
pub struct SoakArgs {
    /// How long calls keep arriving and leaving: seconds, or e.g. 30m (default 30m; 20 s with
    /// --quick).
    #[arg(long, value_parser = soak::parse_duration)]
    pub duration: Option<Duration>,
    /// Calls in all, spread evenly over the duration, the kinds in turn (default 3000; 50 with
    /// --quick).
    #[arg(long)]
    pub calls: Option<usize>,
    /// Most calls live at once: an arrival waits while this many are (default 60; 12 with
    /// --quick).
    #[arg(long)]
    pub max_live: Option<usize>,
    /// Mean holding time of a call, seconds (each holds uniformly between half and one and a
    /// half of it); default: what keeps about 70 % of --max-live busy, 3–60 s.
    #[arg(long, value_parser = soak::parse_duration)]
    pub hold: Option<Duration>,
    /// Share of the calls that vanish (stop sending and close their sockets without a word, so
    /// the gateway's timeouts must end them) instead of leaving (close_notify and DELETE, ng
    /// delete).
    #[arg(long, default_value_t = 0.25)]
    pub vanish: f64,
    /// A running gateway's signaling base URL (https://host:port or http://host:port); without
    /// it the soak starts its own `secrelay serve` (HTTPS with a throw-away CA, ng on, short
    /// timeouts) as a child process.
    #[arg(long)]
    pub target: Option<String>,
    /// With --target over HTTPS: the CA certificate (PEM) that issued its certificate.
    #[arg(long, value_name = "FILE", requires = "target")]
    pub ca: Option<PathBuf>,
    /// With --target: its ng control socket, for the ng calls (none without it).
    #[arg(long, value_name = "ADDR", requires = "target")]
    pub ng: Option<SocketAddr>,
    /// With --target: its process id, for memory, descriptors and threads from /proc (without
    /// it only its /metrics is sampled).
    #[arg(long, requires = "target")]
    pub server_pid: Option<u32>,
    /// With --target: a Bearer token for its rooms.
    #[arg(long, requires = "target")]
    pub token: Option<String>,
    /// With --target: the gateway's admin key.
    #[command(flatten)]
    pub admin: crate::lab_gateway::AdminKeyArg,
    /// The started gateway's packet workers.
    #[arg(long, default_value_t = 2, conflicts_with = "target")]
    pub workers: usize,
    /// The started gateway's ICE consent and telephony media timeouts, seconds (default 5; 3
    /// with --quick).
    #[arg(long, conflicts_with = "target")]
    pub gateway_timeout: Option<f64>,
    /// How long to wait, once the last call has gone, for the gateway to hold nothing (default:
    /// twice the started gateway's timeout + 20 s; 150 s with --target, which covers secrelay's
    /// default 30 s consent, 60 s media timeout and 30 s ng sweep).
    #[arg(long, value_parser = soak::parse_duration)]
    pub drain_timeout: Option<Duration>,
    /// Address the simulated legs bind to.
    #[arg(long, default_value = "127.0.0.1")]
    pub bind: IpAddr,
    /// Threads doing the signaling (HTTP(S) offers and DELETEs, ng commands).
    #[arg(long, default_value_t = 4)]
    pub signaling_threads: usize,
    /// Seed of the random holding times and endings.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// A short run: 20 s, 50 calls, 12 live at most (each default only where not given).
    #[arg(long)]
    pub quick: bool,
    /// Write the study and every sample as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write report.html, PNG plots and results.json into DIR.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// No progress lines.
    #[arg(long)]
    pub no_progress: bool,
}

/// Runs the soak, prints the tables, writes the JSON and the report; fails when something
/// remained.
pub fn run(a: &SoakArgs) -> Result<()> {
    let duration = a.duration.unwrap_or(if a.quick {
        Duration::from_secs(20)
    } else {
        Duration::from_secs(1800)
    });
    let calls = a.calls.unwrap_or(if a.quick { 50 } else { 3000 });
    let max_live = a.max_live.unwrap_or(if a.quick { 12 } else { 60 });
    if calls == 0 || max_live == 0 {
        bail!("--calls and --max-live must be at least 1");
    }
    if !(0.0..=1.0).contains(&a.vanish) {
        bail!("--vanish {}: give a share between 0 and 1", a.vanish);
    }
    let timeout = a.gateway_timeout.unwrap_or(if a.quick { 3.0 } else { 5.0 });
    if !(timeout.is_finite() && timeout > 0.0) {
        bail!("--gateway-timeout {timeout}: give a positive number of seconds");
    }
    let hold = a
        .hold
        .unwrap_or_else(|| SoakOptions::default_hold(duration, calls, max_live));
    if hold.mul_f64(1.5) >= duration {
        bail!(
            "--hold {:.1} s: the longest call (1.5 × the hold) must end within --duration {:.0} s",
            hold.as_secs_f64(),
            duration.as_secs_f64()
        );
    }
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let (child, signaling, ng, pid, timeouts) = match &a.target {
        Some(url) => {
            let https = url.starts_with("https://");
            if !(https || url.starts_with("http://")) {
                bail!("--target {url:?}: give the gateway's signaling base URL, https://host:port or http://host:port");
            }
            if https && a.ca.is_none() {
                bail!("--target {url}: HTTPS needs --ca FILE, the CA certificate to trust");
            }
            let mut s = Signaling::new(url.trim_end_matches('/'));
            s.token = a.token.clone();
            s.admin = a.admin.key()?;
            if let Some(ca) = &a.ca {
                s = s.with_ca_file(ca)?;
            }
            (None, s, a.ng, a.server_pid, None)
        }
        None => {
            let exe = std::env::current_exe()
                .map_err(|e| anyhow!("finding the secrelay binary to start the gateway: {e}"))?;
            let g = ChildGateway::start(&exe, a.workers, timeout)?;
            let s = Signaling::new(g.url.clone())
                .with_ca_file(&g.ca)?
                .with_admin(g.admin.key());
            let (ng, pid, t) = (Some(g.ng), Some(g.pid()), Some(g.timeouts));
            (Some(g), s, ng, pid, t)
        }
    };
    let drain_timeout = a.drain_timeout.unwrap_or(match &child {
        Some(_) => Duration::from_secs_f64(2.0 * timeout + 20.0),
        None => Duration::from_secs(150),
    });
    let o = SoakOptions {
        signaling,
        ng,
        server_pid: pid,
        duration,
        calls,
        max_live,
        hold,
        vanish: a.vanish,
        drain_timeout,
        bind_ip: a.bind,
        signaling_threads: a.signaling_threads,
        seed: a.seed,
        quick: a.quick,
        progress: !a.no_progress,
        command,
        gateway_timeouts: timeouts,
    };
    eprintln!(
        "secrelay lab soak: {calls} calls over {:.0} s against {}{}, at most {max_live} live, holding {:.1} s on average, {:.0} % vanishing",
        duration.as_secs_f64(),
        o.signaling.base_url,
        pid.map(|p| format!(" (pid {p})")).unwrap_or_default(),
        hold.as_secs_f64(),
        a.vanish * 100.0
    );
    let started = Instant::now();
    let report = soak::run(&o);
    if let Some(g) = child {
        g.stop();
    }
    let report = report?;
    let study = report.study(&o, started.elapsed().as_secs_f64());
    println!("{}", study.render_text());
    let lab = LabOutput {
        secrelay: env!("CARGO_PKG_VERSION").into(),
        studies: vec![study],
        sizing: None,
    };
    let failed: Vec<String> = report
        .checks
        .iter()
        .filter(|c| !c.pass)
        .map(|c| format!("{}: {} (expected {})", c.what, c.found, c.expected))
        .collect();
    if let Some(dir) = &a.out {
        std::fs::create_dir_all(dir).map_err(|e| anyhow!("--out {}: {e}", dir.display()))?;
        secrelay_lab::report::write(dir, &lab)
            .map_err(|e| anyhow!("--out {}: writing the report: {e:#}", dir.display()))?;
    }
    let output = SoakOutput { lab, soak: report };
    if let Some(dir) = &a.out {
        secrelay_lab::write_json(&dir.join("results.json"), &output)?;
        eprintln!("report: {}", dir.join("report.html").display());
    }
    if let Some(p) = &a.json {
        secrelay_lab::write_json(p, &output)
            .map_err(|e| anyhow!("--json {}: {e:#}", p.display()))?;
    }
    if !failed.is_empty() {
        bail!("soak: {}", failed.join("; "));
    }
    Ok(())
}
