//! `secrelay lab gateway-load`: many simulated participants against a running gateway (any
//! process, usually `secrelay serve` on the same machine), with the gateway's side read from
//! its `/metrics` (relay latency histogram, drops, packets) and, given its pid, its CPU time
//! and resident memory from `/proc` — so CPU per relayed packet and memory per participant
//! are the gateway's own, not the load generator's.
//!
//! Two scenarios: rooms of participants that all send and hear G.711 audio (conference and
//! telephony legs mixed), and a broadcast ([`secrelay_testkit::Media::SimulcastVideo`]): per
//! room one WHIP publisher sending Opus-sized audio and VP8 in three simulcast layers, and
//! WHEP viewers that each receive the audio and one layer, with the retransmission buffers'
//! memory read from the gateway's `/metrics`.

use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context as _};
use serde::Serialize;

use secrelay_testkit::fleet::{self, FleetConfig, FleetProgress, FleetReport, StreamCounts};
use secrelay_testkit::Signaling;

/// CPU time and resident memory of a process, from `/proc/PID/stat` and `/proc/PID/status`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProcSample {
    /// User + system CPU seconds.
    pub cpu_secs: f64,
    /// Of those, in user space (`utime`).
    pub user_secs: f64,
    /// Of those, in the kernel on the process's behalf (`stime`: its system calls, and the
    /// softirq work the kernel charges to it).
    pub system_secs: f64,
    /// Resident set size in bytes.
    pub rss_bytes: u64,
}

/// The machine's softirq CPU seconds so far, every CPU (`/proc/stat`'s first line): the
/// kernel's receive path (and on veth and loopback, the delivery of what is sent) runs there.
pub fn softirq_secs() -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string("/proc/stat")?;
    let ticks: f64 = stat
        .lines()
        .next()
        .and_then(|l| l.split_whitespace().nth(7)?.parse().ok())
        .context("/proc/stat has no softirq column")?;
    // In USER_HZ ticks: 100 a second on every Linux architecture.
    Ok(ticks / 100.0)
}

/// Reads a process's CPU time and RSS (Linux).
pub fn proc_sample(pid: u32) -> anyhow::Result<ProcSample> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("--server-pid {pid}: /proc/{pid}/stat"))?;
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .context("unexpected /proc stat format")?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of stat; here indices 11 and 12.
    let (user, system): (f64, f64) = f
        .get(11)
        .zip(f.get(12))
        .and_then(|(u, s)| Some((u.parse::<f64>().ok()?, s.parse::<f64>().ok()?)))
        .context("unexpected /proc stat format")?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("--server-pid {pid}: /proc/{pid}/status"))?;
    let rss_kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .context("no VmRSS in /proc status")?;
    // USER_HZ is 100 on every Linux this runs on (sysconf(_SC_CLK_TCK)).
    Ok(ProcSample {
        cpu_secs: (user + system) / 100.0,
        user_secs: user / 100.0,
        system_secs: system / 100.0,
        rss_bytes: rss_kb * 1024,
    })
}

/// The figures of a `/metrics` scrape this tool uses.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Scrape {
    /// `secrelay_media_forwarded_total`.
    pub forwarded: f64,
    /// `secrelay_media_routed_total`.
    pub routed: f64,
    /// `secrelay_drops_total` by reason.
    pub drops: Vec<(String, f64)>,
    /// `secrelay_relay_latency_seconds_bucket`: (upper bound in seconds, cumulative count).
    pub relay_buckets: Vec<(f64, f64)>,
    /// `secrelay_participants_connected`: members whose security is up on the gateway's side.
    pub connected: f64,
    /// `secrelay_retransmit_buffer_streams`: video streams with a retransmission buffer.
    pub retransmit_streams: f64,
    /// `secrelay_retransmit_buffer_bytes`: bytes all those buffers hold.
    pub retransmit_bytes: f64,
    /// `secrelay_feedback_total` by event (keyframe requests, NACKs, retransmissions).
    pub feedback: Vec<(String, f64)>,
    /// `secrelay_media_transcoded_total`: copies transcoded or mixed for their receivers.
    pub transcoded: f64,
    /// `secrelay_media_decoded_total`: audio packets decoded for transcoding or mixing.
    pub decoded: f64,
    /// `secrelay_media_encoded_total`: audio packets encoded for transcoding or mixing.
    pub encoded: f64,
    /// The busiest worker's `secrelay_worker_load` (admission control's load, 0–1).
    pub worker_load_max: f64,
    /// The most any worker sheds, `secrelay_worker_shedding` (0 nothing, 1 new handshakes, 2
    /// new handshakes and new rooms and legs).
    pub shedding_max: f64,
    /// `secrelay_worker_participants`, by worker index: where the participants are.
    pub worker_participants: Vec<u64>,
    /// `secrelay_srtp_batches_total`: SRTP engine calls that unprotected a receive batch.
    pub srtp_batches: f64,
    /// `secrelay_srtp_batched_packets_total`: the media datagrams in those calls.
    pub srtp_batched: f64,
}

impl Scrape {
    /// `reason`'s drops.
    pub fn drops_of(&self, reason: &str) -> f64 {
        self.drops
            .iter()
            .find(|(r, _)| r == reason)
            .map_or(0.0, |(_, n)| *n)
    }
}

/// The drop reason the lab gives `secrelay_media_socket_drops_total`: datagrams the kernel
/// dropped at a full receive buffer of the gateway's media sockets.
pub const SOCKET_BUFFER_FULL: &str = "socket_buffer_full";

/// Parses the OpenMetrics text of secrelay's `/metrics`.
pub fn parse_metrics(text: &str) -> Scrape {
    let mut s = Scrape::default();
    for line in text.lines() {
        if line.starts_with('#') {
            continue;
        }
        let Some((name, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(v) = value.trim().parse::<f64>() else {
            continue;
        };
        if name == "secrelay_media_forwarded_total" {
            s.forwarded = v;
        } else if name == "secrelay_media_routed_total" {
            s.routed = v;
        } else if name == "secrelay_participants_connected" {
            s.connected = v;
        } else if name == "secrelay_retransmit_buffer_streams" {
            s.retransmit_streams = v;
        } else if name == "secrelay_retransmit_buffer_bytes" {
            s.retransmit_bytes = v;
        } else if let Some(event) = name
            .strip_prefix("secrelay_feedback_total{event=\"")
            .and_then(|r| r.strip_suffix("\"}"))
        {
            s.feedback.push((event.to_owned(), v));
        } else if name == "secrelay_media_transcoded_total" {
            s.transcoded = v;
        } else if name == "secrelay_media_decoded_total" {
            s.decoded = v;
        } else if name == "secrelay_media_encoded_total" {
            s.encoded = v;
        } else if name == "secrelay_srtp_batches_total" {
            s.srtp_batches = v;
        } else if name == "secrelay_srtp_batched_packets_total" {
            s.srtp_batched = v;
        } else if name.starts_with("secrelay_worker_load{") {
            s.worker_load_max = s.worker_load_max.max(v);
        } else if let Some(w) = name
            .strip_prefix("secrelay_worker_participants{worker=\"")
            .and_then(|r| r.strip_suffix("\"}"))
            .and_then(|w| w.parse::<usize>().ok())
        {
            if s.worker_participants.len() <= w {
                s.worker_participants.resize(w + 1, 0);
            }
            s.worker_participants[w] = v as u64;
        } else if name.starts_with("secrelay_worker_shedding{") {
            s.shedding_max = s.shedding_max.max(v);
        } else if let Some(reason) = name
            .strip_prefix("secrelay_drops_total{reason=\"")
            .and_then(|r| r.strip_suffix("\"}"))
        {
            s.drops.push((reason.to_owned(), v));
        } else if name == "secrelay_media_socket_drops_total" {
            // What the kernel dropped at the workers' sockets before the gateway read it,
            // reported beside the gateway's own drops.
            s.drops.push((SOCKET_BUFFER_FULL.to_owned(), v));
        } else if let Some(le) = name
            .strip_prefix("secrelay_relay_latency_seconds_bucket{le=\"")
            .and_then(|r| r.strip_suffix("\"}"))
        {
            let bound = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().unwrap_or(f64::INFINITY)
            };
            s.relay_buckets.push((bound, v));
        }
    }
    s
}

/// The `q` quantile of the relay latency between two scrapes (upper bucket bound), seconds.
pub fn relay_quantile(before: &Scrape, after: &Scrape, q: f64) -> Option<f64> {
    let delta: Vec<(f64, f64)> = after
        .relay_buckets
        .iter()
        .map(|(b, n)| {
            let prev = before
                .relay_buckets
                .iter()
                .find(|(pb, _)| pb == b)
                .map_or(0.0, |e| e.1);
            (*b, n - prev)
        })
        .collect();
    let total = delta.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let rank = (q * total).ceil().max(1.0);
    delta.iter().find(|(_, c)| *c >= rank).map(|(b, _)| *b)
}

/// What the slow viewer got ([`LoadOptions::slow_viewer`]).
#[derive(Debug, Clone, Serialize)]
pub struct SlowViewerRow {
    /// How fast it read, kbit/s.
    pub read_kbps: u64,
    /// Whether it connected.
    pub connected: bool,
    /// Packets it received.
    pub received: u64,
    /// Packets its streams' sequence numbers span.
    pub expected: u64,
    /// Its end-to-end delay, µs (p50, p99).
    pub delay_us: Option<[u32; 2]>,
}

impl From<fleet::SlowViewer> for SlowViewerRow {
    fn from(s: fleet::SlowViewer) -> SlowViewerRow {
        SlowViewerRow {
            read_kbps: s.read_bytes_per_sec * 8 / 1000,
            connected: s.connected,
            received: s.received,
            expected: s.expected,
            delay_us: s.delay_us,
        }
    }
}

/// What the load run measured.
#[derive(Debug, Clone, Serialize)]
pub struct LoadReport {
    /// Participants.
    pub participants: usize,
    /// Participants per room.
    pub per_room: usize,
    /// The kinds of leg in each room, cycled ([`secrelay_testkit::Leg::name`]).
    pub legs: Vec<&'static str>,
    /// The receivers' counts split by kind of leg.
    pub by_leg: Vec<LegRow>,
    /// Connected.
    pub connected: usize,
    /// Seconds of media measured (all connected to the end).
    pub media_secs: f64,
    /// Packets sent by the participants.
    pub sent: u64,
    /// Packets received by the participants.
    pub received: u64,
    /// Lost (from RTP sequence numbers at the receivers).
    pub lost: u64,
    /// Expected at the receivers.
    pub expected: u64,
    /// Media packets the gateway received and routed during the media window.
    pub gateway_routed: f64,
    /// Copies it forwarded during the window.
    pub gateway_forwarded: f64,
    /// Of those, copies transcoded or mixed; and the audio packets it decoded and encoded for
    /// them, during the window.
    pub gateway_transcoded: f64,
    /// Audio packets decoded for transcoding or mixing during the window.
    pub gateway_decoded: f64,
    /// Audio packets encoded for transcoding or mixing during the window.
    pub gateway_encoded: f64,
    /// Its drops during the window, by reason (non-zero only).
    pub gateway_drops: Vec<(String, f64)>,
    /// SRTP datagrams per receive batch during the window (the mean of what each engine call
    /// unprotected at once: more when a worker falls behind; a publisher's consecutive packets
    /// in one are routed together).
    pub gateway_receive_batch: Option<f64>,
    /// Relay latency quantiles in µs (p50, p90, p99, p99.9) from the gateway's histogram
    /// during the window (bucket upper bounds: ≤ 25 % above the true value).
    pub relay_latency_us: Option<[f64; 4]>,
    /// End-to-end delay at the receivers in µs (p50, p90, p99, max).
    pub end_to_end_us: Option<[u32; 4]>,
    /// Gateway CPU seconds during the window, if its pid was given.
    pub gateway_cpu_secs: Option<f64>,
    /// Gateway CPU per packet through it (routed in + forwarded out), µs.
    pub gateway_cpu_us_per_packet: Option<f64>,
    /// Gateway CPU per relayed copy (forwarded), µs: the rtpengine comparison's unit.
    pub gateway_cpu_us_per_relayed: Option<f64>,
    /// Of that, user and kernel time per relayed copy, µs.
    pub gateway_cpu_us_per_relayed_split: Option<[f64; 2]>,
    /// The machine's softirq time during the window per relayed copy, µs (the kernel's
    /// receive paths and deliveries, the load's and the gateway's alike).
    pub softirq_us_per_relayed: Option<f64>,
    /// Gateway resident memory growth per participant (before the joins → all connected), bytes.
    pub gateway_rss_per_participant: Option<f64>,
    /// Gateway resident memory at the end of the window, bytes.
    pub gateway_rss_bytes: Option<u64>,
    /// Participants on each of the gateway's workers at the end of the window (how a spread
    /// room's viewers fell).
    pub gateway_worker_participants: Vec<u64>,
    /// The broadcast scenario's figures; `None` in rooms of audio participants.
    pub broadcast: Option<BroadcastReport>,
    /// The slow viewer's figures, when there was one (the others' figures are without it).
    pub slow_viewer: Option<SlowViewerRow>,
    /// Failures.
    pub failures: Vec<String>,
}

/// How the gateway chose the layer each viewer is sent when the viewers send no feedback.
pub const LAYER_CHOICE_BEST: &str = "best layer: the simulated viewers offer no transport-cc and send no bandwidth feedback, so the gateway sends each the best layer it has";
/// How it chose with `--transport-cc`.
pub const LAYER_CHOICE_ESTIMATE: &str = "estimate: the simulated viewers send transport-cc feedback every 100 ms, and the gateway's bandwidth estimate for each chooses its layer";

/// A broadcast of simulcast video: what the publishers sent, what the viewers got, what the
/// gateway's retransmission buffers held.
#[derive(Debug, Clone, Serialize)]
pub struct BroadcastReport {
    /// Publishers (one per room, WHIP).
    pub publishers: usize,
    /// Viewers (WHEP).
    pub viewers: usize,
    /// How each viewer's layer was chosen ([`LAYER_CHOICE_BEST`], [`LAYER_CHOICE_ESTIMATE`]).
    pub layer_choice: &'static str,
    /// Viewers that sent transport-cc feedback.
    pub viewers_with_feedback: usize,
    /// Transport-cc feedback messages they sent.
    pub feedbacks_sent: u64,
    /// Per layer: sent, received, viewers on it.
    pub layers: Vec<LayerRow>,
    /// Keyframe requests (PLI, FIR) the publishers got from the gateway.
    pub keyframe_requests: u64,
    /// Viewers that received audio.
    pub viewers_with_audio: usize,
    /// Viewers that received video.
    pub viewers_with_video: usize,
    /// Viewers that received exactly one video stream (one SSRC) per publisher.
    pub viewers_one_video_stream: usize,
    /// Layer changes the viewers saw, all together.
    pub switches: u64,
    /// Audio delivered: at each viewer, the publisher's packets from the viewer's first to
    /// 250 ms before the end of the run, and how many arrived (counts what never arrived at
    /// the end too, which sequence numbers cannot).
    pub audio_delivery: DeliveryRow,
    /// Video delivered over each viewer's last layer, likewise.
    pub video_delivery: DeliveryRow,
    /// The viewers' audio streams (loss from RTP sequence numbers).
    pub audio: StreamRow,
    /// The viewers' video streams (loss from RTP sequence numbers).
    pub video: StreamRow,
    /// The gateway's video streams with a retransmission buffer, at the end of the window.
    pub retransmit_streams: f64,
    /// Bytes all those buffers held then.
    pub retransmit_bytes: f64,
    /// Per stream: bytes / streams.
    pub retransmit_bytes_per_stream: Option<f64>,
    /// The gateway's feedback counters during the window (non-zero only).
    pub feedback: Vec<(String, f64)>,
}

/// One simulcast layer in the report.
#[derive(Debug, Clone, Serialize)]
pub struct LayerRow {
    /// Its rid.
    pub rid: &'static str,
    /// Its target bitrate, kbit/s.
    pub target_kbps: u64,
    /// Frames the publishers made on it.
    pub frames: u64,
    /// Of them, keyframes.
    pub keyframes: u64,
    /// Packets the publishers sent on it.
    pub packets_sent: u64,
    /// Packets of it the viewers received.
    pub packets_received: u64,
    /// Viewers sent this layer at the end (their last video packet was of it).
    pub viewers_at_end: usize,
    /// Viewers that received any of it.
    pub viewers_any: usize,
}

/// Packets sent within the viewers' windows and those that arrived.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct DeliveryRow {
    /// Sent within the windows (summed over viewers).
    pub expected: u64,
    /// Of them, received.
    pub delivered: u64,
    /// Never received.
    pub undelivered: u64,
}

impl From<secrelay_testkit::fleet::Delivery> for DeliveryRow {
    fn from(d: secrelay_testkit::fleet::Delivery) -> DeliveryRow {
        DeliveryRow {
            expected: d.expected,
            delivered: d.delivered,
            undelivered: d.expected.saturating_sub(d.delivered),
        }
    }
}

/// Received packets of one kind at the viewers.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct StreamRow {
    /// Streams (distinct SSRCs), all viewers.
    pub streams: u64,
    /// Packets received.
    pub received: u64,
    /// Packets expected.
    pub expected: u64,
    /// Expected minus received.
    pub lost: u64,
}

impl From<StreamCounts> for StreamRow {
    fn from(c: StreamCounts) -> StreamRow {
        StreamRow {
            streams: c.streams,
            received: c.received,
            expected: c.expected,
            lost: c.lost,
        }
    }
}

/// What the participants of one kind of leg sent, received and lost.
#[derive(Debug, Clone, Serialize)]
pub struct LegRow {
    /// The kind (`join`, `whip`, `whep`, `sdes`, `plain`).
    pub leg: &'static str,
    /// Participants of this kind.
    pub participants: usize,
    /// Of them, connected.
    pub connected: usize,
    /// Audio packets they sent.
    pub sent: u64,
    /// Audio packets they received.
    pub received: u64,
    /// Packets they expected (sequence-number spans of the streams they got).
    pub expected: u64,
    /// Expected minus received.
    pub lost: u64,
}

/// What to run.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// The fleet.
    pub fleet: FleetConfig,
    /// The gateway's pid, for CPU and memory.
    pub server_pid: Option<u32>,
    /// One more viewer of the first room, over ICE-TCP, reading at most this many bytes a
    /// second ([`fleet::join_slow_viewer`]): its figures apart, the others' without it.
    pub slow_viewer: Option<u64>,
}

/// The text of the gateway's `/metrics` (with the signaling's admin key).
pub fn metrics_text(signaling: &Signaling) -> anyhow::Result<String> {
    let (status, body) = signaling.get("/metrics")?;
    if status != 200 {
        bail!(
            "GET {}/metrics answered {status}: {} (the gateway's admin key: --admin-key-file)",
            signaling.base_url,
            body.trim()
        );
    }
    Ok(body)
}

/// Scrapes the gateway's `/metrics`.
pub fn scrape(signaling: &Signaling) -> anyhow::Result<Scrape> {
    Ok(parse_metrics(&metrics_text(signaling)?))
}

/// A scrape half a second before a media window of `window` that opens now closes, on a thread
/// of its own: the gateway's gauges while every participant is still in.
fn gauges_before_the_end(
    signaling: &Signaling,
    window: std::time::Duration,
) -> std::thread::JoinHandle<anyhow::Result<Scrape>> {
    let signaling = signaling.clone();
    let at = window.saturating_sub(std::time::Duration::from_millis(500));
    std::thread::spawn(move || {
        std::thread::sleep(at);
        scrape(&signaling)
    })
}

/// Labelled counters that grew between two scrapes, by how much.
fn deltas(before: &[(String, f64)], after: &[(String, f64)]) -> Vec<(String, f64)> {
    after
        .iter()
        .map(|(k, v)| {
            let b = before.iter().find(|e| &e.0 == k).map_or(0.0, |e| e.1);
            (k.clone(), v - b)
        })
        .filter(|e| e.1 > 0.0)
        .collect()
}

/// The broadcast's figures: the viewers' (`v`), the gateway's retransmission buffers as
/// `held` before the end, and its feedback counters' growth.
fn broadcast_report(
    v: &fleet::VideoReport,
    held: &Scrape,
    feedback: Vec<(String, f64)>,
) -> BroadcastReport {
    BroadcastReport {
        publishers: v.publishers,
        viewers: v.viewers,
        layer_choice: if v.viewers_with_feedback > 0 {
            LAYER_CHOICE_ESTIMATE
        } else {
            LAYER_CHOICE_BEST
        },
        viewers_with_feedback: v.viewers_with_feedback,
        feedbacks_sent: v.feedbacks,
        layers: v
            .layers
            .iter()
            .map(|l| LayerRow {
                rid: l.rid,
                target_kbps: l.target_bps / 1000,
                frames: l.frames,
                keyframes: l.keyframes,
                packets_sent: l.packets_sent,
                packets_received: l.packets_received,
                viewers_at_end: l.viewers_at_end,
                viewers_any: l.viewers_any,
            })
            .collect(),
        keyframe_requests: v.keyframe_requests,
        viewers_with_audio: v.viewers_with_audio,
        viewers_with_video: v.viewers_with_video,
        viewers_one_video_stream: v.viewers_one_video_stream,
        switches: v.switches,
        audio_delivery: v.audio_delivery.into(),
        video_delivery: v.video_delivery.into(),
        audio: v.audio.into(),
        video: v.video.into(),
        retransmit_streams: held.retransmit_streams,
        retransmit_bytes: held.retransmit_bytes,
        retransmit_bytes_per_stream: (held.retransmit_streams > 0.0)
            .then(|| held.retransmit_bytes / held.retransmit_streams),
        feedback,
    }
}

/// What one load run measured: the participants at the end (the slow viewer apart), the
/// media window's length, the gateway's counters and process figures when it opened and
/// closed, what it held before the end, the machine's softirq time.
struct Measured {
    done: Vec<secrelay_testkit::participant::SimParticipant>,
    slow_viewer: Option<fleet::SlowViewer>,
    media_secs: f64,
    before: Scrape,
    after: Scrape,
    held: Scrape,
    proc_before: Option<ProcSample>,
    proc_after: Option<ProcSample>,
    soft_before: Option<f64>,
    soft_after: Option<f64>,
    rss_before: Option<ProcSample>,
}

/// Joins the fleet (and the slow viewer), opens the media window once the gateway says all
/// are up, closes it, leaves; the gateway's figures at each end.
fn measure(o: &LoadOptions, progress: Arc<FleetProgress>) -> anyhow::Result<Measured> {
    let base = &o.fleet.signaling;
    scrape(base).context("the gateway's /metrics (is --target a secrelay gateway?)")?;
    let rss_before = o.server_pid.map(proc_sample).transpose()?;
    let epoch = Instant::now();
    let mut group = fleet::join_all(&o.fleet, &progress, epoch)?;
    let slow = match o.slow_viewer {
        Some(bps) => {
            let p = fleet::join_slow_viewer(&o.fleet, &progress, epoch, bps);
            let p = p.inspect_err(|_| fleet::leave_all(&o.fleet, &group))?;
            let at = p.location.clone();
            group.push(p);
            Some((at, bps))
        }
        None => None,
    };
    // The window opens when everybody is connected.
    let p2 = progress.clone();
    let (done, media_secs, (before, proc_before, gauges, soft_before)) =
        fleet::run_media_windowed(&o.fleet, group, progress, || {
            // A participant is up when its own side has its keys; the gateway's side of a
            // handshake can finish a moment later (it reads the last flight after the client
            // has what it needs), and copies to it meanwhile are dropped as
            // `receiver_not_ready`. The window opens once the gateway says they are all up
            // too (or after 2 s, then with those drops in it).
            let want = p2.connected.load(std::sync::atomic::Ordering::Relaxed) as f64;
            let until = Instant::now() + std::time::Duration::from_secs(2);
            loop {
                let s = scrape(base)?;
                if s.connected >= want || Instant::now() >= until {
                    let gauges = gauges_before_the_end(base, o.fleet.duration);
                    let proc = o.server_pid.map(proc_sample).transpose()?;
                    return Ok((s, proc, gauges, softirq_secs().ok()));
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        })?;
    let after = scrape(base)?;
    // What the gateway holds (buffers, participants per worker) is read before the fleet closes
    // its participants at the end of the window, not after (a teardown in progress).
    let held = gauges
        .join()
        .ok()
        .and_then(Result::ok)
        .unwrap_or_else(|| after.clone());
    let proc_after = o.server_pid.map(proc_sample).transpose()?;
    let soft_after = softirq_secs().ok();
    fleet::leave_all(&o.fleet, &done);
    let (slow_done, done): (Vec<_>, Vec<_>) = done
        .into_iter()
        .partition(|p| slow.as_ref().is_some_and(|(at, _)| *at == p.location));
    let slow_viewer = slow
        .zip(slow_done.first())
        .map(|((_, bps), p)| fleet::SlowViewer::of(p, bps));
    Ok(Measured {
        done,
        slow_viewer,
        media_secs,
        before,
        after,
        held,
        proc_before,
        proc_after,
        soft_before,
        soft_after,
        rss_before,
    })
}

/// Runs the load: joins, waits for all connected, measures the media window, leaves.
pub fn run(o: &LoadOptions, progress: Arc<FleetProgress>) -> anyhow::Result<LoadReport> {
    let Measured {
        done,
        slow_viewer,
        media_secs,
        before,
        after,
        held,
        proc_before,
        proc_after,
        soft_before,
        soft_after,
        rss_before,
    } = measure(o, progress)?;
    let r: FleetReport = fleet::summarize(&done, media_secs);
    if r.connected == 0 {
        bail!("no participant connected: {}", r.failures.join("; "));
    }
    let forwarded = after.forwarded - before.forwarded;
    let routed = after.routed - before.routed;
    let drops = deltas(&before.drops, &after.drops);
    let cpu = proc_before
        .zip(proc_after)
        .map(|(a, b)| b.cpu_secs - a.cpu_secs);
    let feedback = deltas(&before.feedback, &after.feedback);
    let broadcast = r
        .video
        .as_ref()
        .filter(|_| o.fleet.media.is_video())
        .map(|v| broadcast_report(v, &held, feedback));
    let q = |p| relay_quantile(&before, &after, p).map(|s| s * 1e6);
    let relay = match (q(0.5), q(0.9), q(0.99), q(0.999)) {
        (Some(a), Some(b), Some(c), Some(d)) => Some([a, b, c, d]),
        _ => None,
    };
    Ok(LoadReport {
        participants: r.participants,
        per_room: o.fleet.per_room,
        legs: o.fleet.legs.iter().map(|l| l.name()).collect(),
        by_leg: r
            .by_leg
            .iter()
            .map(|t| LegRow {
                leg: t.leg,
                participants: t.participants,
                connected: t.connected,
                sent: t.sent,
                received: t.received,
                expected: t.expected,
                lost: t.lost,
            })
            .collect(),
        connected: r.connected,
        media_secs,
        sent: r.sent,
        received: r.received,
        lost: r.lost,
        expected: r.expected,
        gateway_routed: routed,
        gateway_forwarded: forwarded,
        gateway_transcoded: after.transcoded - before.transcoded,
        gateway_decoded: after.decoded - before.decoded,
        gateway_encoded: after.encoded - before.encoded,
        gateway_drops: drops,
        gateway_receive_batch: Some(after.srtp_batches - before.srtp_batches)
            .filter(|&n| n > 0.0)
            .map(|n| (after.srtp_batched - before.srtp_batched) / n),
        relay_latency_us: relay,
        end_to_end_us: r.delay_us,
        gateway_cpu_secs: cpu,
        gateway_cpu_us_per_packet: cpu
            .filter(|_| routed + forwarded > 0.0)
            .map(|c| c * 1e6 / (routed + forwarded)),
        gateway_cpu_us_per_relayed: cpu.filter(|_| forwarded > 0.0).map(|c| c * 1e6 / forwarded),
        gateway_cpu_us_per_relayed_split: proc_before
            .zip(proc_after)
            .filter(|_| forwarded > 0.0)
            .map(|(a, b)| {
                [
                    (b.user_secs - a.user_secs) * 1e6 / forwarded,
                    (b.system_secs - a.system_secs) * 1e6 / forwarded,
                ]
            }),
        softirq_us_per_relayed: soft_before
            .zip(soft_after)
            .filter(|_| forwarded > 0.0)
            .map(|(a, b)| (b - a) * 1e6 / forwarded),
        gateway_rss_per_participant: rss_before
            .zip(proc_before)
            .map(|(a, b)| (b.rss_bytes as f64 - a.rss_bytes as f64) / r.participants as f64),
        gateway_rss_bytes: proc_after.map(|p| p.rss_bytes),
        gateway_worker_participants: held.worker_participants.clone(),
        broadcast,
        slow_viewer: slow_viewer.map(SlowViewerRow::from),
        failures: r.failures,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_text_parses_and_quantiles_come_from_the_delta() {
        let before = parse_metrics(
            "# TYPE x counter\nsecrelay_media_forwarded_total 10\nsecrelay_drops_total{reason=\"replayed\"} 2\n\
             secrelay_relay_latency_seconds_bucket{le=\"0.00001\"} 5\nsecrelay_relay_latency_seconds_bucket{le=\"0.0001\"} 10\n\
             secrelay_relay_latency_seconds_bucket{le=\"+Inf\"} 10\n",
        );
        let after = parse_metrics(
            "secrelay_media_forwarded_total 110\nsecrelay_drops_total{reason=\"replayed\"} 3\n\
             secrelay_relay_latency_seconds_bucket{le=\"0.00001\"} 5\nsecrelay_relay_latency_seconds_bucket{le=\"0.0001\"} 100\n\
             secrelay_relay_latency_seconds_bucket{le=\"+Inf\"} 110\n",
        );
        assert_eq!(before.forwarded, 10.0);
        let gauges = parse_metrics(
            "secrelay_retransmit_buffer_streams 3\nsecrelay_retransmit_buffer_bytes 1500000\n\
             secrelay_feedback_total{event=\"nacked\"} 4\n",
        );
        assert_eq!(gauges.retransmit_streams, 3.0);
        assert_eq!(gauges.retransmit_bytes, 1.5e6);
        assert_eq!(gauges.feedback, vec![("nacked".to_string(), 4.0)]);
        let t = parse_metrics("secrelay_media_transcoded_total 7\nsecrelay_media_decoded_total 3\nsecrelay_media_encoded_total 2\n");
        assert_eq!((t.transcoded, t.decoded, t.encoded), (7.0, 3.0, 2.0));
        let b = parse_metrics(
            "secrelay_srtp_batches_total 40\nsecrelay_srtp_batched_packets_total 90\n",
        );
        assert_eq!((b.srtp_batches, b.srtp_batched), (40.0, 90.0));
        let w = parse_metrics(
            "secrelay_worker_load{worker=\"0\"} 0.4\nsecrelay_worker_load{worker=\"1\"} 0.97\n\
             secrelay_worker_shedding{worker=\"0\"} 0\nsecrelay_worker_shedding{worker=\"1\"} 2\n\
             secrelay_worker_participants{worker=\"1\"} 251\nsecrelay_worker_participants{worker=\"0\"} 250\n",
        );
        assert_eq!((w.worker_load_max, w.shedding_max), (0.97, 2.0));
        assert_eq!(w.worker_participants, [250, 251]);
        assert_eq!(after.drops, vec![("replayed".to_string(), 3.0)]);
        let k = parse_metrics(
            "secrelay_drops_total{reason=\"replayed\"} 3\nsecrelay_media_socket_drops_total 12\n",
        );
        assert_eq!(
            k.drops,
            vec![
                ("replayed".to_string(), 3.0),
                (SOCKET_BUFFER_FULL.to_string(), 12.0)
            ]
        );
        // 100 new observations: 90 in (10 µs, 100 µs], 10 above.
        assert_eq!(relay_quantile(&before, &after, 0.5), Some(0.0001));
        assert_eq!(relay_quantile(&before, &after, 0.95), Some(f64::INFINITY));
    }

    #[test]
    fn our_own_process_can_be_sampled() {
        let s = proc_sample(std::process::id()).unwrap();
        assert!(s.rss_bytes > 0);
        assert!(s.cpu_secs >= 0.0);
    }
}
