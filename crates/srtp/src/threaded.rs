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
//! without `unsafe`. By default the calling thread runs lane 0 itself while the pool runs the
//! others, so `workers` lanes keep `workers` cores busy with `workers - 1` pool threads and
//! nothing spins idle beside the caller.
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

/// How to build a [`ThreadedEngine`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadedConfig {
    workers: usize,
    threshold: usize,
    caller_works: bool,
}

impl Default for ThreadedConfig {
    fn default() -> Self {
        ThreadedConfig::new()
    }
}

impl ThreadedConfig {
    /// As many lanes as available cores, batches of [`DEFAULT_PARALLEL_THRESHOLD`] packets
    /// or more split, the calling thread running one lane.
    pub fn new() -> Self {
        ThreadedConfig {
            workers: available_cores(),
            threshold: DEFAULT_PARALLEL_THRESHOLD,
            caller_works: true,
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

    /// Whether the calling thread runs one lane itself (the default) while the pool runs the
    /// others, or hands every lane to the pool (which then has `workers` threads) and waits.
    pub fn caller_works(mut self, yes: bool) -> Self {
        self.caller_works = yes;
        self
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
            Some(
                ThreadPoolBuilder::new()
                    .num_threads(pool_threads)
                    .thread_name(|i| format!("srtp-worker-{i}"))
                    .build()
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
        assert!(
            results.len() >= packets.len(),
            "results slice ({}) shorter than the batch ({})",
            results.len(),
            packets.len()
        );
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
        let e = ThreadedEngine::new(ThreadedConfig::new().workers(1)).unwrap();
        assert!(e.pool.is_none());
        let e = ThreadedEngine::new(ThreadedConfig::new().workers(1).caller_works(false)).unwrap();
        assert_eq!(e.pool.as_ref().unwrap().current_num_threads(), 1);
        let e = ThreadedEngine::new(ThreadedConfig::new().workers(3)).unwrap();
        assert_eq!(e.pool.as_ref().unwrap().current_num_threads(), 2);
        assert_eq!(ThreadedConfig::new().workers(0).worker_count(), 1);
    }
}
