//! `secrelay lab failover`: a gateway's ng calls through its death, on its standby;
//! the work is `secrelay_lab::failover`'s.

use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use clap::Args;
use secrelay_lab::failover::{self, FailoverOptions, FailoverReport};
use secrelay_lab::LabOutput;
use serde::Serialize;

/// Flags of `secrelay lab failover`.
#[derive(Args, Debug)]
pub struct FailoverArgs {
    /// Runs: each starts node a, opens its calls, kills it (default 20; 3 with --quick).
    #[arg(long)]
    pub runs: Option<usize>,
    /// Calls per run, plain and SDES (AES-CM, AES-GCM) in turn (default 20; 6 with --quick).
    #[arg(long)]
    pub calls: Option<usize>,
    /// Calls per run from a phone to a simulated browser (DTLS-SRTP), which restarts ICE
    /// through the standby after a second without audio (default 4; 2 with --quick).
    #[arg(long)]
    pub webrtc_calls: Option<usize>,
    /// Both nodes' cluster_lease_secs: how long a dead node's lease runs before its standby
    /// takes its calls.
    #[arg(long, default_value_t = 1.0)]
    pub lease: f64,
    /// Seconds the calls talk before the kill, over which the directory's writes of steady
    /// calls are counted (default 5; 1 with --quick).
    #[arg(long)]
    pub steady: Option<f64>,
    /// --quick (3 runs of 6 calls, 1 s steady, each only where not given), --json, --out,
    /// --no-progress.
    #[command(flatten)]
    pub study: crate::lab::StudyArgs,
}

/// What `lab failover --json` writes: the lab's usual output and every call's figures.
#[derive(Serialize)]
struct FailoverOutput {
    #[serde(flatten)]
    lab: LabOutput,
    failover: FailoverReport,
}

/// Runs the study, prints its tables, writes the JSON and the report; fails when a call was
/// not taken over.
pub fn run(a: &FailoverArgs) -> Result<()> {
    let steady = a.steady.unwrap_or(if a.study.quick { 1.0 } else { 5.0 });
    if !(steady.is_finite() && steady > 0.0) {
        bail!("--steady {steady}: give a positive number of seconds");
    }
    if !(a.lease.is_finite() && a.lease >= 0.3) {
        bail!("--lease {}: give at least 0.3 seconds", a.lease);
    }
    let o = FailoverOptions {
        exe: std::env::current_exe()
            .map_err(|e| anyhow!("finding the secrelay binary to start the nodes: {e}"))?,
        runs: a.runs.unwrap_or(if a.study.quick { 3 } else { 20 }),
        calls: a.calls.unwrap_or(if a.study.quick { 6 } else { 20 }),
        webrtc_calls: a.webrtc_calls.unwrap_or(if a.study.quick { 2 } else { 4 }),
        lease_secs: a.lease,
        steady: Duration::from_secs_f64(steady),
        quick: a.study.quick,
        progress: !a.study.no_progress,
    };
    eprintln!(
        "secrelay lab failover: {} runs of {} calls and {} with a WebRTC side, lease {:.1} s, {steady:.0} s steady before each kill",
        o.runs, o.calls, o.webrtc_calls, o.lease_secs
    );
    let started = Instant::now();
    let report = failover::run(&o)?;
    let study = report.study(&o, started.elapsed().as_secs_f64());
    println!("{}", study.render_text());
    let not_taken: usize = report.runs.iter().map(|r| r.not_taken).sum();
    let lab = LabOutput {
        secrelay: env!("CARGO_PKG_VERSION").into(),
        studies: vec![study],
        sizing: None,
    };
    if let Some(dir) = &a.study.out {
        std::fs::create_dir_all(dir).map_err(|e| anyhow!("--out {}: {e}", dir.display()))?;
        secrelay_lab::report::write(dir, &lab)
            .map_err(|e| anyhow!("--out {}: writing the report: {e:#}", dir.display()))?;
    }
    let output = FailoverOutput {
        lab,
        failover: report,
    };
    if let Some(dir) = &a.study.out {
        secrelay_lab::write_json(&dir.join("results.json"), &output)?;
        eprintln!("report: {}", dir.join("report.html").display());
    }
    if let Some(p) = &a.study.json {
        secrelay_lab::write_json(p, &output)
            .map_err(|e| anyhow!("--json {}: {e:#}", p.display()))?;
    }
    if not_taken > 0 {
        bail!("failover: {not_taken} calls were not heard again within 30 s of the kill");
    }
    Ok(())
}
