//! `secrelay lab soak`: calls of every kind of leg keep joining a gateway, talking for a random
//! while and leaving, for a set time, with a bounded number live at once; the gateway's
//! resident memory, open file descriptors, participants, rooms, telephony ports, ng calls and
//! routing entries are sampled every second; and once every call has left, the verdict: did
//! anything remain?
//!
//! The kinds of call, in turn:
//! * `webrtc`: two conference participants in a room (`POST /rooms/{room}/join` over HTTP(S),
//!   ICE, DTLS-SRTP, SRTP audio both ways);
//! * `whip-whep`: a WHIP publisher and a WHEP viewer of its room;
//! * `sdes`: two SIP phones' SDES-SRTP legs (`POST /rooms/{room}/rtp`, keys in `a=crypto`);
//! * `plain`: two plain RTP phones' legs, the same way;
//! * `ng`: a call a simulated SIP proxy sets up over the ng control socket (`offer`, `answer`)
//!   from a phone (plain or SDES) to a callee that is a plain phone, an SDES phone or a WebRTC
//!   browser, in turn.
//!
//! Each call ends one of two ways, chosen at random: it *leaves* (WebRTC legs send
//! close_notify and DELETE their resource, phones DELETE theirs, the proxy sends ng `delete`),
//! or it *vanishes* (its legs stop sending and close their sockets without a word), so that the
//! gateway's own timeouts (ICE consent, telephony media timeout, the ng sweep) must end it.
//!
//! The gateway is the one at `--target` (its process id given for `/proc`), or one this tool
//! starts as a child process (`secrelay serve` with HTTPS from a throw-away CA, ng on, and short
//! timeouts), so that what `/proc` shows is the gateway's alone.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _};
use mio::{Events, Interest, Poll, Token};
use serde::Serialize;

use secrelay_testkit::ng::Ng;
use secrelay_testkit::phone::SimPhone;
use secrelay_testkit::{Leg, Phase, Rng, Signaling, SimParticipant};
use secrelay_wire::bencode::Bencode;

use crate::frame::{LabOutput, Method, Plot, PlotKind, Series, StudyReport, Table};

/// The kinds of call a soak runs, in the order it starts them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CallKind {
    /// Two WebRTC conference participants in a room.
    Webrtc,
    /// A WHIP publisher and a WHEP viewer.
    WhipWhep,
    /// Two SDES-SRTP phones joined over HTTP.
    Sdes,
    /// Two plain RTP phones joined over HTTP.
    Plain,
    /// A SIP proxy's call over the ng control socket.
    Ng,
}

impl CallKind {
    /// Every kind, in turn.
    pub const ALL: [CallKind; 5] = [
        CallKind::Webrtc,
        CallKind::WhipWhep,
        CallKind::Sdes,
        CallKind::Plain,
        CallKind::Ng,
    ];

    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            CallKind::Webrtc => "webrtc",
            CallKind::WhipWhep => "whip-whep",
            CallKind::Sdes => "sdes",
            CallKind::Plain => "plain",
            CallKind::Ng => "ng",
        }
    }

    /// What its legs are, for the report.
    pub fn legs(self) -> &'static str {
        match self {
            CallKind::Webrtc => "2 × POST /rooms/{room}/join: HTTP(S), ICE, DTLS-SRTP",
            CallKind::WhipWhep => "POST /whip/{room} + POST /whep/{room}: HTTP(S), ICE, DTLS-SRTP",
            CallKind::Sdes => "2 × POST /rooms/{room}/rtp with a=crypto (SDES-SRTP)",
            CallKind::Plain => "2 × POST /rooms/{room}/rtp, RTP/AVP (plain RTP)",
            CallKind::Ng => {
                "ng offer/answer: a phone (plain or SDES) to a plain, SDES or WebRTC callee"
            }
        }
    }
}

/// How a call ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    /// close_notify and DELETE, or ng `delete`.
    Leave,
    /// Nothing said: the sockets close; the gateway's timeouts must end it.
    Vanish,
}

/// What to run.
#[derive(Debug, Clone)]
pub struct SoakOptions {
    /// The gateway's HTTP(S) side.
    pub signaling: Signaling,
    /// Its ng control socket (no `ng` calls without one).
    pub ng: Option<SocketAddr>,
    /// Its process id, for memory, file descriptors and threads from `/proc`.
    pub server_pid: Option<u32>,
    /// How long calls keep arriving.
    pub duration: Duration,
    /// Calls in all.
    pub calls: usize,
    /// Most calls live at once (an arrival waits while this many are).
    pub max_live: usize,
    /// Mean holding time (each call holds uniformly between half and one and a half of it).
    pub hold: Duration,
    /// Share of calls that vanish instead of leaving.
    pub vanish: f64,
    /// How long to wait, once the last call has gone, for the gateway to have nothing left.
    pub drain_timeout: Duration,
    /// Address the simulated legs bind to.
    pub bind_ip: IpAddr,
    /// Threads doing the signaling (HTTP, ng).
    pub signaling_threads: usize,
    /// Seed of the random holding times and endings.
    pub seed: u64,
    /// A `--quick` run (recorded in the method).
    pub quick: bool,
    /// Print a line of progress every few seconds on stderr.
    pub progress: bool,
    /// The command line, for the report.
    pub command: String,
    /// The gateway's timeouts as the report states them (consent, media), when known.
    pub gateway_timeouts: Option<(f64, f64)>,
}

impl SoakOptions {
    /// A mean holding time that keeps about 70 % of `max_live` calls live when `calls` arrive
    /// evenly over `duration` (Little's law), between 3 and 60 s.
    pub fn default_hold(duration: Duration, calls: usize, max_live: usize) -> Duration {
        let h = 0.7 * max_live as f64 * duration.as_secs_f64() / calls.max(1) as f64;
        Duration::from_secs_f64(h.clamp(3.0, 60.0))
    }
}

/// A duration on the command line: seconds (`600`), or with a unit (`30m`, `90s`, `1h`).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    if let Ok(secs) = s.parse::<f64>() {
        if secs.is_finite() && secs > 0.0 {
            return Ok(Duration::from_secs_f64(secs));
        }
        return Err(format!("{s:?}: give a positive number of seconds"));
    }
    humantime::parse_duration(s).map_err(|e| format!("{s:?}: {e} (seconds, or e.g. 30m, 90s)"))
}

/// Phases of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SoakPhase {
    /// Before the first call.
    Baseline,
    /// Calls arriving, talking and leaving.
    Load,
    /// Every call gone; the gateway's timeouts at work.
    Drain,
    /// After the drain: nothing should move.
    Settle,
}

impl SoakPhase {
    fn from_u8(v: u8) -> SoakPhase {
        match v {
            0 => SoakPhase::Baseline,
            1 => SoakPhase::Load,
            2 => SoakPhase::Drain,
            _ => SoakPhase::Settle,
        }
    }
    fn name(self) -> &'static str {
        match self {
            SoakPhase::Baseline => "baseline",
            SoakPhase::Load => "load",
            SoakPhase::Drain => "drain",
            SoakPhase::Settle => "settle",
        }
    }
}

/// One sample: the gateway (its `/metrics`, its `/proc`) and the load generator's own counts.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Sample {
    /// Seconds since the start of the run.
    pub t: f64,
    /// The phase.
    pub phase: Option<SoakPhase>,
    /// Calls live (being set up, talking, or being ended), the load generator's count.
    pub calls_live: u64,
    /// Legs talking, the load generator's count.
    pub legs_live: u64,
    /// Calls started so far.
    pub calls_started: u64,
    /// Calls finished so far.
    pub calls_done: u64,
    /// Errors so far (failed set-ups, legs that never connected or heard nothing, failed
    /// DELETEs and ng deletes).
    pub errors: u64,
    /// The gateway's participants (`secrelay_participants`).
    pub participants: Option<f64>,
    /// Of them, connected.
    pub connected: Option<f64>,
    /// Rooms (`secrelay_rooms`).
    pub rooms: Option<f64>,
    /// Telephony ports held (`secrelay_rtp_ports_in_use`).
    pub rtp_ports: Option<f64>,
    /// ng calls held (`secrelay_ng_calls`).
    pub ng_calls: Option<f64>,
    /// Routing directory entries, ufrags and addresses (`secrelay_routes`).
    pub routes: Option<f64>,
    /// HTTP(S) connections open (`secrelay_http_connections_open`).
    pub http_connections: Option<f64>,
    /// Resources (`Location`s) the HTTP side holds, live and ended within their grace
    /// (`secrelay_http_resources`).
    pub http_resources: Option<f64>,
    /// Participants by kind of leg (webrtc, sdes, plain).
    pub by_leg: BTreeMap<String, f64>,
    /// Resident memory, MiB (`VmRSS`).
    pub rss_mib: Option<f64>,
    /// Open file descriptors (entries of `/proc/PID/fd`).
    pub fds: Option<u64>,
    /// Threads (`Threads` of `/proc/PID/status`).
    pub threads: Option<u64>,
    /// Why the gateway could not be read this time, if it could not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scrape_error: Option<String>,
}

/// One check of the verdict.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// What is checked.
    pub what: String,
    /// What it must be.
    pub expected: String,
    /// What it was.
    pub found: String,
    /// Whether it held.
    pub pass: bool,
}

/// Per kind of call: what happened.
#[derive(Debug, Clone, Default, Serialize)]
pub struct KindTally {
    /// Calls started.
    pub started: u64,
    /// Of them, set up (every leg answered).
    pub set_up: u64,
    /// Set-ups that failed.
    pub setup_failed: u64,
    /// Ended by leaving (close_notify/DELETE, ng delete).
    pub left: u64,
    /// Ended by vanishing (the gateway's timeouts).
    pub vanished: u64,
    /// Legs set up.
    pub legs: u64,
    /// Of them, connected (WebRTC: DTLS-SRTP up; phones: from the answer).
    pub legs_connected: u64,
    /// Of them, heard media from the other side (a WHIP publisher: sent media).
    pub legs_heard: u64,
    /// Calls whose every leg heard the other side.
    pub calls_talked: u64,
    /// Media packets the legs sent.
    pub sent: u64,
    /// Media packets the legs received.
    pub received: u64,
    /// Packets a leg failed to open.
    pub rx_errors: u64,
}

/// What a soak found.
#[derive(Debug, Clone, Serialize)]
pub struct SoakReport {
    /// Every sample, in order.
    pub samples: Vec<Sample>,
    /// Per kind of call.
    pub kinds: BTreeMap<CallKind, KindTally>,
    /// The verdict's checks.
    pub checks: Vec<Check>,
    /// Whether every check held.
    pub pass: bool,
    /// Errors seen (the first 50), with what they were.
    pub errors: Vec<String>,
    /// Errors in all.
    pub error_count: u64,
    /// Of them, failed offers, answers, DELETEs and ng commands.
    pub signaling_errors: u64,
    /// The open file descriptors at the end that were not there at the start (their
    /// `/proc/PID/fd` targets), when the count differs.
    pub extra_fds: Vec<String>,
    /// Seconds the calls took to arrive and leave, and the drain.
    pub load_secs: f64,
    /// Seconds from the last call gone to the gateway holding nothing.
    pub drain_secs: f64,
    /// The options' figures, for the record.
    pub calls: usize,
    /// Most calls live at once allowed.
    pub max_live: usize,
    /// Most calls live at once seen.
    pub peak_live: u64,
    /// Mean holding time, seconds.
    pub hold_secs: f64,
    /// Share of calls that vanished.
    pub vanish: f64,
    /// The memory tolerance applied, and why.
    pub memory_rule: String,
}

/// Live counters shared by the threads.
#[derive(Default)]
struct Shared {
    calls_live: AtomicU64,
    legs_live: AtomicU64,
    calls_started: AtomicU64,
    calls_done: AtomicU64,
    peak_live: AtomicU64,
    errors: AtomicU64,
    signaling_errors: AtomicU64,
    error_list: Mutex<Vec<String>>,
    kinds: Mutex<BTreeMap<CallKind, KindTally>>,
    phase: AtomicU8,
}

impl Shared {
    fn error(&self, e: String) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        let mut l = self.error_list.lock().unwrap_or_else(|e| e.into_inner());
        if l.len() < 50 {
            l.push(e);
        }
    }
    /// An offer, answer, DELETE or ng command that failed: the gateway's fault or the
    /// tool's, never the network's (loopback).
    fn signaling_error(&self, e: String) {
        self.signaling_errors.fetch_add(1, Ordering::Relaxed);
        self.error(e);
    }
    fn tally(&self, kind: CallKind, f: impl FnOnce(&mut KindTally)) {
        let mut k = self.kinds.lock().unwrap_or_else(|e| e.into_inner());
        f(k.entry(kind).or_default());
    }
    fn finished(&self) {
        self.calls_live.fetch_sub(1, Ordering::Relaxed);
        self.calls_done.fetch_add(1, Ordering::Relaxed);
    }
}

/// A call to start.
struct CallSpec {
    n: u64,
    kind: CallKind,
    ending: Ending,
    hold: Duration,
    /// For `ng` calls: the callee's kind (0 plain, 1 SDES, 2 WebRTC) and whether the caller
    /// is SDES.
    variant: u64,
    ssrc: u32,
}

/// A call set up: its legs talk until `ends_at`.
struct LiveCall {
    spec: CallSpec,
    legs: Vec<SimParticipant>,
    /// The ng call id and caller's tag, for `delete`.
    ng_call: Option<(String, String)>,
    ends_at: Instant,
}

/// Work for the signaling threads.
enum Job {
    Start(CallSpec),
    End(LiveCall),
}

/// Runs the soak against the gateway `o` names.
pub fn run(o: &SoakOptions) -> anyhow::Result<SoakReport> {
    if o.calls == 0 || o.max_live == 0 {
        bail!("--calls and --max-live must be at least 1");
    }
    let mut soak = Soak {
        o,
        start: Instant::now(),
        shared: Arc::new(Shared::default()),
        samples: Arc::new(Mutex::new(Vec::new())),
        last_progress: Instant::now(),
    };
    let stop_sampler = Arc::new(AtomicBool::new(false));
    let sampler = soak.start_sampler(stop_sampler.clone())?;
    // Baseline: three samples before the first call.
    soak.wait_for_samples(3);
    let baseline = soak.last_sample().unwrap_or_default();
    if let Some(e) = &baseline.scrape_error {
        stop_sampler.store(true, Ordering::Relaxed);
        let _ = sampler.join();
        bail!("the gateway's /metrics: {e}");
    }
    let baseline_fd_targets = o.server_pid.map(fd_targets).unwrap_or_default();

    // The media thread and the signaling threads.
    let (to_media, media_rx) = mpsc::channel::<LiveCall>();
    let (jobs_tx, jobs_rx) = mpsc::channel::<Job>();
    let workers = soak.start_signaling(jobs_rx, to_media)?;
    let media_done = Arc::new(AtomicBool::new(false));
    let media = {
        let (shared, done, jobs_tx) = (soak.shared.clone(), media_done.clone(), jobs_tx.clone());
        std::thread::Builder::new()
            .name("soak-media".into())
            .spawn(move || media_thread(media_rx, &jobs_tx, &shared, &done))
            .context("starting the media thread")?
    };

    soak.shared.phase.store(1, Ordering::Relaxed);
    let load_started = Instant::now();
    soak.arrive(&jobs_tx, load_started)?;
    soak.wait_for_calls_to_end();
    let load_secs = load_started.elapsed().as_secs_f64();
    media_done.store(true, Ordering::Relaxed);
    drop(jobs_tx);
    let _ = media.join();
    for w in workers {
        let _ = w.join();
    }

    soak.shared.phase.store(2, Ordering::Relaxed);
    let drain_started = Instant::now();
    soak.drain(&baseline, drain_started);
    let drain_secs = drain_started.elapsed().as_secs_f64();
    // Settle: a few more samples, to show nothing moves.
    soak.shared.phase.store(3, Ordering::Relaxed);
    let settle_from = soak.samples.lock().unwrap_or_else(|e| e.into_inner()).len();
    soak.wait_for_samples(settle_from + 3);
    stop_sampler.store(true, Ordering::Relaxed);
    let _ = sampler.join();
    let samples = std::mem::take(&mut *soak.samples.lock().unwrap_or_else(|e| e.into_inner()));
    let extra_fds = match (o.server_pid, samples.last()) {
        (Some(pid), Some(s)) if s.fds != baseline.fds => {
            let now = fd_targets(pid);
            now.into_iter()
                .filter(|t| !baseline_fd_targets.contains(t))
                .collect()
        }
        _ => Vec::new(),
    };
    Ok(soak.report(samples, &baseline, extra_fds, (load_secs, drain_secs)))
}

/// A soak under way: its options, the state its threads share, the samples taken.
struct Soak<'a> {
    o: &'a SoakOptions,
    start: Instant,
    shared: Arc<Shared>,
    samples: Arc<Mutex<Vec<Sample>>>,
    last_progress: Instant,
}

impl Soak<'_> {
    /// The sampler: once a second, /proc then /metrics, until `stop`.
    fn start_sampler(&self, stop: Arc<AtomicBool>) -> anyhow::Result<std::thread::JoinHandle<()>> {
        let (shared, samples, start) = (self.shared.clone(), self.samples.clone(), self.start);
        let (sig, pid) = (self.o.signaling.clone(), self.o.server_pid);
        std::thread::Builder::new()
            .name("soak-sampler".into())
            .spawn(move || {
                let mut next = Instant::now();
                while !stop.load(Ordering::Relaxed) {
                    let s = sample(&sig, pid, &shared, start);
                    samples.lock().unwrap_or_else(|e| e.into_inner()).push(s);
                    next += Duration::from_secs(1);
                    while Instant::now() < next && !stop.load(Ordering::Relaxed) {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                }
            })
            .context("starting the sampler thread")
    }

    /// Waits until `n` samples were taken.
    fn wait_for_samples(&self, n: usize) {
        while self.samples.lock().unwrap_or_else(|e| e.into_inner()).len() < n {
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn last_sample(&self) -> Option<Sample> {
        self.samples
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .last()
            .cloned()
    }

    /// A progress line every 5 s, when asked for.
    fn progress(&mut self) {
        if self.o.progress && self.last_progress.elapsed() >= Duration::from_secs(5) {
            self.last_progress = Instant::now();
            progress_line(&self.shared, &self.samples, self.start);
        }
    }

    /// The signaling threads, taking the jobs and handing the calls they start to the media
    /// thread.
    fn start_signaling(
        &self,
        jobs_rx: mpsc::Receiver<Job>,
        to_media: mpsc::Sender<LiveCall>,
    ) -> anyhow::Result<Vec<std::thread::JoinHandle<()>>> {
        let jobs_rx = Arc::new(Mutex::new(jobs_rx));
        let epoch = Instant::now();
        let mut workers = Vec::new();
        for i in 0..self.o.signaling_threads.max(1) {
            let (jobs_rx, to_media, shared, o2) = (
                jobs_rx.clone(),
                to_media.clone(),
                self.shared.clone(),
                self.o.clone(),
            );
            workers.push(
                std::thread::Builder::new()
                    .name(format!("soak-signaling-{i}"))
                    .spawn(move || signaling_worker(&o2, &jobs_rx, &to_media, &shared, epoch))
                    .context("starting a signaling thread")?,
            );
        }
        Ok(workers)
    }

    /// The arrivals: evenly over the duration less the longest hold, never more than
    /// `max_live` at once, each call's kind, ending and hold drawn.
    fn arrive(&mut self, jobs_tx: &mpsc::Sender<Job>, load_started: Instant) -> anyhow::Result<()> {
        let o = self.o;
        let window = o.duration.saturating_sub(o.hold.mul_f64(1.5));
        let spacing = window.div_f64(o.calls as f64);
        let mut rng = Rng::new(o.seed);
        let kinds: Vec<CallKind> = CallKind::ALL
            .into_iter()
            .filter(|k| *k != CallKind::Ng || o.ng.is_some())
            .collect();
        for n in 0..o.calls as u64 {
            let due = load_started + spacing.mul_f64(n as f64);
            loop {
                let now = Instant::now();
                if now >= due && self.shared.calls_live.load(Ordering::Relaxed) < o.max_live as u64
                {
                    break;
                }
                self.progress();
                std::thread::sleep(Duration::from_millis(2));
            }
            let kind = kinds[(n as usize) % kinds.len()];
            let ending = if rng.chance(o.vanish) {
                Ending::Vanish
            } else {
                Ending::Leave
            };
            let hold = o.hold.mul_f64(0.5 + (rng.below(1001) as f64) / 1000.0);
            let shared = &self.shared;
            let live = shared.calls_live.fetch_add(1, Ordering::Relaxed) + 1;
            shared.peak_live.fetch_max(live, Ordering::Relaxed);
            shared.calls_started.fetch_add(1, Ordering::Relaxed);
            shared.tally(kind, |t| t.started += 1);
            let spec = CallSpec {
                n,
                kind,
                ending,
                hold,
                variant: n / kinds.len() as u64,
                ssrc: rng.next_u64() as u32,
            };
            if jobs_tx.send(Job::Start(spec)).is_err() {
                bail!("the signaling threads ended early");
            }
        }
        Ok(())
    }

    /// Until every call finished its hold and left (or vanished), or 2 minutes after the
    /// longest hold (an error).
    fn wait_for_calls_to_end(&mut self) {
        let hold_max = self.o.hold.mul_f64(1.5);
        let give_up = Instant::now() + hold_max + Duration::from_secs(120);
        while self.shared.calls_live.load(Ordering::Relaxed) > 0 {
            if Instant::now() > give_up {
                self.shared.error(format!(
                    "{} calls still live {} s after the last arrival",
                    self.shared.calls_live.load(Ordering::Relaxed),
                    (hold_max + Duration::from_secs(120)).as_secs()
                ));
                break;
            }
            self.progress();
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The drain: until the gateway holds nothing (twice in a row: no participants, rooms,
    /// ports, ng calls, routes or HTTP resources, the descriptors of the baseline) or the
    /// timeout.
    fn drain(&mut self, baseline: &Sample, drain_started: Instant) {
        let clean = |s: &Sample| {
            s.scrape_error.is_none()
                && s.participants == Some(0.0)
                && s.rooms == Some(0.0)
                && s.rtp_ports.unwrap_or(0.0) == 0.0
                && s.ng_calls.unwrap_or(0.0) == 0.0
                && s.routes.unwrap_or(0.0) == 0.0
                && s.http_resources.unwrap_or(0.0) == 0.0
                && (s.fds.is_none() || s.fds == baseline.fds)
        };
        let mut clean_in_a_row = 0;
        let mut seen = self.samples.lock().unwrap_or_else(|e| e.into_inner()).len();
        while drain_started.elapsed() < self.o.drain_timeout && clean_in_a_row < 2 {
            std::thread::sleep(Duration::from_millis(100));
            let g = self.samples.lock().unwrap_or_else(|e| e.into_inner());
            for s in &g[seen..] {
                if s.phase == Some(SoakPhase::Drain) && clean(s) {
                    clean_in_a_row += 1;
                } else if s.phase == Some(SoakPhase::Drain) {
                    clean_in_a_row = 0;
                }
            }
            seen = g.len();
            drop(g);
            self.progress();
        }
    }

    /// The report: the verdict's checks against the baseline and the calls by kind, the
    /// signaling's failures, the errors.
    fn report(
        &self,
        samples: Vec<Sample>,
        baseline: &Sample,
        extra_fds: Vec<String>,
        (load_secs, drain_secs): (f64, f64),
    ) -> SoakReport {
        let (o, shared) = (self.o, &self.shared);
        let kinds = shared
            .kinds
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let (mut checks, memory_rule) = verdict(o, &samples, baseline, &kinds, &kinds_expected(o));
        let signaling_errors = shared.signaling_errors.load(Ordering::Relaxed);
        checks.push(Check {
            what: "failed offers, answers, DELETEs and ng commands".into(),
            expected: "0".into(),
            found: signaling_errors.to_string(),
            pass: signaling_errors == 0,
        });
        let pass = checks.iter().all(|c| c.pass);
        let errors = shared
            .error_list
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        SoakReport {
            samples,
            kinds,
            pass,
            checks,
            errors,
            error_count: shared.errors.load(Ordering::Relaxed),
            signaling_errors,
            extra_fds,
            load_secs,
            drain_secs,
            calls: o.calls,
            max_live: o.max_live,
            peak_live: shared.peak_live.load(Ordering::Relaxed),
            hold_secs: o.hold.as_secs_f64(),
            vanish: o.vanish,
            memory_rule,
        }
    }
}

fn kinds_expected(o: &SoakOptions) -> Vec<CallKind> {
    CallKind::ALL
        .into_iter()
        .filter(|k| *k != CallKind::Ng || o.ng.is_some())
        .collect()
}

fn progress_line(shared: &Shared, samples: &Mutex<Vec<Sample>>, start: Instant) {
    let s = samples
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .last()
        .cloned()
        .unwrap_or_default();
    let f = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.0}"));
    eprintln!(
        "soak [{:>6.0} s] {}: calls started {}, live {}, done {}; errors {}; gateway participants {}, rooms {}, ports {}, ng calls {}, RSS {} MiB, fds {}",
        start.elapsed().as_secs_f64(),
        SoakPhase::from_u8(shared.phase.load(Ordering::Relaxed)).name(),
        shared.calls_started.load(Ordering::Relaxed),
        shared.calls_live.load(Ordering::Relaxed),
        shared.calls_done.load(Ordering::Relaxed),
        shared.errors.load(Ordering::Relaxed),
        f(s.participants),
        f(s.rooms),
        f(s.rtp_ports),
        f(s.ng_calls),
        s.rss_mib.map_or("-".into(), |v| format!("{v:.1}")),
        s.fds.map_or("-".into(), |v| v.to_string()),
    );
}

/// One sample: `/proc` first (so the scrape's own connection is not among the descriptors),
/// then `/metrics`.
fn sample(sig: &Signaling, pid: Option<u32>, shared: &Shared, start: Instant) -> Sample {
    let mut s = Sample {
        t: start.elapsed().as_secs_f64(),
        phase: Some(SoakPhase::from_u8(shared.phase.load(Ordering::Relaxed))),
        calls_live: shared.calls_live.load(Ordering::Relaxed),
        legs_live: shared.legs_live.load(Ordering::Relaxed),
        calls_started: shared.calls_started.load(Ordering::Relaxed),
        calls_done: shared.calls_done.load(Ordering::Relaxed),
        errors: shared.errors.load(Ordering::Relaxed),
        ..Sample::default()
    };
    if let Some(pid) = pid {
        if let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) {
            let field = |name: &str| {
                status
                    .lines()
                    .find_map(|l| l.strip_prefix(name))
                    .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            };
            s.rss_mib = field("VmRSS:").map(|kb| kb as f64 / 1024.0);
            s.threads = field("Threads:");
        }
        s.fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
            .ok()
            .map(|d| d.count() as u64);
    }
    match sig.get("/metrics") {
        Ok((200, text)) => {
            let m = metrics(&text);
            let g = |k: &str| m.get(k).copied();
            s.participants = g("secrelay_participants");
            s.connected = g("secrelay_participants_connected");
            s.rooms = g("secrelay_rooms");
            s.rtp_ports = g("secrelay_rtp_ports_in_use");
            s.ng_calls = g("secrelay_ng_calls");
            s.routes = match (
                g("secrelay_routes{key=\"ufrag\"}"),
                g("secrelay_routes{key=\"address\"}"),
            ) {
                (Some(a), Some(b)) => Some(a + b),
                _ => None,
            };
            s.http_connections = g("secrelay_http_connections_open");
            s.http_resources = match (
                g("secrelay_http_resources{state=\"live\"}"),
                g("secrelay_http_resources{state=\"ended\"}"),
            ) {
                (Some(a), Some(b)) => Some(a + b),
                _ => None,
            };
            for (k, v) in &m {
                if let Some(leg) = k
                    .strip_prefix("secrelay_participants_by_leg{leg=\"")
                    .and_then(|r| r.strip_suffix("\"}"))
                {
                    s.by_leg.insert(leg.to_owned(), *v);
                }
            }
        }
        Ok((status, body)) => {
            s.scrape_error = Some(format!("GET /metrics answered {status}: {}", body.trim()))
        }
        Err(e) => s.scrape_error = Some(format!("{e:#}")),
    }
    s
}

/// The samples and labels of an OpenMetrics text: `name{labels}` → value.
fn metrics(text: &str) -> HashMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            Some((k.to_owned(), v.trim().parse().ok()?))
        })
        .collect()
}

/// What each open descriptor of `pid` points at (`socket:[…]`, a path, `anon_inode:[eventpoll]`).
fn fd_targets(pid: u32) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Vec::new();
    };
    let mut v: Vec<String> = dir
        .filter_map(|e| {
            let e = e.ok()?;
            let target = std::fs::read_link(e.path()).ok()?;
            Some(format!(
                "{} -> {}",
                e.file_name().to_string_lossy(),
                target.display()
            ))
        })
        .collect();
    v.sort();
    v
}

/// Sets calls up and ends them.
fn signaling_worker(
    o: &SoakOptions,
    jobs: &Mutex<Receiver<Job>>,
    to_media: &Sender<LiveCall>,
    shared: &Shared,
    epoch: Instant,
) {
    let mut ng = None;
    loop {
        let job = {
            let rx = jobs.lock().unwrap_or_else(|e| e.into_inner());
            rx.recv()
        };
        let Ok(job) = job else { return };
        match job {
            Job::Start(spec) => {
                let kind = spec.kind;
                match set_up(o, &mut ng, spec, epoch) {
                    Ok(call) => {
                        shared.tally(kind, |t| {
                            t.set_up += 1;
                            t.legs += call.legs.len() as u64;
                        });
                        shared
                            .legs_live
                            .fetch_add(call.legs.len() as u64, Ordering::Relaxed);
                        if to_media.send(call).is_err() {
                            shared.finished();
                        }
                    }
                    Err(e) => {
                        shared.tally(kind, |t| t.setup_failed += 1);
                        shared.signaling_error(format!("{} call set-up: {e:#}", kind.name()));
                        shared.finished();
                    }
                }
            }
            Job::End(call) => {
                end(o, &mut ng, &call, shared);
                drop(call);
                shared.finished();
            }
        }
    }
}

fn s(v: &str) -> Bencode {
    Bencode::str(v)
}

/// Sets a call up: its legs joined (and for `ng`, the proxy's offer and answer made).
fn set_up(
    o: &SoakOptions,
    ng: &mut Option<Ng>,
    spec: CallSpec,
    epoch: Instant,
) -> anyhow::Result<LiveCall> {
    let room = format!("soak-{}-{}", spec.kind.name(), spec.n);
    let sig = &o.signaling;
    let mut legs: Vec<SimParticipant> = Vec::new();
    let mut ng_call = None;
    let joined = (|| -> anyhow::Result<()> {
        match spec.kind {
            CallKind::Webrtc => {
                for _ in 0..2 {
                    legs.push(SimParticipant::join(
                        sig,
                        &room,
                        Leg::Join,
                        o.bind_ip,
                        epoch,
                    )?);
                }
            }
            CallKind::WhipWhep => {
                legs.push(SimParticipant::join(
                    sig,
                    &room,
                    Leg::Whip,
                    o.bind_ip,
                    epoch,
                )?);
                legs.push(SimParticipant::join(
                    sig,
                    &room,
                    Leg::Whep,
                    o.bind_ip,
                    epoch,
                )?);
            }
            CallKind::Sdes => {
                for _ in 0..2 {
                    legs.push(SimParticipant::join(
                        sig,
                        &room,
                        Leg::Sdes,
                        o.bind_ip,
                        epoch,
                    )?);
                }
            }
            CallKind::Plain => {
                for _ in 0..2 {
                    legs.push(SimParticipant::join(
                        sig,
                        &room,
                        Leg::Plain,
                        o.bind_ip,
                        epoch,
                    )?);
                }
            }
            CallKind::Ng => {
                let addr = o.ng.ok_or_else(|| anyhow!("no ng control socket"))?;
                if ng.is_none() {
                    *ng = Some(Ng::new(addr)?);
                }
                let ng = ng.as_mut().expect("just made");
                let call_id = format!("soak-{}@proxy", spec.n);
                let caller_sdes = spec.variant % 2 == 1;
                let callee = spec.variant % 3;
                let (caller_sock, mut caller) = phone(o.bind_ip, caller_sdes, spec.ssrc)?;
                let transport = match callee {
                    0 => "RTP/AVP",
                    1 => "RTP/SAVP",
                    _ => "UDP/TLS/RTP/SAVPF",
                };
                let mut offer = vec![
                    ("command".to_owned(), s("offer")),
                    ("call-id".to_owned(), s(&call_id)),
                    ("from-tag".to_owned(), s("caller")),
                    ("sdp".to_owned(), s(&caller.offer())),
                    ("transport-protocol".to_owned(), s(transport)),
                ];
                if callee == 2 {
                    offer.push(("ICE".to_owned(), s("force")));
                    offer.push(("rtcp-mux".to_owned(), Bencode::List(vec![s("offer")])));
                }
                let to_callee = ng
                    .call(offer)?
                    .remove("sdp")
                    .ok_or_else(|| anyhow!("ng offer: no sdp in the reply"))?;
                ng_call = Some((call_id.clone(), "caller".to_owned()));
                let answer = if callee == 2 {
                    let (p, answer) =
                        SimParticipant::answer_gateway_offer(&to_callee, &room, o.bind_ip, epoch)?;
                    legs.push(p);
                    answer
                } else {
                    let (sock, mut p) = phone(o.bind_ip, callee == 1, spec.ssrc ^ 0xffff)?;
                    let answer = p
                        .answer_offer(&to_callee)
                        .map_err(|e| anyhow!("the callee answering the gateway's offer: {e}"))?;
                    legs.push(SimParticipant::from_phone(&room, p, sock, epoch)?);
                    answer
                };
                let to_caller = ng
                    .call(vec![
                        ("command".to_owned(), s("answer")),
                        ("call-id".to_owned(), s(&call_id)),
                        ("from-tag".to_owned(), s("caller")),
                        ("to-tag".to_owned(), s("callee")),
                        ("sdp".to_owned(), s(&answer)),
                    ])?
                    .remove("sdp")
                    .ok_or_else(|| anyhow!("ng answer: no sdp in the reply"))?;
                caller
                    .accept_answer(&to_caller)
                    .map_err(|e| anyhow!("the caller taking the gateway's answer: {e}"))?;
                legs.insert(
                    0,
                    SimParticipant::from_phone(&room, caller, caller_sock, epoch)?,
                );
            }
        }
        Ok(())
    })();
    let call = LiveCall {
        ends_at: Instant::now() + spec.hold,
        spec,
        legs,
        ng_call,
    };
    if let Err(e) = joined {
        // What was made is taken down, as a client that gave up would.
        let shared = Shared::default();
        end(o, ng, &call, &shared);
        return Err(e);
    }
    Ok(call)
}

/// A phone on a socket of its own on `ip`: its address in its SDP, RTP and RTCP muxed.
fn phone(ip: IpAddr, sdes: bool, ssrc: u32) -> anyhow::Result<(UdpSocket, SimPhone)> {
    let sock = UdpSocket::bind((ip, 0)).context("binding a phone's socket")?;
    let mut p = if sdes {
        SimPhone::sdes(1, secrelay_srtp::Profile::AesCm128HmacSha1_80)
    } else {
        SimPhone::plain(1)
    };
    p.addr = sock.local_addr().context("a phone's socket address")?;
    p.ssrc = ssrc;
    p.seq = (ssrc >> 16) as u16;
    p.rtcp_mux = true;
    Ok((sock, p))
}

/// Ends a call that leaves: DELETE for the HTTP legs, ng `delete` for the proxy's call.
fn end(o: &SoakOptions, ng: &mut Option<Ng>, call: &LiveCall, shared: &Shared) {
    if let Some((call_id, tag)) = &call.ng_call {
        let r = (|| {
            if ng.is_none() {
                let addr = o.ng.ok_or_else(|| anyhow!("no ng control socket"))?;
                *ng = Some(Ng::new(addr)?);
            }
            ng.as_mut().expect("just made").call(vec![
                ("command".to_owned(), s("delete")),
                ("call-id".to_owned(), s(call_id)),
                ("from-tag".to_owned(), s(tag)),
            ])
        })();
        if let Err(e) = r {
            shared.signaling_error(format!("ng delete {call_id}: {e:#}"));
        }
    }
    for l in &call.legs {
        if l.location.is_empty() {
            continue;
        }
        match o.signaling.delete(&l.location) {
            Ok(200..=299) => {}
            Ok(status) => shared.signaling_error(format!(
                "{} call: DELETE {} answered {status}",
                call.spec.kind.name(),
                l.location
            )),
            Err(e) => shared.signaling_error(format!(
                "{} call: DELETE {}: {e:#}",
                call.spec.kind.name(),
                l.location
            )),
        }
    }
}

/// Drives every live call's legs (one mio poll), ends each when its hold is over.
fn media_thread(rx: Receiver<LiveCall>, jobs: &Sender<Job>, shared: &Shared, done: &AtomicBool) {
    let Ok(mut poll) = Poll::new() else {
        shared.error("the media thread's poll could not be made".into());
        return;
    };
    let mut events = Events::with_capacity(1024);
    let mut calls: HashMap<u64, LiveCall> = HashMap::new();
    loop {
        while let Ok(mut call) = rx.try_recv() {
            let n = call.spec.n;
            for (i, l) in call.legs.iter_mut().enumerate() {
                if let Err(e) = poll.registry().register(
                    l.socket_mut(),
                    Token((n as usize) * 4 + i),
                    Interest::READABLE,
                ) {
                    shared.error(format!("registering a leg's socket: {e}"));
                }
            }
            calls.insert(n, call);
        }
        if calls.is_empty() && done.load(Ordering::Relaxed) {
            return;
        }
        let now = Instant::now();
        let next = calls
            .values()
            .flat_map(|c| c.legs.iter().map(|l| l.deadline()).chain([c.ends_at]))
            .min()
            .unwrap_or(now + Duration::from_millis(20));
        let wait = next
            .saturating_duration_since(now)
            .min(Duration::from_millis(20));
        if poll.poll(&mut events, Some(wait)).is_err() {
            std::thread::sleep(Duration::from_millis(1));
        }
        let now = Instant::now();
        for ev in events.iter() {
            let (n, i) = ((ev.token().0 / 4) as u64, ev.token().0 % 4);
            if let Some(l) = calls.get_mut(&n).and_then(|c| c.legs.get_mut(i)) {
                if let Err(e) = l.on_readable(now) {
                    shared.error(format!("a leg's socket: {e}"));
                }
            }
        }
        let mut ended = Vec::new();
        for (n, c) in calls.iter_mut() {
            for l in c.legs.iter_mut() {
                if l.deadline() <= now {
                    l.on_timer(now);
                }
            }
            if now >= c.ends_at {
                ended.push(*n);
            }
        }
        for n in ended {
            let Some(mut call) = calls.remove(&n) else {
                continue;
            };
            record(&call, shared);
            shared
                .legs_live
                .fetch_sub(call.legs.len() as u64, Ordering::Relaxed);
            match call.spec.ending {
                Ending::Vanish => {
                    shared.tally(call.spec.kind, |t| t.vanished += 1);
                    drop(call);
                    shared.finished();
                }
                Ending::Leave => {
                    shared.tally(call.spec.kind, |t| t.left += 1);
                    for l in call.legs.iter_mut() {
                        l.close(now);
                    }
                    if jobs.send(Job::End(call)).is_err() {
                        shared.finished();
                    }
                }
            }
        }
    }
}

/// What a call's legs did, into the tallies; a leg that never connected or heard nothing is
/// an error.
fn record(call: &LiveCall, shared: &Shared) {
    let kind = call.spec.kind;
    let mut all_heard = true;
    for l in &call.legs {
        let connected = l.phase == Phase::Connected;
        // A WHIP publisher receives nothing: it counts as heard when it sent.
        let heard = if l.leg.receives() {
            l.received() > 0
        } else {
            l.sent > 0
        };
        all_heard &= heard;
        shared.tally(kind, |t| {
            t.legs_connected += u64::from(connected);
            t.legs_heard += u64::from(heard);
            t.sent += l.sent;
            t.received += l.received();
            t.rx_errors += l.rx_errors;
        });
        if !connected {
            shared.error(format!(
                "{} call {}: a {} leg never connected ({:?})",
                kind.name(),
                call.spec.n,
                l.leg.name(),
                l.phase
            ));
        } else if !heard {
            shared.error(format!(
                "{} call {}: a {} leg heard nothing in {:.1} s",
                kind.name(),
                call.spec.n,
                l.leg.name(),
                call.spec.hold.as_secs_f64()
            ));
        }
    }
    if all_heard {
        shared.tally(kind, |t| t.calls_talked += 1);
    }
}

/// The checks: nothing remains, every kind of call talked, memory back near its plateau.
fn verdict(
    o: &SoakOptions,
    samples: &[Sample],
    baseline: &Sample,
    kinds: &BTreeMap<CallKind, KindTally>,
    expected_kinds: &[CallKind],
) -> (Vec<Check>, String) {
    let mut checks = Vec::new();
    let end = samples.last().cloned().unwrap_or_default();
    let mut zero = |what: &str, v: Option<f64>, required: bool| {
        let found = v.map_or("not reported".to_owned(), |v| format!("{v:.0}"));
        checks.push(Check {
            what: what.to_owned(),
            expected: "0".into(),
            pass: v == Some(0.0) || (!required && v.is_none()),
            found,
        });
    };
    zero("participants left", end.participants, true);
    zero("rooms left", end.rooms, true);
    zero("telephony ports in use", end.rtp_ports, true);
    zero("ng calls held", end.ng_calls, o.ng.is_some());
    zero("routing entries (ufrags, addresses)", end.routes, true);
    zero(
        "HTTP resources (Location URLs) held",
        end.http_resources,
        true,
    );
    if let (Some(b), Some(e)) = (baseline.fds, end.fds) {
        checks.push(Check {
            what: "open file descriptors".into(),
            expected: format!("{b} (as before the first call)"),
            found: e.to_string(),
            pass: e == b,
        });
    }
    let load: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.phase == Some(SoakPhase::Load))
        .collect();
    let plateau = load
        .iter()
        .filter_map(|s| s.rss_mib)
        .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))));
    // glibc's malloc keeps what was freed in its arenas for the next allocation rather than
    // returning it to the kernel, so resident memory after everyone left stays near the
    // highest level the load reached rather than falling back to the start. What must not
    // happen is more than that: memory still growing once there is nothing to hold.
    let tolerance = |p: f64| (p * 0.05).max(2.0);
    let rule = "resident memory once every call has left ≤ the highest level under load + \
                max(5 %, 2 MiB): glibc's malloc keeps freed memory in its arenas for reuse \
                instead of returning it to the kernel, so after a load it stays near its \
                plateau instead of falling back to the start; the margin covers the drain's \
                own small allocations (sweeps, metrics scrapes). A leak shows as memory above \
                the plateau, and, in runs of 5 minutes or more, as growth under steady load: \
                the median of the last quarter of the load ≤ the median of its second \
                quarter + max(10 %, 4 MiB)"
        .to_owned();
    if let (Some(p), Some(e)) = (plateau, end.rss_mib) {
        checks.push(Check {
            what: "resident memory after every call left".into(),
            expected: format!(
                "≤ {:.1} MiB (plateau {p:.1} MiB + {:.1})",
                p + tolerance(p),
                tolerance(p)
            ),
            found: format!(
                "{e:.1} MiB (at the start {:.1} MiB)",
                baseline.rss_mib.unwrap_or(0.0)
            ),
            pass: e <= p + tolerance(p),
        });
    }
    let load_secs = match (load.first(), load.last()) {
        (Some(a), Some(b)) => b.t - a.t,
        _ => 0.0,
    };
    if load_secs >= 300.0 {
        let q = load.len() / 4;
        let median = |v: &[&Sample]| {
            let mut m: Vec<f64> = v.iter().filter_map(|s| s.rss_mib).collect();
            m.sort_by(f64::total_cmp);
            m.get(m.len() / 2).copied()
        };
        if let (Some(second), Some(last)) = (median(&load[q..2 * q]), median(&load[3 * q..])) {
            let tol = (second * 0.10).max(4.0);
            checks.push(Check {
                what: "resident memory under steady load (medians of the 2nd and 4th quarters)"
                    .into(),
                expected: format!("last ≤ {:.1} MiB ({second:.1} + {tol:.1})", second + tol),
                found: format!("{last:.1} MiB"),
                pass: last <= second + tol,
            });
        }
    }
    for k in expected_kinds {
        let t = kinds.get(k).cloned().unwrap_or_default();
        checks.push(Check {
            what: format!("{} calls talked (every leg heard the other side)", k.name()),
            expected: "≥ 1".into(),
            found: format!("{} of {}", t.calls_talked, t.started),
            pass: t.calls_talked >= 1,
        });
    }
    let vanished: u64 = kinds.values().map(|t| t.vanished).sum();
    let left: u64 = kinds.values().map(|t| t.left).sum();
    checks.push(Check {
        what: "calls that left and that vanished".into(),
        expected: if o.vanish > 0.0 {
            "both ≥ 1".into()
        } else {
            "≥ 1 left (--vanish 0: none vanish)".into()
        },
        found: format!("{left} left, {vanished} vanished"),
        pass: left >= 1 && (vanished >= 1 || o.vanish <= 0.0),
    });
    (checks, rule)
}

impl SoakReport {
    /// The verdict: each check, what was expected and found.
    fn verdict_table(&self) -> Table {
        let mut verdict = Table::new(
            "verdict",
            "Verdict: after every call has left, nothing remains",
        )
        .col("check", "check")
        .col("expected", "expected")
        .col("found", "found")
        .col("result", "result");
        for c in &self.checks {
            verdict.push([
                ("check", c.what.clone()),
                ("expected", c.expected.clone()),
                ("found", c.found.clone()),
                ("result", if c.pass { "pass" } else { "FAIL" }.to_owned()),
            ]);
        }
        verdict
    }

    /// The calls by kind: started, set up, left or vanished, their legs and media.
    fn calls_table(&self) -> Table {
        let mut calls = Table::new("calls", "Calls by kind")
            .col("kind", "kind")
            .col_unit("started", "started", "")
            .col_unit("set_up", "set up", "")
            .col_unit("setup_failed", "set-up failed", "")
            .col_unit("left", "left", "")
            .col_unit("vanished", "vanished", "")
            .col_unit("legs", "legs", "")
            .col_unit("legs_connected", "connected", "")
            .col_unit("legs_heard", "heard media", "")
            .col_unit("calls_talked", "calls talked", "")
            .col_unit("sent", "packets sent", "")
            .col_unit("received", "received", "")
            .col("legs_are", "legs");
        for (k, t) in &self.kinds {
            calls.push([
                ("kind", crate::frame::Cell::text(k.name())),
                ("started", (t.started as f64).into()),
                ("set_up", (t.set_up as f64).into()),
                ("setup_failed", (t.setup_failed as f64).into()),
                ("left", (t.left as f64).into()),
                ("vanished", (t.vanished as f64).into()),
                ("legs", (t.legs as f64).into()),
                ("legs_connected", (t.legs_connected as f64).into()),
                ("legs_heard", (t.legs_heard as f64).into()),
                ("calls_talked", (t.calls_talked as f64).into()),
                ("sent", (t.sent as f64).into()),
                ("received", (t.received as f64).into()),
                ("legs_are", crate::frame::Cell::text(k.legs())),
            ]);
        }
        calls
    }

    /// The samples over time: every step-th (about 60 in all), the first of each phase and
    /// the last.
    fn timeline_table(&self) -> Table {
        let mut timeline = Table::new("timeline", "Over time (every sample is in the JSON)")
            .col_unit("t", "t", "s")
            .col("phase", "phase")
            .col_unit("calls_live", "calls live", "")
            .col_unit("calls_done", "calls done", "")
            .col_unit("participants", "participants", "")
            .col_unit("rooms", "rooms", "")
            .col_unit("rtp_ports", "ports in use", "")
            .col_unit("ng_calls", "ng calls", "")
            .col_unit("routes", "routes", "")
            .col_unit("http_resources", "HTTP resources", "")
            .col_unit("rss", "RSS", "MiB")
            .col_unit("fds", "fds", "")
            .col_unit("threads", "threads", "")
            .col_unit("errors", "errors", "");
        let step = self.samples.len().div_ceil(60).max(1);
        let n = self.samples.len();
        for (i, s) in self.samples.iter().enumerate() {
            // Every step-th sample, the first of each phase, and the last.
            let phase_change = i == 0 || self.samples[i - 1].phase != s.phase;
            if !(i % step == 0 || phase_change || i + 1 == n) {
                continue;
            }
            let opt =
                |v: Option<f64>| v.map_or(crate::frame::Cell::text("-"), crate::frame::Cell::num);
            timeline.push([
                ("t", crate::frame::Cell::num((s.t * 10.0).round() / 10.0)),
                (
                    "phase",
                    crate::frame::Cell::text(s.phase.map_or("", |p| p.name())),
                ),
                ("calls_live", (s.calls_live as f64).into()),
                ("calls_done", (s.calls_done as f64).into()),
                ("participants", opt(s.participants)),
                ("rooms", opt(s.rooms)),
                ("rtp_ports", opt(s.rtp_ports)),
                ("ng_calls", opt(s.ng_calls)),
                ("routes", opt(s.routes)),
                ("http_resources", opt(s.http_resources)),
                ("rss", opt(s.rss_mib.map(|v| (v * 10.0).round() / 10.0))),
                ("fds", opt(s.fds.map(|v| v as f64))),
                ("threads", opt(s.threads.map(|v| v as f64))),
                ("errors", (s.errors as f64).into()),
            ]);
        }
        timeline
    }

    /// Lines over time: what the gateway holds, participants by leg, memory, descriptors.
    fn plots(&self) -> Vec<Plot> {
        let series = |name: &str, f: &dyn Fn(&Sample) -> Option<f64>| Series {
            name: name.to_owned(),
            points: self
                .samples
                .iter()
                .filter_map(|s| Some((s.t, f(s)?)))
                .collect(),
        };
        let line_plot = |id: &str, title: &str, y: &str, series: Vec<Series>| Plot {
            id: id.to_owned(),
            title: title.to_owned(),
            kind: PlotKind::Lines,
            x_label: "time since start (s)".into(),
            y_label: y.to_owned(),
            log_y: false,
            categories: Vec::new(),
            series: series
                .into_iter()
                .filter(|s| !s.points.is_empty())
                .collect(),
        };
        vec![
            line_plot(
                "soak_state",
                "Calls live and what the gateway holds",
                "count",
                vec![
                    series("calls live (load generator)", &|s| {
                        Some(s.calls_live as f64)
                    }),
                    series("participants", &|s| s.participants),
                    series("rooms", &|s| s.rooms),
                    series("telephony ports in use", &|s| s.rtp_ports),
                    series("ng calls", &|s| s.ng_calls),
                    series("routing entries", &|s| s.routes),
                    series("HTTP resources", &|s| s.http_resources),
                ],
            ),
            line_plot(
                "soak_by_leg",
                "Participants by kind of leg",
                "participants",
                ["webrtc", "sdes", "plain"]
                    .into_iter()
                    .map(|k| series(k, &|s| s.by_leg.get(k).copied()))
                    .collect(),
            ),
            line_plot(
                "soak_memory",
                "The gateway's resident memory",
                "RSS (MiB)",
                vec![series("VmRSS", &|s| s.rss_mib)],
            ),
            line_plot(
                "soak_fds",
                "The gateway's open file descriptors and threads",
                "count",
                vec![
                    series("open file descriptors", &|s| s.fds.map(|v| v as f64)),
                    series("threads", &|s| s.threads.map(|v| v as f64)),
                    series("HTTP(S) connections open", &|s| s.http_connections),
                ],
            ),
        ]
    }

    /// The verdict in words, the load, the memory rule, the command, the gateway's timeouts,
    /// errors and descriptors left open.
    fn notes(&self, o: &SoakOptions) -> Vec<String> {
        let mut notes = vec![
            format!(
                "Verdict: {}.",
                if self.pass {
                    "after every call had left, nothing remained".to_owned()
                } else {
                    let failed: Vec<&str> = self
                        .checks
                        .iter()
                        .filter(|c| !c.pass)
                        .map(|c| c.what.as_str())
                        .collect();
                    format!("FAILED: {}", failed.join("; "))
                }
            ),
            format!(
                "{} calls over {:.0} s of arrivals and leaving ({} at most live, {} at the peak), holding {:.1} s on average (uniform from half to one and a half of it); {:.0} % vanished instead of leaving; the gateway held nothing {:.1} s after the last call.",
                self.calls,
                self.load_secs,
                self.max_live,
                self.peak_live,
                self.hold_secs,
                self.vanish * 100.0,
                self.drain_secs
            ),
            format!("Memory rule: {}.", self.memory_rule),
            format!("Command: `{}`.", o.command),
        ];
        if let Some((consent, media)) = o.gateway_timeouts {
            notes.push(format!(
                "The gateway ran with an ICE consent timeout of {consent} s, a telephony media timeout of {media} s (its ng sweep as often as the media timeout) and the resources of sessions that ended on their own kept {consent} s for a late DELETE (ended_resource_grace_secs), so that calls that vanish end within the run."
            ));
        }
        if self.error_count > 0 {
            notes.push(format!(
                "{} errors; the first: {}",
                self.error_count,
                self.errors
                    .iter()
                    .take(5)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(" | ")
            ));
        }
        if !self.extra_fds.is_empty() {
            notes.push(format!(
                "Descriptors open at the end that were not at the start: {}",
                self.extra_fds.join(", ")
            ));
        }
        notes
    }

    /// The study report: the verdict, the kinds of call, the timeline (at most 60 rows), and
    /// plots of everything sampled.
    pub fn study(&self, o: &SoakOptions, elapsed_s: f64) -> StudyReport {
        let verdict = self.verdict_table();
        let calls = self.calls_table();
        let timeline = self.timeline_table();
        let plots = self.plots();
        let notes = self.notes(o);
        StudyReport {
            study: "soak".into(),
            title: "Soak: calls of every kind joining and leaving, and what the gateway keeps".into(),
            seeds: Vec::new(),
            method: Method {
                timed: "Nothing is timed: the gateway's state is sampled once a second (/proc/PID/status, /proc/PID/fd, GET /metrics) while calls arrive, talk and leave, then until it holds nothing.".into(),
                quick: o.quick,
                smoke: false,
                warmup_ms: 0.0,
                runs: 1,
                run_ms: elapsed_s * 1e3,
                harness_overhead_ns: 0.0,
                spread: "one run".into(),
                instructions: "not counted".into(),
                machine: crate::machine::Machine::detect(),
                versions: crate::versions(),
                date: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
                elapsed_s,
            },
            tables: vec![verdict, calls, timeline],
            plots,
            notes,
        }
    }
}

/// What `lab soak --json` writes: the lab's usual output (the study) and every sample.
#[derive(Debug, Serialize)]
pub struct SoakOutput {
    /// The study, as every lab run writes it.
    #[serde(flatten)]
    pub lab: LabOutput,
    /// Every sample, the checks and the tallies.
    pub soak: SoakReport,
}

/// A `secrelay serve` child process for the soak: HTTPS (a throw-away CA), ng, short timeouts.
pub struct ChildGateway {
    child: Child,
    /// The HTTPS base URL.
    pub url: String,
    /// The CA certificate to trust.
    pub ca: PathBuf,
    /// The ng control address.
    pub ng: SocketAddr,
    /// ICE consent and telephony media timeouts, seconds.
    pub timeouts: (f64, f64),
    /// Its admin key (for `/metrics`).
    pub admin: secrelay_testkit::AdminKeyFile,
    _config: tempfile::NamedTempFile,
}

impl ChildGateway {
    /// Starts `exe serve` on loopback with `workers` workers, the consent and media timeouts
    /// `timeout` seconds, and waits for its banner.
    pub fn start(
        exe: &std::path::Path,
        workers: usize,
        timeout: f64,
    ) -> anyhow::Result<ChildGateway> {
        let mut config = tempfile::NamedTempFile::new().context("the gateway's config file")?;
        use std::io::Write as _;
        writeln!(
            config,
            "consent_timeout_secs = {timeout:?}\nmedia_timeout_secs = {timeout:?}\nended_resource_grace_secs = {timeout:?}\nrtp_ports = \"42000-45999\"\ndrain_secs = 0.2"
        )
        .context("writing the gateway's config file")?;
        let admin = secrelay_testkit::AdminKeyFile::new()?;
        let mut child = Command::new(exe)
            .arg("serve")
            .arg("--config")
            .arg(config.path())
            .arg("--admin-key-file")
            .arg(admin.path())
            .args([
                "--https",
                "127.0.0.1:0",
                "--udp",
                "127.0.0.1:0",
                "--ng",
                "127.0.0.1:0",
            ])
            .args(["--workers", &workers.to_string(), "--log", "warn"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {} serve", exe.display()))?;
        let (banner, seen) = read_banner(&mut child, "gateway")?;
        let parsed = banner.and_then(|b| Some((b.url()?, b.ca?, b.ng?)));
        let Some((url, ca, ng)) = parsed else {
            let _ = child.kill();
            let _ = child.wait();
            bail!("the gateway's banner did not name its HTTPS URL, CA and ng address: {seen}");
        };
        Ok(ChildGateway {
            child,
            url,
            ca,
            ng,
            timeouts: (timeout, timeout),
            admin,
            _config: config,
        })
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Stops it (SIGTERM, then a kill after 5 s).
    pub fn stop(mut self) {
        self.stop_inner();
    }

    fn stop_inner(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let end = Instant::now() + Duration::from_secs(5);
        while Instant::now() < end {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The banner of a `secrelay serve` child whose stderr is piped (`None` if it printed none),
/// and every line it printed until then; its log after that goes on to ours, each line after
/// `who: `, from a thread that keeps reading so that the pipe never fills.
pub(crate) fn read_banner(
    child: &mut Child,
    who: &'static str,
) -> anyhow::Result<(Option<secrelay_gateway::server::BannerReader>, String)> {
    let mut lines = BufReader::new(child.stderr.take().context("the child's stderr")?).lines();
    let mut seen = String::new();
    let banner = secrelay_gateway::server::BannerReader::read(&mut lines, |l| {
        seen.push_str(l);
        seen.push('\n');
    });
    std::thread::spawn(move || {
        for l in lines.map_while(Result::ok) {
            eprintln!("{who}: {l}");
        }
    });
    Ok((banner, seen))
}

impl Drop for ChildGateway {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.stop_inner();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_text_is_read_with_labels() {
        let m = metrics(
            "# HELP x y\nsecrelay_rooms 3\nsecrelay_routes{key=\"ufrag\"} 2\nsecrelay_participants_by_leg{leg=\"sdes\"} 1\n# EOF\n",
        );
        assert_eq!(m["secrelay_rooms"], 3.0);
        assert_eq!(m["secrelay_routes{key=\"ufrag\"}"], 2.0);
        assert_eq!(m["secrelay_participants_by_leg{leg=\"sdes\"}"], 1.0);
        assert_eq!(m.len(), 3);
    }

    #[test]
    fn the_default_hold_keeps_most_of_max_live_busy() {
        // 3,000 calls over 30 minutes, 60 live at most: 0.7 × 60 × 1800 / 3000 = 25.2 s.
        let h = SoakOptions::default_hold(Duration::from_secs(1800), 3000, 60);
        assert!((h.as_secs_f64() - 25.2).abs() < 1e-9);
        assert_eq!(
            SoakOptions::default_hold(Duration::from_secs(20), 1000, 10),
            Duration::from_secs(3)
        );
    }

    fn sample(phase: SoakPhase, t: f64, rss: f64) -> Sample {
        Sample {
            t,
            phase: Some(phase),
            participants: Some(0.0),
            rooms: Some(0.0),
            rtp_ports: Some(0.0),
            ng_calls: Some(0.0),
            routes: Some(0.0),
            http_resources: Some(0.0),
            rss_mib: Some(rss),
            fds: Some(20),
            ..Sample::default()
        }
    }

    #[test]
    fn the_verdict_fails_on_what_remains_and_on_memory_above_the_plateau() {
        let o = SoakOptions {
            signaling: Signaling::new("http://127.0.0.1:1"),
            ng: None,
            server_pid: Some(1),
            duration: Duration::from_secs(20),
            calls: 10,
            max_live: 4,
            hold: Duration::from_secs(3),
            vanish: 0.25,
            drain_timeout: Duration::from_secs(10),
            bind_ip: "127.0.0.1".parse().unwrap(),
            signaling_threads: 1,
            seed: 1,
            quick: true,
            progress: false,
            command: String::new(),
            gateway_timeouts: None,
        };
        let mut kinds = BTreeMap::new();
        for k in kinds_expected(&o) {
            kinds.insert(
                k,
                KindTally {
                    started: 2,
                    calls_talked: 2,
                    left: 1,
                    vanished: 1,
                    ..KindTally::default()
                },
            );
        }
        let base = sample(SoakPhase::Baseline, 0.0, 10.0);
        let mut samples = vec![
            base.clone(),
            sample(SoakPhase::Load, 1.0, 30.0),
            sample(SoakPhase::Load, 2.0, 40.0),
            sample(SoakPhase::Settle, 3.0, 39.0),
        ];
        let (checks, _) = verdict(&o, &samples, &base, &kinds, &kinds_expected(&o));
        assert!(checks.iter().all(|c| c.pass), "{checks:?}");
        // A room left behind, a descriptor more, memory past the plateau's margin.
        let end = samples.last_mut().unwrap();
        end.rooms = Some(1.0);
        end.fds = Some(21);
        end.rss_mib = Some(43.0);
        let (checks, _) = verdict(&o, &samples, &base, &kinds, &kinds_expected(&o));
        let failed: Vec<&str> = checks
            .iter()
            .filter(|c| !c.pass)
            .map(|c| c.what.as_str())
            .collect();
        assert_eq!(
            failed,
            [
                "rooms left",
                "open file descriptors",
                "resident memory after every call left"
            ]
        );
        // A kind that never talked fails too.
        kinds.get_mut(&CallKind::Sdes).unwrap().calls_talked = 0;
        let (checks, _) = verdict(&o, &samples, &base, &kinds, &kinds_expected(&o));
        assert!(checks
            .iter()
            .any(|c| !c.pass && c.what.starts_with("sdes calls talked")));
    }
}
