//! `lab calls` (`003_…`): the delay SRTP adds per packet as the number of concurrent G.711
//! calls grows, per batch engine, and the delay the whole gateway adds through real sockets.
//!
//! **SRTP only** (isolates the engine): N calls are 2N streams of 172-byte packets every 20 ms
//! at random phases. Time runs in rounds of 200 ms: the round's packets are protected by their
//! senders beforehand (not timed), then replayed in real time: whenever packets are due, the
//! ones that arrived make a batch, which the engine unprotects with the sender's key and
//! protects again with the receiver's (the gateway's K1 → K2 work); each packet's delay is the
//! instant its batch finished minus the instant it was due. So queueing behind earlier
//! packets counts, as it does in a gateway, and an engine that cannot keep up shows delays
//! growing through the round. A first round is replayed but not measured: in it every stream
//! is made on its first packet (and each engine's forms of its keys), all 2N within 20 ms, a
//! start-up burst that real calls, arriving over time, never make.
//!
//! **Through the gateway**: the gateway (`secrelay_gateway::server`) in-process on loopback,
//! N calls as N rooms of two of the lab's simulated WebRTC participants; the delay is the
//! gateway's own relay latency histogram (socket read to socket write), and loss is counted at
//! the receivers.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use secrelay_srtp::batch::{Engine, Op, Packet, PacketResult, SerialEngine};
use secrelay_srtp::{Context, MasterKey, Policy, Profile};

use crate::frame::{Cell, Plot, PlotKind, Series, StudyReport, Table};
use crate::{Ctx, Study};

/// The study.
pub struct CallsStudy;

/// Packets of a G.711 20 ms call, RTP header included.
const PACKET: usize = 172;
/// Length of one pre-generated round.
const ROUND: Duration = Duration::from_millis(200);

/// Delay percentiles of one run, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Delays {
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest.
    pub max: f64,
    /// Mean.
    pub mean: f64,
    /// Packets measured.
    pub packets: usize,
}

impl Delays {
    /// Percentiles of delays given in nanoseconds.
    pub fn of(mut ns: Vec<u64>) -> Option<Delays> {
        if ns.is_empty() {
            return None;
        }
        ns.sort_unstable();
        let q = |p: f64| {
            let i = ((p * ns.len() as f64).ceil() as usize).clamp(1, ns.len()) - 1;
            ns[i] as f64 / 1e3
        };
        Some(Delays {
            p50: q(0.5),
            p90: q(0.9),
            p99: q(0.99),
            max: *ns.last().expect("not empty") as f64 / 1e3,
            mean: ns.iter().sum::<u64>() as f64 / ns.len() as f64 / 1e3,
            packets: ns.len(),
        })
    }
}

fn key(profile: Profile, seed: u64) -> MasterKey {
    let mut raw = vec![0u8; profile.key_len() + profile.salt_len()];
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    for b in &mut raw {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    MasterKey::from_concatenated(profile, &raw).expect("lengths from the profile")
}

/// Runs N calls through `engine` for `rounds` rounds; the per-packet delays in ns.
pub fn srtp_only(
    engine: &dyn Engine,
    calls: usize,
    rounds: usize,
    profile: Profile,
) -> anyhow::Result<Vec<u64>> {
    let streams = calls * 2;
    let mut senders = Vec::with_capacity(streams);
    // The gateway's contexts: 2s receives stream s (K1), 2s+1 sends it on (K2).
    let mut gateway = Vec::with_capacity(streams * 2);
    for s in 0..streams {
        let k1 = key(profile, s as u64 * 2 + 1);
        let k2 = key(profile, s as u64 * 2 + 2);
        senders.push(Context::new(Policy::new(k1.clone()).any_outbound())?);
        gateway.push(Context::new(Policy::new(k1).any_inbound())?);
        gateway.push(Context::new(Policy::new(k2).any_outbound())?);
    }
    // Each stream's phase in the 20 ms period, spread evenly with a stride so neighbours differ.
    let period_ns = 20_000_000u64;
    let phase = |s: usize| (s as u64).wrapping_mul(7_919_011) % period_ns;
    let mut seq = vec![0u16; streams];
    let mut delays = Vec::with_capacity(streams * 10 * rounds);
    let round_ns = ROUND.as_nanos() as u64;
    let per_round = (round_ns / period_ns) as usize;
    // One more round than measured: the first, a warm-up, makes every stream (and each
    // engine's forms of its keys) on its first packet, 2N of them in the first 20 ms, which is
    // a start-up burst, not the steady state of N calls.
    for r in 0..=rounds {
        // Generate: (due offset within the round, stream, buffer).
        let mut arrivals: Vec<(u64, usize, Vec<u8>)> = Vec::with_capacity(streams * per_round);
        for s in 0..streams {
            for k in 0..per_round {
                let due = phase(s) + k as u64 * period_ns;
                let mut buf = vec![0u8; PACKET + 16];
                buf[0] = 0x80;
                let sq = seq[s];
                seq[s] = sq.wrapping_add(1);
                buf[2..4].copy_from_slice(&sq.to_be_bytes());
                let ts = (r * per_round + k) as u32 * 160;
                buf[4..8].copy_from_slice(&ts.to_be_bytes());
                buf[8..12].copy_from_slice(&(0x1000_0000 + s as u32).to_be_bytes());
                let n = senders[s]
                    .protect_rtp(&mut buf, PACKET)
                    .context("protecting a generated packet")?;
                buf.truncate(n);
                buf.resize(PACKET + 16, 0);
                arrivals.push((due, s, buf));
            }
        }
        arrivals.sort_by_key(|a| a.0);
        // Replay in real time.
        let mut lengths: Vec<usize> = vec![PACKET + profile.rtp_overhead(); arrivals.len()];
        let t0 = Instant::now();
        let mut next = 0;
        let mut results: Vec<PacketResult> = vec![Ok(0); arrivals.len()];
        while next < arrivals.len() {
            let now_ns = t0.elapsed().as_nanos() as u64;
            if arrivals[next].0 > now_ns {
                // Sleep only through long gaps, spin through short ones: a sleeping thread wakes
                // late by the scheduler's slack, which is not SRTP's delay.
                let wait = arrivals[next].0 - now_ns;
                if wait > 2_000_000 {
                    std::thread::sleep(Duration::from_nanos(wait - 1_000_000));
                } else {
                    std::hint::spin_loop();
                }
                continue;
            }
            let end = next
                + arrivals[next..]
                    .iter()
                    .take_while(|a| a.0 <= now_ns)
                    .count();
            let batch = &mut arrivals[next..end];
            {
                let mut packets: Vec<Packet<'_>> = batch
                    .iter_mut()
                    .zip(&lengths[next..end])
                    .map(|((_, s, buf), len)| Packet {
                        context: 2 * *s,
                        op: Op::UnprotectRtp,
                        buf: buf.as_mut_slice(),
                        len: *len,
                    })
                    .collect();
                engine.process(&mut gateway, &mut packets, &mut results[next..end]);
            }
            for (i, r) in results[next..end].iter().enumerate() {
                lengths[next + i] = match r {
                    Ok(n) => *n,
                    Err(e) => anyhow::bail!("the engine refused a genuine packet: {e}"),
                };
            }
            {
                let mut packets: Vec<Packet<'_>> = batch
                    .iter_mut()
                    .zip(&lengths[next..end])
                    .map(|((_, s, buf), len)| Packet {
                        context: 2 * *s + 1,
                        op: Op::ProtectRtp,
                        buf: buf.as_mut_slice(),
                        len: *len,
                    })
                    .collect();
                engine.process(&mut gateway, &mut packets, &mut results[next..end]);
            }
            let done = t0.elapsed().as_nanos() as u64;
            for (i, a) in arrivals[next..end].iter().enumerate() {
                if let Err(e) = &results[next + i] {
                    anyhow::bail!("the engine failed to protect: {e}");
                }
                if r > 0 {
                    delays.push(done.saturating_sub(a.0));
                }
            }
            next = end;
        }
    }
    Ok(delays)
}

/// An engine and its name in the tables.
pub type NamedEngine = (&'static str, Box<dyn Engine>);

/// The engines this machine has, by name: serial, multi-buffer (HMAC-SHA1 tags in SIMD lanes,
/// AES-CM and AES-GCM in the VAES kernels, cache hints across the batch), and worker threads
/// (one pinned lane per core, each running the multi-buffer engine; batches under its
/// threshold run that engine on the caller), and the GPU engine where there is a GPU, with
/// the settings `gpu` asks for ([`super::srtp_gpu::calls_config`]).
///
/// The notes say which engines could not be made, and why.
pub fn engines(gpu: &crate::GpuSettings) -> (Vec<NamedEngine>, Vec<String>) {
    // The GPU engine (`003_…`'s GPU curve) where a CUDA GPU can be opened.
    let gpu = secrelay_srtp_gpu::GpuEngine::open(super::srtp_gpu::calls_config(gpu))
        .map_err(|e| e.to_string());
    engines_with(gpu, true)
}

/// The worker-thread engine and `gpu` (an engine already open, or why there is none), after
/// the serial and multi-buffer engines if `all`; and the notes.
pub fn engines_with(
    gpu: Result<secrelay_srtp_gpu::GpuEngine, String>,
    all: bool,
) -> (Vec<NamedEngine>, Vec<String>) {
    let mut notes = Vec::new();
    let mut v: Vec<NamedEngine> = Vec::new();
    if all {
        v.push(("serial", Box::new(SerialEngine)));
        v.push(("simd", Box::new(secrelay_srtp::SimdEngine::new())));
    }
    match secrelay_srtp::ThreadedEngine::with_default_workers() {
        Ok(t) => v.push(("threaded", Box::new(t))),
        Err(e) => notes.push(format!("no threaded engine: {e}")),
    }
    match gpu {
        Ok(g) => {
            notes.push(format!("gpu engine on {}", g.device()));
            v.push(("gpu", Box::new(g)));
        }
        Err(e) => notes.push(format!("no GPU curve: {e}")),
    }
    (v, notes)
}

/// Call counts added to the full SRTP-only sweep when a GPU engine runs: past what the CPU
/// engines of a many-core machine hold.
pub(crate) const GPU_NS: [usize; 4] = [30_000, 50_000, 75_000, 100_000];

/// What one gateway run found.
#[derive(Debug, Clone)]
pub struct GatewayRun {
    /// Relay latency percentiles from the gateway's histogram, µs (p50, p90, p99, p99.9).
    pub relay_us: Option<[f64; 4]>,
    /// Packets received by the participants.
    pub received: u64,
    /// Lost at the receivers.
    pub lost: u64,
    /// Participants that failed to connect.
    pub failed: usize,
}

/// Workers for the in-process gateway: every core but the one the participants' thread needs.
pub fn gateway_workers() -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .saturating_sub(1)
        .max(1)
}

/// The gateway's SRTP engines the calls study compares (`srtp_engine` values).
pub const GATEWAY_ENGINES: [&str; 2] = ["serial", "simd"];

/// N calls (rooms of two simulated WebRTC participants) through an in-process gateway whose
/// workers hand their receive batches to the SRTP engine `engine`, for `secs` seconds of media.
pub fn through_gateway(calls: usize, secs: f64, engine: &str) -> anyhow::Result<GatewayRun> {
    use secrelay_gateway::server::HistogramSnapshot;
    use secrelay_gateway::server::{ServeConfig, Server};
    use secrelay_testkit::fleet::{self, FleetConfig, FleetProgress};
    use secrelay_testkit::{Leg, Signaling};
    let server = Server::start(ServeConfig {
        http: Some("127.0.0.1:0".parse().expect("a valid literal address")),
        udp: "127.0.0.1:0".parse().expect("a valid literal address"),
        drain_secs: 0.0,
        srtp_engine: engine.into(),
        // The simulated participants run on one thread in this process: the gateway gets the
        // other cores (one worker each), as it would on a machine of its own.
        workers: gateway_workers(),
        // Every call offers from this host without a credential: the cap on unconnected
        // anonymous sessions per source is lifted for the load.
        max_pending_offers_per_source: 1_000_000,
        ..ServeConfig::default()
    })
    .map_err(|e| anyhow::anyhow!("starting the gateway: {e}"))?;
    let cfg = FleetConfig {
        signaling: Signaling::new(server.url()).with_admin(server.admin_key().expose()),
        rooms: calls,
        per_room: 2,
        legs: vec![Leg::Join],
        room_prefix: "call-".into(),
        duration: Duration::from_secs_f64(secs),
        threads: 1,
        bind_ip: std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
        connect_timeout: Duration::from_secs(60),
        inject_bad: false,
        media: secrelay_testkit::Media::Pcmu,
        transcode: false,
        mix: None,
        ice_tcp: false,
        publish_at: None,
    };
    let progress = std::sync::Arc::new(FleetProgress::default());
    let group = fleet::join_all(&cfg, &progress, Instant::now())?;
    let g = server.gateway().clone();
    let (done, media_secs, before): (_, _, HistogramSnapshot) =
        fleet::run_media_windowed(&cfg, group, progress, || {
            Ok(g.stats().totals().relay_latency)
        })?;
    let window = g.stats().totals().relay_latency.since(&before);
    fleet::leave_all(&cfg, &done);
    server.shutdown();
    let r = fleet::summarize(&done, media_secs);
    let q = |p| window.quantile(p).map(|d| d.as_secs_f64() * 1e6);
    Ok(GatewayRun {
        relay_us: match (q(0.5), q(0.9), q(0.99), q(0.999)) {
            (Some(a), Some(b), Some(c), Some(d)) => Some([a, b, c, d]),
            _ => None,
        },
        received: r.received,
        lost: r.lost,
        failed: r.failures.len(),
    })
}

/// The SRTP-only sweep: each engine at each N, a row per (engine, N), p50 and p99 series for
/// the plot, a note per engine with the most calls it held at p99 ≤ 1 ms.
pub(crate) fn srtp_sweep(
    ctx: &Ctx,
    engines: &[NamedEngine],
    srtp_ns: &[usize],
    rounds: usize,
    notes: &mut Vec<String>,
) -> anyhow::Result<(Table, Vec<Series>)> {
    let mut table = Table::new(
        "calls_srtp",
        "SRTP only: delay per packet (unprotect K1 + protect K2) against concurrent calls, per engine",
    )
    .col("engine", "engine")
    .col_unit("calls", "calls", "calls")
    .col_unit("pps", "packets/s", "packets/s")
    .col_unit("p50", "p50", "µs")
    .col_unit("p90", "p90", "µs")
    .col_unit("p99", "p99", "µs")
    .col_unit("max", "max", "µs")
    .col_unit("mean", "mean", "µs");
    let mut plot_series = Vec::new();
    for (name, engine) in engines {
        let mut p50 = Vec::new();
        let mut p99 = Vec::new();
        let mut largest_ok = None;
        for &n in srtp_ns {
            ctx.step(format!("{name}: {n} calls"));
            let d = Delays::of(srtp_only(
                engine.as_ref(),
                n,
                rounds,
                Profile::AesCm128HmacSha1_80,
            )?)
            .context("no packets measured")?;
            table.push([
                ("engine", Cell::text(*name)),
                ("calls", Cell::num(n as f64)),
                ("pps", Cell::num((n * 100) as f64)),
                ("p50", Cell::num(d.p50)),
                ("p90", Cell::num(d.p90)),
                ("p99", Cell::num(d.p99)),
                ("max", Cell::num(d.max)),
                ("mean", Cell::num(d.mean)),
            ]);
            p50.push((n as f64, d.p50));
            p99.push((n as f64, d.p99));
            if d.p99 <= 1000.0 {
                largest_ok = Some(n);
            }
            ctx.done();
        }
        notes.push(match largest_ok {
            Some(n) => format!(
                "SRTP only, {name} engine: the largest number of calls measured with p99 ≤ 1 ms is {n} (of {:?})",
                srtp_ns
            ),
            None => format!("SRTP only, {name} engine: p99 above 1 ms at every N measured"),
        });
        plot_series.push(Series {
            name: format!("{name} p50"),
            points: p50,
        });
        plot_series.push(Series {
            name: format!("{name} p99"),
            points: p99,
        });
    }
    Ok((table, plot_series))
}

impl Study for CallsStudy {
    fn name(&self) -> &'static str {
        "calls"
    }

    fn title(&self) -> &'static str {
        "Concurrent G.711 calls: per-packet delay added by SRTP and by the gateway (003)"
    }

    fn run(&self, ctx: &mut Ctx) -> anyhow::Result<StudyReport> {
        let quick = ctx.quick();
        let srtp_ns: &[usize] = if quick {
            &[10, 140, 1000]
        } else {
            &[
                10, 50, 100, 140, 500, 1000, 2000, 3000, 4000, 5000, 7000, 10000, 12000, 15000,
                20000,
            ]
        };
        let gateway_ns: &[usize] = if quick {
            &[10, 50]
        } else {
            &[10, 50, 100, 140, 250, 500, 1000, 1500, 2000]
        };
        let rounds = if quick { 2 } else { 10 };
        let gateway_secs = if quick { 1.0 } else { 5.0 };
        let (engines, engine_notes) = engines(&ctx.opts.gpu);
        let mut srtp_ns = srtp_ns.to_vec();
        if !quick && engines.iter().any(|(n, _)| *n == "gpu") {
            srtp_ns.extend(GPU_NS);
        }
        let srtp_ns = &srtp_ns[..];
        ctx.steps(
            (engines.len() * srtp_ns.len() + GATEWAY_ENGINES.len() * gateway_ns.len()) as u64,
        );
        let mut notes = engine_notes;
        let (table, mut plot_series) = srtp_sweep(ctx, &engines, srtp_ns, rounds, &mut notes)?;
        let mut gw = Table::new(
            "calls_gateway",
            "Through the gateway over loopback: relay latency (socket read to socket write) against concurrent calls",
        )
        .col("engine", "engine")
        .col_unit("calls", "calls", "calls")
        .col_unit("p50", "p50", "µs")
        .col_unit("p90", "p90", "µs")
        .col_unit("p99", "p99", "µs")
        .col_unit("p999", "p99.9", "µs")
        .col_unit("received", "received", "packets")
        .col_unit("lost", "lost", "packets");
        for engine in GATEWAY_ENGINES {
            let mut gw_p99 = Vec::new();
            let mut largest_ok = None;
            for &n in gateway_ns {
                ctx.step(format!("gateway ({engine} engine): {n} calls"));
                let r = through_gateway(n, gateway_secs, engine)?;
                let cell = |i: usize| {
                    r.relay_us
                        .map_or(Cell::not_offered("no packets relayed"), |v| Cell::num(v[i]))
                };
                gw.push([
                    (
                        "engine",
                        Cell::text(format!("{engine}, each worker's receive batches")),
                    ),
                    ("calls", Cell::num(n as f64)),
                    ("p50", cell(0)),
                    ("p90", cell(1)),
                    ("p99", cell(2)),
                    ("p999", cell(3)),
                    ("received", Cell::num(r.received as f64)),
                    ("lost", Cell::num(r.lost as f64)),
                ]);
                if let Some(v) = r.relay_us {
                    gw_p99.push((n as f64, v[2]));
                    if v[2] <= 1000.0 && r.lost == 0 && r.failed == 0 {
                        largest_ok = Some(n);
                    }
                }
                if r.failed > 0 {
                    notes.push(format!(
                        "gateway ({engine}), {n} calls: {} participants failed to connect",
                        r.failed
                    ));
                }
                ctx.done();
            }
            notes.push(match largest_ok {
                Some(n) => format!(
                    "Through the gateway, {engine} engine: the largest number of calls measured with relay p99 ≤ 1 ms and no loss is {n} (of {gateway_ns:?})"
                ),
                None => format!("Through the gateway, {engine} engine: relay p99 above 1 ms (or loss) at every N measured"),
            });
            plot_series.push(Series {
                name: format!("gateway p99 ({engine})"),
                points: gw_p99,
            });
        }
        let plot = Plot {
            id: "calls_delay".into(),
            title: "Per-packet delay against concurrent G.711 calls".into(),
            kind: PlotKind::Lines,
            x_label: "concurrent calls".into(),
            y_label: "delay (µs)".into(),
            log_y: true,
            categories: Vec::new(),
            series: plot_series,
        };
        let method = ctx.method(
            format!(
                "SRTP only: N calls = 2N streams of {PACKET}-byte AES_CM_128_HMAC_SHA1_80 packets every 20 ms at spread phases, \
                 in rounds of {} ms generated beforehand and replayed in real time; a packet's delay is the end of its batch \
                 (unprotect with the sender's key, protect with the receiver's) minus its due instant; {rounds} rounds per N measured after one warm-up round (in which every stream is made). \
                 Through the gateway: N rooms of two simulated WebRTC participants (HTTP join, ICE, DTLS-SRTP, G.711 over \
                 SRTP on real UDP sockets) for {gateway_secs} s after all connected; delay from the gateway's relay-latency \
                 histogram (bucket upper bounds, ≤ 25 % above the truth); the load generator runs on the same machine, on one \
                 thread, and the gateway has {} worker(s) (one per remaining core), each handing its receive batches to the row's SRTP engine.",
                ROUND.as_millis(),
                gateway_workers()
            ),
            "not counted: delays, not operations, are measured",
        );
        Ok(StudyReport {
            study: self.name().into(),
            title: self.title().into(),
            seeds: vec!["003".into()],
            method,
            tables: vec![table, gw],
            plots: vec![plot],
            notes,
        })
    }
}
