//! The streaming form of the worker-thread engine: packets submitted one by one, processed by
//! persistent workers in batches, completions handed back.
//!
//! # Design
//! A [`Pipeline`] owns its contexts. They are dealt out to `workers` threads when it starts:
//! context `c` lives on worker `c % workers` for the pipeline's whole life, so each worker
//! owns its contexts outright (no sharing, no locks) and packets of one context are processed
//! in submission order. This is the persistent-thread layout of a gateway's per-core workers.
//!
//! [`Pipeline::submit`] sends a [`Job`] (an owned buffer, its context, the operation and a
//! caller's tag) down the owning worker's bounded, lock-free queue (`crossbeam-channel`). A
//! worker sleeps until a job arrives, takes every job already queued, and then waits for more
//! until either the batch holds [`PipelineConfig::max_batch`] jobs or the *batching window*
//! ([`PipelineConfig::window`], default [`DEFAULT_WINDOW`] = 200 µs, counted from the batch's
//! first job) has passed. It then runs the batch through an inner [`Engine`] (the serial
//! engine by default; a multi-buffer engine gains most from full batches) and sends one
//! [`Completion`] per job, in batch order, down a shared queue that [`Pipeline::complete`]
//! and [`Pipeline::complete_timeout`] read. So at high load batches fill and the per-batch
//! costs (a wake-up, the inner engine's set-up) are shared by many packets, and at low load no
//! packet waits longer than the window before its batch starts. A window of zero processes
//! whatever is queued at once (greedy batching), which suits the serial inner engine best.
//!
//! The time is read by the workers (`Instant::now`), the only clock in this crate: the window
//! has to expire while the submitting thread is busy elsewhere.
//!
//! Queues are bounded ([`PipelineConfig::queue_capacity`] jobs per worker): [`Pipeline::submit`]
//! waits for room, [`Pipeline::try_submit`] hands the job back instead, so a gateway under
//! overload can drop rather than queue without bound. [`Pipeline::shutdown`] (or dropping the
//! pipeline) lets the workers finish what was submitted, stops them, and hands back the
//! contexts in their original order with the completions not yet collected.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{
    bounded, unbounded, Receiver, RecvTimeoutError, Sender, TryRecvError, TrySendError,
};

use crate::batch::{Engine, Op, Packet, PacketResult, SerialEngine};
use crate::context::Context;
use crate::error::ConfigError;
use crate::threaded::available_cores;

/// Default batching window: the longest a job waits for its batch to fill.
pub const DEFAULT_WINDOW: Duration = Duration::from_micros(200);
/// Default largest batch a worker processes at once.
pub const DEFAULT_MAX_BATCH: usize = 64;
/// Default queue capacity per worker, in jobs.
pub const DEFAULT_QUEUE_CAPACITY: usize = 8192;

/// How to build a [`Pipeline`].
#[derive(Clone)]
pub struct PipelineConfig {
    workers: usize,
    max_batch: usize,
    window: Duration,
    queue_capacity: usize,
    inner: Arc<dyn Engine>,
}

impl core::fmt::Debug for PipelineConfig {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("PipelineConfig")
            .field("workers", &self.workers)
            .field("max_batch", &self.max_batch)
            .field("window", &self.window)
            .field("queue_capacity", &self.queue_capacity)
            .field("inner", &self.inner.name())
            .finish()
    }
}

impl Default for PipelineConfig {
    fn default() -> Self {
        PipelineConfig::new()
    }
}

impl PipelineConfig {
    /// One worker per available core, batches of up to [`DEFAULT_MAX_BATCH`], a
    /// [`DEFAULT_WINDOW`] window, [`DEFAULT_QUEUE_CAPACITY`] jobs of queue per worker, the
    /// serial engine inside.
    pub fn new() -> Self {
        PipelineConfig {
            workers: available_cores(),
            max_batch: DEFAULT_MAX_BATCH,
            window: DEFAULT_WINDOW,
            queue_capacity: DEFAULT_QUEUE_CAPACITY,
            inner: Arc::new(SerialEngine),
        }
    }

    /// Worker threads (at least 1).
    pub fn workers(mut self, n: usize) -> Self {
        self.workers = n.max(1);
        self
    }

    /// The most jobs a worker processes in one batch (at least 1).
    pub fn max_batch(mut self, n: usize) -> Self {
        self.max_batch = n.max(1);
        self
    }

    /// The batching window: how long a worker waits, from a batch's first job, for the batch
    /// to fill. Zero processes what is queued at once.
    pub fn window(mut self, window: Duration) -> Self {
        self.window = window;
        self
    }

    /// Jobs each worker's queue holds before [`Pipeline::submit`] waits (at least 1).
    pub fn queue_capacity(mut self, jobs: usize) -> Self {
        self.queue_capacity = jobs.max(1);
        self
    }

    /// The engine each worker runs its batches through.
    pub fn inner_engine(mut self, engine: Arc<dyn Engine>) -> Self {
        self.inner = engine;
        self
    }
}

/// A packet to process: an owned buffer (`buf[..len]` is the input; the output is written in
/// place, so protecting needs room for the tag), its context and a tag of the caller's.
#[derive(Debug)]
pub struct Job {
    /// The caller's identifier, returned in the [`Completion`].
    pub tag: u64,
    /// Index of the context, in the order the contexts were given to [`Pipeline::new`].
    pub context: usize,
    /// The operation.
    pub op: Op,
    /// The packet's buffer.
    pub buf: Vec<u8>,
    /// Length of the input in `buf`.
    pub len: usize,
}

/// A processed job: the buffer back with its result.
#[derive(Debug)]
pub struct Completion {
    /// The job's tag.
    pub tag: u64,
    /// The job's context.
    pub context: usize,
    /// The job's operation.
    pub op: Op,
    /// The buffer; on success the output is `buf[..n]` for `result == Ok(n)`.
    pub buf: Vec<u8>,
    /// The output length, or what went wrong.
    pub result: PacketResult,
    /// How many jobs the batch it ran in held (for measurements of the window).
    pub batch_len: usize,
}

/// Why a job was not accepted; the job comes back.
#[derive(Debug)]
pub enum SubmitError {
    /// The worker's queue is full ([`Pipeline::try_submit`] only).
    Full(Job),
    /// The worker is gone (it panicked: a bug).
    Closed(Job),
}

/// What a worker thread hands back when it stops.
type WorkerExit = Vec<Context>;

/// Persistent workers that own their contexts, fed through lock-free queues, processing in
/// batches bounded in size and in time; see the [module documentation](self).
pub struct Pipeline {
    queues: Vec<Sender<Job>>,
    done: Receiver<Completion>,
    threads: Vec<JoinHandle<WorkerExit>>,
    contexts: usize,
    config: PipelineConfig,
}

impl core::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Pipeline")
            .field("config", &self.config)
            .field("contexts", &self.contexts)
            .finish_non_exhaustive()
    }
}

struct Worker {
    jobs: Receiver<Job>,
    done: Sender<Completion>,
    contexts: Vec<Context>,
    stride: usize,
    max_batch: usize,
    window: Duration,
    inner: Arc<dyn Engine>,
}

impl Worker {
    fn run(mut self) -> WorkerExit {
        let mut batch: Vec<Job> = Vec::with_capacity(self.max_batch);
        let mut results: Vec<PacketResult> = vec![Ok(0); self.max_batch];
        loop {
            let Ok(first) = self.jobs.recv() else {
                // Every sender is gone and the queue is empty.
                return self.contexts;
            };
            let deadline = Instant::now() + self.window;
            batch.push(first);
            let mut closed = false;
            while batch.len() < self.max_batch {
                match self.jobs.try_recv() {
                    Ok(j) => batch.push(j),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => {
                        closed = true;
                        break;
                    }
                }
            }
            while !closed && batch.len() < self.max_batch && !self.window.is_zero() {
                match self.jobs.recv_deadline(deadline) {
                    Ok(j) => batch.push(j),
                    Err(RecvTimeoutError::Timeout) => break,
                    Err(RecvTimeoutError::Disconnected) => closed = true,
                }
            }
            self.process(&mut batch, &mut results);
        }
    }

    fn process(&mut self, batch: &mut Vec<Job>, results: &mut [PacketResult]) {
        let n = batch.len();
        {
            let stride = self.stride;
            let mut packets: Vec<Packet<'_>> = batch
                .iter_mut()
                .map(|j| Packet {
                    context: j.context / stride,
                    op: j.op,
                    len: j.len,
                    buf: &mut j.buf[..],
                })
                .collect();
            self.inner
                .process(&mut self.contexts, &mut packets, &mut results[..n]);
        }
        for (j, r) in batch.drain(..).zip(results.iter()) {
            // The receiver lives in the pipeline, which outlives its workers (it joins them):
            // a failed send means the pipeline is being dropped and nobody wants the result.
            let _ = self.done.send(Completion {
                tag: j.tag,
                context: j.context,
                op: j.op,
                buf: j.buf,
                result: *r,
                batch_len: n,
            });
        }
    }
}

impl Pipeline {
    /// Deals `contexts` out to the workers (context `c` to worker `c % workers`) and starts
    /// them.
    pub fn new(contexts: Vec<Context>, config: PipelineConfig) -> Result<Self, ConfigError> {
        let workers = config.workers;
        let total = contexts.len();
        let mut per_worker: Vec<Vec<Context>> = (0..workers)
            .map(|_| Vec::with_capacity(total / workers + 1))
            .collect();
        for (i, c) in contexts.into_iter().enumerate() {
            per_worker[i % workers].push(c);
        }
        let (done_tx, done) = unbounded();
        let mut queues = Vec::with_capacity(workers);
        let mut threads = Vec::with_capacity(workers);
        for (i, ctxs) in per_worker.into_iter().enumerate() {
            let (tx, rx) = bounded(config.queue_capacity);
            let w = Worker {
                jobs: rx,
                done: done_tx.clone(),
                contexts: ctxs,
                stride: workers,
                max_batch: config.max_batch,
                window: config.window,
                inner: config.inner.clone(),
            };
            let handle = std::thread::Builder::new()
                .name(format!("srtp-pipeline-{i}"))
                .spawn(move || w.run())
                .map_err(|e| ConfigError::WorkerThreads(e.to_string()))?;
            queues.push(tx);
            threads.push(handle);
        }
        Ok(Pipeline {
            queues,
            done,
            threads,
            contexts: total,
            config,
        })
    }

    /// The configuration it was built with.
    pub fn config(&self) -> &PipelineConfig {
        &self.config
    }

    /// The number of contexts it holds.
    pub fn context_count(&self) -> usize {
        self.contexts
    }

    fn queue_for(&self, job: &Job) -> &Sender<Job> {
        &self.queues[job.context % self.queues.len()]
    }

    /// Queues `job` for its context's worker, waiting while that queue is full. A job naming
    /// a context out of range completes with [`crate::Error::UnknownContext`].
    pub fn submit(&self, job: Job) -> Result<(), SubmitError> {
        self.queue_for(&job)
            .send(job)
            .map_err(|e| SubmitError::Closed(e.into_inner()))
    }

    /// Queues `job` if its worker's queue has room, else hands it back.
    pub fn try_submit(&self, job: Job) -> Result<(), SubmitError> {
        self.queue_for(&job).try_send(job).map_err(|e| match e {
            TrySendError::Full(j) => SubmitError::Full(j),
            TrySendError::Disconnected(j) => SubmitError::Closed(j),
        })
    }

    /// A completed job, if one is ready.
    pub fn complete(&self) -> Option<Completion> {
        self.done.try_recv().ok()
    }

    /// The next completed job, waiting up to `timeout` for one.
    pub fn complete_timeout(&self, timeout: Duration) -> Option<Completion> {
        self.done.recv_timeout(timeout).ok()
    }

    /// Finishes every submitted job, stops the workers and returns the contexts (in the order
    /// given to [`Pipeline::new`]) and the completions not collected yet.
    ///
    /// # Panics
    /// Re-raises a worker's panic (a bug: processing never panics on packet data).
    pub fn shutdown(mut self) -> (Vec<Context>, Vec<Completion>) {
        let per_worker = self.stop();
        let workers = per_worker.len();
        let mut iters: Vec<_> = per_worker.into_iter().map(Vec::into_iter).collect();
        let mut contexts = Vec::with_capacity(self.contexts);
        for i in 0..self.contexts {
            if let Some(c) = iters[i % workers].next() {
                contexts.push(c);
            }
        }
        let completions = self.done.try_iter().collect();
        (contexts, completions)
    }

    /// Closes the queues and joins the workers, whose contexts come back.
    fn stop(&mut self) -> Vec<Vec<Context>> {
        self.queues.clear();
        let mut out = Vec::with_capacity(self.threads.len());
        for t in self.threads.drain(..) {
            match t.join() {
                Ok(c) => out.push(c),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        out
    }
}

impl Drop for Pipeline {
    fn drop(&mut self) {
        self.queues.clear();
        for t in self.threads.drain(..) {
            // A worker's panic was a bug already reported on its thread; dropping must not
            // panic again.
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;

    #[test]
    fn pipelines_are_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<Pipeline>();
    }

    fn sender() -> Context {
        let key = crate::MasterKey::new(crate::Profile::AesCm128HmacSha1_80, &[1; 16], &[2; 14])
            .expect("valid key");
        Context::new(crate::Policy::new(key).any_outbound()).expect("valid policy")
    }

    fn rtp(seq: u16) -> Job {
        let mut buf = vec![0u8; 12 + 20 + 10];
        buf[0] = 0x80;
        buf[2..4].copy_from_slice(&seq.to_be_bytes());
        Job {
            tag: seq as u64,
            context: 0,
            op: Op::ProtectRtp,
            buf,
            len: 32,
        }
    }

    #[test]
    fn a_full_batch_runs_without_waiting_for_the_window() {
        // A window far longer than the test: only a full batch can start the work.
        let cfg = PipelineConfig::new()
            .workers(1)
            .max_batch(4)
            .window(Duration::from_secs(3600));
        let p = Pipeline::new(vec![sender()], cfg).unwrap();
        for seq in 0..4 {
            p.submit(rtp(seq)).unwrap();
        }
        for seq in 0..4 {
            let c = p.complete_timeout(Duration::from_secs(60)).unwrap();
            assert_eq!((c.tag, c.result, c.batch_len), (seq, Ok(42), 4));
        }
    }

    #[test]
    fn a_lone_packet_runs_when_the_window_closes() {
        let cfg = PipelineConfig::new()
            .workers(2)
            .max_batch(64)
            .window(Duration::from_millis(1));
        let p = Pipeline::new(vec![sender()], cfg).unwrap();
        p.submit(rtp(9)).unwrap();
        let c = p.complete_timeout(Duration::from_secs(60)).unwrap();
        assert_eq!((c.tag, c.result, c.batch_len), (9, Ok(42), 1));
        // Shutting down finishes what was submitted and hands the context back.
        p.submit(rtp(10)).unwrap();
        let (ctxs, rest) = p.shutdown();
        assert_eq!(ctxs.len(), 1);
        assert_eq!(rest.len(), 1);
        assert_eq!((rest[0].tag, rest[0].result), (10, Ok(42)));
    }

    #[test]
    fn an_empty_pipeline_starts_and_stops() {
        let p = Pipeline::new(Vec::new(), PipelineConfig::new().workers(3)).unwrap();
        p.submit(Job {
            tag: 7,
            context: 5,
            op: Op::ProtectRtp,
            buf: vec![0; 40],
            len: 20,
        })
        .unwrap();
        let c = p.complete_timeout(Duration::from_secs(10)).unwrap();
        assert_eq!((c.tag, c.result), (7, Err(Error::UnknownContext)));
        let (ctxs, rest) = p.shutdown();
        assert!(ctxs.is_empty() && rest.is_empty());
    }
}
