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
//! So a batch is split into *lanes* by context index: context `c` belongs to lane
//! `c % lanes`. One pass over the context slice hands each lane `&mut` references to its own
//! contexts (disjoint borrows from `iter_mut`, no `unsafe`), one pass over the batch hands each
//! lane its packets and their result slots, in batch order. Each lane then runs the scalar code
//! over its packets one after another. A packet naming a context out of range gets
//! [`Error::UnknownContext`] on the calling thread.
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
//! per-batch set-up walks the context slice once (one pointer per context), so very large
//! context slices with small batches are better served by [`crate::pipeline`], where each
//! worker owns its contexts outright.
//!
//! For packets that arrive one by one (a gateway's sockets), [`crate::pipeline::Pipeline`] is
//! the streaming form: workers that own their contexts, fed through lock-free queues, with a
//! batching window bounded in time.

use std::num::NonZeroUsize;

use rayon::{ThreadPool, ThreadPoolBuilder};

use crate::batch::{process_on, Engine, Packet, PacketResult};
use crate::context::Context;
use crate::error::{ConfigError, Error};

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
    caller_works: bool,
    pin: bool,
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
            caller_works: false,
            pin: true,
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

/// One lane's share of a batch: its contexts (local index `c / lanes`) and its packets with
/// their result slots, in batch order.
struct Lane<'c, 'p, 'b> {
    contexts: Vec<&'c mut Context>,
    packets: Vec<(&'p mut Packet<'b>, &'p mut PacketResult)>,
}

impl Lane<'_, '_, '_> {
    fn run(&mut self, lanes: usize) {
        for (p, r) in self.packets.iter_mut() {
            let ctx = &mut self.contexts[p.context / lanes];
            **r = process_on(ctx, p);
        }
    }
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
        Ok(ThreadedEngine { pool, config })
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
    /// calling thread.
    fn run_split(
        &self,
        pool: &ThreadPool,
        contexts: &mut [Context],
        packets: &mut [Packet<'_>],
        results: &mut [PacketResult],
    ) {
        let lanes = self.config.workers;
        let n_ctx = contexts.len();
        let mut split: Vec<Lane<'_, '_, '_>> = (0..lanes)
            .map(|_| Lane {
                contexts: Vec::with_capacity(n_ctx / lanes + 1),
                packets: Vec::with_capacity(packets.len() / lanes + 1),
            })
            .collect();
        for (i, c) in contexts.iter_mut().enumerate() {
            split[i % lanes].contexts.push(c);
        }
        for (p, r) in packets.iter_mut().zip(results.iter_mut()) {
            if p.context >= n_ctx {
                *r = Err(Error::UnknownContext);
            } else {
                split[p.context % lanes].packets.push((p, r));
            }
        }
        split.retain(|l| !l.packets.is_empty());
        match split.len() {
            0 => {}
            1 if self.config.caller_works => split[0].run(lanes),
            _ => {
                let (mine, theirs) = if self.config.caller_works {
                    let (first, rest) = split.split_at_mut(1);
                    (first.first_mut(), rest)
                } else {
                    (None, &mut split[..])
                };
                pool.in_place_scope(|s| {
                    for lane in theirs.iter_mut() {
                        s.spawn(move |_| lane.run(lanes));
                    }
                    if let Some(lane) = mine {
                        lane.run(lanes);
                    }
                });
            }
        }
    }
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
            _ => {
                for (p, r) in packets.iter_mut().zip(results.iter_mut()) {
                    *r = crate::batch::process_one(contexts, p);
                }
            }
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
