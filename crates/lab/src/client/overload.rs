//! `secrelay lab overload`: more calls offered than the gateway can carry, and what admission
//! control does with them (`secrelay_gateway::admission`). Established calls run throughout;
//! a storm of new calls arrives in waves (each wave's admitted calls start talking before the
//! next arrives, as a real surge does) until the storm has offered its calls; then the storm's
//! calls leave and the gateway must take calls again.
//!
//! Three windows, measured the same way: **before** (established calls only), **storm** (from
//! the first storm offer to the storm calls' end) and **after** (once the gateway sheds nothing
//! again). In each: the established calls' delivery (packets their receivers got against what
//! their peers sent), the gateway's relay latency (its histogram's delta), the busiest worker's
//! load and what it shed, and the handshakes it deferred. Storm offers are counted by what the
//! gateway answered (admitted, 503 with the overload reason, other refusals).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use serde::Serialize;

use secrelay_testkit::fleet::{self, FleetConfig, FleetProgress};
use secrelay_testkit::participant::{JoinRefused, Phase};
use secrelay_testkit::Signaling;

use super::load::{proc_sample, relay_quantile, scrape, Scrape};

/// What to run.
#[derive(Debug, Clone)]
pub struct OverloadOptions {
    /// The established calls (their rooms, legs, media); its duration is ignored (they run
    /// until the last window ends).
    pub established: FleetConfig,
    /// Participants the storm offers (in rooms of `established.per_room`, the same legs and
    /// media).
    pub storm_participants: usize,
    /// Waves the storm arrives in.
    pub waves: usize,
    /// Seconds of each measuring window (before, after) and of the storm calls' media.
    pub window: Duration,
    /// The gateway's pid, for its CPU time (`/proc`).
    pub server_pid: Option<u32>,
}

/// One window's figures.
#[derive(Debug, Clone, Serialize)]
pub struct WindowReport {
    /// `before`, `storm` or `after`.
    pub name: &'static str,
    /// Its length, s.
    pub secs: f64,
    /// Packets the established calls sent in it.
    pub established_sent: u64,
    /// Packets their receivers got in it.
    pub established_received: u64,
    /// `established_received / established_sent` (each packet has one receiver in a call).
    pub established_delivery: f64,
    /// The gateway's relay latency p50 and p99 over the window (all calls), µs (bucket upper
    /// bounds).
    pub relay_p50_us: Option<f64>,
    /// p99, µs.
    pub relay_p99_us: Option<f64>,
    /// The busiest worker's load, the highest sampled (every 250 ms).
    pub load_max: f64,
    /// The most it shed (0 nothing, 1 new handshakes, 2 new handshakes and new rooms and legs).
    pub shedding_max: f64,
    /// DTLS flights of handshakes not started, deferred (`overload` drops).
    pub handshakes_deferred: f64,
    /// The gateway's CPU seconds in the window.
    pub gateway_cpu_secs: Option<f64>,
}

/// What the overload run measured.
#[derive(Debug, Clone, Serialize)]
pub struct OverloadReport {
    /// Established calls' participants, and how many connected.
    pub established: usize,
    /// Connected.
    pub established_connected: usize,
    /// Established participants still connected at the end.
    pub established_connected_at_end: usize,
    /// Storm participants offered.
    pub storm_offered: usize,
    /// Admitted (answered 201).
    pub storm_admitted: usize,
    /// Of those, connected (their handshakes done, deferred or not).
    pub storm_connected: usize,
    /// Refused with 503 for overload.
    pub storm_refused_overload: usize,
    /// Refused otherwise (another status or error), with the first reason.
    pub storm_refused_other: usize,
    /// The first refusal's reason, as the gateway gave it.
    pub first_refusal: Option<String>,
    /// The windows.
    pub windows: Vec<WindowReport>,
    /// Seconds from the storm calls' end until the gateway shed nothing.
    pub recovery_secs: Option<f64>,
    /// What a fresh call offered after recovery got (201 expected).
    pub after_join_status: Option<u16>,
}

/// Samples the gateway's `/metrics` every 100 ms on a thread of its own until stopped: the
/// highest load and shedding seen.
struct Sampler {
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<anyhow::Result<(f64, f64)>>,
}

impl Sampler {
    fn start(base: &Signaling) -> Sampler {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (base, flag) = (base.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let (mut load, mut shed) = (0.0f64, 0.0f64);
            loop {
                let s = scrape(&base)?;
                load = load.max(s.worker_load_max);
                shed = shed.max(s.shedding_max);
                if flag.load(Ordering::Relaxed) {
                    return Ok((load, shed));
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        Sampler { stop, thread }
    }

    /// Stops it: the highest load and shedding it saw.
    fn stop(self) -> anyhow::Result<(f64, f64)> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .join()
            .map_err(|_| anyhow::anyhow!("the /metrics sampler panicked"))?
    }
}

/// Waits `d` with a sampler running: the highest load and shedding seen.
fn sample_for(base: &Signaling, d: Duration) -> anyhow::Result<(f64, f64)> {
    let s = Sampler::start(base);
    std::thread::sleep(d);
    s.stop()
}

struct Mark {
    at: Instant,
    scrape: Scrape,
    sent: u64,
    received: u64,
    cpu: Option<f64>,
}

fn mark(base: &Signaling, progress: &FleetProgress, pid: Option<u32>) -> anyhow::Result<Mark> {
    Ok(Mark {
        at: Instant::now(),
        scrape: scrape(base)?,
        sent: progress.sent.load(Ordering::Relaxed),
        received: progress.received.load(Ordering::Relaxed),
        cpu: pid.map(proc_sample).transpose()?.map(|p| p.cpu_secs),
    })
}

fn window(name: &'static str, a: &Mark, b: &Mark, load_shed: (f64, f64)) -> WindowReport {
    let sent = b.sent - a.sent;
    let received = b.received - a.received;
    let us = |q| relay_quantile(&a.scrape, &b.scrape, q).map(|s| s * 1e6);
    WindowReport {
        name,
        secs: b.at.duration_since(a.at).as_secs_f64(),
        established_sent: sent,
        established_received: received,
        established_delivery: if sent == 0 {
            0.0
        } else {
            received as f64 / sent as f64
        },
        relay_p50_us: us(0.5),
        relay_p99_us: us(0.99),
        load_max: load_shed.0,
        shedding_max: load_shed.1,
        handshakes_deferred: b.scrape.drops_of("overload") - a.scrape.drops_of("overload"),
        gateway_cpu_secs: a.cpu.zip(b.cpu).map(|(x, y)| y - x),
    }
}

/// Runs the scenario against the gateway the established configuration's signaling names.
pub fn run(o: &OverloadOptions) -> anyhow::Result<OverloadReport> {
    let base = o.established.signaling.clone();
    scrape(&base).context("the gateway's /metrics (is --target a secrelay gateway?)")?;
    if o.waves == 0 || o.storm_participants == 0 {
        bail!("the storm needs at least one call and one wave");
    }
    // The established calls: joined, then run until told to stop.
    let mut est_cfg = o.established.clone();
    est_cfg.duration = Duration::from_secs(24 * 3600);
    let est_progress = Arc::new(FleetProgress::default());
    let epoch = Instant::now();
    let established = fleet::join_all(&est_cfg, &est_progress, epoch)
        .context("the established calls (before any overload)")?;
    let n_est = established.len();
    let cfg2 = est_cfg.clone();
    let p2 = est_progress.clone();
    let est_thread = std::thread::spawn(move || fleet::run_media(&cfg2, established, p2));
    let until = Instant::now() + est_cfg.connect_timeout;
    while (est_progress.connected.load(Ordering::Relaxed) as usize) < n_est
        && Instant::now() < until
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(500));

    // Before.
    let m0 = mark(&base, &est_progress, o.server_pid)?;
    let ls = sample_for(&base, o.window)?;
    let m1 = mark(&base, &est_progress, o.server_pid)?;
    let before = window("before", &m0, &m1, ls);

    // The storm: waves of calls, each wave's admitted calls talking until the storm ends.
    let per_room = o.established.per_room.max(1);
    let rooms = o.storm_participants.div_ceil(per_room);
    let wave_rooms = rooms.div_ceil(o.waves);
    let storm_progress = Arc::new(FleetProgress::default());
    let storm_end = Instant::now() + o.window;
    let spacing = o.window / (o.waves as u32 + 1);
    let (mut admitted, mut refused_overload, mut refused_other) = (0, 0, 0);
    let mut first_refusal = None;
    let mut wave_threads = Vec::new();
    let sampler = Sampler::start(&base);
    for w in 0..o.waves {
        let first = w * wave_rooms;
        if first >= rooms {
            break;
        }
        let mut cfg = o.established.clone();
        cfg.room_prefix = format!("storm-w{w}-");
        cfg.rooms = wave_rooms.min(rooms - first);
        let (joined, refused) = fleet::join_some(&cfg, &storm_progress, epoch);
        admitted += joined.len();
        for e in &refused {
            match e.downcast_ref::<JoinRefused>() {
                Some(r) if r.status == 503 => refused_overload += 1,
                _ => refused_other += 1,
            }
            if first_refusal.is_none() {
                first_refusal = Some(format!("{e:#}"));
            }
        }
        cfg.duration = storm_end.saturating_duration_since(Instant::now());
        let sp = storm_progress.clone();
        wave_threads.push(std::thread::spawn(move || {
            let r = fleet::run_media(&cfg, joined, sp);
            if let Ok((done, _)) = &r {
                fleet::leave_all(&cfg, done);
            }
            r
        }));
        std::thread::sleep(spacing);
    }
    let mut storm_connected = 0;
    for t in wave_threads {
        let (done, _) = t
            .join()
            .map_err(|_| anyhow::anyhow!("a storm thread panicked"))??;
        storm_connected += done
            .iter()
            .filter(|p| matches!(p.phase, Phase::Connected))
            .count();
    }
    let m2 = mark(&base, &est_progress, o.server_pid)?;
    let storm = window("storm", &m1, &m2, sampler.stop()?);

    // Recovery: until no worker sheds, then a fresh call.
    let t = Instant::now();
    let mut recovery_secs = None;
    while t.elapsed() < Duration::from_secs(30) {
        if scrape(&base)?.shedding_max == 0.0 {
            recovery_secs = Some(t.elapsed().as_secs_f64());
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut probe_cfg = o.established.clone();
    probe_cfg.room_prefix = "after-".into();
    probe_cfg.rooms = 1;
    let probe_progress = FleetProgress::default();
    let (probe, probe_refused) = fleet::join_some(&probe_cfg, &probe_progress, epoch);
    let after_join_status = match probe_refused.first() {
        None => Some(201),
        Some(e) => e.downcast_ref::<JoinRefused>().map(|r| r.status),
    };
    fleet::leave_all(&probe_cfg, &probe);

    // After.
    let m3 = mark(&base, &est_progress, o.server_pid)?;
    let ls = sample_for(&base, o.window)?;
    let m4 = mark(&base, &est_progress, o.server_pid)?;
    let after = window("after", &m3, &m4, ls);

    est_progress.stop.store(true, Ordering::Relaxed);
    let (est_done, _) = est_thread
        .join()
        .map_err(|_| anyhow::anyhow!("the established calls' thread panicked"))??;
    let connected_at_end = est_done
        .iter()
        .filter(|p| matches!(p.phase, Phase::Connected))
        .count();
    fleet::leave_all(&est_cfg, &est_done);
    Ok(OverloadReport {
        established: n_est,
        established_connected: est_progress.connected.load(Ordering::Relaxed) as usize,
        established_connected_at_end: connected_at_end,
        storm_offered: rooms * per_room,
        storm_admitted: admitted,
        storm_connected,
        storm_refused_overload: refused_overload,
        storm_refused_other: refused_other,
        first_refusal,
        windows: vec![before, storm, after],
        recovery_secs,
        after_join_status,
    })
}
