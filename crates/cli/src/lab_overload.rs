//! `secrelay lab overload`: more calls offered than a running gateway can carry; what its
//! admission control sheds, and whether the calls it already carries keep their quality.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Result};
use clap::Args;
use secrelay_lab::client::overload::{self, OverloadOptions, OverloadReport};
use secrelay_testkit::fleet::FleetConfig;
use secrelay_testkit::Media;

/// Flags of `secrelay lab overload`.
#[derive(Args, Debug)]
pub struct OverloadArgs {
    /// The gateway and how its participants are driven.
    #[command(flatten)]
    pub client: crate::lab_gateway::GatewayClientArgs,
    /// Calls established before the storm (two participants each), running throughout.
    #[arg(long, default_value_t = 40)]
    pub calls: usize,
    /// Calls the storm offers. Offer about twice what the gateway carries: with --transcode
    /// (Opus ↔ PCMU, libopus complexity 10) one worker of this kind of machine carries about
    /// 90 calls.
    #[arg(long, default_value_t = 160)]
    pub storm_calls: usize,
    /// Waves the storm's calls arrive in (each wave's admitted calls talk before the next).
    #[arg(long, default_value_t = 8)]
    pub waves: usize,
    /// Seconds of each window (before, storm, after).
    #[arg(long, default_value_t = 10)]
    pub window: u64,
    /// The kinds of leg of each call, cycled: `join`, `sdes`, `plain`.
    #[arg(long, default_value = "join,plain", value_delimiter = ',')]
    pub legs: Vec<String>,
    /// Calls that make the gateway transcode: WebRTC participants send Opus only, phones PCMU
    /// only (each call costs the gateway an Opus encode and decode per 20 ms).
    #[arg(long)]
    pub transcode: bool,
    /// Write the report as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

fn us(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("≤{v:.0} µs"))
}

fn print(r: &OverloadReport) {
    println!(
        "lab overload: {} established participants ({} connected, {} still at the end); the storm offered {}: {} admitted ({} connected), {} refused with 503 for overload, {} refused otherwise",
        r.established,
        r.established_connected,
        r.established_connected_at_end,
        r.storm_offered,
        r.storm_admitted,
        r.storm_connected,
        r.storm_refused_overload,
        r.storm_refused_other
    );
    if let Some(f) = &r.first_refusal {
        println!("  first refusal: {f}");
    }
    println!(
        "  {:<7} {:>6} {:>22} {:>9} {:>13} {:>13} {:>9} {:>8} {:>10} {:>8}",
        "window",
        "secs",
        "established recv/sent",
        "delivery",
        "relay p50",
        "relay p99",
        "load max",
        "shed max",
        "deferred",
        "cpu s"
    );
    for w in &r.windows {
        println!(
            "  {:<7} {:>6.1} {:>22} {:>8.2}% {:>13} {:>13} {:>9.2} {:>8} {:>10} {:>8}",
            w.name,
            w.secs,
            format!("{}/{}", w.established_received, w.established_sent),
            w.established_delivery * 100.0,
            us(w.relay_p50_us),
            us(w.relay_p99_us),
            w.load_max,
            w.shedding_max,
            w.handshakes_deferred,
            w.gateway_cpu_secs.map_or("-".into(), |c| format!("{c:.2}"))
        );
    }
    println!(
        "  recovery: shedding nothing {} after the storm's calls ended; a fresh call then got {}",
        r.recovery_secs
            .map_or("not within 30 s".into(), |s| format!("{s:.1} s")),
        r.after_join_status
            .map_or("no answer".into(), |s| s.to_string())
    );
}

/// Runs the scenario and prints the report.
pub fn run(a: &OverloadArgs) -> Result<()> {
    if a.calls == 0 || a.storm_calls == 0 || a.waves == 0 || a.window == 0 {
        bail!("--calls, --storm-calls, --waves and --window must each be at least 1");
    }
    let o = OverloadOptions {
        established: FleetConfig {
            signaling: a.client.signaling()?,
            rooms: a.calls,
            per_room: 2,
            legs: crate::lab_gateway::parse_legs(&a.legs)?,
            room_prefix: "established-".into(),
            duration: Duration::from_secs(a.window),
            threads: a.client.threads,
            bind_ip: a.client.bind,
            connect_timeout: Duration::from_secs(60),
            inject_bad: false,
            media: Media::Pcmu,
            transcode: a.transcode,
            mix: None,
            ice_tcp: false,
            publish_at: None,
        },
        storm_participants: a.storm_calls * 2,
        waves: a.waves,
        window: Duration::from_secs(a.window),
        server_pid: a.client.server_pid,
    };
    let r = overload::run(&o)?;
    print(&r);
    if let Some(path) = &a.json {
        std::fs::write(path, serde_json::to_string_pretty(&r)?)
            .map_err(|e| anyhow::anyhow!("--json {}: {e}", path.display()))?;
    }
    Ok(())
}
