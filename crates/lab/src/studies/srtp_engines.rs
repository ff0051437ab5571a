//! The batch engines in `lab srtp` (issue 5): every engine secrelay has (serial, worker
//! threads) protecting batches of 1 to 4,096 RTP packets of 172 bytes, spread over 64
//! contexts; packets per second, time per batch, and each engine's throughput over the serial
//! engine's (for the threaded engine, the scaling over one core).

use std::cell::RefCell;
use std::hint::black_box;
use std::rc::Rc;

use secrelay_srtp::batch::PacketResult;
use secrelay_srtp::{
    Context, Engine, MasterKey, Op, Packet, Policy, Profile, SerialEngine, SimdEngine,
    ThreadedConfig, ThreadedEngine,
};

use crate::frame::{Cell, Plot, PlotKind, Series, Table};
use crate::measure::Chunked;
use crate::{Ctx, Timing};

/// Batch sizes swept, in packets.
pub const BATCHES: [usize; 7] = [1, 4, 16, 64, 256, 1024, 4096];
/// Profiles swept.
pub const PROFILES: [Profile; 2] = [Profile::AesCm128HmacSha1_80, Profile::AeadAes128Gcm];
/// Contexts a batch's packets are spread over (packet i to context i mod 64, one SSRC each).
pub const CONTEXTS: usize = 64;
/// RTP packet size (G.711, 20 ms).
pub const SIZE: usize = 172;

/// One engine's batch, its contexts and its buffers.
struct Run {
    engine: Rc<dyn Engine>,
    contexts: Vec<Context>,
    bufs: Vec<Vec<u8>>,
    seqs: Vec<u16>,
    results: Vec<PacketResult>,
    plain: Vec<u8>,
    /// Packets that did not protect (there must be none).
    failures: usize,
    want: usize,
}

impl Run {
    fn new(profile: Profile, engine: Rc<dyn Engine>, batch: usize) -> Run {
        let mk = MasterKey::new(
            profile,
            &vec![0x42; profile.key_len()],
            &vec![0x17; profile.salt_len()],
        )
        .expect("key and salt lengths come from the profile");
        let mut plain = vec![0u8; SIZE];
        plain[0] = 0x80;
        for (i, b) in plain[12..].iter_mut().enumerate() {
            *b = i as u8;
        }
        Run {
            engine,
            contexts: (0..CONTEXTS)
                .map(|_| {
                    Context::new(Policy::new(mk.clone()).any_outbound()).expect("valid policy")
                })
                .collect(),
            bufs: (0..batch).map(|_| vec![0u8; SIZE + 32]).collect(),
            seqs: vec![0; CONTEXTS],
            results: vec![Ok(0); batch],
            plain,
            failures: 0,
            want: SIZE + profile.rtp_tag_len(),
        }
    }

    /// Plaintext in every buffer, each context's sequence numbers rising.
    fn fill(&mut self) {
        for (i, b) in self.bufs.iter_mut().enumerate() {
            let c = i % CONTEXTS;
            b[..SIZE].copy_from_slice(&self.plain);
            b[2..4].copy_from_slice(&self.seqs[c].to_be_bytes());
            b[8..12].copy_from_slice(&(0x5EC0_0000 + c as u32).to_be_bytes());
            self.seqs[c] = self.seqs[c].wrapping_add(1);
        }
    }

    /// One `Engine::process` call on the whole batch.
    fn process(&mut self) {
        let mut packets: Vec<Packet<'_>> = self
            .bufs
            .iter_mut()
            .enumerate()
            .map(|(i, b)| Packet {
                context: i % CONTEXTS,
                op: Op::ProtectRtp,
                buf: &mut b[..],
                len: SIZE,
            })
            .collect();
        self.engine
            .process(&mut self.contexts, &mut packets, &mut self.results);
        let want = self.want;
        self.failures += self.results.iter().filter(|r| **r != Ok(want)).count();
        black_box(&self.results);
    }
}

/// An engine by name, or why it could not be made.
type Named = (String, Result<Rc<dyn Engine>, String>);

/// The engines measured: (name, engine; names fit a plot legend's 28 characters with a
/// profile after them). The multi-buffer engine says whether its lanes run in AVX-512; the
/// threaded engine has one lane per available core, each running the multi-buffer engine or
/// the scalar code.
fn engines() -> Vec<Named> {
    let simd = if SimdEngine::accelerated() {
        "simd (AVX-512)"
    } else {
        "simd (scalar lanes)"
    };
    let mut v: Vec<Named> = vec![
        ("serial".into(), Ok(Rc::new(SerialEngine))),
        (simd.into(), Ok(Rc::new(SimdEngine::all_lanes()))),
    ];
    // Threads with the multi-buffer engine in each lane (the default), and threads alone.
    for multi in [true, false] {
        let kind = if multi { "simd" } else { "scalar" };
        match ThreadedEngine::new(ThreadedConfig::new().multi_buffer(multi)) {
            Ok(e) => {
                let lanes = e.config().worker_count();
                v.push((format!("threaded×{lanes} {kind}"), Ok(Rc::new(e))));
            }
            Err(e) => v.push((format!("threaded {kind}"), Err(e.to_string()))),
        }
    }
    v
}

/// One measured cell: (profile, batch, engine, timing or why not).
type Measured = (Profile, usize, String, Result<Timing, String>);

/// Packets per second of `threads` serial (or multi-buffer, `simd`) engines running at once on
/// their own threads, each on its own contexts, batches of 4,096 (filling included), for about
/// `run`: what the machine gives that many threads right now, the ceiling of any engine with
/// that many lanes of that kind. (Each thread fills its own batch, so no data crosses cores:
/// the threaded engine's lanes pay for that on top, as a gateway's do.)
fn independent_rate(profile: Profile, simd: bool, threads: usize, run: std::time::Duration) -> f64 {
    use std::time::Instant;
    let start = Instant::now();
    let packets: usize = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(move || {
                    let engine: Rc<dyn Engine> = if simd {
                        Rc::new(SimdEngine::all_lanes())
                    } else {
                        Rc::new(SerialEngine)
                    };
                    let mut r = Run::new(profile, engine, 4096);
                    let mut done = 0;
                    while start.elapsed() < run || done == 0 {
                        r.fill();
                        r.process();
                        done += 4096;
                    }
                    done
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a serial engine does not panic"))
            .sum()
    });
    packets as f64 / start.elapsed().as_secs_f64()
}

/// The machine's ceiling for `threads` lanes: the median ratio of `threads` independent serial
/// (or multi-buffer) engines' packets/s over one's, one and many alternating run by run.
fn ceiling(ctx: &Ctx, profile: Profile, simd: bool, threads: usize) -> f64 {
    let run = ctx.bench.run_time * 2;
    let mut ratios: Vec<f64> = (0..ctx.bench.runs.max(3))
        .map(|_| {
            let one = independent_rate(profile, simd, 1, run);
            independent_rate(profile, simd, threads, run) / one
        })
        .collect();
    ratios.sort_by(f64::total_cmp);
    ratios[ratios.len() / 2]
}

/// What the sweep adds to `lab srtp`: the table, its plots, and the scaling in a sentence.
pub struct EngineSweep {
    /// One row per profile × batch size × engine.
    pub table: Table,
    /// What the machine gives several threads at the time of the run (the ceiling of any
    /// multi-lane engine), per profile.
    pub ceiling: Table,
    /// Throughput per batch size (one per profile) and time per batch.
    pub plots: Vec<Plot>,
    /// The threaded engine's throughput over the serial engine's, in words.
    pub notes: Vec<String>,
}

/// Measures every engine at every batch size, each profile's runs interleaved across engines
/// and batch sizes so that a machine whose speed drifts weighs on all of them alike.
pub fn sweep(ctx: &Ctx) -> EngineSweep {
    let engines = engines();
    let mut measured: Vec<Measured> = Vec::new();
    let lanes = secrelay_srtp::threaded::available_cores();
    let mut ceilings = Vec::new();
    for profile in PROFILES {
        ctx.step(format!("engines, {} batches", profile.sdp_name()));
        let mut live: Vec<(usize, String, Rc<RefCell<Run>>)> = Vec::new();
        for batch in BATCHES {
            for (name, engine) in &engines {
                match engine {
                    Ok(e) => live.push((
                        batch,
                        name.clone(),
                        Rc::new(RefCell::new(Run::new(profile, e.clone(), batch))),
                    )),
                    Err(why) => measured.push((profile, batch, name.clone(), Err(why.clone()))),
                }
            }
        }
        let mut ops: Vec<Chunked<'_>> = live
            .iter()
            .map(|(batch, _, run)| {
                let (fill, work) = (run.clone(), run.clone());
                Chunked {
                    chunk: *batch,
                    prepare: Box::new(move || fill.borrow_mut().fill()),
                    process: Box::new(move || work.borrow_mut().process()),
                }
            })
            .collect();
        let timings = ctx.bench.time_chunked_interleaved(&mut ops);
        drop(ops);
        for ((batch, name, run), t) in live.into_iter().zip(timings) {
            let failures = run.borrow().failures;
            let r = if failures == 0 {
                Ok(t)
            } else {
                Err(format!("{failures} packets failed to protect"))
            };
            measured.push((profile, batch, name, r));
        }
        if lanes > 1 {
            for simd in [false, true] {
                ceilings.push((profile, simd, ceiling(ctx, profile, simd, lanes)));
            }
        }
        ctx.done();
    }
    let mut sweep = report(&engines, &measured);
    for (profile, simd, ratio) in ceilings {
        let kind = if simd { "multi-buffer" } else { "serial" };
        sweep.ceiling.push([
            ("profile", Cell::text(profile.sdp_name())),
            ("engine", Cell::text(kind)),
            ("threads", Cell::num(lanes as f64)),
            ("vs_one", Cell::num(ratio)),
        ]);
        let lane = if simd {
            "threaded×N simd"
        } else {
            "threaded×N scalar"
        };
        sweep.notes.push(format!(
            "{lanes} independent {kind} engines on {lanes} threads gave {ratio:.2}× one engine's packets/s ({}): \
             the ceiling of {lane} on this machine during the run",
            profile.sdp_name()
        ));
    }
    sweep
}

fn report(engines: &[Named], m: &[Measured]) -> EngineSweep {
    let mut table = Table::new(
        "srtp_engines",
        format!(
            "SRTP batch engines: protect {SIZE}-byte RTP packets in batches over {CONTEXTS} contexts"
        ),
    )
    .col("profile", "profile")
    .col("engine", "engine")
    .col_unit("batch", "batch", "packets")
    .col_unit("packets_per_s", "throughput", "packets/s")
    .col_unit("ns_per_packet", "per packet", "ns")
    .col_unit("batch_us", "per batch", "µs")
    .col_unit("spread_pct", "spread", "%")
    .col_unit("vs_serial", "throughput vs serial", "×");
    let serial = |profile: Profile, batch: usize| {
        m.iter()
            .find(|x| x.0 == profile && x.1 == batch && x.2 == "serial")
            .and_then(|x| x.3.as_ref().ok())
            .map(|t| t.ns)
    };
    for (profile, batch, name, r) in m {
        let mut row: Vec<(&str, Cell)> = vec![
            ("profile", Cell::text(profile.sdp_name())),
            ("engine", Cell::text(name.clone())),
            ("batch", Cell::num(*batch as f64)),
        ];
        match r {
            Ok(t) => {
                row.push(("packets_per_s", Cell::num(t.ops_per_s())));
                row.push(("ns_per_packet", Cell::num(t.ns)));
                row.push(("batch_us", Cell::num(t.ns * *batch as f64 / 1e3)));
                row.push(("spread_pct", Cell::num(t.spread_pct)));
                if let Some(s) = serial(*profile, *batch) {
                    row.push(("vs_serial", Cell::num(s / t.ns)));
                }
            }
            Err(why) => {
                row.push(("packets_per_s", Cell::not_offered(why.clone())));
                row.push(("ns_per_packet", Cell::not_offered(why.clone())));
            }
        }
        table.push(row);
    }

    let categories: Vec<String> = BATCHES.iter().map(|b| b.to_string()).collect();
    let series_of = |profile: Profile, name: &str, f: &dyn Fn(usize, &Timing) -> f64| Series {
        name: name.to_string(),
        points: BATCHES
            .iter()
            .enumerate()
            .filter_map(|(i, b)| {
                m.iter()
                    .find(|x| x.0 == profile && x.1 == *b && x.2 == name)
                    .and_then(|x| x.3.as_ref().ok())
                    .map(|t| (i as f64, f(*b, t)))
            })
            .collect(),
    };
    let mut plots = Vec::new();
    for profile in PROFILES {
        plots.push(Plot {
            id: format!(
                "srtp_engines_throughput_{}",
                profile.sdp_name().to_lowercase()
            ),
            title: format!(
                "{}, {SIZE}-byte packets: throughput by batch size and engine",
                profile.sdp_name()
            ),
            kind: PlotKind::Bars,
            x_label: "packets per batch".into(),
            y_label: "packets per second".into(),
            log_y: false,
            categories: categories.clone(),
            series: engines
                .iter()
                .map(|(n, _)| series_of(profile, n, &|_, t| t.ops_per_s()))
                .collect(),
        });
    }
    plots.push(Plot {
        id: "srtp_engines_batch_latency".into(),
        title: format!("Time to protect one batch of {SIZE}-byte packets, by engine"),
        kind: PlotKind::Bars,
        x_label: "packets per batch".into(),
        y_label: "µs per batch".into(),
        log_y: true,
        categories,
        series: PROFILES
            .iter()
            .flat_map(|&p| {
                engines.iter().map(move |(n, _)| {
                    let mut s = series_of(p, n, &|b, t| t.ns * b as f64 / 1e3);
                    // Short profile names: the legend cuts entries past 28 characters.
                    let short = match p {
                        Profile::AeadAes128Gcm => "GCM-128",
                        Profile::AeadAes256Gcm => "GCM-256",
                        Profile::AesCm128HmacSha1_80 => "CM-80",
                        Profile::AesCm128HmacSha1_32 => "CM-32",
                        _ => p.sdp_name(),
                    };
                    s.name = format!("{n}, {short}");
                    s
                })
            })
            .collect(),
    });

    let mut notes = Vec::new();
    let cores = secrelay_srtp::threaded::available_cores();
    for (name, _) in engines.iter().filter(|(n, _)| n != "serial") {
        for profile in PROFILES {
            let ratios: Vec<String> = BATCHES
                .iter()
                .filter_map(|&b| {
                    let s = serial(profile, b)?;
                    let t = m
                        .iter()
                        .find(|x| x.0 == profile && x.1 == b && x.2 == *name)?
                        .3
                        .as_ref()
                        .ok()?;
                    Some(format!("{b}: {:.2}×", s / t.ns))
                })
                .collect();
            notes.push(format!(
                "{name} ÷ serial throughput, {} on {cores} cores, by batch size: {}",
                profile.sdp_name(),
                ratios.join(", ")
            ));
        }
    }
    let ceiling = Table::new(
        "srtp_engine_ceiling",
        "What the machine gives several threads during the run: independent engines of each kind at once, over one",
    )
    .col("profile", "profile")
    .col("engine", "engine")
    .col_unit("threads", "threads", "")
    .col_unit("vs_one", "packets/s vs one thread", "×");
    EngineSweep {
        table,
        ceiling,
        plots,
        notes,
    }
}
