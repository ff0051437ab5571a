//! # secrelay-srtp-gpu
//!
//! The GPU batch engine: SRTP packets of many contexts protected and unprotected on a CUDA
//! GPU, behind the same [`Engine`] trait as the serial, multi-buffer and worker-thread
//! engines, with their bytes and statuses (`crates/srtp/tests/engine_equivalence.rs`).
//!
//! # What runs where
//! The checks before the crypto and the state changes after it stay on the CPU, on the
//! contexts, through `secrelay-srtp`'s [`offload`](secrelay_srtp::offload) hooks, which share
//! their code with the one-packet methods: header, stream, index (ROC) estimate and replay
//! check (*begin*), and for unprotect the replay window and ROC update once the packet has
//! authenticated (*commit*). The crypto of SRTP and SRTCP packets runs on the device, one GPU
//! thread per packet (`kernels/srtp.cu`): AES-CM keystreams and HMAC-SHA1 (80- and 32-bit tags, AES-128
//! and AES-256, and the NULL cipher), AES-GCM 128 and 256; unprotect checks the tag in
//! constant time and decrypts only what authenticated. SRTCP goes the same way (its own key
//! set per context, the E‖index word in the descriptor). The SDES-only AES-192 and f8 profiles
//! stay on the CPU (`abi::supported`), as the packets of a context whose keys find no slot do.
//!
//! # Waves: each context's packets in order
//! Unprotecting a packet reads the stream state the previous packet of its context changes
//! if it authenticates. So a batch goes to the device in *waves*: a wave takes every packet
//! in batch order until a context has an unprotect waiting, and then that context's later
//! packets wait for the next wave (every other context's carry on). A gateway's batch, with
//! one context per participant and a few packets of each, is one or two waves; a batch of
//! many packets of a single receiving context is as many waves as it has packets (the serial
//! engine suits that better).
//!
//! # Host threads
//! The host's share of a packet (its checks and commit, and copying it into the staging and
//! back) costs about a hundred nanoseconds (measured on the development VM: `host_share` in the
//! tests), so one host thread cannot feed a GPU at 100 million packets a second. With [`GpuConfig::host_threads`] above one, a batch is split by context
//! over that many threads (the worker-thread engine's split, [`ThreadedEngine`], with this
//! engine in its lanes), each with lanes of its own on the same device; the key slots are
//! shared. Several callers (a gateway's workers, each with its own contexts) may also call
//! one engine at once: each gets a host state of its own, and no batch is split. On an H200
//! machine with 16 cores the second way went further (about 53 M packets/s from 16 callers
//! against about 23 M from one caller split over 16 threads): the split was then a serial pass
//! of about 20 ns per packet on the calling thread, since dealt by the worker threads for
//! large batches (docs/benchmarks.md).
//!
//! # Lanes and keys
//! A wave's packets are copied into the staging buffers of up to [`GpuConfig::lanes`] lanes,
//! [`GpuConfig::chunk`] packets each; each lane is a CUDA stream whose staging is page-locked
//! host memory, so that while one lane's packets are copied or processed, the host fills the
//! next lane. Each key set is expanded on the device once (AES schedule, HMAC inner and outer
//! states, GHASH key table) into a key slot that stays there, found again by the key set's
//! process-unique name and noted on the context ([`Context::offload_note`], tagged with this
//! engine and this filling of its slots), so a packet finds its slot in the context it
//! already touches, with no lookup shared between host threads; when all
//! [`GpuConfig::key_slots`] are taken, the slots are reused
//! from the start at the next batch (packets whose keys found no slot in this one have their
//! crypto done on the CPU).
//!
//! # Without a GPU
//! [`GpuEngine::open`] fails with [`Unavailable`] (no CUDA driver, no device, NVRTC missing,
//! or built without the `cuda` feature) and callers use a CPU engine. A device that fails
//! while working (a driver error) makes the engine finish that batch's crypto on the CPU and
//! every later batch too ([`GpuStats::device_errors`]). [`GpuEngine::emulated`] runs the same
//! kernel source compiled for the host: slow, for tests on machines without a GPU.
//!
//! # Not built
//! The kernels are launched per chunk of a batch (a few microseconds each), not run as
//! persistent kernels polling a queue in mapped host memory. For packets that arrive one by
//! one, [`secrelay_srtp::pipeline::Pipeline`] with this engine inside gathers them into
//! batches over a window on persistent host threads. Whether a persistent kernel is worth its
//! complexity depends on the launch cost: on the H200 machine a batch of 1,024 packets took
//! about 210–310 µs host memory to host memory (`srtp_gpu`'s p50), against 90–110 µs on 16
//! cores, so small batches belong on the CPU ([`GpuConfig::cpu_below`]).

#![deny(unsafe_code)]

pub mod abi;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod device;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use foldhash::HashMap;
use secrelay_srtp::batch::{process_one, PacketResult};
use secrelay_srtp::{Context, Contexts, Engine, Error, Op, Packet, ThreadedConfig, ThreadedEngine};
use zeroize::{Zeroize, Zeroizing};

use crate::abi::{Work, DESC_BYTES};
use crate::device::{Device, DeviceError, HostDevice, Lanes};

/// Default lanes (CUDA streams) per host thread.
pub const DEFAULT_LANES: usize = 4;
/// Default packets per lane launch.
pub const DEFAULT_CHUNK: usize = 16_384;
/// Default key slots on the device (1 KiB each: 64 MiB).
pub const DEFAULT_KEY_SLOTS: usize = 65_536;
/// Default threads per block of the packet kernel.
pub const DEFAULT_BLOCK: u32 = 256;
/// Default smallest batch split over host threads (when there are several).
pub const DEFAULT_SPLIT_ABOVE: usize = 4_096;

/// How to build a [`GpuEngine`].
#[derive(Debug, Clone)]
pub struct GpuConfig {
    device: usize,
    lanes: usize,
    chunk: usize,
    key_slots: usize,
    cpu_below: usize,
    block: u32,
    max_registers: Option<u32>,
    host_threads: usize,
    split_above: usize,
}

impl Default for GpuConfig {
    fn default() -> Self {
        GpuConfig::new()
    }
}

impl GpuConfig {
    /// GPU 0, one host thread with [`DEFAULT_LANES`] lanes of [`DEFAULT_CHUNK`] packets,
    /// [`DEFAULT_KEY_SLOTS`] key slots, blocks of [`DEFAULT_BLOCK`] threads, every batch on
    /// the device.
    pub fn new() -> Self {
        GpuConfig {
            device: 0,
            lanes: DEFAULT_LANES,
            chunk: DEFAULT_CHUNK,
            key_slots: DEFAULT_KEY_SLOTS,
            cpu_below: 0,
            block: DEFAULT_BLOCK,
            max_registers: None,
            host_threads: 1,
            split_above: DEFAULT_SPLIT_ABOVE,
        }
    }
    /// Which GPU (CUDA ordinal).
    pub fn device(mut self, ordinal: usize) -> Self {
        self.device = ordinal;
        self
    }
    /// Lanes (CUDA streams) per host thread, at least 1.
    pub fn lanes(mut self, n: usize) -> Self {
        self.lanes = n.max(1);
        self
    }
    /// Packets per lane launch, 1 to 32,768 (a lane's packet offsets are 32-bit: 32,768
    /// packets of the largest size stay under 4 GiB).
    pub fn chunk(mut self, packets: usize) -> Self {
        self.chunk = packets.clamp(1, 32_768);
        self
    }
    /// Key sets kept on the device at once, at least 1 (1 KiB of device memory each).
    pub fn key_slots(mut self, n: usize) -> Self {
        self.key_slots = n.clamp(1, u32::MAX as usize / 2);
        self
    }
    /// Threads per block of the packet kernel (32 to 1,024, a multiple of 32).
    pub fn block_threads(mut self, threads: u32) -> Self {
        self.block = (threads.clamp(32, 1024) / 32) * 32;
        self
    }
    /// A cap on the packet kernel's registers per thread (NVRTC's `--maxrregcount`); `None`
    /// leaves the compiler's choice.
    pub fn max_registers(mut self, registers: Option<u32>) -> Self {
        self.max_registers = registers;
        self
    }
    /// Host threads a batch is split over (by context) for the host's share of the work, at
    /// least 1; batches of fewer than [`GpuConfig::split_above`] packets stay on one.
    pub fn host_threads(mut self, n: usize) -> Self {
        self.host_threads = n.max(1);
        self
    }
    /// The smallest batch split over host threads.
    pub fn split_above(mut self, packets: usize) -> Self {
        self.split_above = packets;
        self
    }
    /// Batches of fewer packets than this run on the CPU (the serial engine's code): a device
    /// round trip costs tens of microseconds whatever the batch. 0 sends every batch.
    pub fn cpu_below(mut self, packets: usize) -> Self {
        self.cpu_below = packets;
        self
    }
    /// A short description of the settings, for tables: host threads, lanes × chunk, block,
    /// register cap.
    pub fn label(&self) -> String {
        let regs = match self.max_registers {
            Some(r) => format!(", ≤{r} regs"),
            None => String::new(),
        };
        format!(
            "{} host × {} lanes × {}, block {}{regs}",
            self.host_threads, self.lanes, self.chunk, self.block
        )
    }
}

/// Why the GPU engine cannot run here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unavailable(pub String);

impl core::fmt::Display for Unavailable {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "GPU engine unavailable: {}", self.0)
    }
}

impl std::error::Error for Unavailable {}

/// What the engine has done since it was made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GpuStats {
    /// Batches processed (each host thread's share counts once).
    pub batches: u64,
    /// Waves sent to the device.
    pub waves: u64,
    /// Lane launches.
    pub launches: u64,
    /// Packets whose crypto ran on the device.
    pub device_packets: u64,
    /// Packets whose crypto ran on the CPU instead (no key slot free, too long, a failed
    /// device, a batch under [`GpuConfig::cpu_below`]).
    pub cpu_packets: u64,
    /// Key sets expanded on the device.
    pub key_uploads: u64,
    /// Device failures (after the first, every batch runs on the CPU).
    pub device_errors: u64,
}

impl GpuStats {
    fn add(&mut self, o: &GpuStats) {
        self.batches += o.batches;
        self.waves += o.waves;
        self.launches += o.launches;
        self.device_packets += o.device_packets;
        self.cpu_packets += o.cpu_packets;
        self.key_uploads += o.key_uploads;
        self.device_errors += o.device_errors;
    }
}

/// Key set name → key slot, shared by the host threads.
struct KeyCache {
    /// The slot, and whether its keys are on the device yet.
    slots: HashMap<u64, (u32, bool)>,
    next: u32,
    max: u32,
}

/// A tag for [`Core::key_owner`] no engine in the process had before (0 is never one).
fn next_owner() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// A packet of a wave whose crypto is offloaded.
struct Job {
    packet: usize,
    context: usize,
    job: Work,
    /// Its key slot; [`NO_SLOT`]: its crypto runs on the CPU.
    slot: u32,
    /// Where its bytes are in its chunk's data area.
    offset: u32,
    /// The device finished it (its result is written).
    done: bool,
}

const NO_SLOT: u32 = u32::MAX;

/// What the host threads share: the device, the key slots' names, the counters.
struct Core {
    device: Box<dyn Device>,
    config: GpuConfig,
    describe: String,
    keys: Mutex<KeyCache>,
    /// A key set found no slot: the slots start over when no batch runs (read without the
    /// lock at every batch).
    keys_full: AtomicBool,
    /// The tag this engine's notes on the contexts carry ([`Context::offload_note`]): unique
    /// in the process, and new whenever the key slots start over (the old notes then answer
    /// to no one).
    key_owner: AtomicU64,
    /// Held (read) by every batch while it runs; the key slots start over only under the
    /// write side, when nothing runs.
    active: RwLock<()>,
    /// Host states not in use (one per host thread working at once).
    idle: Mutex<Vec<Host>>,
    stats: Mutex<GpuStats>,
    failed: Mutex<Option<DeviceError>>,
    has_failed: AtomicBool,
    /// Batches of fewer packets run on the CPU: [`GpuConfig::cpu_below`] at first,
    /// [`GpuEngine::set_cpu_below`] since.
    cpu_below: AtomicUsize,
}

/// One host thread's lanes and scratch, kept between batches.
struct Host {
    lanes: Box<dyn Lanes>,
    /// [`Core::key_owner`] when this batch began.
    owner: u64,
    stats: GpuStats,
    /// The wave's packets whose crypto goes to the device, in batch order.
    jobs: Vec<Job>,
    /// The wave's packets whose keys found no slot: their crypto runs on the CPU. (A
    /// context's packets may be split between the two lists: protects moved their stream on
    /// at begin, and a context has at most one unprotect in a wave, its last packet there, so
    /// the order of the crypto across the lists does not matter.)
    cpu_jobs: Vec<Job>,
    remaining: Vec<usize>,
    next: Vec<usize>,
    blocked: Vec<u32>,
    generation: u32,
    new_raw: Zeroizing<Vec<u8>>,
    new_ids: Vec<u32>,
    new_names: Vec<u64>,
    /// Each lane's last launch (packets, data offset, bytes), for [`GpuEngine::time_kernels`].
    last_launch: Vec<Option<(u32, usize, usize)>>,
}

/// The GPU batch engine (see the [crate docs](crate)).
pub struct GpuEngine {
    core: Arc<Core>,
    /// The split over host threads, when there are several.
    split: Option<ThreadedEngine>,
}

impl core::fmt::Debug for GpuEngine {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("GpuEngine")
            .field("device", &self.core.describe)
            .field("config", &self.core.config)
            .finish_non_exhaustive()
    }
}

impl GpuEngine {
    /// Opens the CUDA GPU the config names and loads the kernels.
    #[cfg(feature = "cuda")]
    pub fn open(config: GpuConfig) -> Result<Self, Unavailable> {
        // A driver too old for a symbol cudarc expects panics inside cudarc: that too means
        // "unavailable", not a crash.
        let opened = std::panic::catch_unwind(|| {
            cuda::CudaDevice::open(
                config.device,
                config.key_slots,
                config.block,
                config.max_registers,
            )
        })
        .map_err(|_| Unavailable("the CUDA driver does not provide what cudarc needs".into()))?
        .map_err(|e| Unavailable(e.0))?;
        Self::with_device(Box::new(opened), config)
    }

    /// Without the `cuda` feature there is no GPU engine.
    #[cfg(not(feature = "cuda"))]
    pub fn open(_config: GpuConfig) -> Result<Self, Unavailable> {
        Err(Unavailable("built without the `cuda` feature".into()))
    }

    /// The engine on the host emulation of the device: the same kernel source compiled for
    /// the CPU, run on the calling threads. Slow; for tests where there is no GPU.
    pub fn emulated(config: GpuConfig) -> Result<Self, Unavailable> {
        let d = HostDevice::new(config.key_slots).map_err(|e| Unavailable(e.0))?;
        Self::with_device(Box::new(d), config)
    }

    fn with_device(device: Box<dyn Device>, config: GpuConfig) -> Result<Self, Unavailable> {
        let describe = device.describe();
        let max = device.slot_capacity().min(config.key_slots) as u32;
        let core = Arc::new(Core {
            device,
            describe,
            keys: Mutex::new(KeyCache {
                slots: HashMap::default(),
                next: 0,
                max,
            }),
            keys_full: AtomicBool::new(false),
            key_owner: AtomicU64::new(next_owner()),
            active: RwLock::new(()),
            idle: Mutex::new(Vec::new()),
            stats: Mutex::new(GpuStats::default()),
            failed: Mutex::new(None),
            has_failed: AtomicBool::new(false),
            cpu_below: AtomicUsize::new(config.cpu_below),
            config,
        });
        let split = if core.config.host_threads > 1 {
            let cfg = ThreadedConfig::new()
                .workers(core.config.host_threads)
                .parallel_threshold(core.config.split_above);
            Some(
                ThreadedEngine::with_lane_engine(cfg, core.clone() as Arc<dyn Engine>)
                    .map_err(|e| Unavailable(format!("host threads: {e}")))?,
            )
        } else {
            None
        };
        Ok(GpuEngine { core, split })
    }

    /// The device it runs on, in words.
    pub fn device(&self) -> &str {
        &self.core.describe
    }

    /// The configuration it was opened with (its CPU threshold since: [`GpuEngine::cpu_below`]).
    pub fn config(&self) -> &GpuConfig {
        &self.core.config
    }

    /// Batches of fewer packets than this run on the CPU (0: every batch on the device).
    pub fn cpu_below(&self) -> usize {
        self.core.cpu_below.load(Ordering::Relaxed)
    }

    /// From the next batch on, batches of fewer than `packets` packets run on the CPU, as
    /// [`GpuConfig::cpu_below`] sets at opening: one engine (its kernels compiled and its key
    /// slots loaded once) can serve runs that want every packet on the device and runs that
    /// leave small batches to the CPU.
    pub fn set_cpu_below(&self, packets: usize) {
        self.core.cpu_below.store(packets, Ordering::Relaxed);
    }

    /// What it has done so far.
    pub fn stats(&self) -> GpuStats {
        *lock(&self.core.stats)
    }

    /// The device failure that sent all work to the CPU, if one happened.
    pub fn failure(&self) -> Option<String> {
        lock(&self.core.failed).as_ref().map(|e| e.0.clone())
    }

    /// The kernels alone, for measuring (`lab gpu`): processes the batch as
    /// [`Engine::process`] does (its results are the engine's), then runs the packet kernel
    /// `times` more over what each lane's last launch left on the device, with no copy either
    /// way and no work on the host, and times that. Returns the packets the device ran and
    /// the time from the first of those launches to the end of the last. An engine with one
    /// host thread only (the lanes of a split batch belong to several).
    pub fn time_kernels(
        &self,
        contexts: &mut [Context],
        packets: &mut [Packet<'_>],
        results: &mut [PacketResult],
        times: u32,
    ) -> Result<(u64, std::time::Duration), String> {
        if self.split.is_some() {
            return Err("the kernels are timed with one host thread".into());
        }
        self.core.run(contexts, packets, results);
        let mut host = lock(&self.core.idle)
            .pop()
            .ok_or("the batch did not run on the device")?;
        let started = std::time::Instant::now();
        let mut ran = 0u64;
        let mut timed = Ok(());
        for (lane, last) in host.last_launch.iter().enumerate() {
            if let Some((n, data_at, bytes)) = *last {
                timed = timed.and_then(|()| host.lanes.relaunch(lane, n, data_at, bytes, times));
                ran += u64::from(n) * u64::from(times);
            }
        }
        for lane in 0..host.last_launch.len() {
            timed = timed.and_then(|()| host.lanes.wait(lane).map(|_| ()));
        }
        let elapsed = started.elapsed();
        lock(&self.core.idle).push(host);
        timed.map_err(|e| e.to_string())?;
        Ok((ran, elapsed))
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Every user leaves the state consistent between statements; a panic elsewhere while
    // holding the lock does not make it unusable.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn read(l: &RwLock<()>) -> std::sync::RwLockReadGuard<'_, ()> {
    l.read().unwrap_or_else(|p| p.into_inner())
}

impl Core {
    /// When a key set found no slot, the slots start over, but only while no batch runs (a
    /// running batch's packets name slots).
    fn start_over_if_full(&self) {
        if !self.keys_full.load(Ordering::Acquire) {
            return;
        }
        if let Ok(_quiet) = self.active.try_write() {
            let mut k = lock(&self.keys);
            k.slots.clear();
            k.next = 0;
            self.keys_full.store(false, Ordering::Release);
            self.key_owner.store(next_owner(), Ordering::Release);
        }
    }

    fn fail(&self, e: DeviceError, stats: &mut GpuStats) {
        stats.device_errors += 1;
        let mut f = lock(&self.failed);
        if f.is_none() {
            *f = Some(e);
        }
        self.has_failed.store(true, Ordering::Release);
    }

    /// One host thread's batch (the whole batch, or its share of a split one).
    fn run<C: Contexts + ?Sized>(
        &self,
        contexts: &mut C,
        packets: &mut [Packet<'_>],
        results: &mut [PacketResult],
    ) {
        secrelay_srtp::batch::check_results_len(packets.len(), results.len());
        let _active = read(&self.active);
        let mut stats = GpuStats {
            batches: 1,
            ..GpuStats::default()
        };
        let on_cpu = packets.len() < self.cpu_below.load(Ordering::Relaxed)
            || self.has_failed.load(Ordering::Acquire);
        let host = if on_cpu {
            None
        } else {
            self.take_host(&mut stats)
        };
        match host {
            Some(mut h) => {
                h.process(self, contexts, packets, results);
                stats.add(&h.stats);
                h.stats = GpuStats::default();
                lock(&self.idle).push(h);
            }
            None => {
                for (p, r) in packets.iter_mut().zip(results.iter_mut()) {
                    *r = process_one(contexts, p);
                    stats.cpu_packets += 1;
                }
            }
        }
        lock(&self.stats).add(&stats);
    }

    /// An idle host state, or a new one (new lanes on the device); `None` if the device
    /// cannot make lanes (it has failed).
    fn take_host(&self, stats: &mut GpuStats) -> Option<Host> {
        if let Some(h) = lock(&self.idle).pop() {
            return Some(h);
        }
        match self.device.new_lanes(self.config.lanes) {
            Ok(lanes) => Some(Host {
                lanes,
                owner: 0,
                stats: GpuStats::default(),
                jobs: Vec::new(),
                cpu_jobs: Vec::new(),
                remaining: Vec::new(),
                next: Vec::new(),
                blocked: Vec::new(),
                generation: 0,
                new_raw: Zeroizing::new(Vec::new()),
                new_ids: Vec::new(),
                new_names: Vec::new(),
                last_launch: Vec::new(),
            }),
            Err(e) => {
                self.fail(e, stats);
                None
            }
        }
    }
}

impl Engine for Core {
    fn name(&self) -> &'static str {
        "gpu"
    }

    fn process(
        &self,
        contexts: &mut [Context],
        packets: &mut [Packet<'_>],
        results: &mut [PacketResult],
    ) {
        self.run(contexts, packets, results);
    }

    fn process_in(
        &self,
        contexts: &mut dyn Contexts,
        packets: &mut [Packet<'_>],
        results: &mut [PacketResult],
    ) {
        self.run(contexts, packets, results);
    }
}

impl Host {
    fn process<C: Contexts + ?Sized>(
        &mut self,
        core: &Core,
        contexts: &mut C,
        packets: &mut [Packet<'_>],
        results: &mut [PacketResult],
    ) {
        self.owner = core.key_owner.load(Ordering::Acquire);
        self.last_launch.clear();
        if self.blocked.len() < contexts.len() {
            self.blocked.resize(contexts.len(), 0);
        }
        self.remaining.clear();
        self.remaining.extend(0..packets.len());
        while !self.remaining.is_empty() {
            self.generation = self.generation.wrapping_add(1);
            if self.generation == 0 {
                self.blocked.fill(0);
                self.generation = 1;
            }
            self.begin_wave(core, contexts, packets, results);
            if !self.jobs.is_empty() || !self.cpu_jobs.is_empty() {
                self.stats.waves += 1;
                self.run_wave(core, contexts, packets, results);
            }
            core::mem::swap(&mut self.remaining, &mut self.next);
        }
    }

    /// Takes the remaining packets in order: each begun (or, packets that fail their checks,
    /// done at once), until its context has an unprotect waiting; the rest go to `next`.
    fn begin_wave<C: Contexts + ?Sized>(
        &mut self,
        core: &Core,
        contexts: &mut C,
        packets: &mut [Packet<'_>],
        results: &mut [PacketResult],
    ) {
        self.jobs.clear();
        self.cpu_jobs.clear();
        self.next.clear();
        // The last wave's upload wiped its raw keys; should any be left, they are wiped here
        // (not on every wave: `zeroize` writes the whole capacity, empty or not).
        if !self.new_raw.is_empty() {
            self.new_raw.zeroize();
        }
        self.new_ids.clear();
        self.new_names.clear();
        let generation = self.generation;
        let remaining = core::mem::take(&mut self.remaining);
        for &pi in &remaining {
            let p = &mut packets[pi];
            let ci = p.context;
            if ci >= contexts.len() {
                results[pi] = Err(Error::UnknownContext);
                continue;
            }
            if self.blocked[ci] == generation {
                self.next.push(pi);
                continue;
            }
            let Some(ctx) = contexts.get_mut(ci) else {
                results[pi] = Err(Error::UnknownContext);
                continue;
            };
            let begun = match p.op {
                Op::ProtectRtp => ctx.offload_protect_rtp_begin(p.buf, p.len).map(Work::Rtp),
                Op::UnprotectRtp => ctx.offload_unprotect_rtp_begin(p.buf, p.len).map(Work::Rtp),
                Op::ProtectRtcp => ctx.offload_protect_rtcp_begin(p.buf, p.len).map(Work::Rtcp),
                Op::UnprotectRtcp => ctx
                    .offload_unprotect_rtcp_begin(p.buf, p.len)
                    .map(Work::Rtcp),
            };
            let job = match begun {
                Ok(j) => j,
                Err(e) => {
                    results[pi] = Err(e);
                    continue;
                }
            };
            if !job.is_protect() {
                self.blocked[ci] = generation;
            }
            // The slot noted on the context (no table shared with the other host threads),
            // else one found or given in the shared table, then noted.
            let slot = if job.fits() {
                let key_set = job.key_set();
                ctx.offload_note(key_set, self.owner).unwrap_or_else(|| {
                    let slot = self.slot_for(core, &job, ctx);
                    if slot != NO_SLOT {
                        ctx.set_offload_note(key_set, self.owner, slot);
                    }
                    slot
                })
            } else {
                NO_SLOT
            };
            let j = Job {
                packet: pi,
                context: ci,
                job,
                slot,
                offset: 0,
                done: false,
            };
            if slot == NO_SLOT {
                self.cpu_jobs.push(j);
            } else {
                self.jobs.push(j);
            }
        }
        self.remaining = remaining;
    }

    /// The key slot for `job`'s key set: the one it has, or a free one with its keys queued
    /// for upload; [`NO_SLOT`] when none is free (or the profile is not one the kernels do).
    fn slot_for(&mut self, core: &Core, job: &Work, ctx: &Context) -> u32 {
        let mut keys = lock(&core.keys);
        if let Some(&(s, ready)) = keys.slots.get(&job.key_set()) {
            // Not ready: another thread is uploading it (a key set only ever belongs to one
            // context, so this does not happen; the CPU would do it right anyway).
            if !ready {
                return NO_SLOT;
            }
            return s;
        }
        if keys.next >= keys.max {
            core.keys_full.store(true, Ordering::Release);
            return NO_SLOT;
        }
        let Some(m) = job.keys(ctx).filter(abi::supported) else {
            return NO_SLOT;
        };
        let s = keys.next;
        keys.next += 1;
        keys.slots.insert(job.key_set(), (s, false));
        drop(keys);
        let raw = abi::raw_keys(&m);
        if self.new_raw.capacity() - self.new_raw.len() < raw.len() {
            // A new buffer and a copy: growing in place could free the old one unwiped.
            let cap = (2 * self.new_raw.capacity()).max(16 * raw.len());
            let mut grown = Zeroizing::new(Vec::with_capacity(cap));
            grown.extend_from_slice(&self.new_raw);
            self.new_raw = grown;
        }
        self.new_raw.extend_from_slice(&raw[..]);
        self.new_ids.push(s);
        self.new_names.push(job.key_set());
        s
    }

    /// Sends the wave's jobs to the device lane by lane and finishes every job (device
    /// results, or the CPU where the device could not take it or failed).
    fn run_wave<C: Contexts + ?Sized>(
        &mut self,
        core: &Core,
        contexts: &mut C,
        packets: &mut [Packet<'_>],
        results: &mut [PacketResult],
    ) {
        let ran = self
            .upload(core)
            .and_then(|()| self.launch_all(core, contexts, packets, results));
        if let Err(e) = ran {
            core.fail(e, &mut self.stats);
        }
        // What the device did not finish or could not take: on the CPU, through the
        // context's provider.
        for j in self.jobs.iter().chain(&self.cpu_jobs).filter(|j| !j.done) {
            self.stats.cpu_packets += 1;
            results[j.packet] = finish_on_cpu(contexts, j, &mut packets[j.packet]);
        }
    }

    fn upload(&mut self, core: &Core) -> Result<(), DeviceError> {
        if self.new_ids.is_empty() {
            return Ok(());
        }
        let uploaded = core.device.upload_keys(&self.new_raw, &self.new_ids);
        self.new_raw.zeroize();
        uploaded?;
        let mut keys = lock(&core.keys);
        for name in &self.new_names {
            if let Some(e) = keys.slots.get_mut(name) {
                e.1 = true;
            }
        }
        self.stats.key_uploads += self.new_ids.len() as u64;
        Ok(())
    }

    /// The jobs of chunk `c`: [`GpuConfig::chunk`] at a time, in order.
    fn chunk_range(&self, core: &Core, c: usize) -> core::ops::Range<usize> {
        let size = core.config.chunk;
        c * size..((c + 1) * size).min(self.jobs.len())
    }

    /// Fills, launches and collects the lanes: chunk `c` on lane `c % lanes`, each lane
    /// collected before it is filled again, the last ones in chunk order at the end. On a
    /// device error the jobs not finished stay for the CPU.
    fn launch_all<C: Contexts + ?Sized>(
        &mut self,
        core: &Core,
        contexts: &mut C,
        packets: &mut [Packet<'_>],
        results: &mut [PacketResult],
    ) -> Result<(), DeviceError> {
        let lanes = self.lanes.count();
        let chunks = self.jobs.len().div_ceil(core.config.chunk);
        for c in 0..chunks {
            if c >= lanes {
                let prev = self.chunk_range(core, c - lanes);
                self.collect(c % lanes, prev, contexts, packets, results)?;
            }
            let range = self.chunk_range(core, c);
            self.fill_and_launch(c % lanes, range, packets)?;
        }
        for c in chunks.saturating_sub(lanes)..chunks {
            let range = self.chunk_range(core, c);
            self.collect(c % lanes, range, contexts, packets, results)?;
        }
        Ok(())
    }

    fn fill_and_launch(
        &mut self,
        lane: usize,
        chunk: core::ops::Range<usize>,
        packets: &[Packet<'_>],
    ) -> Result<(), DeviceError> {
        let jobs = &mut self.jobs[chunk];
        let data_at = abi::data_at(jobs.len());
        let mut offset = 0usize;
        for j in jobs.iter_mut() {
            j.offset = offset as u32;
            offset += abi::packet_room(j.job.len());
        }
        let bytes = data_at + offset;
        let staging = self.lanes.staging(lane, bytes)?;
        let (descs, data) = staging.split_at_mut(data_at);
        for (j, desc) in jobs.iter().zip(descs.chunks_exact_mut(DESC_BYTES)) {
            abi::put_desc(desc, &j.job, j.offset, j.slot);
            let at = j.offset as usize;
            let len = j.job.len();
            data[at..at + len].copy_from_slice(&packets[j.packet].buf[..len]);
        }
        self.lanes.launch(lane, jobs.len() as u32, data_at, bytes)?;
        if self.last_launch.len() <= lane {
            self.last_launch.resize(lane + 1, None);
        }
        self.last_launch[lane] = Some((jobs.len() as u32, data_at, bytes));
        self.stats.launches += 1;
        Ok(())
    }

    /// Waits for a lane and finishes its jobs from the device's results: outputs copied into
    /// the packets' buffers, unprotects committed.
    fn collect<C: Contexts + ?Sized>(
        &mut self,
        lane: usize,
        chunk: core::ops::Range<usize>,
        contexts: &mut C,
        packets: &mut [Packet<'_>],
        results: &mut [PacketResult],
    ) -> Result<(), DeviceError> {
        let staging = self.lanes.wait(lane)?;
        let jobs = &mut self.jobs[chunk];
        let data_at = abi::data_at(jobs.len());
        let (descs, data) = staging.split_at(data_at);
        for (j, desc) in jobs.iter_mut().zip(descs.chunks_exact(DESC_BYTES)) {
            let p = &mut packets[j.packet];
            let at = j.offset as usize;
            let r = match abi::status(desc) {
                abi::STATUS_DONE if j.job.is_protect() => {
                    let n = j.job.output_len();
                    p.buf[..n].copy_from_slice(&data[at..at + n]);
                    Ok(n)
                }
                abi::STATUS_DONE => {
                    let committed = contexts
                        .get_mut(j.context)
                        .ok_or(Error::UnknownContext)
                        .and_then(|ctx| j.job.commit(ctx));
                    committed.map(|()| {
                        let (hdr, n) = (j.job.header_len(), j.job.output_len());
                        p.buf[hdr..n].copy_from_slice(&data[at + hdr..at + n]);
                        n
                    })
                }
                abi::STATUS_AUTH_FAILED if !j.job.is_protect() => Err(Error::AuthFailed),
                // Not done: the CPU does it.
                _ => continue,
            };
            results[j.packet] = r;
            j.done = true;
            self.stats.device_packets += 1;
        }
        Ok(())
    }
}

/// The crypto of a begun packet on the CPU, then the commit (unprotect), as the serial engine
/// would have done it.
fn finish_on_cpu<C: Contexts + ?Sized>(
    contexts: &mut C,
    j: &Job,
    p: &mut Packet<'_>,
) -> PacketResult {
    let ctx = contexts.get_mut(j.context).ok_or(Error::UnknownContext)?;
    let n = j.job.crypto_on_cpu(ctx, p.buf)?;
    if !j.job.is_protect() {
        j.job.commit(ctx)?;
    }
    Ok(n)
}

impl Engine for GpuEngine {
    fn name(&self) -> &'static str {
        "gpu"
    }

    fn process(
        &self,
        contexts: &mut [Context],
        packets: &mut [Packet<'_>],
        results: &mut [PacketResult],
    ) {
        self.core.start_over_if_full();
        match &self.split {
            // Batches of `split_above` packets or more are split over the host threads (below
            // that the worker-thread engine runs them on this one). Each thread's share runs
            // under its own hold on `active` and names only slots it found or filled in that
            // run: the slots may start over between shares, never during one.
            Some(t) => t.process(contexts, packets, results),
            None => self.core.run(contexts, packets, results),
        }
    }

    fn process_in(
        &self,
        contexts: &mut dyn Contexts,
        packets: &mut [Packet<'_>],
        results: &mut [PacketResult],
    ) {
        // A store of contexts is not split (the worker-thread engine splits slices): one host
        // thread.
        self.core.start_over_if_full();
        self.core.run(contexts, packets, results);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use secrelay_srtp::{MasterKey, Policy, Profile, SerialEngine};

    use std::sync::atomic::AtomicUsize;

    /// The host emulation, failing from the `fail_at`-th launch on (counted over every
    /// host thread's lanes).
    struct Failing {
        inner: HostDevice,
        launches: Arc<AtomicUsize>,
        fail_at: usize,
    }

    struct FailingLanes {
        inner: Box<dyn Lanes>,
        launches: Arc<AtomicUsize>,
        fail_at: usize,
    }

    impl Device for Failing {
        fn describe(&self) -> String {
            "failing".into()
        }
        fn slot_capacity(&self) -> usize {
            self.inner.slot_capacity()
        }
        fn upload_keys(&self, raw: &[u8], ids: &[u32]) -> Result<(), DeviceError> {
            self.inner.upload_keys(raw, ids)
        }
        fn new_lanes(&self, n: usize) -> Result<Box<dyn Lanes>, DeviceError> {
            Ok(Box::new(FailingLanes {
                inner: self.inner.new_lanes(n)?,
                launches: self.launches.clone(),
                fail_at: self.fail_at,
            }))
        }
    }

    impl Lanes for FailingLanes {
        fn count(&self) -> usize {
            self.inner.count()
        }
        fn staging(&mut self, lane: usize, bytes: usize) -> Result<&mut [u8], DeviceError> {
            self.inner.staging(lane, bytes)
        }
        fn launch(
            &mut self,
            lane: usize,
            n: u32,
            at: usize,
            bytes: usize,
        ) -> Result<(), DeviceError> {
            if self.launches.fetch_add(1, Ordering::SeqCst) + 1 >= self.fail_at {
                return Err(DeviceError("injected failure".into()));
            }
            self.inner.launch(lane, n, at, bytes)
        }
        fn wait(&mut self, lane: usize) -> Result<&[u8], DeviceError> {
            self.inner.wait(lane)
        }
    }

    fn contexts() -> Vec<Context> {
        let mut v = Vec::new();
        for p in [Profile::AesCm128HmacSha1_80, Profile::AeadAes256Gcm] {
            let key = MasterKey::new(p, &vec![9; p.key_len()], &vec![5; p.salt_len()]).unwrap();
            v.push(Context::new(Policy::new(key.clone()).any_outbound()).unwrap());
            v.push(Context::new(Policy::new(key).any_inbound()).unwrap());
        }
        v
    }

    /// `n` RTP packets over both senders (contexts 0 and 2), 3 SSRCs each.
    fn plain(n: usize) -> Vec<(usize, Vec<u8>)> {
        (0..n)
            .map(|i| {
                let mut b = vec![0u8; 12 + 100 + 16];
                b[0] = 0x80;
                b[2..4].copy_from_slice(&(i as u16 / 6).to_be_bytes());
                b[8..12].copy_from_slice(&(i as u32 % 3).to_be_bytes());
                b[12..112].fill(i as u8);
                (if i % 2 == 0 { 0 } else { 2 }, b)
            })
            .collect()
    }

    fn run(
        e: &dyn Engine,
        ctxs: &mut [Context],
        input: &[(usize, Vec<u8>)],
        op: Op,
        len: impl Fn(usize) -> usize,
    ) -> (Vec<Vec<u8>>, Vec<PacketResult>) {
        let mut bufs: Vec<Vec<u8>> = input.iter().map(|(_, b)| b.clone()).collect();
        let mut pk: Vec<Packet<'_>> = bufs
            .iter_mut()
            .zip(input)
            .enumerate()
            .map(|(i, (b, (c, _)))| Packet {
                context: *c,
                op,
                len: len(i),
                buf: &mut b[..],
            })
            .collect();
        let mut res = vec![Ok(0); input.len()];
        e.process(ctxs, &mut pk, &mut res);
        drop(pk);
        (bufs, res)
    }

    /// Protect then unprotect (every fourth packet forged) on `engine`, against the serial
    /// engine: SRTP packets of [`plain`].
    fn check(engine: &GpuEngine) {
        let forged = round_trip(
            engine,
            &plain(60),
            [Op::ProtectRtp, Op::UnprotectRtp],
            112,
            (4, 20),
        );
        assert_eq!(forged, 15);
    }

    /// `input` (of `len` bytes each) through `ops[0]` then `ops[1]` on `engine` and on the
    /// serial engine, with every `forge.0`-th protected packet's byte `forge.1` flipped
    /// between: the same statuses, the same bytes for what succeeded, and a refused packet
    /// left as given or as the serial engine left it. Returns how many were refused.
    fn round_trip(
        engine: &GpuEngine,
        input: &[(usize, Vec<u8>)],
        ops: [Op; 2],
        len: usize,
        forge: (usize, usize),
    ) -> usize {
        let (mut a, mut b) = (contexts(), contexts());
        let want = run(&SerialEngine, &mut a, input, ops[0], |_| len);
        let got = run(engine, &mut b, input, ops[0], |_| len);
        assert_eq!(want, got);
        let sealed: Vec<(usize, Vec<u8>)> = want
            .0
            .iter()
            .enumerate()
            .map(|(i, buf)| {
                let mut buf = buf.clone();
                if i % forge.0 == forge.0 - 1 {
                    buf[forge.1] ^= 0x40;
                }
                (input[i].0 + 1, buf)
            })
            .collect();
        let lens: Vec<usize> = want.1.iter().map(|r| *r.as_ref().unwrap()).collect();
        let want = run(&SerialEngine, &mut a, &sealed, ops[1], |i| lens[i]);
        let got = run(engine, &mut b, &sealed, ops[1], |i| lens[i]);
        assert_eq!(want.1, got.1);
        for (i, (_, given)) in sealed.iter().enumerate() {
            if want.1[i].is_ok() {
                assert_eq!(want.0[i], got.0[i], "packet {i}");
            } else {
                // As given (the device decrypts only what verified), or as the serial engine
                // left it (the CPU fallback: aws-lc's GCM wipes a forged payload).
                assert!(
                    got.0[i] == *given || got.0[i] == want.0[i],
                    "forged packet {i}"
                );
            }
        }
        want.1.iter().filter(|r| r.is_err()).count()
    }

    #[test]
    fn the_emulated_device_gives_the_serial_engines_results() {
        let e = GpuEngine::emulated(GpuConfig::new().lanes(2).chunk(8)).unwrap();
        check(&e);
        let s = e.stats();
        assert_eq!(s.device_packets, 120);
        assert_eq!((s.cpu_packets, s.device_errors), (0, 0));
        // Two contexts' keys each way: uploaded once.
        assert_eq!(s.key_uploads, 4);
        // Unprotect: one packet per receiving context per wave.
        assert!(s.waves >= 30, "{s:?}");
        assert!(s.launches >= 8 + 30, "{s:?}");
    }

    #[test]
    fn host_threads_split_the_batch_and_share_the_key_slots() {
        let e = GpuEngine::emulated(
            GpuConfig::new()
                .host_threads(3)
                .split_above(8)
                .lanes(2)
                .chunk(4),
        )
        .unwrap();
        check(&e);
        let s = e.stats();
        assert_eq!(s.device_packets, 120, "{s:?}");
        assert_eq!((s.cpu_packets, s.device_errors), (0, 0));
        // Each key set once, whichever thread met it first.
        assert_eq!(s.key_uploads, 4);
        // The protect batch (60 packets over two contexts) went to two host threads.
        assert!(s.batches >= 3, "{s:?}");
    }

    #[test]
    fn engines_taking_turns_on_the_same_contexts_use_their_own_slots() {
        // Each engine notes its slots on the contexts. Here the second engine puts the GCM
        // sender's keys in its slot 0 and the first the CM sender's: a note taken by the wrong
        // engine would run one sender's packets under the other's keys.
        let (e1, e2) = (
            GpuEngine::emulated(GpuConfig::new().chunk(8)).unwrap(),
            GpuEngine::emulated(GpuConfig::new().chunk(8)).unwrap(),
        );
        let all = plain(60);
        let (mut want, mut got) = (contexts(), contexts());
        let gcm_only: Vec<(usize, Vec<u8>)> =
            all.iter().filter(|(c, _)| *c == 2).cloned().collect();
        let turns = [(&e2, &gcm_only[..3]), (&e1, &all[..20]), (&e2, &all[20..])];
        for (turn, (engine, batch)) in turns.into_iter().enumerate() {
            let w = run(&SerialEngine, &mut want, batch, Op::ProtectRtp, |_| 112);
            let g = run(engine, &mut got, batch, Op::ProtectRtp, |_| 112);
            assert_eq!(w, g, "turn {turn}");
        }
        assert_eq!(e1.stats().cpu_packets + e2.stats().cpu_packets, 0);
    }

    #[test]
    fn the_kernels_alone_run_again_on_what_the_lanes_left() {
        let e = GpuEngine::emulated(GpuConfig::new().lanes(2).chunk(16)).unwrap();
        let input = plain(60);
        let (mut want, mut got) = (contexts(), contexts());
        let w = run(&SerialEngine, &mut want, &input, Op::ProtectRtp, |_| 112);
        let mut bufs: Vec<Vec<u8>> = input.iter().map(|(_, b)| b.clone()).collect();
        let mut pk: Vec<Packet<'_>> = bufs
            .iter_mut()
            .zip(&input)
            .map(|(b, (c, _))| Packet {
                context: *c,
                op: Op::ProtectRtp,
                len: 112,
                buf: &mut b[..],
            })
            .collect();
        let mut res = vec![Ok(0); input.len()];
        let (ran, _) = e.time_kernels(&mut got, &mut pk, &mut res, 3).unwrap();
        drop(pk);
        // The batch itself as the engine does it; then the last chunk of each lane (60 packets
        // in chunks of 16 over 2 lanes: chunks 2 and 3, 16 and 12 packets) three times more.
        assert_eq!((bufs, res), w);
        assert_eq!(ran, 3 * (16 + 12));
        // The split engine's lanes are not one host thread's.
        let split = GpuEngine::emulated(GpuConfig::new().host_threads(2)).unwrap();
        let mut none: Vec<Packet<'_>> = Vec::new();
        assert!(split.time_kernels(&mut got, &mut none, &mut [], 1).is_err());
    }

    #[test]
    fn srtcp_runs_on_the_device() {
        // Compound-RTCP-sized packets from both senders, protected then unprotected (every
        // third forged), on the device and against the serial engine.
        let input: Vec<(usize, Vec<u8>)> = (0..24)
            .map(|i| {
                let mut b = vec![0u8; 8 + 52 + 4 + 16];
                b[0] = 0x81;
                b[1] = 200;
                b[4..8].copy_from_slice(&(i as u32 % 3).to_be_bytes());
                b[8..60].fill(i as u8);
                (if i % 2 == 0 { 0 } else { 2 }, b)
            })
            .collect();
        let e = GpuEngine::emulated(GpuConfig::new().chunk(5)).unwrap();
        let forged = round_trip(
            &e,
            &input,
            [Op::ProtectRtcp, Op::UnprotectRtcp],
            60,
            (3, 30),
        );
        assert_eq!(forged, 8);
        let s = e.stats();
        assert_eq!((s.device_packets, s.cpu_packets), (48, 0), "{s:?}");
        // SRTCP keys are key sets of their own: two contexts' each way.
        assert_eq!(s.key_uploads, 4);
    }

    #[test]
    fn keys_that_find_no_slot_run_on_the_cpu() {
        let e = GpuEngine::emulated(GpuConfig::new().key_slots(1)).unwrap();
        check(&e);
        let s = e.stats();
        assert!(s.cpu_packets > 0 && s.device_packets > 0, "{s:?}");
        assert_eq!(s.device_packets + s.cpu_packets, 120);
    }

    #[test]
    fn the_cpu_threshold_moves_at_run_time() {
        let e = GpuEngine::emulated(GpuConfig::new().lanes(2).chunk(8).cpu_below(1_000)).unwrap();
        assert_eq!(e.cpu_below(), 1_000);
        check(&e);
        let s = e.stats();
        assert_eq!((s.cpu_packets, s.device_packets), (120, 0), "{s:?}");
        // The same engine, every batch on the device from now on.
        e.set_cpu_below(0);
        assert_eq!(e.cpu_below(), 0);
        check(&e);
        let s = e.stats();
        assert_eq!((s.cpu_packets, s.device_packets), (120, 120), "{s:?}");
    }

    #[test]
    fn a_failing_device_hands_its_work_to_the_cpu() {
        for fail_at in [1, 2, 5] {
            let d = Failing {
                inner: HostDevice::new(64).unwrap(),
                launches: Arc::new(AtomicUsize::new(0)),
                fail_at,
            };
            let e =
                GpuEngine::with_device(Box::new(d), GpuConfig::new().lanes(2).chunk(4)).unwrap();
            check(&e);
            let s = e.stats();
            assert_eq!(s.device_errors, 1, "{s:?}");
            assert!(e.failure().unwrap().contains("injected"));
            assert_eq!(s.device_packets + s.cpu_packets, 120, "{s:?}");
        }
    }

    #[test]
    fn without_a_gpu_the_engine_says_why() {
        // On a machine with a GPU this opens it; without one the reason names what is missing.
        match GpuEngine::open(GpuConfig::new()) {
            Ok(e) => assert!(!e.device().is_empty()),
            Err(e) => {
                let s = e.to_string();
                assert!(s.starts_with("GPU engine unavailable: "), "{s}");
                assert!(s.len() > "GPU engine unavailable: ".len() + 5, "{s}");
            }
        }
    }

    /// The host's share of the work per packet: a device whose kernel only marks every
    /// packet done, so what is timed is the checks, the key slot lookups, the copies into the
    /// staging and back and the commits. Run by hand (release):
    /// `cargo test --release -p secrelay-srtp-gpu --lib host_share -- --ignored --nocapture`.
    mod host_share {
        use super::*;
        use std::time::Instant;

        /// A device whose kernel only marks every packet done: what is left is the host's share.
        struct Null;
        struct NullLanes(Vec<Vec<u8>>);
        impl Device for Null {
            fn describe(&self) -> String {
                "null".into()
            }
            fn slot_capacity(&self) -> usize {
                1 << 20
            }
            fn upload_keys(&self, _: &[u8], _: &[u32]) -> Result<(), DeviceError> {
                Ok(())
            }
            fn new_lanes(&self, n: usize) -> Result<Box<dyn Lanes>, DeviceError> {
                Ok(Box::new(NullLanes((0..n).map(|_| Vec::new()).collect())))
            }
        }
        impl Lanes for NullLanes {
            fn count(&self) -> usize {
                self.0.len()
            }
            fn staging(&mut self, lane: usize, bytes: usize) -> Result<&mut [u8], DeviceError> {
                let s = &mut self.0[lane];
                if s.len() < bytes {
                    s.resize(bytes.next_power_of_two(), 0);
                }
                Ok(&mut s[..])
            }
            fn launch(
                &mut self,
                lane: usize,
                n: u32,
                _: usize,
                _: usize,
            ) -> Result<(), DeviceError> {
                for d in self.0[lane][..n as usize * DESC_BYTES].chunks_exact_mut(DESC_BYTES) {
                    d[14] = 1;
                }
                Ok(())
            }
            fn wait(&mut self, lane: usize) -> Result<&[u8], DeviceError> {
                Ok(&self.0[lane])
            }
        }

        #[test]
        #[ignore]
        fn host_share_per_packet() {
            let cores = secrelay_srtp::threaded::available_cores();
            for (profile, ctxs, batch, hosts) in [
                (Profile::AesCm128HmacSha1_80, 4096usize, 65536usize, 1usize),
                (Profile::AeadAes128Gcm, 4096, 65536, 1),
                (Profile::AesCm128HmacSha1_80, 65536, 65536, 1),
                (Profile::AesCm128HmacSha1_80, 4096, 65536, cores),
                (Profile::AesCm128HmacSha1_80, 65536, 65536, cores),
            ] {
                let e = GpuEngine::with_device(
                    Box::new(Null),
                    GpuConfig::new().chunk(1024).host_threads(hosts),
                )
                .unwrap();
                let mut contexts: Vec<Context> = (0..ctxs)
                    .map(|i| {
                        let mut k = vec![0x42u8; profile.key_len()];
                        k[..8].copy_from_slice(&(i as u64).to_be_bytes());
                        Context::new(
                            Policy::new(
                                MasterKey::new(profile, &k, &vec![0x17; profile.salt_len()])
                                    .unwrap(),
                            )
                            .any_outbound(),
                        )
                        .unwrap()
                    })
                    .collect();
                let mut bufs: Vec<Vec<u8>> = (0..batch).map(|_| vec![0u8; 172 + 32]).collect();
                let mut seqs = vec![0u16; ctxs];
                let mut results = vec![Ok(0); batch];
                let mut best = f64::MAX;
                for round in 0..8 {
                    for (i, b) in bufs.iter_mut().enumerate() {
                        let c = i % ctxs;
                        b[0] = 0x80;
                        b[2..4].copy_from_slice(&seqs[c].to_be_bytes());
                        b[8..12].copy_from_slice(&(c as u32).to_be_bytes());
                        seqs[c] = seqs[c].wrapping_add(1);
                    }
                    let mut pk: Vec<Packet<'_>> = bufs
                        .iter_mut()
                        .enumerate()
                        .map(|(i, b)| Packet {
                            context: i % ctxs,
                            op: Op::ProtectRtp,
                            len: 172,
                            buf: &mut b[..],
                        })
                        .collect();
                    let t = Instant::now();
                    e.process(&mut contexts, &mut pk, &mut results);
                    let ns = t.elapsed().as_nanos() as f64 / batch as f64;
                    if round > 0 {
                        best = best.min(ns);
                    }
                }
                eprintln!(
                    "{profile} {ctxs} contexts, batch {batch}, {hosts} host thread(s): \
                     {best:.1} ns/packet of wall time (best of 7)"
                );
            }
        }
    }
}
