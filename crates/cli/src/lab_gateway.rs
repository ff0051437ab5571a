//! `secrelay lab gateway-load`: simulated participants against a running gateway, with the
//! gateway's own relay latency, drops, CPU per packet and memory per participant; rooms of
//! audio participants, or (`--viewers`) a broadcast of simulcast video to many viewers.

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Result};
use clap::Args;
use secrelay_lab::client::load::{self, LoadOptions};
use secrelay_testkit::fleet::{FleetConfig, FleetProgress};
use secrelay_testkit::{Leg, Media, Signaling};

/// The admin key of a running gateway, for its `/metrics`: the flag every lab tool aimed at
/// one (`--target`) takes.
#[derive(Args, Debug, Clone, Default)]
pub struct AdminKeyArg {
    /// A file holding the gateway's admin key (the file `secrelay serve` printed, or its
    /// --admin-key-file); else $SECRELAY_ADMIN_KEY.
    #[arg(long, value_name = "FILE")]
    pub admin_key_file: Option<PathBuf>,
}

impl AdminKeyArg {
    /// The key, if one was given.
    pub(crate) fn key(&self) -> Result<Option<String>> {
        if let Some(path) = &self.admin_key_file {
            let text = std::fs::read_to_string(path)
                .map_err(|e| anyhow::anyhow!("--admin-key-file {}: {e}", path.display()))?;
            return Ok(Some(text.trim().to_owned()));
        }
        Ok(std::env::var("SECRELAY_ADMIN_KEY")
            .ok()
            .filter(|k| !k.is_empty()))
    }
}

/// How the lab reaches a running gateway and drives its participants: the flags
/// `gateway-load` and `overload` share.
#[derive(Args, Debug)]
pub struct GatewayClientArgs {
    /// The gateway's signaling base URL (e.g. https://127.0.0.1:8443, or http://… where plain
    /// HTTP was asked for).
    #[arg(long)]
    pub target: String,
    /// The private CA's certificate (PEM) that issued the gateway's HTTPS certificate (the
    /// path `secrelay serve` prints, or a `secrelay ca` directory's ca.pem).
    #[arg(long, value_name = "FILE")]
    pub ca: Option<PathBuf>,
    /// Threads driving the participants.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// The gateway's process id, for its CPU time and memory (/proc).
    #[arg(long)]
    pub server_pid: Option<u32>,
    /// Bearer token for the rooms.
    #[arg(long)]
    pub token: Option<String>,
    /// The gateway's admin key.
    #[command(flatten)]
    pub admin: AdminKeyArg,
    /// Address the participants' sockets bind to.
    #[arg(long, default_value = "127.0.0.1")]
    pub bind: IpAddr,
}

impl GatewayClientArgs {
    /// The signaling client of `--target` (HTTPS trusts the `--ca` certificate), with the
    /// rooms' `--token` and the gateway's admin key.
    pub(crate) fn signaling(&self) -> Result<Signaling> {
        self.signaling_of("--target", &self.target)
    }

    /// The signaling of another gateway than the target's (`flag` names where its URL came
    /// from), with the same CA, token and admin key.
    pub(crate) fn signaling_of(&self, flag: &str, url: &str) -> Result<Signaling> {
        let mut s = signaling(flag, url, self.ca.as_deref(), self.token.clone())?;
        s.admin = self.admin.key()?;
        Ok(s)
    }
}

/// Flags of `secrelay lab gateway-load`.
#[derive(Args, Debug)]
pub struct GatewayLoadArgs {
    /// The gateway and how its participants are driven.
    #[command(flatten)]
    pub client: GatewayClientArgs,
    /// Participants in all.
    #[arg(long, default_value_t = 1000)]
    pub participants: usize,
    /// Participants per room (each sends G.711 20 ms audio and receives the others').
    #[arg(long, default_value_t = 4)]
    pub per_room: usize,
    /// Seconds of media once everybody is connected.
    #[arg(long, default_value_t = 30)]
    pub duration: u64,
    /// The kinds of leg in each room, cycled (comma-separated): `join` (a WebRTC conference
    /// participant: ICE, DTLS-SRTP), `sdes` (a SIP phone's SDES-SRTP leg), `plain` (a SIP
    /// phone's plain RTP leg). `join,join,sdes,plain` puts half of each room of 4 on
    /// telephony legs.
    #[arg(long, default_value = "join", value_delimiter = ',')]
    pub legs: Vec<String>,
    /// The broadcast scenario instead of rooms of audio participants: N WHEP viewers of
    /// simulcast video. Each room has one WHIP publisher sending Opus-sized audio (50
    /// packets/s) and VP8 in three simulcast layers told apart by the rid extension (q ~150
    /// kbit/s, h ~500 kbit/s, f ~1.8 Mbit/s at 30 frames/s, packets up to 1,200 bytes, paced,
    /// a keyframe every 3 s and on PLI/FIR), and its share of the viewers, each receiving the
    /// audio and one video layer (the best, or with --transport-cc the one the gateway's
    /// estimate for the viewer chooses).
    /// Reports per-layer counts, audio and video loss per viewer stream, and the gateway's
    /// retransmission buffer memory per stream.
    #[arg(long, value_name = "N", conflicts_with_all = ["participants", "per_room", "legs"])]
    pub viewers: Option<usize>,
    /// With --viewers: the viewers offer transport-cc and send transport-cc feedback every
    /// 100 ms, so that the gateway's bandwidth estimate for each chooses its layer (without it
    /// they send no feedback and get the best layer).
    #[arg(long, requires = "viewers")]
    pub transport_cc: bool,
    /// With --viewers: one more viewer of the first publisher, over ICE-TCP (the gateway needs
    /// `ice_tcp`), that reads its connection at most KBPS kbit/s with a small receive buffer
    /// (a viewer behind a narrow link); its figures are printed apart, the others' without it.
    #[arg(long, value_name = "KBPS", requires = "viewers")]
    pub slow_viewer: Option<u64>,
    /// With --viewers: publishers, each in a room of its own with an equal share of the
    /// viewers (N must be a multiple).
    #[arg(long, value_name = "P", default_value_t = 1, requires = "viewers")]
    pub publishers: usize,
    /// Codecs that make the gateway transcode: `join` participants offer and send only Opus,
    /// phones (`sdes`, `plain`) only PCMU (no end-to-end delay is measured then: the send
    /// instant stamped in the audio would not survive transcoding).
    #[arg(long)]
    pub transcode: bool,
    /// Every room mixes its audio (N−1, `PATCH /api/rooms/{room}`): each participant receives
    /// one stream, the others' sum.
    #[arg(long)]
    pub mix: bool,
    /// With `--mix`: the most talkers summed at once, the loudest (0: every participant, as
    /// all of them send audio all the time). Everyone else hears one shared mix.
    #[arg(long, default_value_t = 0, requires = "mix")]
    pub mix_speakers: u16,
    /// WebRTC participants reach the gateway over ICE-TCP (a connection each to the answer's
    /// passive TCP candidate; the gateway needs `ice_tcp`) instead of UDP.
    #[arg(long)]
    pub ice_tcp: bool,
    /// With --viewers: the publishers join at this gateway (another node of a cluster with
    /// `cluster_pipe`) while the viewers join at --target, which serves them through its pipe
    /// from the publishers' node.
    #[arg(long, value_name = "URL", requires = "viewers")]
    pub publish_at: Option<String>,
    /// Write the report as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// The signaling client of `--target` (an `http://` or `https://` base URL; HTTPS trusts the
/// `--ca` certificate), with the rooms' `--token`.
fn signaling(
    flag: &str,
    target: &str,
    ca: Option<&std::path::Path>,
    token: Option<String>,
) -> Result<Signaling> {
    let https = target.starts_with("https://");
    if !(https || target.starts_with("http://")) {
        bail!(
            "{flag} {target:?}: give the gateway's signaling base URL, https://host:port (or http://host:port)"
        );
    }
    let mut s = Signaling::new(target.trim_end_matches('/'));
    s.token = token;
    match ca {
        Some(ca) => Ok(s.with_ca_file(ca)?),
        None if https => {
            bail!("{flag} {target}: HTTPS needs --ca FILE, the CA certificate to trust")
        }
        None => Ok(s),
    }
}

/// `--legs`: kinds of leg, each `join`, `sdes` or `plain`.
pub(crate) fn parse_legs(names: &[String]) -> Result<Vec<Leg>> {
    let legs = names
        .iter()
        .map(|n| match Leg::from_name(n.trim()) {
            Some(l @ (Leg::Join | Leg::Sdes | Leg::Plain)) => Ok(l),
            _ => bail!("--legs {n:?}: each kind is one of join, sdes, plain"),
        })
        .collect::<Result<Vec<_>>>()?;
    if legs.is_empty() {
        bail!("--legs: name at least one kind of leg");
    }
    Ok(legs)
}

/// Refuses flags that do not go together, naming them.
fn check(a: &GatewayLoadArgs) -> Result<()> {
    if a.viewers.is_none() && (a.per_room < 2 || a.participants < a.per_room) {
        bail!("--per-room must be at least 2 and --participants at least --per-room");
    }
    if a.slow_viewer == Some(0) {
        bail!("--slow-viewer 0: give a rate in kbit/s above 0");
    }
    if let Some(v) = a.viewers {
        if a.publishers == 0 || v == 0 || v % a.publishers != 0 {
            bail!(
                "--viewers {v} --publishers {}: give at least one of each, the viewers a multiple of the publishers",
                a.publishers
            );
        }
    }
    Ok(())
}

/// The load as the flags describe it: rooms of `--per-room` with `--legs`, or a broadcast
/// (per room, the publisher first, then its viewers).
fn load_options(a: &GatewayLoadArgs) -> Result<LoadOptions> {
    let signaling = a.client.signaling()?;
    let legs = parse_legs(&a.legs)?;
    // The broadcast: per room, the publisher first, then its viewers.
    let (rooms, per_room, legs, media, prefix) = match a.viewers {
        Some(v) => {
            let per_room = 1 + v / a.publishers;
            let mut legs = vec![Leg::Whep; per_room];
            legs[0] = Leg::Whip;
            (
                a.publishers,
                per_room,
                legs,
                Media::SimulcastVideo {
                    transport_cc: a.transport_cc,
                },
                "broadcast-",
            )
        }
        None => (
            a.participants / a.per_room,
            a.per_room,
            legs,
            Media::Pcmu,
            "load-",
        ),
    };
    Ok(LoadOptions {
        fleet: FleetConfig {
            signaling,
            rooms,
            per_room,
            legs,
            room_prefix: prefix.into(),
            duration: Duration::from_secs(a.duration),
            threads: a.client.threads,
            bind_ip: a.client.bind,
            connect_timeout: Duration::from_secs(60),
            inject_bad: false,
            media,
            transcode: a.transcode,
            mix: a.mix.then_some(a.mix_speakers),
            ice_tcp: a.ice_tcp,
            publish_at: match &a.publish_at {
                Some(url) => Some(a.client.signaling_of("--publish-at", url)?),
                None => None,
            },
        },
        server_pid: a.client.server_pid,
        slow_viewer: a.slow_viewer.map(|kbps| kbps * 1000 / 8),
    })
}

/// Says every 2 s how many joined, connected and received, while anything changes.
fn watch(progress: Arc<FleetProgress>, total: u64) -> std::thread::JoinHandle<()> {
    let p2 = progress;
    std::thread::spawn(move || {
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
    })
}

/// The report's lines: what ran, connections, packets, the broadcast's or each leg kind's
/// figures, then the gateway's.
fn print_report(r: &load::LoadReport) {
    match &r.broadcast {
        Some(b) => println!(
            "gateway-load: broadcast, {} publisher(s) of audio and 3 simulcast video layers to {} viewers, {:.1} s of media",
            b.publishers, b.viewers, r.media_secs
        ),
        None => println!(
            "gateway-load: {} participants in rooms of {}, {:.1} s of media",
            r.participants, r.per_room, r.media_secs
        ),
    }
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
    if let Some(b) = &r.broadcast {
        print_broadcast(b);
    }
    if r.by_leg.len() > 1 && r.broadcast.is_none() {
        for t in &r.by_leg {
            println!(
                "    {:<6}           {} participants ({} connected), sent {}, received {}, lost {} of {}",
                t.leg, t.participants, t.connected, t.sent, t.received, t.lost, t.expected
            );
        }
    }
    print_gateway(r);
}

/// The gateway's lines: routed and forwarded, transcoding, latency, CPU, memory, workers and
/// drops.
fn print_gateway(r: &load::LoadReport) {
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
    if let Some(b) = r.gateway_receive_batch {
        println!(
            "  receive batches    {b:.1} SRTP datagrams each on average (one engine call each)"
        );
    }
    if let Some(s) = &r.slow_viewer {
        let delay = s.delay_us.map_or_else(
            || "no delay measured".to_owned(),
            |[p50, p99]| format!("delay p50 {p50} µs, p99 {p99} µs"),
        );
        println!(
            "  slow viewer        ICE-TCP read at {} kbit/s: {}, received {} of {} ({:.1} %), {delay} (not in the figures above)",
            s.read_kbps,
            if s.connected { "connected" } else { "NOT connected" },
            s.received,
            s.expected,
            if s.expected > 0 { s.received as f64 * 100.0 / s.expected as f64 } else { 0.0 }
        );
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
    if let Some(soft) = r.softirq_us_per_relayed {
        println!("  machine softirq    {soft:.2} µs per relayed copy (receive paths and deliveries, the load's too)");
    }
    if let Some(m) = r.gateway_rss_per_participant {
        println!(
            "  gateway memory     {:.1} KiB resident per participant{}",
            m / 1024.0,
            r.gateway_rss_bytes
                .map(|b| format!(", {:.1} MiB resident at the end", b as f64 / 1048576.0))
                .unwrap_or_default()
        );
    }
    if r.gateway_worker_participants.len() > 1 {
        let split: Vec<String> = r
            .gateway_worker_participants
            .iter()
            .map(u64::to_string)
            .collect();
        println!("  gateway workers    participants {}", split.join(" / "));
    }
    if !r.gateway_drops.is_empty() {
        println!("  gateway drops      {:?}", r.gateway_drops);
    }
}

/// The broadcast's lines: viewers, their audio and video, delivery, layers, keyframes, the
/// retransmission buffer and feedback.
fn print_broadcast(b: &load::BroadcastReport) {
    let pct = |lost: u64, expected: u64| {
        if expected > 0 {
            lost as f64 * 100.0 / expected as f64
        } else {
            0.0
        }
    };
    println!(
        "  viewers            {} with audio, {} with video, {} with one video stream per publisher",
        b.viewers_with_audio, b.viewers_with_video, b.viewers_one_video_stream
    );
    println!(
        "  viewer audio       {} streams, received {}, lost {} of {} ({:.3} %)",
        b.audio.streams,
        b.audio.received,
        b.audio.lost,
        b.audio.expected,
        pct(b.audio.lost, b.audio.expected)
    );
    println!(
        "  viewer video       {} streams, received {}, lost {} of {} ({:.3} %)",
        b.video.streams,
        b.video.received,
        b.video.lost,
        b.video.expected,
        pct(b.video.lost, b.video.expected)
    );
    for (kind, d) in [("audio", &b.audio_delivery), ("video", &b.video_delivery)] {
        println!(
            "  {kind} delivered    {} of {} sent in the viewers' windows ({} never arrived, {:.3} %){}",
            d.delivered,
            d.expected,
            d.undelivered,
            pct(d.undelivered, d.expected),
            if kind == "video" { "; last layer each" } else { "" }
        );
    }
    println!("  layer choice       {}", b.layer_choice);
    if b.viewers_with_feedback > 0 {
        println!(
            "  viewer feedback    {} viewers sent {} transport-cc messages",
            b.viewers_with_feedback, b.feedbacks_sent
        );
    }
    println!("    layer  target kbit/s  frames  keyframes  packets sent  received by viewers  viewers at end  viewers any");
    for l in &b.layers {
        println!(
            "    {:<5}  {:>13}  {:>6}  {:>9}  {:>12}  {:>19}  {:>14}  {:>11}",
            l.rid,
            l.target_kbps,
            l.frames,
            l.keyframes,
            l.packets_sent,
            l.packets_received,
            l.viewers_at_end,
            l.viewers_any
        );
    }
    println!(
        "  keyframes asked    {} (PLI/FIR at the publishers); layer changes seen by viewers {}",
        b.keyframe_requests, b.switches
    );
    match b.retransmit_bytes_per_stream {
        Some(per) => println!(
            "  retransmit buffer  {:.0} streams, {:.1} KiB in all, {:.1} KiB per stream (gateway /metrics)",
            b.retransmit_streams,
            b.retransmit_bytes / 1024.0,
            per / 1024.0
        ),
        None => println!("  retransmit buffer  none reported by the gateway"),
    }
    if !b.feedback.is_empty() {
        println!("  gateway feedback   {:?}", b.feedback);
    }
}

/// Runs the load and prints the report.
pub fn run(a: &GatewayLoadArgs) -> Result<()> {
    check(a)?;
    let o = load_options(a)?;
    let total = (o.fleet.rooms * o.fleet.per_room) as u64;
    let progress = Arc::new(FleetProgress::default());
    let watcher = watch(progress.clone(), total);
    let report = load::run(&o, progress.clone());
    progress.stop.store(true, Ordering::Relaxed);
    let _ = watcher.join();
    let r = report?;
    print_report(&r);
    if let Some(p) = &a.json {
        std::fs::write(p, serde_json::to_string_pretty(&r)?)
            .map_err(|e| anyhow::anyhow!("--json {}: {e}", p.display()))?;
    }
    Ok(())
}
