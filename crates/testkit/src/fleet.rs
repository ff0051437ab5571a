//! Many simulated participants driven on a few threads (one mio poll each), joined in rooms,
//! sending for a while, then leaving; live counters while they run and a summary at the end.

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use mio::{Events, Poll, Token};

use crate::participant::{Media, Phase, SimParticipant, StreamRx};
use crate::signaling::{Leg, Signaling};
use crate::video;

/// What to run.
#[derive(Debug, Clone)]
pub struct FleetConfig {
    /// The gateway's HTTP side.
    pub signaling: Signaling,
    /// Rooms.
    pub rooms: usize,
    /// Participants per room.
    pub per_room: usize,
    /// What each participant of a room is (cycled: `[Join]` makes every one a conference
    /// participant; `[Whip, Whep, Whep]` one publisher and two subscribers per three).
    pub legs: Vec<Leg>,
    /// Room names are `{prefix}{n}`.
    pub room_prefix: String,
    /// How long media flows once everybody is up.
    pub duration: Duration,
    /// Threads driving the participants.
    pub threads: usize,
    /// Address the participants' sockets bind to.
    pub bind_ip: IpAddr,
    /// How long to wait for every participant to connect.
    pub connect_timeout: Duration,
    /// Senders also inject a replayed and a forged packet once a second.
    pub inject_bad: bool,
    /// What the WebRTC participants offer and send: [`Media::Pcmu`] (every kind of leg), or
    /// [`Media::SimulcastVideo`] (only [`Leg::Whip`] publishers and [`Leg::Whep`] viewers).
    pub media: Media,
    /// Codecs that make the gateway transcode: WebRTC participants offer and send only Opus,
    /// phones only PCMU (no send instant stamped into the audio: no end-to-end delay).
    pub transcode: bool,
    /// Every room mixes its audio (`PATCH /api/rooms/{room}` before anyone joins): each
    /// receiver gets one stream, the others' sum: `Some(speakers)`, the most talkers summed
    /// at once (0: every member who talks).
    pub mix: Option<u16>,
    /// WebRTC participants reach the gateway over ICE-TCP (its passive candidate) instead of
    /// UDP.
    pub ice_tcp: bool,
    /// The publishers ([`Leg::Whip`]) join at this gateway instead of `signaling`'s: another
    /// node of a cluster, whose rooms' viewers at `signaling` are served through its pipes.
    pub publish_at: Option<Signaling>,
}

/// Live counters, readable while the fleet runs.
#[derive(Debug, Default)]
pub struct FleetProgress {
    /// Participants whose offer was answered.
    pub joined: AtomicU64,
    /// Participants connected (DTLS-SRTP up).
    pub connected: AtomicU64,
    /// Participants that failed.
    pub failed: AtomicU64,
    /// Media packets sent.
    pub sent: AtomicU64,
    /// Media packets received.
    pub received: AtomicU64,
    /// Set to stop early.
    pub stop: AtomicBool,
}

/// What a fleet run found.
#[derive(Debug, Clone, Default)]
pub struct FleetReport {
    /// Participants started.
    pub participants: usize,
    /// Connected.
    pub connected: usize,
    /// Failures with their reasons.
    pub failures: Vec<String>,
    /// Audio packets sent.
    pub sent: u64,
    /// Audio packets received.
    pub received: u64,
    /// Packets expected by the receivers (sequence-number span of each stream they got).
    pub expected: u64,
    /// Expected minus received.
    pub lost: u64,
    /// Packets that failed to unprotect at a receiver.
    pub rx_errors: u64,
    /// Replayed and forged packets sent at the gateway.
    pub bad_sent: u64,
    /// Streams received that should have been and were not: (receiver count × publishers in
    /// its room) minus streams seen.
    pub missing_streams: u64,
    /// End-to-end delay percentiles (p50, p90, p99, max) in microseconds.
    pub delay_us: Option<[u32; 4]>,
    /// Setup time (POST to keys) percentiles (p50, p99) in milliseconds.
    pub setup_ms: Option<[f64; 2]>,
    /// Seconds of media (from all connected to the end).
    pub media_secs: f64,
    /// The same counts split by kind of leg ([`Leg::name`]), in the order the kinds first
    /// appear.
    pub by_leg: Vec<LegTally>,
    /// With [`Media::SimulcastVideo`]: what the publishers sent per layer and what each viewer
    /// received.
    pub video: Option<VideoReport>,
}

/// Received packets of one kind (audio or video streams) at the viewers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StreamCounts {
    /// Streams (distinct SSRCs) received, all viewers.
    pub streams: u64,
    /// Packets received.
    pub received: u64,
    /// Packets expected (sequence-number span of each stream).
    pub expected: u64,
    /// Expected minus received.
    pub lost: u64,
}

/// Packets sent this close to a run's end are left out of the delivery figures (still in
/// flight when the viewers stopped).
pub const DELIVERY_GRACE: Duration = Duration::from_millis(250);

/// Packets a publisher sent within a viewer's window, and those the viewer received: unlike
/// loss from sequence numbers, this counts what never arrived at the end of the run too.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Delivery {
    /// Packets the publisher sent in the windows (summed over viewers).
    pub expected: u64,
    /// Of them, received.
    pub delivered: u64,
}

/// The stamps in `sorted` within `[from, to]`.
fn in_window(sorted: &[u64], from: u64, to: u64) -> u64 {
    if from > to {
        return 0;
    }
    (sorted.partition_point(|s| *s <= to) - sorted.partition_point(|s| *s < from)) as u64
}

/// One simulcast layer: what the publishers sent on it and what the viewers got of it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LayerTally {
    /// Its rid.
    pub rid: &'static str,
    /// Its target bitrate, bits per second ([`video::LAYERS`]).
    pub target_bps: u64,
    /// Frames the publishers made on it.
    pub frames: u64,
    /// Of them, keyframes (every few seconds, and on request).
    pub keyframes: u64,
    /// Packets the publishers sent on it.
    pub packets_sent: u64,
    /// Packets of it the viewers received.
    pub packets_received: u64,
    /// Viewers whose last video packet was of this layer (the layer each was sent at the end).
    pub viewers_at_end: usize,
    /// Viewers that received any packet of it.
    pub viewers_any: usize,
}

/// What a broadcast of simulcast video did: the publishers' layers and the viewers' streams.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VideoReport {
    /// Publishers (WHIP).
    pub publishers: usize,
    /// Viewers (WHEP).
    pub viewers: usize,
    /// Keyframe requests (PLI, FIR) the publishers received from the gateway.
    pub keyframe_requests: u64,
    /// Per layer, in [`video::LAYERS`] order.
    pub layers: Vec<LayerTally>,
    /// Viewers that received audio.
    pub viewers_with_audio: usize,
    /// Viewers that received video.
    pub viewers_with_video: usize,
    /// Viewers that received exactly one video stream per publisher of their room (one SSRC:
    /// the layers reach a viewer as one stream).
    pub viewers_one_video_stream: usize,
    /// Layer changes the viewers saw, all together.
    pub switches: u64,
    /// Viewers that sent transport-cc feedback.
    pub viewers_with_feedback: usize,
    /// Transport-cc feedback messages they sent, all together.
    pub feedbacks: u64,
    /// Audio delivery: at each viewer, from its first audio packet to [`DELIVERY_GRACE`]
    /// before the publisher's last, the publisher's packets and those that arrived.
    pub audio_delivery: Delivery,
    /// Video delivery over each viewer's last layer: from its first packet after its last
    /// change of layer to [`DELIVERY_GRACE`] before the publisher's last packet, the packets
    /// the publisher sent on that layer and those that arrived.
    pub video_delivery: Delivery,
    /// The viewers' audio streams.
    pub audio: StreamCounts,
    /// The viewers' video streams.
    pub video: StreamCounts,
}

/// What the participants of one kind of leg did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LegTally {
    /// The kind ([`Leg::name`]).
    pub leg: &'static str,
    /// Participants of this kind.
    pub participants: usize,
    /// Of them, connected.
    pub connected: usize,
    /// Audio packets they sent.
    pub sent: u64,
    /// Audio packets they received.
    pub received: u64,
    /// Packets they expected.
    pub expected: u64,
    /// Expected minus received.
    pub lost: u64,
}

fn percentile<T: Copy + Ord>(sorted: &[T], q: f64) -> T {
    let i = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

/// Joins every participant (HTTP, sequentially), runs them on `threads` threads until
/// `duration` of media has passed after all connected (or the connect timeout), then sends
/// close_notify and DELETE for each and summarizes.
pub fn run(config: &FleetConfig, progress: Arc<FleetProgress>) -> anyhow::Result<FleetReport> {
    let epoch = Instant::now();
    let group = join_all(config, &progress, epoch)?;
    let (done, media_secs) = run_media(config, group, progress)?;
    leave_all(config, &done);
    Ok(summarize(&done, media_secs))
}

/// Sends every participant's offer (sequentially) and builds them from the answers; the first
/// refusal ends it, and those that joined before it leave (DELETE) rather than stay behind in
/// the gateway's rooms, where the next run against the same gateway would find them.
pub fn join_all(
    config: &FleetConfig,
    progress: &FleetProgress,
    epoch: Instant,
) -> anyhow::Result<Vec<SimParticipant>> {
    let mut all = Vec::new();
    for r in 0..config.rooms {
        let joined = prepare_room(config, r).and_then(|room| {
            (0..config.per_room).try_for_each(|i| {
                all.push(join_one(config, progress, &room, i, epoch)?);
                Ok(())
            })
        });
        if let Err(e) = joined {
            leave_all(config, &all);
            return Err(e);
        }
    }
    Ok(all)
}

/// Like [`join_all`], but every offer is sent whatever the others got: the participants that
/// joined, and why each other one did not (a [`crate::participant::JoinRefused`] when the
/// gateway answered with an error status). What a load beyond capacity looks like.
pub fn join_some(
    config: &FleetConfig,
    progress: &FleetProgress,
    epoch: Instant,
) -> (Vec<SimParticipant>, Vec<anyhow::Error>) {
    let (mut all, mut refused) = (Vec::new(), Vec::new());
    for r in 0..config.rooms {
        let room = match prepare_room(config, r) {
            Ok(room) => room,
            Err(e) => {
                refused.push(e);
                continue;
            }
        };
        for i in 0..config.per_room {
            match join_one(config, progress, &room, i, epoch) {
                Ok(p) => all.push(p),
                Err(e) => refused.push(e),
            }
        }
    }
    (all, refused)
}

/// Room `r`'s name, its mixing set when it matters.
fn prepare_room(config: &FleetConfig, r: usize) -> anyhow::Result<String> {
    let room = format!("{}{}", config.room_prefix, r + 1);
    // A gateway keeps a room's setting by name: say it either way when it matters.
    if config.mix.is_some() || config.transcode {
        config.signaling.set_mixing(&room, config.mix)?;
    }
    Ok(room)
}

/// Participant `i` of `room` joins, with the leg and media the configuration gives it.
fn join_one(
    config: &FleetConfig,
    progress: &FleetProgress,
    room: &str,
    i: usize,
    epoch: Instant,
) -> anyhow::Result<SimParticipant> {
    let leg = config.legs[i % config.legs.len().max(1)];
    let s = match &config.publish_at {
        Some(at) if leg == Leg::Whip => at,
        _ => &config.signaling,
    };
    let ip = config.bind_ip;
    let joined = match (config.transcode, config.ice_tcp, leg.is_phone()) {
        (false, false, _) | (false, true, true) => {
            SimParticipant::join_media(s, room, leg, ip, epoch, config.media)
        }
        (true, _, true) => SimParticipant::join_pcmu_phone(s, room, leg, ip, epoch),
        (opus_only, ice_tcp, false) => {
            let dtls = crate::participant::PeerDtls {
                opus_only,
                ice_tcp,
                ..Default::default()
            };
            SimParticipant::join_full(s, room, leg, ip, epoch, dtls, config.media)
        }
    };
    let mut p = joined.with_context(|| format!("participant {} of room {room}", i + 1))?;
    // Its resource named where it is, whichever gateway leaves it.
    p.location = s.url_of(&p.location);
    p.inject_bad = config.inject_bad;
    progress.joined.fetch_add(1, Ordering::Relaxed);
    Ok(p)
}

/// Runs the participants on `threads` threads until `duration` of media has passed after all
/// connected (or the connect timeout); each sends close_notify at the end. Returns them and
/// the seconds of media.
pub fn run_media(
    config: &FleetConfig,
    all: Vec<SimParticipant>,
    progress: Arc<FleetProgress>,
) -> anyhow::Result<(Vec<SimParticipant>, f64)> {
    let total = all.len();
    if total == 0 {
        // Nobody to settle, so no media window would ever open.
        return Ok((all, 0.0));
    }
    let threads = config.threads.clamp(1, total.max(1));
    let mut groups: Vec<Vec<SimParticipant>> = (0..threads).map(|_| Vec::new()).collect();
    for (i, p) in all.into_iter().enumerate() {
        groups[i % threads].push(p);
    }
    let all_up = Arc::new(AtomicU64::new(0));
    let media_start = Arc::new(std::sync::Mutex::new(None::<Instant>));
    let mut handles = Vec::new();
    for (t, group) in groups.into_iter().enumerate() {
        let progress = progress.clone();
        let cfg = config.clone();
        let media_start = media_start.clone();
        let all_up = all_up.clone();
        handles.push(
            std::thread::Builder::new()
                .name(format!("sim-fleet-{t}"))
                .spawn(move || drive(group, &cfg, &progress, total, &all_up, &media_start))
                .context("starting a fleet thread")?,
        );
    }
    let mut done = Vec::new();
    for h in handles {
        done.extend(
            h.join()
                .map_err(|_| anyhow::anyhow!("a fleet thread panicked"))??,
        );
    }
    let media_secs = media_start
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .map_or(0.0, |t| t.elapsed().as_secs_f64());
    Ok((done, media_secs))
}

/// [`run_media`] on its own thread, calling `at_window` once every participant is connected
/// (or failed, or the connect timeout passed): the instant a measurement window opens.
/// Returns the participants, the seconds of media and what `at_window` returned.
pub fn run_media_windowed<T>(
    config: &FleetConfig,
    group: Vec<SimParticipant>,
    progress: Arc<FleetProgress>,
    at_window: impl FnOnce() -> anyhow::Result<T>,
) -> anyhow::Result<(Vec<SimParticipant>, f64, T)> {
    let total = group.len() as u64;
    let cfg = config.clone();
    let p2 = progress.clone();
    let media = std::thread::spawn(move || run_media(&cfg, group, p2));
    let deadline = Instant::now() + config.connect_timeout + Duration::from_secs(1);
    while progress.connected.load(Ordering::Relaxed) + progress.failed.load(Ordering::Relaxed)
        < total
        && Instant::now() < deadline
        && !media.is_finished()
    {
        std::thread::sleep(Duration::from_millis(5));
    }
    let opened = at_window();
    let (done, media_secs) = media
        .join()
        .map_err(|_| anyhow::anyhow!("the fleet thread panicked"))??;
    Ok((done, media_secs, opened?))
}

/// One more viewer of the first room (WHEP, over ICE-TCP) that reads its connection at most
/// `bytes_per_sec` bytes a second, its receive buffer small: a viewer behind a narrow link.
/// Keep it apart from the others' figures (its resource URL names it).
pub fn join_slow_viewer(
    config: &FleetConfig,
    progress: &FleetProgress,
    epoch: Instant,
    bytes_per_sec: u64,
) -> anyhow::Result<SimParticipant> {
    let room = format!("{}1", config.room_prefix);
    let dtls = crate::participant::PeerDtls {
        ice_tcp: true,
        tcp_read_limit: Some(bytes_per_sec),
        ..Default::default()
    };
    let p = SimParticipant::join_full(
        &config.signaling,
        &room,
        Leg::Whep,
        config.bind_ip,
        epoch,
        dtls,
        config.media,
    )
    .with_context(|| format!("the slow viewer of room {room}"))?;
    progress.joined.fetch_add(1, Ordering::Relaxed);
    Ok(p)
}

/// What the slow viewer ([`join_slow_viewer`]) got.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SlowViewer {
    /// How fast it read, bytes a second.
    pub read_bytes_per_sec: u64,
    /// Whether it connected.
    pub connected: bool,
    /// Packets it received, of those its streams' sequence numbers span.
    pub received: u64,
    /// Packets expected.
    pub expected: u64,
    /// Its end-to-end delay, µs (p50, p99).
    pub delay_us: Option<[u32; 2]>,
}

impl SlowViewer {
    /// The slow viewer's figures.
    pub fn of(p: &SimParticipant, read_bytes_per_sec: u64) -> SlowViewer {
        let mut d = p.delays_us.clone();
        d.sort_unstable();
        SlowViewer {
            read_bytes_per_sec,
            connected: p.phase == Phase::Connected,
            received: p.streams.values().map(|s| s.received).sum(),
            expected: p.streams.values().map(StreamRx::expected).sum(),
            delay_us: (!d.is_empty()).then(|| [percentile(&d, 0.5), percentile(&d, 0.99)]),
        }
    }
}

/// DELETEs every participant's resource (errors ignored: the gateway may have ended it).
pub fn leave_all(config: &FleetConfig, done: &[SimParticipant]) {
    for p in done {
        let _ = config.signaling.delete(&p.location);
    }
}

/// The report of a finished run.
pub fn summarize(done: &[SimParticipant], media_secs: f64) -> FleetReport {
    let mut r = FleetReport {
        participants: done.len(),
        media_secs,
        ..FleetReport::default()
    };
    let mut delays: Vec<u32> = Vec::new();
    let mut setup: Vec<Duration> = Vec::new();
    for p in done {
        let k = match r.by_leg.iter().position(|t| t.leg == p.leg.name()) {
            Some(k) => k,
            None => {
                r.by_leg.push(LegTally {
                    leg: p.leg.name(),
                    ..LegTally::default()
                });
                r.by_leg.len() - 1
            }
        };
        let tally = &mut r.by_leg[k];
        tally.participants += 1;
        tally.sent += p.sent;
        for s in p.streams.values() {
            tally.received += s.received;
            tally.expected += s.expected();
            tally.lost += s.lost();
        }
        match &p.phase {
            Phase::Connected => {
                r.connected += 1;
                tally.connected += 1;
            }
            Phase::Failed(why) => r.failures.push(format!("{} ({:?}): {why}", p.room, p.leg)),
            other => r
                .failures
                .push(format!("{} ({:?}): still {other:?}", p.room, p.leg)),
        }
        r.sent += p.sent;
        r.rx_errors += p.rx_errors;
        r.bad_sent += p.bad_sent;
        for s in p.streams.values() {
            r.received += s.received;
            r.expected += s.expected();
            r.lost += s.lost();
        }
        if p.leg.receives() {
            let publishers = done
                .iter()
                .filter(|q| q.room == p.room && q.leg.sends() && !std::ptr::eq(*q, p))
                .count() as u64;
            r.missing_streams += publishers.saturating_sub(p.streams.len() as u64);
        }
        delays.extend_from_slice(&p.delays_us);
        setup.extend(p.setup_time);
    }
    if !delays.is_empty() {
        delays.sort_unstable();
        r.delay_us = Some([
            percentile(&delays, 0.5),
            percentile(&delays, 0.9),
            percentile(&delays, 0.99),
            *delays.last().expect("not empty"),
        ]);
    }
    if done.iter().any(|p| p.media.is_video()) {
        r.video = Some(video_report(done));
    }
    if !setup.is_empty() {
        setup.sort_unstable();
        r.setup_ms = Some([
            percentile(&setup, 0.5).as_secs_f64() * 1e3,
            percentile(&setup, 0.99).as_secs_f64() * 1e3,
        ]);
    }
    r
}

/// The broadcast's side of the report: the publishers' layers, the viewers' streams.
fn video_report(done: &[SimParticipant]) -> VideoReport {
    let mut v = VideoReport {
        layers: video::LAYERS
            .iter()
            .map(|l| LayerTally {
                rid: l.rid,
                target_bps: l.bps,
                ..LayerTally::default()
            })
            .collect(),
        ..VideoReport::default()
    };
    for p in done {
        if let Some(sender) = &p.video {
            v.publishers += 1;
            v.keyframe_requests += sender.keyframe_requests;
            for (t, l) in v.layers.iter_mut().zip(sender.sent()) {
                t.frames += l.frames;
                t.keyframes += l.keyframes;
                t.packets_sent += l.packets;
            }
        }
        if p.leg != Leg::Whep || !p.media.is_video() {
            continue;
        }
        v.viewers += 1;
        let mut video_streams = 0;
        for s in p.streams.values() {
            let c = if s.payload_type == Some(video::VP8_PT) {
                video_streams += 1;
                &mut v.video
            } else {
                &mut v.audio
            };
            c.streams += 1;
            c.received += s.received;
            c.expected += s.expected();
            c.lost += s.lost();
        }
        let audio_streams = p.streams.len() - video_streams;
        v.viewers_with_audio += usize::from(audio_streams > 0);
        v.viewers_with_video += usize::from(video_streams > 0);
        let publishers = done
            .iter()
            .filter(|q| q.room == p.room && q.leg == Leg::Whip)
            .count();
        v.viewers_one_video_stream += usize::from(video_streams == publishers);
        // Delivery against the room's publisher (one per room in a broadcast).
        if let Some(publisher) = done
            .iter()
            .find(|q| q.room == p.room && q.leg == Leg::Whip && q.video.is_some())
        {
            let sent = &publisher.sent_stamps;
            let last = sent
                .audio
                .iter()
                .chain(sent.video.iter().flatten())
                .copied()
                .max()
                .unwrap_or(0);
            let end = last.saturating_sub(DELIVERY_GRACE.as_nanos() as u64);
            let mut audio = p.video_rx.audio_stamps.clone();
            audio.sort_unstable();
            if let Some(&first) = audio.first() {
                v.audio_delivery.expected += in_window(&sent.audio, first, end);
                v.audio_delivery.delivered += in_window(&audio, first, end);
            }
            if let Some(layer) = p.video_rx.last_layer {
                let mut got = p.video_rx.video_stamps.clone();
                got.sort_unstable();
                if let (Some(&first), Some(sent)) =
                    (got.first(), sent.video.get(usize::from(layer)))
                {
                    v.video_delivery.expected += in_window(sent, first, end);
                    v.video_delivery.delivered += in_window(&got, first, end);
                }
            }
        }
        v.switches += p.video_rx.switches;
        if let Some(t) = &p.twcc {
            v.viewers_with_feedback += 1;
            v.feedbacks += t.feedbacks;
        }
        for (k, t) in v.layers.iter_mut().enumerate() {
            let n = p.video_rx.by_layer.get(k).copied().unwrap_or(0);
            t.packets_received += n;
            t.viewers_any += usize::from(n > 0);
            t.viewers_at_end += usize::from(p.video_rx.last_layer == Some(k as u8));
        }
    }
    v
}

fn drive(
    mut group: Vec<SimParticipant>,
    config: &FleetConfig,
    progress: &FleetProgress,
    total: usize,
    all_up: &AtomicU64,
    media_start: &std::sync::Mutex<Option<Instant>>,
) -> anyhow::Result<Vec<SimParticipant>> {
    let mut poll = Poll::new().context("fleet poll")?;
    for (i, p) in group.iter_mut().enumerate() {
        let interest = p.interest();
        poll.registry()
            .register(p.socket_mut(), Token(i), interest)
            .context("registering a participant socket")?;
    }
    let mut events = Events::with_capacity(1024);
    let started = Instant::now();
    let mut up = vec![false; group.len()];
    let mut reported_sent = 0u64;
    let mut reported_received = 0u64;
    let mut last_report = Instant::now();
    loop {
        let now = Instant::now();
        let next = group.iter().map(SimParticipant::deadline).min();
        let timeout = next.map_or(Duration::from_millis(10), |t| {
            t.saturating_duration_since(now)
                .min(Duration::from_millis(10))
        });
        match poll.poll(&mut events, Some(timeout)) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            r => r.context("fleet poll")?,
        }
        let now = Instant::now();
        for ev in events.iter() {
            if let Some(p) = group.get_mut(ev.token().0) {
                p.on_readable(now).context("participant socket")?;
            }
        }
        for (i, p) in group.iter_mut().enumerate() {
            if p.deadline() <= now {
                p.on_timer(now);
            }
            if !up[i] {
                let counter = match p.phase {
                    Phase::Connected => &progress.connected,
                    Phase::Failed(_) => &progress.failed,
                    _ => continue,
                };
                up[i] = true;
                counter.fetch_add(1, Ordering::Relaxed);
                // The media window opens when the last participant is settled, connected or
                // failed (a failure last must not leave the window unopened).
                if all_up.fetch_add(1, Ordering::AcqRel) + 1 == total as u64 {
                    *media_start.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
                }
            }
        }
        if now.duration_since(last_report) >= Duration::from_millis(100) {
            last_report = now;
            let sent: u64 = group.iter().map(|p| p.sent).sum();
            let received: u64 = group
                .iter()
                .flat_map(|p| p.streams.values())
                .map(|s| s.received)
                .sum();
            progress
                .sent
                .fetch_add(sent - reported_sent, Ordering::Relaxed);
            progress
                .received
                .fetch_add(received - reported_received, Ordering::Relaxed);
            reported_sent = sent;
            reported_received = received;
        }
        if progress.stop.load(Ordering::Relaxed) {
            break;
        }
        let everybody = all_up.load(Ordering::Acquire) >= total as u64;
        if !everybody && now.duration_since(started) > config.connect_timeout {
            break;
        }
        let media_since = *media_start.lock().unwrap_or_else(|e| e.into_inner());
        if media_since.is_some_and(|t| now.duration_since(t) >= config.duration) {
            break;
        }
    }
    // Let the last packets in flight arrive, then say goodbye.
    let end = Instant::now() + Duration::from_millis(60);
    while Instant::now() < end {
        match poll.poll(&mut events, Some(Duration::from_millis(5))) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            r => r.context("fleet poll")?,
        }
        let now = Instant::now();
        for ev in events.iter() {
            if let Some(p) = group.get_mut(ev.token().0) {
                p.on_readable(now).context("participant socket")?;
            }
        }
    }
    let now = Instant::now();
    for p in &mut group {
        p.close(now);
    }
    Ok(group)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_counts_the_stamps_inside_it_ends_included() {
        let s = [10, 20, 20, 30, 40];
        assert_eq!(in_window(&s, 20, 30), 3);
        assert_eq!(in_window(&s, 0, 100), 5);
        assert_eq!(in_window(&s, 41, 100), 0);
        assert_eq!(in_window(&s, 30, 20), 0, "an empty window");
    }
}
