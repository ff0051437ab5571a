//! Wall-time measurement: warm-up, calibrated runs, median and spread, with the harness's
//! own per-operation cost (an empty operation) measured and subtracted.

use std::hint::black_box;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// One measured figure.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Timing {
    /// Median time per operation over the runs, in ns, harness overhead subtracted.
    pub ns: f64,
    /// Fastest run's time per operation, in ns.
    pub min_ns: f64,
    /// Slowest run's time per operation, in ns.
    pub max_ns: f64,
    /// Interquartile range of the runs as a percentage of the median.
    pub spread_pct: f64,
    /// Timed runs.
    pub runs: usize,
    /// Operations per run.
    pub iters: u64,
}

impl Timing {
    /// Operations per second at the median.
    pub fn ops_per_s(&self) -> f64 {
        1e9 / self.ns
    }
}

/// An operation for [`Bench::time_chunked_interleaved`]: `prepare` readies `chunk`
/// operations outside the timing, `process` does them inside it.
pub struct Chunked<'a> {
    /// Operations per chunk.
    pub chunk: usize,
    /// Untimed preparation of one chunk.
    pub prepare: Box<dyn FnMut() + 'a>,
    /// The timed work on one chunk.
    pub process: Box<dyn FnMut() + 'a>,
}

/// Settings for a measurement series (one per study run).
#[derive(Debug, Clone)]
pub struct Bench {
    /// Warm-up before each measurement.
    pub warmup: Duration,
    /// Timed runs per measurement.
    pub runs: usize,
    /// Target duration of one run.
    pub run_time: Duration,
    /// Harness cost per empty operation, ns.
    pub overhead_ns: f64,
}

fn run_loop<F: FnMut()>(f: &mut F, iters: u64) -> Duration {
    let start = Instant::now();
    for _ in 0..iters {
        f();
    }
    start.elapsed()
}

/// How long a study measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pace {
    /// Figures to publish: 200 ms of warm-up and 11 runs of 100 ms per measurement.
    Full,
    /// `--quick`, first looks: 10 ms of warm-up and 5 runs of 10 ms.
    Quick,
    /// `--smoke`, a check that a study and its report are made end to end (what the tests
    /// run): 1 ms of warm-up and 3 runs of 1 ms, figures not fit to read.
    Smoke,
}

impl Pace {
    /// The pace `--quick` and `--smoke` ask for (`--smoke` wins).
    pub fn of(quick: bool, smoke: bool) -> Pace {
        match (quick, smoke) {
            (_, true) => Pace::Smoke,
            (true, false) => Pace::Quick,
            (false, false) => Pace::Full,
        }
    }
}

impl Bench {
    /// Settings for `pace`, with the empty-op overhead measured right away.
    pub fn new(pace: Pace) -> Bench {
        let (warmup_ms, runs, run_ms) = match pace {
            Pace::Full => (200, 11, 100),
            Pace::Quick => (10, 5, 10),
            Pace::Smoke => (1, 3, 1),
        };
        let mut b = Bench {
            warmup: Duration::from_millis(warmup_ms),
            runs,
            run_time: Duration::from_millis(run_ms),
            overhead_ns: 0.0,
        };
        let empty = b.time_raw(&mut || black_box(()), None);
        b.overhead_ns = empty.ns;
        b
    }

    /// Times `op`, which must `black_box` what it produces. Slow operations get at least
    /// one operation per run and fewer runs, so that one measurement stays within about
    /// `runs × run_time` (never fewer than 3 runs).
    pub fn time<F: FnMut()>(&self, mut op: F) -> Timing {
        let mut t = self.time_raw(&mut op, None);
        for v in [&mut t.ns, &mut t.min_ns, &mut t.max_ns] {
            *v = (*v - self.overhead_ns).max(f64::MIN_POSITIVE);
        }
        t
    }

    /// Like [`Bench::time`], with a fixed number of runs (for operations that take seconds,
    /// e.g. RSA-4096 key generation, where the caller decides the budget).
    pub fn time_runs<F: FnMut()>(&self, runs: usize, mut op: F) -> Timing {
        let mut t = self.time_raw(&mut op, Some(runs.max(1)));
        for v in [&mut t.ns, &mut t.min_ns, &mut t.max_ns] {
            *v = (*v - self.overhead_ns).max(f64::MIN_POSITIVE);
        }
        t
    }

    /// Times work that needs fresh input each time (e.g. SRTP packets with rising sequence
    /// numbers): `prepare` readies a chunk of `chunk` operations outside the timing, then
    /// `process` does them inside it. Reported per operation.
    pub fn time_chunked<S: FnMut(), P: FnMut()>(
        &self,
        chunk: usize,
        prepare: S,
        process: P,
    ) -> Timing {
        let mut ops = [Chunked {
            chunk,
            prepare: Box::new(prepare),
            process: Box::new(process),
        }];
        self.time_chunked_interleaved(&mut ops).remove(0)
    }

    /// Like [`Bench::time_chunked`] for several operations at once, their runs interleaved
    /// (run r of every operation, each round starting at another one), so that a machine
    /// whose speed drifts (other load, frequency changes) weighs on all of them alike and
    /// their ratios hold.
    pub fn time_chunked_interleaved(&self, ops: &mut [Chunked<'_>]) -> Vec<Timing> {
        fn one_run(op: &mut Chunked<'_>, min: Duration) -> (f64, u64) {
            let chunk = op.chunk.max(1) as u64;
            let mut spent = Duration::ZERO;
            let mut done = 0u64;
            while spent < min || done == 0 {
                (op.prepare)();
                let start = Instant::now();
                (op.process)();
                spent += start.elapsed();
                done += chunk;
            }
            (spent.as_secs_f64() * 1e9 / done as f64, done)
        }
        for op in ops.iter_mut() {
            one_run(op, self.warmup);
        }
        let n = ops.len();
        let mut samples: Vec<Vec<f64>> = vec![Vec::with_capacity(self.runs); n];
        let mut iters = vec![0u64; n];
        for r in 0..self.runs {
            for k in 0..n {
                let i = (r + k) % n;
                let (ns, done) = one_run(&mut ops[i], self.run_time);
                samples[i].push(ns);
                iters[i] = done;
            }
        }
        samples
            .iter_mut()
            .zip(iters)
            .map(|(s, it)| {
                let mut t = Self::summarize(s, it);
                for v in [&mut t.ns, &mut t.min_ns, &mut t.max_ns] {
                    *v = (*v - self.overhead_ns).max(f64::MIN_POSITIVE);
                }
                t
            })
            .collect()
    }

    fn summarize(samples: &mut [f64], iters: u64) -> Timing {
        samples.sort_by(f64::total_cmp);
        let q = |p: f64| {
            let i = p * (samples.len() - 1) as f64;
            let (lo, hi) = (i.floor() as usize, i.ceil() as usize);
            samples[lo] + (samples[hi] - samples[lo]) * (i - lo as f64)
        };
        let median = q(0.5);
        Timing {
            ns: median,
            min_ns: samples[0],
            max_ns: samples[samples.len() - 1],
            spread_pct: if median > 0.0 {
                (q(0.75) - q(0.25)) / median * 100.0
            } else {
                0.0
            },
            runs: samples.len(),
            iters,
        }
    }

    fn time_raw<F: FnMut()>(&self, op: &mut F, fixed_runs: Option<usize>) -> Timing {
        // Warm-up, which also estimates the cost of one operation.
        let start = Instant::now();
        let mut done = 0u64;
        let mut batch = 1u64;
        while start.elapsed() < self.warmup || done == 0 {
            run_loop(op, batch);
            done += batch;
            batch = (batch * 2).min(1 << 20);
        }
        let per_op = start.elapsed().as_secs_f64() / done as f64;
        let iters = ((self.run_time.as_secs_f64() / per_op) as u64).max(1);
        let runs = match fixed_runs {
            Some(r) => r,
            None if per_op > self.run_time.as_secs_f64() => {
                let budget = self.run_time.as_secs_f64() * self.runs as f64;
                ((budget / per_op) as usize).clamp(3, self.runs)
            }
            None => self.runs,
        };
        let mut samples: Vec<f64> = (0..runs)
            .map(|_| run_loop(op, iters).as_secs_f64() * 1e9 / iters as f64)
            .collect();
        Self::summarize(&mut samples, iters)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overhead_is_measured_and_work_is_positive() {
        let b = Bench::new(Pace::Quick);
        assert!(b.overhead_ns.is_finite() && b.overhead_ns >= 0.0);
        let mut x = 0u64;
        let t = b.time(|| {
            for i in 0..100u64 {
                x = black_box(x.wrapping_mul(31).wrapping_add(i));
            }
        });
        assert!(t.ns > 0.0 && t.ns.is_finite());
        assert!(t.min_ns <= t.ns + b.overhead_ns && t.ns <= t.max_ns);
        assert_eq!(t.runs, b.runs);
    }
}
