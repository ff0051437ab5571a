//! `secrelay lab gateway-load`: simulated participants against a running gateway, with the
//! gateway's own relay latency, drops, CPU per packet and memory per participant.

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Result};
use clap::Args;
use secrelay_lab::client::load::{self, LoadOptions};
use secrelay_testkit::fleet::{FleetConfig, FleetProgress};
use secrelay_testkit::{Leg, Signaling};

/// Flags of `secrelay lab gateway-load`.
#[derive(Args, Debug)]
pub struct GatewayLoadArgs {
    /// The gateway's signaling base URL (e.g. https://127.0.0.1:8443, or http://… where plain
    /// HTTP was asked for).
    #[arg(long)]
    pub target: String,
    /// The private CA's certificate (PEM) that issued the gateway's HTTPS certificate (the
    /// path `secrelay serve` prints, or a `secrelay ca` directory's ca.pem).
    #[arg(long, value_name = "FILE")]
    pub ca: Option<PathBuf>,
    /// Participants in all.
    #[arg(long, default_value_t = 1000)]
    pub participants: usize,
    /// Participants per room (each sends G.711 20 ms audio and receives the others').
    #[arg(long, default_value_t = 4)]
    pub per_room: usize,
    /// Seconds of media once everybody is connected.
    #[arg(long, default_value_t = 30)]
    pub duration: u64,
    /// Threads driving the participants.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// The gateway's process id, for its CPU time and memory (/proc).
    #[arg(long)]
    pub server_pid: Option<u32>,
    /// Bearer token for the rooms.
    #[arg(long)]
    pub token: Option<String>,
    /// Address the participants' sockets bind to.
    #[arg(long, default_value = "127.0.0.1")]
    pub bind: IpAddr,
    /// The kinds of leg in each room, cycled (comma-separated): `join` (a WebRTC conference
    /// participant: ICE, DTLS-SRTP), `sdes` (a SIP phone's SDES-SRTP leg), `plain` (a SIP
    /// phone's plain RTP leg). `join,join,sdes,plain` puts half of each room of 4 on
    /// telephony legs.
    #[arg(long, default_value = "join", value_delimiter = ',')]
    pub legs: Vec<String>,
    /// Codecs that make the gateway transcode: `join` participants offer and send only Opus,
    /// phones (`sdes`, `plain`) only PCMU (no end-to-end delay is measured then: the send
    /// instant stamped in the audio would not survive transcoding).
    #[arg(long)]
    pub transcode: bool,
    /// Every room mixes its audio (N−1, `PATCH /api/rooms/{room}`): each participant receives
    /// one stream, the others' sum.
    #[arg(long)]
    pub mix: bool,
    /// Write the report as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// Runs the load and prints the report.
pub fn run(a: &GatewayLoadArgs) -> Result<()> {
    if a.per_room < 2 || a.participants < a.per_room {
        bail!("--per-room must be at least 2 and --participants at least --per-room");
    }
    let https = a.target.starts_with("https://");
    if !(https || a.target.starts_with("http://")) {
        bail!(
            "--target {:?}: give the gateway's signaling base URL, https://host:port (or http://host:port)",
            a.target
        );
    }
    if https && a.ca.is_none() {
        bail!(
            "--target {}: HTTPS needs --ca FILE, the CA certificate to trust",
            a.target
        );
    }
    let legs = a
        .legs
        .iter()
        .map(|n| match Leg::from_name(n.trim()) {
            Some(l @ (Leg::Join | Leg::Sdes | Leg::Plain)) => Ok(l),
            _ => bail!("--legs {n:?}: each kind is one of join, sdes, plain"),
        })
        .collect::<Result<Vec<_>>>()?;
    if legs.is_empty() {
        bail!("--legs: name at least one kind of leg");
    }
    let rooms = a.participants / a.per_room;
    let o = LoadOptions {
        fleet: FleetConfig {
            signaling: {
                let mut s = Signaling::new(a.target.trim_end_matches('/'));
                s.token = a.token.clone();
                match &a.ca {
                    Some(ca) => s.with_ca_file(ca)?,
                    None => s,
                }
            },
            rooms,
            per_room: a.per_room,
            legs,
            room_prefix: "load-".into(),
            duration: Duration::from_secs(a.duration),
            threads: a.threads,
            bind_ip: a.bind,
            connect_timeout: Duration::from_secs(60),
            inject_bad: false,
            transcode: a.transcode,
            mix: a.mix,
        },
        server_pid: a.server_pid,
    };
    let progress = Arc::new(FleetProgress::default());
    let p2 = progress.clone();
    let total = (rooms * a.per_room) as u64;
    let watcher = std::thread::spawn(move || {
        let mut last = 0;
        while !p2.stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_secs(2));
            let (j, c) = (
                p2.joined.load(Ordering::Relaxed),
                p2.connected.load(Ordering::Relaxed),
            );
            let r = p2.received.load(Ordering::Relaxed);
            if (j, c, r) != (0, 0, last) {
                eprintln!("gateway-load: joined {j}/{total}, connected {c}, received {r}");
            }
            last = r;
        }
    });
    let report = load::run(&o, progress.clone());
    progress.stop.store(true, Ordering::Relaxed);
    let _ = watcher.join();
    let r = report?;
    println!(
        "gateway-load: {} participants in rooms of {}, {:.1} s of media",
        r.participants, r.per_room, r.media_secs
    );
    println!(
        "  connected          {} ({} failed)",
        r.connected,
        r.failures.len()
    );
    println!(
        "  packets            sent {}, received {}, lost {} of {} expected ({:.3} %)",
        r.sent,
        r.received,
        r.lost,
        r.expected,
        if r.expected > 0 {
            r.lost as f64 * 100.0 / r.expected as f64
        } else {
            0.0
        }
    );
    if r.by_leg.len() > 1 {
        for t in &r.by_leg {
            println!(
                "    {:<6}           {} participants ({} connected), sent {}, received {}, lost {} of {}",
                t.leg, t.participants, t.connected, t.sent, t.received, t.lost, t.expected
            );
        }
    }
    println!(
        "  gateway            routed {:.0}, forwarded {:.0} ({:.0} packets/s through it)",
        r.gateway_routed,
        r.gateway_forwarded,
        (r.gateway_routed + r.gateway_forwarded) / r.media_secs.max(1e-9)
    );
    if r.gateway_transcoded > 0.0 {
        println!(
            "  transcoding        {:.0} copies transcoded or mixed; {:.0} packets decoded, {:.0} encoded",
            r.gateway_transcoded, r.gateway_decoded, r.gateway_encoded
        );
    }
    if let Some([p50, p90, p99, p999]) = r.relay_latency_us {
        println!("  relay latency      p50 ≤{p50:.0} µs, p90 ≤{p90:.0} µs, p99 ≤{p99:.0} µs, p99.9 ≤{p999:.0} µs (gateway histogram)");
    }
    if let Some([p50, p90, p99, max]) = r.end_to_end_us {
        println!("  end-to-end delay   p50 {p50} µs, p90 {p90} µs, p99 {p99} µs, max {max} µs (sender to receiver)");
    }
    if let (Some(cpu), Some(pp), Some(pr)) = (
        r.gateway_cpu_secs,
        r.gateway_cpu_us_per_packet,
        r.gateway_cpu_us_per_relayed,
    ) {
        println!("  gateway CPU        {cpu:.2} s: {pp:.2} µs per packet in or out, {pr:.2} µs per relayed copy");
    }
    if let Some([user, kernel]) = r.gateway_cpu_us_per_relayed_split {
        println!("                     per relayed copy: user {user:.2} µs, kernel {kernel:.2} µs");
    }
    if let Some(m) = r.gateway_rss_per_participant {
        println!(
            "  gateway memory     {:.1} KiB resident per participant",
            m / 1024.0
        );
    }
    if !r.gateway_drops.is_empty() {
        println!("  gateway drops      {:?}", r.gateway_drops);
    }
    if let Some(p) = &a.json {
        std::fs::write(p, serde_json::to_string_pretty(&r)?)
            .map_err(|e| anyhow::anyhow!("--json {}: {e}", p.display()))?;
    }
    Ok(())
}
