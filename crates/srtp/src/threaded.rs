//! The worker-thread batch engine: one batch split across persistent worker threads, by
//! context.
//!
//! # Design
//! [`ThreadedEngine`] implements [`Engine`], so it takes the batch as the serial engine does
//! (`&mut [Context]`, `&mut [Packet]`, `&mut [PacketResult]`) and must give the same bytes and
//! statuses. What makes that possible is that contexts share no mutable state (streams made
//! from one master key share their keyed primitives read-only), so packets of *different*
//! contexts may run in any order on any thread, while packets of *one* context must run in
//! batch order, on one thread, for index estimation and replay protection to see them as the
//! serial engine does.
//!
//! So a batch is split into *lanes* by context: the contexts the batch names, in index order,
//! are cut into `lanes` runs holding as many named contexts each, one per lane (neighbours in
//! memory stay on one thread, so no cache line of contexts or streams is written from two).
//! Each lane gets its run as one slice (a `split_at_mut` per lane: disjoint borrows, no
//! `unsafe`; the contexts between named ones ride along untouched), and each packet finds its
//! lane by a search among the runs' starts and its context by subtracting its run's start (a
//! bit per context is scanned to find the runs, so a batch's set-up grows with the batch and
//! the context count / 64, and nothing is done per context). The packets are dealt to their
//! lanes in batch order by the calling thread, or, from [`PARALLEL_DEAL_ABOVE`] packets, by the
//! pool: each worker deals a chunk of the batch, a lane joins its parts in chunk order (so its
//! packets keep batch order), and the results go back a chunk per worker. On a 16-core machine
//! the calling thread's pass had cost 18–24 ns a packet whatever the number of lanes, capping a
//! split batch near 50 M packets/s. Dealing contexts out by
//! `c % lanes` after sorting the batch's indices cost ~46 µs of a 4,096-packet batch on the
//! calling thread before any lane started: two multi-buffer lanes then ran at 0.51–0.69 of
//! two independent multi-buffer engines, against 0.64–0.84 with a table of each context's lane
//! and place, the method before the runs (`examples/engine_scaling.rs`,
//! `docs/benchmarks.md`). Each lane then runs the multi-buffer engine
//! ([`crate::SimdEngine`]) over its packets and its run of contexts, so threads and SIMD lanes
//! add up; [`ThreadedConfig::multi_buffer`] `(false)` runs the scalar code one packet at a time
//! instead, for comparison. A packet naming a context out of range gets
//! [`Error::UnknownContext`] where it is dealt, and goes to no lane.
//!
//! The lanes run on a pool of persistent worker threads (a `rayon` pool made once, in
//! [`ThreadedEngine::new`]): handing a lane over costs a push onto the pool's lock-free
//! injector queue (`crossbeam-deque`) and, when a worker sleeps, a wake-up; no thread is
//! started per batch. The hand-over is *scoped*: [`Engine::process`] returns only once every
//! lane has finished, which is what lets borrowed contexts and buffers cross to other threads
//! without `unsafe`. By default every lane goes to the pool (`workers` threads, each pinned to
//! its own core on Linux) and the caller waits; [`ThreadedConfig::caller_works`] lets the
//! caller run one lane itself with `workers - 1` pool threads instead. The default is the one
//! that scaled on the shared 2-vCPU VM: protecting batches of 4,096 172-byte packets, pinned
//! pool-only lanes gave 1.28–1.52× the serial engine where the caller-works, unpinned layout
//! gave 0.95× (the scheduler woke the pool thread on the caller's core and the lanes took
//! turns), `examples/engine_scaling.rs`.
//!
//! Handing work over costs microseconds (waking a sleeping pool thread and being woken when it
//! is done: ~24 µs per batch on the 2-vCPU development VM, `cargo bench --bench engines --
//! handover`), a 172-byte packet a few hundred nanoseconds, so batches smaller than
//! [`ThreadedConfig::parallel_threshold`] (and batches whose packets all fall in one lane) run
//! on the calling thread with no hand-over at all. Scaling also needs the cores to be free: on
//! a machine busy with other work the scheduler may wake a pool thread on the caller's own
//! core, and the lanes then take turns instead of running side by side.
//!
//! Balance: lanes are as even as the batch's spread over context indices. A batch whose
//! packets all belong to one context runs on one thread (it must, to keep their order); a
//! gateway that gives each call or participant its own context spreads naturally. The
//! per-batch set-up marks the batch's context indices in a bitmap, so its cost follows the
//! batch and the number of contexts / 64.
//!
//! For packets that arrive one by one (a gateway's sockets), [`crate::pipeline::Pipeline`] is
//! the streaming form: workers that own their contexts, fed through lock-free queues, with a
//! batching window bounded in time.

use std::cell::RefCell;
use std::num::NonZeroUsize;

use rayon::{ThreadPool, ThreadPoolBuilder};

use crate::batch::{Engine, Packet, PacketResult, SerialEngine};
use crate::context::Context;
use crate::error::{ConfigError, Error};
use crate::simd::engine::SimdEngine;

/// Smallest batch split across workers by default: below it, the hand-over costs more than
/// the work it would share. Measured on the 2-vCPU development VM: ~24 µs per hand-over,
/// while 128 packets of 172 bytes take ~25–50 µs per lane of two (GCM, CM-SHA1); at 64 packets
/// the split engine ran at 0.4–0.54× the serial one there (threshold 32 at the time).
pub const DEFAULT_PARALLEL_THRESHOLD: usize = 128;

/// The number of cores this process may use (1 when the OS does not say).
pub fn available_cores() -> usize {
    std::thread::available_parallelism().map_or(1, NonZeroUsize::get)
}

/// The cores this process may run on (empty where the OS does not say).
pub fn allowed_cores() -> Vec<usize> {
    #[cfg(target_os = "linux")]
    {
        use nix::sched::{sched_getaffinity, CpuSet};
        use nix::unistd::Pid;
        match sched_getaffinity(Pid::from_raw(0)) {
            Ok(set) => (0..CpuSet::count())
                .filter(|&c| set.is_set(c).unwrap_or(false))
                .collect(),
            Err(_) => Vec::new(),
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        Vec::new()
    }
}

/// Pins the calling thread to `core`; a refusal leaves it where it was (pinning only helps
/// the scheduler, nothing depends on it).
fn pin_current_thread(core: usize) {
    #[cfg(target_os = "linux")]
    {
        use nix::sched::{sched_setaffinity, CpuSet};
        use nix::unistd::Pid;
        let mut set = CpuSet::new();
        if set.set(core).is_ok() {
            let _ = sched_setaffinity(Pid::from_raw(0), &set);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = core;
}

/// How to build a [`ThreadedEngine`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadedConfig {
    workers: usize,
    threshold: usize,
    deal_above: usize,
    caller_works: bool,
    pin: bool,
    multi_buffer: bool,
}

impl Default for ThreadedConfig {
    fn default() -> Self {
        ThreadedConfig::new()
    }
}

impl ThreadedConfig {
    /// As many lanes as available cores, batches of [`DEFAULT_PARALLEL_THRESHOLD`] packets
    /// or more split, every lane on a pool thread pinned to its own core.
    pub fn new() -> Self {
        ThreadedConfig {
            workers: available_cores(),
            threshold: DEFAULT_PARALLEL_THRESHOLD,
            deal_above: PARALLEL_DEAL_ABOVE,
            caller_works: false,
            pin: true,
            multi_buffer: true,
        }
    }

    /// Lanes a batch is split into, i.e. threads working on it at once (at least 1).
    pub fn workers(mut self, n: usize) -> Self {
        self.workers = n.max(1);
        self
    }

    /// Batches with fewer packets than this run on the calling thread (0: always split).
    pub fn parallel_threshold(mut self, packets: usize) -> Self {
        self.threshold = packets;
        self
    }

    /// Split batches of at least this many packets are dealt to their lanes by the pool, a
    /// chunk of the batch per worker, rather than by the calling thread (default
    /// [`PARALLEL_DEAL_ABOVE`]).
    pub fn parallel_deal_above(mut self, packets: usize) -> Self {
        self.deal_above = packets;
        self
    }

    /// Whether the calling thread runs one lane itself while the pool runs the others, or
    /// hands every lane to the pool (which then has `workers` threads) and waits (the default).
    pub fn caller_works(mut self, yes: bool) -> Self {
        self.caller_works = yes;
        self
    }

    /// Whether each pool thread is pinned to its own core (the default; Linux, elsewhere a
    /// no-op). Pool
    /// thread `i` takes the `i`-th core the process may run on, counted from the second when
    /// the caller works. On a machine busy with other work this stops the scheduler from
    /// waking a worker on the caller's own core, where the lanes take turns instead of running
    /// side by side; it suits a process that owns its cores (a gateway's per-core workers).
    pub fn pin_workers(mut self, yes: bool) -> Self {
        self.pin = yes;
        self
    }

    /// Whether each lane runs the multi-buffer engine ([`crate::SimdEngine`] with its
    /// defaults: its SIMD lanes where the CPU runs them in AVX-512, and its cache hints; the
    /// default) or the scalar code one packet at a time (threads alone, for comparison).
    /// Batches below the threshold run the same way on the caller.
    pub fn multi_buffer(mut self, yes: bool) -> Self {
        self.multi_buffer = yes;
        self
    }

    /// Whether lanes run the multi-buffer engine.
    pub fn multi_buffered(&self) -> bool {
        self.multi_buffer
    }

    /// Whether the pool threads are pinned.
    pub fn pinned(&self) -> bool {
        self.pin
    }

    /// Whether the calling thread runs a lane.
    pub fn caller_working(&self) -> bool {
        self.caller_works
    }

    /// The number of lanes.
    pub fn worker_count(&self) -> usize {
        self.workers
    }
}

/// Batches split by context across persistent worker threads; see the [module
/// documentation](self) for the design.
pub struct ThreadedEngine {
    /// `None` when no lane runs off the calling thread (one lane, the caller working).
    pool: Option<ThreadPool>,
    config: ThreadedConfig,
    /// What each lane runs.
    lane: LaneEngine,
}

impl core::fmt::Debug for ThreadedEngine {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ThreadedEngine")
            .field("config", &self.config)
            .field(
                "pool_threads",
                &self
                    .pool
                    .as_ref()
                    .map_or(0, ThreadPool::current_num_threads),
            )
            .finish()
    }
}

/// What a lane runs: the multi-buffer engine (the default), the scalar code, or an engine
/// given by the caller ([`ThreadedEngine::with_lane_engine`]).
enum LaneEngine {
    MultiBuffer(SimdEngine),
    Scalar(SerialEngine),
    Given(std::sync::Arc<dyn Engine>),
}

impl core::fmt::Debug for LaneEngine {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            LaneEngine::MultiBuffer(e) => e.fmt(f),
            LaneEngine::Scalar(e) => e.fmt(f),
            LaneEngine::Given(e) => f.write_str(e.name()),
        }
    }
}

/// One lane's share of a batch: the contexts its packets name (in index order), and its
/// packets in batch order, each naming its context by position in that list, with the batch
/// positions they came from.
struct Lane<'c, 'p> {
    /// Its run of the batch's contexts (index order), the first at index `base`.
    contexts: &'c mut [Context],
    base: usize,
    packets: Vec<Packet<'p>>,
    /// Packets dealt by the pool, a part per chunk of the batch in chunk order, joined into
    /// `packets` by the lane's own thread before it runs.
    parts: Vec<Vec<Packet<'p>>>,
    slots: Vec<usize>,
    results: Vec<PacketResult>,
}

impl Lane<'_, '_> {
    fn new() -> Self {
        Lane {
            contexts: &mut [],
            base: 0,
            packets: Vec::new(),
            parts: Vec::new(),
            slots: Vec::new(),
            results: Vec::new(),
        }
    }

    fn has_work(&self) -> bool {
        !self.packets.is_empty() || self.parts.iter().any(|p| !p.is_empty())
    }

    fn run(&mut self, engine: &LaneEngine, hints: bool) {
        if !self.parts.is_empty() {
            self.packets
                .reserve(self.parts.iter().map(Vec::len).sum::<usize>());
            for part in self.parts.drain(..) {
                self.packets.extend(part);
            }
        }
        self.results.clear();
        self.results.resize(self.packets.len(), Ok(0));
        match engine {
            LaneEngine::MultiBuffer(e) => {
                e.process_lane(self.contexts, &mut self.packets, &mut self.results, hints)
            }
            LaneEngine::Scalar(e) => e.process(self.contexts, &mut self.packets, &mut self.results),
            LaneEngine::Given(e) => e.process(self.contexts, &mut self.packets, &mut self.results),
        }
    }
}

/// The calling thread's scratch for splitting batches, kept between batches so that a split
/// allocates nothing for it: a bit per context (cleared as it is read), and where each lane's
/// run of contexts starts (with the context count last).
#[derive(Default)]
struct Split {
    seen: Vec<u64>,
    bounds: Vec<usize>,
}

thread_local! {
    static SPLIT: RefCell<Split> = RefCell::new(Split::default());
}

impl ThreadedEngine {
    /// Starts the worker threads (`workers - 1` when the caller works, else `workers`).
    pub fn new(config: ThreadedConfig) -> Result<Self, ConfigError> {
        let pool_threads = if config.caller_works {
            config.workers - 1
        } else {
            config.workers
        };
        let pool = if pool_threads == 0 {
            None
        } else {
            let mut b = ThreadPoolBuilder::new()
                .num_threads(pool_threads)
                .thread_name(|i| format!("srtp-worker-{i}"));
            if config.pin {
                let cores = allowed_cores();
                let skip = usize::from(config.caller_works);
                if !cores.is_empty() {
                    b = b.start_handler(move |i| {
                        pin_current_thread(cores[(i + skip) % cores.len()])
                    });
                }
            }
            Some(
                b.build()
                    .map_err(|e| ConfigError::WorkerThreads(e.to_string()))?,
            )
        };
        let lane = if config.multi_buffer {
            LaneEngine::MultiBuffer(SimdEngine::new())
        } else {
            LaneEngine::Scalar(SerialEngine)
        };
        Ok(ThreadedEngine { pool, config, lane })
    }

    /// Lanes that run `engine` (through [`Engine::process`], on their run of the batch's
    /// contexts) instead of the multi-buffer or scalar code; batches under the threshold go
    /// to `engine` whole, on the calling thread. For an engine whose per-packet work on the
    /// host is to be spread over cores, such as the GPU engine's checks, copies and commits.
    /// `engine` is called from several threads at once.
    pub fn with_lane_engine(
        config: ThreadedConfig,
        engine: std::sync::Arc<dyn Engine>,
    ) -> Result<Self, ConfigError> {
        let mut e = Self::new(config)?;
        e.lane = LaneEngine::Given(engine);
        Ok(e)
    }

    /// An engine with the default configuration (one lane per available core).
    pub fn with_default_workers() -> Result<Self, ConfigError> {
        Self::new(ThreadedConfig::new())
    }

    /// The configuration it was built with.
    pub fn config(&self) -> &ThreadedConfig {
        &self.config
    }

    /// Splits the batch into lanes and runs them, on the pool and (when it works) the
    /// calling thread. Only the contexts the batch names are handed out (one `split_at_mut`
    /// step each, in index order), so the cost of a batch does not grow with the contexts
    /// around it. The packets are dealt to their lanes by the calling thread, or, from
    /// [`PARALLEL_DEAL_ABOVE`] packets, by the pool in chunks of the batch (and their results
    /// put back the same way).
    fn run_split(
        &self,
        pool: &ThreadPool,
        contexts: &mut [Context],
        packets: &mut [Packet<'_>],
        results: &mut [PacketResult],
    ) {
        let lanes = self.config.workers;
        let n_ctx = contexts.len();
        let mut split: Vec<Lane<'_, '_>> = (0..lanes).map(|_| Lane::new()).collect();
        let dealt = SPLIT.with(|scratch| {
            let mut scratch = scratch.borrow_mut();
            let Split { seen, bounds } = &mut *scratch;
            hand_out_contexts(contexts, packets, seen, bounds, &mut split);
            if packets.len() >= self.config.deal_above {
                Some(deal_in_chunks(
                    pool, bounds, n_ctx, packets, results, &mut split,
                ))
            } else {
                deal(bounds, n_ctx, packets, results, &mut split);
                None
            }
        });
        let engine = &self.lane;
        // The same rule as the multi-buffer engine's own `process`: a slice of a few hundred
        // contexts stays in the caches, and hints would only cost.
        let hints = n_ctx > crate::simd::engine::HINTS_ABOVE_CONTEXTS;
        let mut busy: Vec<&mut Lane<'_, '_>> = split.iter_mut().filter(|l| l.has_work()).collect();
        match busy.len() {
            0 => {}
            1 if self.config.caller_works => busy[0].run(engine, hints),
            _ => {
                let (mine, theirs) = if self.config.caller_works {
                    let (first, rest) = busy.split_at_mut(1);
                    (first.first_mut(), rest)
                } else {
                    (None, &mut busy[..])
                };
                pool.in_place_scope(|s| {
                    for lane in theirs.iter_mut() {
                        s.spawn(move |_| lane.run(engine, hints));
                    }
                    if let Some(lane) = mine {
                        lane.run(engine, hints);
                    }
                });
            }
        }
        match dealt {
            Some(places) => put_back_in_chunks(pool, &places, &mut split, results),
            None => {
                for lane in split {
                    for (slot, r) in lane.slots.into_iter().zip(lane.results) {
                        results[slot] = r;
                    }
                }
            }
        }
    }
}

/// Batches of at least this many packets are dealt to their lanes by the pool, a chunk of the
/// batch per worker, instead of by the calling thread: that pass costs ~20 ns a packet
/// whatever the number of lanes (18–24 ns on a 16-core machine, 1 to 16 lanes), which capped
/// a split batch near 50 M packets/s there. Below it, the two more hand-overs it takes
/// (~24 µs each on the development VM) cost more than they share.
pub const PARALLEL_DEAL_ABOVE: usize = 16_384;

/// The contexts the batch names, in index order (one bit each, then a count per word), cut
/// into runs holding as many named contexts each: lane `l` takes the contexts from
/// `bounds[l]` to `bounds[l + 1]` as one slice (the unnamed ones between them untouched). A
/// packet finds its lane by a search in `bounds`, its context by subtracting the lane's base.
fn hand_out_contexts<'c>(
    contexts: &'c mut [Context],
    packets: &[Packet<'_>],
    seen: &mut Vec<u64>,
    bounds: &mut Vec<usize>,
    split: &mut [Lane<'c, '_>],
) {
    let lanes = split.len();
    let n_ctx = contexts.len();
    let words = n_ctx.div_ceil(64);
    if seen.len() < words {
        seen.resize(words, 0);
    }
    for p in packets.iter().filter(|p| p.context < n_ctx) {
        seen[p.context / 64] |= 1 << (p.context % 64);
    }
    let named: usize = seen[..words].iter().map(|w| w.count_ones() as usize).sum();
    // Lane `l` starts at the named context numbered `l * named / lanes` (from 0).
    bounds.clear();
    bounds.push(0);
    let mut counted = 0;
    for (w, word) in seen[..words].iter_mut().enumerate() {
        let mut bits = core::mem::take(word);
        while bounds.len() < lanes {
            let want = bounds.len() * named / lanes;
            let here = bits.count_ones() as usize;
            if counted + here <= want {
                counted += here;
                break;
            }
            // The (want - counted)-th set bit of this word, from 0, starts the next lane.
            for _ in 0..want - counted {
                bits &= bits - 1;
            }
            counted = want;
            bounds.push(w * 64 + bits.trailing_zeros() as usize);
        }
    }
    bounds.resize(lanes + 1, n_ctx);
    let mut rest: &mut [Context] = contexts;
    for (l, lane) in split.iter_mut().enumerate() {
        let (mine, tail) = core::mem::take(&mut rest).split_at_mut(bounds[l + 1] - bounds[l]);
        lane.contexts = mine;
        lane.base = bounds[l];
        rest = tail;
    }
}

/// A named context's lane: the last whose run starts at or before it.
fn lane_of(bounds: &[usize], context: usize) -> usize {
    bounds[1..bounds.len() - 1].partition_point(|&b| b <= context)
}

/// One packet as its lane sees it: its context by position in the lane's run.
fn for_lane<'p>(p: &'p mut Packet<'_>, local: usize) -> Packet<'p> {
    Packet {
        context: local,
        op: p.op,
        buf: &mut *p.buf,
        len: p.len,
    }
}

/// The calling thread deals the packets to their lanes, in batch order.
fn deal<'p>(
    bounds: &[usize],
    n_ctx: usize,
    packets: &'p mut [Packet<'_>],
    results: &mut [PacketResult],
    split: &mut [Lane<'_, 'p>],
) {
    for (pi, (p, r)) in packets.iter_mut().zip(results.iter_mut()).enumerate() {
        if p.context >= n_ctx {
            *r = Err(Error::UnknownContext);
            continue;
        }
        let lane = &mut split[lane_of(bounds, p.context)];
        lane.packets.push(for_lane(p, p.context - lane.base));
        lane.slots.push(pi);
    }
}

/// One chunk of a batch dealt by a worker: per lane, its packets from the chunk (in batch
/// order), and where in the batch they came from.
struct Dealt<'p> {
    packets: Vec<Vec<Packet<'p>>>,
    places: Vec<Vec<u32>>,
}

/// Where a batch dealt in chunks came from: the chunk size, and per chunk and lane the batch
/// positions of the lane's packets.
struct Places {
    per: usize,
    by_chunk: Vec<Vec<Vec<u32>>>,
}

/// The pool deals the packets, a chunk of the batch per lane; each lane then takes its parts
/// in chunk order, so its packets stay in batch order.
fn deal_in_chunks<'p>(
    pool: &ThreadPool,
    bounds: &[usize],
    n_ctx: usize,
    packets: &'p mut [Packet<'_>],
    results: &mut [PacketResult],
    split: &mut [Lane<'_, 'p>],
) -> Places {
    let lanes = split.len();
    let per = packets.len().div_ceil(lanes).max(1);
    let mut dealt: Vec<Option<Dealt<'p>>> =
        (0..packets.len().div_ceil(per)).map(|_| None).collect();
    pool.in_place_scope(|s| {
        let chunks = packets.chunks_mut(per).zip(results.chunks_mut(per));
        for (w, ((chunk, res), out)) in chunks.zip(dealt.iter_mut()).enumerate() {
            s.spawn(move |_| {
                let mut d = Dealt {
                    packets: (0..lanes)
                        .map(|_| Vec::with_capacity(per / lanes + 8))
                        .collect(),
                    places: (0..lanes)
                        .map(|_| Vec::with_capacity(per / lanes + 8))
                        .collect(),
                };
                for (i, (p, r)) in chunk.iter_mut().zip(res.iter_mut()).enumerate() {
                    if p.context >= n_ctx {
                        *r = Err(Error::UnknownContext);
                        continue;
                    }
                    let l = lane_of(bounds, p.context);
                    d.packets[l].push(for_lane(p, p.context - bounds[l]));
                    d.places[l].push((w * per + i) as u32);
                }
                *out = Some(d);
            });
        }
    });
    let mut by_chunk = Vec::with_capacity(dealt.len());
    for d in dealt.into_iter().flatten() {
        for (lane, part) in split.iter_mut().zip(d.packets) {
            lane.parts.push(part);
        }
        by_chunk.push(d.places);
    }
    Places { per, by_chunk }
}

/// The lanes' results back in batch order, a chunk of the batch per worker: chunk `w`'s
/// packets in lane `l` are the run of that lane's results after the earlier chunks'.
fn put_back_in_chunks(
    pool: &ThreadPool,
    places: &Places,
    split: &mut [Lane<'_, '_>],
    results: &mut [PacketResult],
) {
    let lane_results: Vec<Vec<PacketResult>> = split
        .iter_mut()
        .map(|l| core::mem::take(&mut l.results))
        .collect();
    let per = places.per;
    let mut offsets = vec![0usize; split.len()];
    pool.in_place_scope(|s| {
        for ((w, chunk), by_lane) in results.chunks_mut(per).enumerate().zip(&places.by_chunk) {
            let starts = offsets.clone();
            for (o, p) in offsets.iter_mut().zip(by_lane) {
                *o += p.len();
            }
            let lane_results = &lane_results;
            s.spawn(move |_| {
                for ((from, start), theirs) in by_lane.iter().zip(starts).zip(lane_results) {
                    for (&at, r) in from.iter().zip(&theirs[start..]) {
                        chunk[at as usize - w * per] = *r;
                    }
                }
            });
        }
    });
}

impl Engine for ThreadedEngine {
    fn name(&self) -> &'static str {
        "threaded"
    }

    fn process(
        &self,
        contexts: &mut [Context],
        packets: &mut [Packet<'_>],
        results: &mut [PacketResult],
    ) {
        crate::batch::check_results_len(packets.len(), results.len());
        match &self.pool {
            Some(pool) if packets.len() >= self.config.threshold => {
                self.run_split(pool, contexts, packets, results)
            }
            _ => match &self.lane {
                LaneEngine::MultiBuffer(e) => e.process(contexts, packets, results),
                LaneEngine::Scalar(e) => e.process(contexts, packets, results),
                LaneEngine::Given(e) => e.process(contexts, packets, results),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engines_are_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<ThreadedEngine>();
    }

    #[test]
    fn pool_threads_follow_the_config() {
        let e = ThreadedEngine::new(ThreadedConfig::new().workers(1).caller_works(true)).unwrap();
        assert!(e.pool.is_none());
        let e = ThreadedEngine::new(ThreadedConfig::new().workers(1).caller_works(false)).unwrap();
        assert_eq!(e.pool.as_ref().unwrap().current_num_threads(), 1);
        let e = ThreadedEngine::new(ThreadedConfig::new().workers(3).caller_works(true)).unwrap();
        assert_eq!(e.pool.as_ref().unwrap().current_num_threads(), 2);
        let e = ThreadedEngine::new(ThreadedConfig::new().workers(3)).unwrap();
        assert_eq!(e.pool.as_ref().unwrap().current_num_threads(), 3);
        assert_eq!(ThreadedConfig::new().workers(0).worker_count(), 1);
    }
}
