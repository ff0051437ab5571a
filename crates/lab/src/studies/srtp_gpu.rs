//! The GPU rows of `lab srtp` (issue 18, `003_…`'s parallel SRTP on a GPU): the GPU engine
//! protecting and unprotecting batches of 1,024 to 262,144 RTP packets of 172 bytes spread
//! over up to 65,536 contexts, host memory to host memory (the copies to and from the device
//! are inside the timing, as are the checks before the crypto and the commits after it);
//! packets per second and the time of one batch (median and 99th percentile), beside the
//! worker-thread engine on all cores in the same run.
//!
//! Where the GPU engine cannot be opened (no driver, no GPU, a build without the `cuda`
//! feature), the table says why in one row per profile, and nothing else runs.

use std::time::{Duration, Instant};

use secrelay_srtp::batch::PacketResult;
use secrelay_srtp::{
    Context, Engine, MasterKey, Op, Packet, Policy, Profile, SimdEngine, ThreadedEngine,
};
use secrelay_srtp_gpu::{GpuConfig, GpuEngine};

use crate::frame::{Cell, Plot, PlotKind, StudyReport, Table};
use crate::{Ctx, GpuSettings, Study};

/// Batch sizes swept (`--quick`: the first and the fourth).
pub const BATCHES: [usize; 5] = [1_024, 4_096, 16_384, 65_536, 262_144];
/// Profiles swept.
pub const PROFILES: [Profile; 2] = [Profile::AesCm128HmacSha1_80, Profile::AeadAes128Gcm];
/// Most contexts a batch is spread over (one SSRC each; packet i to context i mod N).
pub const MAX_CONTEXTS: usize = 65_536;
/// RTP packet size (G.711, 20 ms).
pub const SIZE: usize = 172;

/// One batch, its contexts both ways and its buffers.
struct Run {
    senders: Vec<Context>,
    receivers: Vec<Context>,
    bufs: Vec<Vec<u8>>,
    lens: Vec<usize>,
    results: Vec<PacketResult>,
    seqs: Vec<u16>,
    contexts: usize,
    tag: usize,
}

impl Run {
    fn new(profile: Profile, batch: usize) -> Run {
        let contexts = batch.min(MAX_CONTEXTS);
        let key = |i: usize| {
            let mut k = vec![0x42u8; profile.key_len()];
            k[..8].copy_from_slice(&(i as u64).to_be_bytes());
            MasterKey::new(profile, &k, &vec![0x17; profile.salt_len()])
                .expect("key and salt lengths come from the profile")
        };
        let keys: Vec<MasterKey> = (0..contexts).map(key).collect();
        Run {
            senders: keys
                .iter()
                .map(|k| Context::new(Policy::new(k.clone()).any_outbound()).expect("valid"))
                .collect(),
            receivers: keys
                .into_iter()
                .map(|k| Context::new(Policy::new(k).any_inbound()).expect("valid"))
                .collect(),
            bufs: (0..batch).map(|_| vec![0u8; SIZE + 32]).collect(),
            lens: vec![SIZE; batch],
            results: vec![Ok(0); batch],
            seqs: vec![0; contexts],
            contexts,
            tag: profile.rtp_tag_len(),
        }
    }

    /// Plaintext in every buffer, each context's sequence numbers rising.
    fn fill(&mut self) {
        for (i, b) in self.bufs.iter_mut().enumerate() {
            let c = i % self.contexts;
            b[..SIZE].fill(i as u8);
            b[0] = 0x80;
            b[1] = 0;
            b[2..4].copy_from_slice(&self.seqs[c].to_be_bytes());
            b[8..12].copy_from_slice(&(0x5EC0_0000 + c as u32).to_be_bytes());
            self.seqs[c] = self.seqs[c].wrapping_add(1);
        }
        self.lens.fill(SIZE);
    }

    /// One `Engine::process` call over the batch; returns how many packets did not give the
    /// expected length, and the time of that call alone (not the packet list made for it,
    /// nor the checks of its results).
    fn process(&mut self, engine: &dyn Engine, op: Op) -> (usize, f64) {
        let dt = self.with_batch(op, |ctxs, packets, results| {
            let t0 = Instant::now();
            engine.process(ctxs, packets, results);
            t0.elapsed().as_secs_f64()
        });
        (self.check(op), dt)
    }

    /// `f` on the batch as packets of `op` (each naming its context, its buffer and length),
    /// the contexts that do `op`, and the results.
    fn with_batch<R>(
        &mut self,
        op: Op,
        f: impl FnOnce(&mut [Context], &mut [Packet<'_>], &mut [PacketResult]) -> R,
    ) -> R {
        let contexts = self.contexts;
        let mut packets: Vec<Packet<'_>> = self
            .bufs
            .iter_mut()
            .zip(&self.lens)
            .enumerate()
            .map(|(i, (b, &len))| Packet {
                context: i % contexts,
                op,
                buf: &mut b[..],
                len,
            })
            .collect();
        let ctxs = if op == Op::ProtectRtp {
            &mut self.senders
        } else {
            &mut self.receivers
        };
        f(ctxs, &mut packets, &mut self.results)
    }

    /// How many packets of the last batch of `op` did not give the expected length; the
    /// lengths then become the results'.
    fn check(&mut self, op: Op) -> usize {
        let want = if op == Op::ProtectRtp {
            SIZE + self.tag
        } else {
            SIZE
        };
        let bad = self.results.iter().filter(|r| **r != Ok(want)).count();
        for (l, r) in self.lens.iter_mut().zip(&self.results) {
            *l = *r.as_ref().unwrap_or(l);
        }
        bad
    }
}

/// One batch of `op` (an unprotect takes what the senders just protected, untimed): its
/// time.
fn one_batch(engine: &dyn Engine, run: &mut Run, op: Op) -> Result<f64, String> {
    run.fill();
    if op == Op::UnprotectRtp {
        let (b, _) = run.process(engine, Op::ProtectRtp);
        if b > 0 {
            return Err(format!("{b} packets failed to protect"));
        }
    }
    match run.process(engine, op) {
        (0, dt) => Ok(dt),
        (bad, _) => Err(format!("{bad} packets failed")),
    }
}

/// Batch times of one engine on one cell, for about `time` (3 batches at least).
///
/// For the GPU engine (`gpu`), untimed batches come first until one needs no key upload and
/// sends no packet to the CPU (streams made, every key set in a slot on the device), at most
/// 8; a timed batch that then still sends packets to the CPU fails the cell with the reason,
/// as its time would not be the device's.
fn measure(
    engine: &dyn Engine,
    gpu: Option<&GpuEngine>,
    run: &mut Run,
    op: Op,
    time: Duration,
) -> Result<Vec<f64>, String> {
    let settled = |before: secrelay_srtp_gpu::GpuStats, after: secrelay_srtp_gpu::GpuStats| {
        after.key_uploads == before.key_uploads && after.cpu_packets == before.cpu_packets
    };
    one_batch(engine, run, op)?;
    if let Some(g) = gpu {
        for _ in 0..8 {
            let before = g.stats();
            one_batch(engine, run, op)?;
            if settled(before, g.stats()) {
                break;
            }
        }
    }
    let before = gpu.map(GpuEngine::stats);
    let mut times = Vec::new();
    let start = Instant::now();
    while times.len() < 3 || start.elapsed() < time {
        times.push(one_batch(engine, run, op)?);
    }
    if let (Some(g), Some(before)) = (gpu, before) {
        let after = g.stats();
        if !settled(before, after) {
            return Err(format!(
                "{} packets went to the CPU and {} key sets were uploaded during the timed batches \
                 (key slots: too few for the cell's contexts?)",
                after.cpu_packets - before.cpu_packets,
                after.key_uploads - before.key_uploads
            ));
        }
    }
    Ok(times)
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

/// The engine settings timed against each other at batches of 65,536 (protect), beside the
/// lab's defaults (the first): host threads (all cores, one, half), lanes per host thread and
/// packets per lane launch, threads per block, registers capped so that more blocks share an
/// SM. (host threads as a share of the cores: 0 = one, 1 = half, 2 = all; lanes; chunk; block
/// threads; register cap).
pub const VARIANTS: [(u8, usize, usize, u32, Option<u32>); 10] = [
    (2, 4, 1_024, 256, None),
    (0, 4, 16_384, 256, None),
    (1, 4, 2_048, 256, None),
    (2, 1, 4_096, 256, None),
    (2, 2, 2_048, 256, None),
    (2, 8, 512, 256, None),
    (2, 4, 1_024, 128, None),
    (2, 4, 1_024, 512, None),
    (2, 4, 1_024, 256, Some(80)),
    (2, 4, 1_024, 256, Some(64)),
];

/// Lanes per host thread in the lab's defaults.
pub const LAB_LANES: usize = 4;

/// The GPU engine as the lab runs it: by default a host thread per core, [`LAB_LANES`] lanes
/// each of 1,024 packets per launch (so a 65,536-packet batch on 16 cores fills every lane
/// once), and room on the device for every key set of the largest runs (2 × 65,536 contexts
/// of each profile in `lab srtp`; 100,000 calls of 4 key sets in `lab calls`): 512 MiB; then
/// whatever `settings` asks for instead (all but `cpu_below`: [`calls_config`]).
pub fn lab_config(settings: &GpuSettings) -> GpuConfig {
    let s = settings;
    let mut c = GpuConfig::new()
        .host_threads(
            s.host_threads
                .unwrap_or_else(secrelay_srtp::threaded::available_cores),
        )
        .lanes(s.lanes.unwrap_or(LAB_LANES))
        .chunk(s.chunk.unwrap_or(1_024))
        .key_slots(1 << 19)
        .max_registers(s.max_registers);
    if let Some(b) = s.block {
        c = c.block_threads(b);
    }
    c
}

/// The engine of the calls curves: [`lab_config`], and batches under `settings.cpu_below`
/// packets on the CPU. The throughput tables keep every packet on the device (a packet that
/// goes to the CPU there fails the cell), so that setting applies to the calls alone.
pub fn calls_config(settings: &GpuSettings) -> GpuConfig {
    lab_config(settings).cpu_below(settings.cpu_below.unwrap_or(0))
}

/// Batch size of the variants' runs.
pub const VARIANT_BATCH: usize = 65_536;

/// The run's own engine, then each setting of [`VARIANTS`] it is not, against each other
/// (protect, batches of [`VARIANT_BATCH`]): one row per profile and setting, each against the
/// first. `own`: the run's engine ([`lab_config`] with the run's settings), already open.
fn variants(ctx: &Ctx, own: &GpuEngine) -> Table {
    let mut table = Table::new(
        "srtp_gpu_variants",
        format!(
            "The GPU engine's settings: protect {VARIANT_BATCH} packets of {SIZE} bytes per batch, host memory to host memory"
        ),
    )
    .col("profile", "profile")
    .col("settings", "host threads × lanes × chunk, block, registers")
    .col_unit("packets_per_s", "throughput", "packets/s")
    .col_unit("batch_p50_us", "batch time p50", "µs")
    .col_unit("batch_p99_us", "batch time p99", "µs")
    .col_unit("vs_default", "throughput vs the run's engine (first row)", "×");
    let time = ctx.bench.run_time * 4;
    let cores = secrelay_srtp::threaded::available_cores();
    // One engine per setting (each compiles its kernels), both profiles on it; the rows are
    // kept per profile so the table reads profile by profile.
    let mut runs: Vec<Run> = PROFILES
        .iter()
        .map(|&p| Run::new(p, VARIANT_BATCH))
        .collect();
    let mut rows: Vec<Vec<Vec<(&str, Cell)>>> = vec![Vec::new(); PROFILES.len()];
    let mut default_rate = [None; PROFILES.len()];
    let own_label = own.config().label();
    // The run's engine first (the lab's defaults, or what the flags asked for); then every
    // setting that is not the same one again.
    let others = VARIANTS
        .into_iter()
        .map(|(share, lanes, chunk, block, regs)| {
            let hosts = match share {
                0 => 1,
                1 => (cores / 2).max(1),
                _ => cores,
            };
            lab_config(&ctx.opts.gpu)
                .host_threads(hosts)
                .lanes(lanes)
                .chunk(chunk)
                .block_threads(block)
                .max_registers(regs)
        })
        .filter(|cfg| cfg.label() != own_label)
        .map(Some);
    for cfg in std::iter::once(None).chain(others) {
        let label = cfg
            .as_ref()
            .map_or_else(|| own_label.clone(), GpuConfig::label);
        ctx.step(format!("gpu settings: {label}"));
        let opened;
        let engine: Result<&GpuEngine, String> = match cfg {
            None => Ok(own),
            Some(cfg) => {
                opened = GpuEngine::open(cfg);
                opened.as_ref().map_err(|e| e.to_string())
            }
        };
        for (i, profile) in PROFILES.iter().enumerate() {
            let measured = engine
                .clone()
                .and_then(|g| measure(g, Some(g), &mut runs[i], Op::ProtectRtp, time));
            let mut row: Vec<(&str, Cell)> = vec![
                ("profile", Cell::text(profile.sdp_name())),
                ("settings", Cell::text(label.clone())),
            ];
            match measured {
                Ok(mut t) => {
                    t.sort_by(f64::total_cmp);
                    let rate = VARIANT_BATCH as f64 * t.len() as f64 / t.iter().sum::<f64>();
                    let base = *default_rate[i].get_or_insert(rate);
                    row.push(("packets_per_s", Cell::num(rate)));
                    row.push(("batch_p50_us", Cell::num(percentile(&t, 0.5) * 1e6)));
                    row.push(("batch_p99_us", Cell::num(percentile(&t, 0.99) * 1e6)));
                    row.push(("vs_default", Cell::num(rate / base)));
                }
                Err(why) => row.push(("packets_per_s", Cell::not_offered(why))),
            }
            rows[i].push(row);
        }
        ctx.done();
    }
    for row in rows.into_iter().flatten() {
        table.push(row);
    }
    table
}

/// The GPU tables of `lab srtp`: by batch size beside the threaded engine, and the engine's
/// settings against each other (empty where there is no GPU, or with `--quick`); and the GPU
/// engine of the by-batch table ([`lab_config`] with the run's settings), or why there is none.
pub fn sweep(ctx: &Ctx) -> (Table, Table, Table, Table, Result<GpuEngine, String>) {
    let (t, gpu) = by_batch(ctx);
    let (v, c, k) = match &gpu {
        Ok(g) if !ctx.opts.quick => (variants(ctx, g), callers(ctx), kernels(ctx)),
        _ => (
            variants_header(),
            callers_header("not measured (no GPU, or --quick)"),
            kernels_header("not measured (no GPU, or --quick)"),
        ),
    };
    (t, v, c, k, gpu)
}

/// Packets per launch in `srtp_gpu_kernels` (a lane's chunk), over four lanes.
pub const KERNEL_CHUNK: usize = 16_384;
/// Kernel runs timed per lane.
const KERNEL_RUNS: u32 = 50;

fn kernels_header(state: &str) -> Table {
    Table::new(
        "srtp_gpu_kernels",
        format!(
            "The kernels alone: protect {SIZE}-byte packets already on the device, {KERNEL_CHUNK} per launch on each of 4 lanes, \
             {} contexts, no copy and no host work; {state}",
            4 * KERNEL_CHUNK
        ),
    )
    .col("profile", "profile")
    .col_unit("packets_per_s", "throughput", "packets/s")
    .col_unit("gbit_per_s", "packet bytes through the kernels", "Gbit/s")
    .col_unit("launch_us", "time per launch (4 lanes at once)", "µs")
}

/// What the kernels sustain with the host out of the way: a batch of 4 chunks run as the
/// engine runs it (keys uploaded, packets copied in and out), then each lane's chunk run
/// [`KERNEL_RUNS`] more times where it lies on the device ([`GpuEngine::time_kernels`]).
fn kernels(ctx: &Ctx) -> Table {
    let mut table = kernels_header("after one batch as the engine runs it, untimed");
    for profile in PROFILES {
        ctx.step(format!("gpu kernels: {}", profile.sdp_name()));
        let engine = GpuEngine::open(
            lab_config(&ctx.opts.gpu)
                .host_threads(1)
                .lanes(4)
                .chunk(KERNEL_CHUNK),
        );
        let mut run = Run::new(profile, 4 * KERNEL_CHUNK);
        let timed = engine.map_err(|e| e.to_string()).and_then(|g| {
            // Keys on the device and the lanes' buffers grown first.
            one_batch(&g, &mut run, Op::ProtectRtp)?;
            run.fill();
            let t = run.with_batch(Op::ProtectRtp, |c, p, r| {
                g.time_kernels(c, p, r, KERNEL_RUNS)
            })?;
            match run.check(Op::ProtectRtp) {
                0 => Ok(t),
                bad => Err(format!("{bad} packets failed")),
            }
        });
        let mut row: Vec<(&str, Cell)> = vec![("profile", Cell::text(profile.sdp_name()))];
        match timed {
            Ok((ran, took)) => {
                let rate = ran as f64 / took.as_secs_f64();
                row.push(("packets_per_s", Cell::num(rate)));
                row.push(("gbit_per_s", Cell::num(rate * SIZE as f64 * 8.0 / 1e9)));
                row.push((
                    "launch_us",
                    Cell::num(took.as_secs_f64() * 1e6 / f64::from(KERNEL_RUNS)),
                ));
            }
            Err(why) => row.push(("packets_per_s", Cell::not_offered(why))),
        }
        table.push(row);
        ctx.done();
    }
    table
}

/// Packets per caller's batch in `srtp_gpu_callers`, over as many contexts of its own.
pub const CALLER_BATCH: usize = 16_384;

fn callers_header(state: &str) -> Table {
    Table::new(
        "srtp_gpu_callers",
        format!(
            "Callers at once, each protecting batches of {CALLER_BATCH} packets of {SIZE} bytes over contexts of its own \
             (as the gateway's workers call an engine): one GPU engine shared by all, or a multi-buffer engine per caller; {state}"
        ),
    )
    .col("profile", "profile")
    .col("engine", "engine")
    .col_unit("callers", "callers", "threads")
    .col_unit("packets_per_s", "throughput, all callers (sum)", "packets/s")
    .col_unit("batch_p50_us", "batch time p50", "µs")
    .col_unit("batch_p99_us", "batch time p99", "µs")
    .col_unit("vs_cpu", "throughput vs multi-buffer per caller", "×")
}

/// The engines side by side as the gateway would use them: each of `callers` threads with its
/// own contexts and batches, no split of one batch over threads. The GPU engine runs one host
/// thread per caller (each caller is one); the CPU row gives each caller a multi-buffer engine
/// on its own core.
fn callers(ctx: &Ctx) -> Table {
    let mut table = callers_header("host memory to host memory");
    let cores = secrelay_srtp::threaded::available_cores();
    let mut counts = vec![1, cores / 4, cores / 2, cores];
    counts.retain(|&n| n > 0);
    counts.dedup();
    let time = ctx.bench.run_time * 4;
    for profile in PROFILES {
        // An engine per profile: the cells' key sets (up to all cores × the batch) fit its
        // slots, so no timed phase meets the slots starting over.
        let lanes = ctx.opts.gpu.lanes.unwrap_or(LAB_LANES);
        let gpu = GpuEngine::open(
            lab_config(&ctx.opts.gpu)
                .host_threads(1)
                .lanes(lanes)
                .chunk(CALLER_BATCH.div_ceil(lanes)),
        );
        for &n in &counts {
            ctx.step(format!("gpu callers: {} × {n}", profile.sdp_name()));
            let on_gpu = match &gpu {
                Ok(g) => callers_cell(profile, n, CALLER_BATCH, time, |_| g, Some(g)),
                Err(e) => Err(e.to_string()),
            };
            let simd: Vec<SimdEngine> = (0..n).map(|_| SimdEngine::new()).collect();
            let on_cpu = callers_cell(profile, n, CALLER_BATCH, time, |i| &simd[i], None);
            let cpu_rate = on_cpu.as_ref().ok().map(|c| c.0);
            for (name, cell) in [("gpu", on_gpu), ("multi-buffer per caller", on_cpu)] {
                let mut row: Vec<(&str, Cell)> = vec![
                    ("profile", Cell::text(profile.sdp_name())),
                    ("engine", Cell::text(name)),
                    ("callers", Cell::num(n as f64)),
                ];
                match cell {
                    Ok((rate, p50, p99)) => {
                        row.push(("packets_per_s", Cell::num(rate)));
                        row.push(("batch_p50_us", Cell::num(p50 * 1e6)));
                        row.push(("batch_p99_us", Cell::num(p99 * 1e6)));
                        if let (true, Some(c)) = (name == "gpu", cpu_rate) {
                            row.push(("vs_cpu", Cell::num(rate / c)));
                        }
                    }
                    Err(why) => row.push(("packets_per_s", Cell::not_offered(why))),
                }
                table.push(row);
            }
            ctx.done();
        }
    }
    table
}

/// `callers` threads protecting batches at once for about `time` after three untimed batches
/// each, from a common start: the sum of the callers' rates (each one's packets over its time
/// inside `Engine::process`, as in the other tables), and the batch times' p50 and p99 over
/// every caller. For the GPU engine (`gpu`), a timed
/// phase that uploads keys or sends packets to the CPU fails, as in [`measure`].
fn callers_cell<'e, E: Engine + 'e>(
    profile: Profile,
    callers: usize,
    batch: usize,
    time: Duration,
    engine: impl Fn(usize) -> &'e E + Sync,
    gpu: Option<&GpuEngine>,
) -> Result<(f64, f64, f64), String> {
    let barrier = std::sync::Barrier::new(callers + 1);
    let (per_caller, before) = std::thread::scope(|s| {
        let handles: Vec<_> = (0..callers)
            .map(|i| {
                let (barrier, engine) = (&barrier, &engine);
                s.spawn(move || {
                    let mut run = Run::new(profile, batch);
                    let e = engine(i);
                    // Errors are kept, not returned: every caller meets every barrier.
                    let mut failed = None;
                    for _ in 0..3 {
                        if let Err(why) = one_batch(e, &mut run, Op::ProtectRtp) {
                            failed.get_or_insert(why);
                        }
                    }
                    barrier.wait();
                    barrier.wait();
                    let (start, mut times) = (Instant::now(), Vec::new());
                    while failed.is_none() && (times.len() < 3 || start.elapsed() < time) {
                        match one_batch(e, &mut run, Op::ProtectRtp) {
                            Ok(t) => times.push(t),
                            Err(why) => failed = Some(why),
                        }
                    }
                    barrier.wait();
                    failed.map_or(Ok(times), Err)
                })
            })
            .collect();
        barrier.wait();
        let before = gpu.map(GpuEngine::stats);
        barrier.wait();
        barrier.wait();
        let per_caller: Vec<Result<Vec<f64>, String>> = handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("a caller panicked".into())))
            .collect();
        (per_caller, before)
    });
    if let (Some(g), Some(before)) = (gpu, before) {
        let after = g.stats();
        if after.key_uploads != before.key_uploads || after.cpu_packets != before.cpu_packets {
            return Err(format!(
                "{} packets went to the CPU and {} key sets were uploaded during the timed batches",
                after.cpu_packets - before.cpu_packets,
                after.key_uploads - before.key_uploads
            ));
        }
    }
    let (mut all, mut rate) = (Vec::new(), 0.0);
    for times in per_caller {
        let times = times?;
        rate += (times.len() * batch) as f64 / times.iter().sum::<f64>();
        all.extend(times);
    }
    all.sort_by(f64::total_cmp);
    Ok((rate, percentile(&all, 0.5), percentile(&all, 0.99)))
}

/// The variants' table with no rows.
fn variants_header() -> Table {
    Table::new(
        "srtp_gpu_variants",
        "The GPU engine's settings: not measured (no GPU, or --quick)",
    )
    .col("profile", "profile")
    .col("settings", "host threads × lanes × chunk, block, registers")
}

/// Throughput by batch size, GPU beside the threaded engine; and the GPU engine, or why none
/// opened.
fn by_batch(ctx: &Ctx) -> (Table, Result<GpuEngine, String>) {
    let mut table = Table::new(
        "srtp_gpu",
        format!(
            "SRTP on the GPU: {SIZE}-byte RTP packets in batches over up to {MAX_CONTEXTS} contexts, host memory to host memory"
        ),
    )
    .col("profile", "profile")
    .col("op", "operation")
    .col("engine", "engine")
    .col_unit("batch", "batch", "packets")
    .col_unit("contexts", "contexts", "")
    .col_unit("packets_per_s", "throughput", "packets/s")
    .col_unit("batch_p50_us", "batch time p50", "µs")
    .col_unit("batch_p99_us", "batch time p99", "µs")
    .col_unit("vs_threaded", "throughput vs threaded", "×");
    let gpu = match GpuEngine::open(lab_config(&ctx.opts.gpu)) {
        Ok(g) => g,
        Err(e) => {
            for p in PROFILES {
                table.push([
                    ("profile", Cell::text(p.sdp_name())),
                    ("engine", Cell::text("gpu")),
                    ("packets_per_s", Cell::not_offered(e.to_string())),
                ]);
            }
            return (table, Err(e.to_string()));
        }
    };
    let threaded = ThreadedEngine::with_default_workers().ok();
    let batches: Vec<usize> = if ctx.opts.quick {
        vec![BATCHES[0], BATCHES[3]]
    } else {
        BATCHES.to_vec()
    };
    let time = ctx.bench.run_time * 4;
    let cores = secrelay_srtp::threaded::available_cores();
    for profile in PROFILES {
        for op in [Op::ProtectRtp, Op::UnprotectRtp] {
            let opname = if op == Op::ProtectRtp {
                "protect"
            } else {
                "unprotect"
            };
            ctx.step(format!("gpu, {} {opname}", profile.sdp_name()));
            for &batch in &batches {
                let mut run = Run::new(profile, batch);
                let mut engines: Vec<(String, &dyn Engine, Option<&GpuEngine>)> =
                    vec![(format!("gpu ({})", gpu.device()), &gpu, Some(&gpu))];
                if let Some(t) = &threaded {
                    engines.push((format!("threaded×{cores} simd"), t, None));
                }
                let measured: Vec<(String, Result<Vec<f64>, String>)> = engines
                    .into_iter()
                    .map(|(name, engine, gpu)| {
                        let t = measure(engine, gpu, &mut run, op, time).map(|mut t| {
                            t.sort_by(f64::total_cmp);
                            t
                        });
                        (name, t)
                    })
                    .collect();
                let rate = |t: &[f64]| batch as f64 * t.len() as f64 / t.iter().sum::<f64>();
                let threaded_rate = measured
                    .get(1)
                    .and_then(|(_, t)| t.as_ref().ok())
                    .map(|t| rate(t));
                for (i, (name, t)) in measured.into_iter().enumerate() {
                    let mut row: Vec<(&str, Cell)> = vec![
                        ("profile", Cell::text(profile.sdp_name())),
                        ("op", Cell::text(opname)),
                        ("engine", Cell::text(name)),
                        ("batch", Cell::num(batch as f64)),
                        ("contexts", Cell::num(run.contexts as f64)),
                    ];
                    match t {
                        Ok(t) => {
                            row.push(("packets_per_s", Cell::num(rate(&t))));
                            row.push(("batch_p50_us", Cell::num(percentile(&t, 0.5) * 1e6)));
                            row.push(("batch_p99_us", Cell::num(percentile(&t, 0.99) * 1e6)));
                            if let (0, Some(th)) = (i, threaded_rate) {
                                row.push(("vs_threaded", Cell::num(rate(&t) / th)));
                            }
                        }
                        Err(why) => row.push(("packets_per_s", Cell::not_offered(why))),
                    }
                    table.push(row);
                }
            }
        }
    }
    (table, Ok(gpu))
}

/// `lab gpu`: the GPU rows of `lab srtp` and the SRTP-only curves of `lab calls` for the GPU and
/// worker-thread engines, without the rest of those studies: what a session on a GPU machine
/// runs in its few minutes of device time. Not part of `lab all` (those studies have these
/// rows already).
pub struct GpuStudy;

impl Study for GpuStudy {
    fn name(&self) -> &'static str {
        "gpu"
    }

    fn title(&self) -> &'static str {
        "SRTP on the GPU: throughput by batch size and delay against concurrent calls (003)"
    }

    fn run(&self, ctx: &mut Ctx) -> anyhow::Result<StudyReport> {
        let (table, variants, callers, kernels, gpu) = sweep(ctx);
        // The calls' engine: the tables' one, leaving small batches on the CPU from now on if
        // asked (the tables keep every packet on the device: [`calls_config`]).
        if let (Ok(g), Some(n)) = (&gpu, ctx.opts.gpu.cpu_below) {
            g.set_cpu_below(n);
        }
        let (engines, mut notes) = super::calls::engines_with(gpu, false);
        let ns: Vec<usize> = if ctx.opts.quick {
            vec![1_000, 10_000]
        } else {
            [1_000, 5_000, 10_000, 20_000]
                .into_iter()
                .chain(super::calls::GPU_NS)
                .collect()
        };
        let rounds = if ctx.opts.quick { 2 } else { 5 };
        ctx.steps((engines.len() * ns.len()) as u64);
        let (calls, series) = super::calls::srtp_sweep(ctx, &engines, &ns, rounds, &mut notes)?;
        let cfg = lab_config(&ctx.opts.gpu);
        let method = ctx.method(
            format!(
                "srtp_gpu: as in lab srtp; calls_srtp: as in lab calls (SRTP only), {rounds} rounds per N after a warm-up round, \
                 the GPU engine and the worker-thread engine (a lane per core) only; the GPU engine's settings: {}{}",
                cfg.label(),
                match ctx.opts.gpu.cpu_below {
                    Some(n) if n > 0 => format!("; in calls_srtp, batches under {n} packets on the CPU"),
                    _ => String::new(),
                }
            ),
            "not counted: throughput and delays are measured, not instructions",
        );
        Ok(StudyReport {
            study: self.name().into(),
            title: self.title().into(),
            seeds: vec!["003".into()],
            method,
            tables: vec![table, variants, callers, kernels, calls],
            plots: vec![Plot {
                id: "gpu_calls_delay".into(),
                title: "Per-packet delay against concurrent G.711 calls: GPU and worker threads"
                    .into(),
                kind: PlotKind::Lines,
                x_label: "concurrent calls".into(),
                y_label: "delay (µs)".into(),
                log_y: true,
                categories: Vec::new(),
                series,
            }],
            notes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_variants_table_starts_with_the_runs_engine_and_lists_no_setting_twice() {
        let cores = secrelay_srtp::threaded::available_cores();
        let opts = crate::Options {
            smoke: true,
            no_progress: true,
            gpu: GpuSettings {
                host_threads: Some(cores),
                lanes: Some(2),
                chunk: Some(2_048),
                ..GpuSettings::default()
            },
            ..Default::default()
        };
        let ctx = Ctx::new(&opts, "gpu");
        // The emulated device stands for the run's engine; the others cannot open here and
        // say why, but keep their rows.
        let own = GpuEngine::emulated(lab_config(&opts.gpu)).unwrap();
        let t = variants(&ctx, &own);
        let labels: Vec<String> = t
            .rows
            .iter()
            .filter(|r| r.get("profile") == Some(&Cell::text(PROFILES[0].sdp_name())))
            .map(|r| match r.get("settings") {
                Some(Cell::Text(l)) => l.clone(),
                other => panic!("no settings label: {other:?}"),
            })
            .collect();
        let own_label = format!("{cores} host × 2 lanes × 2048, block 256");
        assert_eq!(labels[0], own_label);
        assert_eq!(labels.iter().filter(|l| **l == own_label).count(), 1);
        // The lab's defaults are among the others, since the run's engine is not them.
        assert!(labels.contains(&format!("{cores} host × 4 lanes × 1024, block 256")));
        assert_eq!(labels.len(), VARIANTS.len());
        let first = t
            .rows
            .iter()
            .find(|r| r.get("vs_default").is_some())
            .unwrap();
        assert_eq!(first.get("vs_default"), Some(&Cell::num(1.0)));
    }

    #[test]
    fn callers_share_one_gpu_engine_and_their_rates_add_up() {
        // The host emulation of the device: the same engine code, the kernels on the CPU.
        let g = GpuEngine::emulated(GpuConfig::new().chunk(64)).unwrap();
        let time = Duration::from_millis(30);
        let (rate, p50, p99) =
            callers_cell(Profile::AesCm128HmacSha1_80, 3, 256, time, |_| &g, Some(&g))
                .expect("three callers on the emulated device");
        assert!(rate > 0.0 && p50 > 0.0 && p99 >= p50);
        let s = g.stats();
        // Every packet on the device: 3 callers' keys uploaded once each, nothing on the CPU.
        assert_eq!((s.cpu_packets, s.key_uploads), (0, 3 * 256));
        assert!(s.device_packets >= 3 * 6 * 256, "{s:?}");
        // The kernels alone, as `srtp_gpu_kernels` times them: the batch comes out right.
        let g = GpuEngine::emulated(GpuConfig::new().lanes(2).chunk(16)).unwrap();
        let mut run = Run::new(Profile::AeadAes128Gcm, 64);
        one_batch(&g, &mut run, Op::ProtectRtp).unwrap();
        run.fill();
        let (ran, _) = run
            .with_batch(Op::ProtectRtp, |c, p, r| g.time_kernels(c, p, r, 2))
            .unwrap();
        assert_eq!((ran, run.check(Op::ProtectRtp)), (2 * 2 * 16, 0));
        let simd: Vec<SimdEngine> = (0..2).map(|_| SimdEngine::new()).collect();
        assert!(callers_cell(Profile::AeadAes128Gcm, 2, 256, time, |i| &simd[i], None).is_ok());
    }
}
