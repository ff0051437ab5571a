//! Multi-buffer HMAC-SHA1: the tags of many messages computed side by side in the lanes of
//! [`super::sha1_x16`], each message keyed on its own.
//!
//! A single message's HMAC is one chain of compressions, each waiting for the last, so a core
//! runs it at the latency of its SHA-1 rounds. Sixteen messages in sixteen lanes are sixteen
//! independent chains: the core runs at its throughput instead. A lane takes the next message
//! as soon as its own is finished, so messages of different lengths share a batch (lanes
//! simply finish at different steps); the longest messages go first, so that the lanes
//! finish nearly together. A message's full blocks are compressed where they lie;
//! only its last blocks (padding, ROC) are built, once, when a lane takes the message. When
//! fewer than [`MIN_ACTIVE_LANES`] lanes are busy, a step compresses them one by one on the
//! scalar function (SHA-NI where present) rather than paying for sixteen lanes to run three.
//!
//! Each message is `a ‖ b` (SRTP authenticates the packet followed by its rollover counter),
//! hashed from the keyed inner state of its [`HmacSha1State`], then the outer block from the
//! keyed outer state: the same function as [`HmacSha1State::sign2`], checked against it by the
//! tests.

use zeroize::Zeroize;

use super::sha1_x16::{compress_x16_soa, StatesSoa, LANES};
use crate::provider::hmac_sha1::{digest_bytes, OUTER_BLOCK};
use crate::provider::HmacSha1State;

/// Below this many busy lanes, a step compresses them one by one on the scalar function
/// instead of running all sixteen vector lanes.
pub const MIN_ACTIVE_LANES: usize = 4;

/// One message to authenticate: `a ‖ b` under `key`.
#[derive(Debug, Clone, Copy)]
pub struct HmacJob<'a> {
    /// The keyed HMAC-SHA1 state.
    pub key: &'a HmacSha1State,
    /// The first part of the message.
    pub a: &'a [u8],
    /// The second part (may be empty).
    pub b: &'a [u8],
}

impl HmacJob<'_> {
    fn total(&self) -> usize {
        self.a.len() + self.b.len()
    }

    /// Number of inner-hash blocks: the message, 0x80 and the 64-bit length, padded.
    fn inner_blocks(&self) -> usize {
        (self.total() + 9).div_ceil(64)
    }

    /// Writes inner block `k` of the padded message into `block`.
    fn fill_inner(&self, k: usize, block: &mut [u8; 64]) {
        let (a, b, total) = (self.a, self.b, self.total());
        let start = 64 * k;
        let end = start + 64;
        block.fill(0);
        if start < a.len() {
            let e = end.min(a.len());
            block[..e - start].copy_from_slice(&a[start..e]);
        }
        let (bs, be) = (start.max(a.len()), end.min(total));
        if bs < be {
            block[bs - start..be - start].copy_from_slice(&b[bs - a.len()..be - a.len()]);
        }
        if (start..end).contains(&total) {
            block[total - start] = 0x80;
        }
        if k + 1 == self.inner_blocks() {
            // The key block counts in the length: 64 bytes before the message.
            block[56..].copy_from_slice(&((64 + total as u64) * 8).to_be_bytes());
        }
    }
}

/// Lane `l`'s state out of the word-by-word states.
#[inline]
fn lane_of(states: &StatesSoa, l: usize) -> [u32; 5] {
    core::array::from_fn(|j| states[j][l])
}

/// Sets lane `l`'s state in the word-by-word states.
#[inline]
fn set_lane(states: &mut StatesSoa, l: usize, st: &[u32; 5]) {
    for (row, w) in states.iter_mut().zip(st) {
        row[l] = *w;
    }
}

/// A lane's message and where it is in it. Steps `0..full` are the message's full blocks,
/// compressed where they lie; steps `full..inner` the one or two padded last blocks, built
/// when the lane takes the message; step `inner` the outer block.
#[derive(Clone, Copy)]
struct Lane<'a> {
    a: &'a [u8],
    key: &'a HmacSha1State,
    out: usize,
    step: usize,
    full: usize,
    inner: usize,
}

/// Jobs put in order at once ([`Order`]); a larger batch is ordered window by window.
const ORDER_WINDOW: usize = 128;

/// The order in which lanes take the jobs: longest first, window by window. A lane takes the
/// next job when its own is done, so with jobs of mixed lengths in batch order (a video
/// stream's full packets among short ones) the last long job to start would keep its lane
/// running while the others sat idle; longest first, the short ones fill the lanes' ends and
/// the lanes finish nearly together.
struct Order {
    n: usize,
    /// Jobs `start..start + len` are ordered in `idx`; `pos` of them are taken.
    start: usize,
    len: usize,
    pos: usize,
    idx: [u16; ORDER_WINDOW],
}

impl Order {
    fn new<'a>(n: usize, job_at: &impl Fn(usize) -> Option<HmacJob<'a>>) -> Self {
        let mut o = Order {
            n,
            start: 0,
            len: 0,
            pos: 0,
            idx: [0; ORDER_WINDOW],
        };
        o.fill(job_at);
        o
    }

    /// Orders the window from `start + len` on.
    fn fill<'a>(&mut self, job_at: &impl Fn(usize) -> Option<HmacJob<'a>>) {
        self.start += self.len;
        self.len = (self.n - self.start).min(ORDER_WINDOW);
        self.pos = 0;
        let mut steps = [0u32; ORDER_WINDOW];
        for (k, (i, s)) in self.idx.iter_mut().zip(steps.iter_mut()).enumerate() {
            if k >= self.len {
                break;
            }
            *i = k as u16;
            // A skipped job sorts last; a message's length bounds its steps.
            *s = job_at(self.start + k)
                .map_or(0, |j| u32::try_from(j.inner_blocks()).unwrap_or(u32::MAX));
        }
        // Unstable: no scratch memory (a batch allocates nothing once warm).
        self.idx[..self.len].sort_unstable_by_key(|&k| core::cmp::Reverse(steps[k as usize]));
    }

    /// The next job to give a lane, if any is left.
    fn next<'a>(&mut self, job_at: &impl Fn(usize) -> Option<HmacJob<'a>>) -> Option<usize> {
        if self.pos == self.len {
            if self.start + self.len >= self.n {
                return None;
            }
            self.fill(job_at);
        }
        let k = self.idx[self.pos];
        self.pos += 1;
        Some(self.start + k as usize)
    }
}

/// Computes HMAC-SHA1 of every job into `out[i]` (20 bytes each; callers truncate).
///
/// # Panics
/// If `out` is shorter than `jobs` (a caller's bug).
pub fn hmac_sha1_many(jobs: &[HmacJob<'_>], out: &mut [[u8; 20]]) {
    hmac_sha1_many_by(jobs.len(), |i| Some(jobs[i]), out);
}

/// [`hmac_sha1_many`] over jobs `0..n` fetched by index (so a caller whose messages live in
/// its own structures need not build a slice of jobs); a job `None` is skipped and its `out`
/// slot left as it was.
///
/// Without AVX-512 the lanes still pay where the CPU has SHA-NI: the sixteen compressions of
/// a step are independent calls of the library's function, which the core overlaps, where one
/// message's blocks would wait on each other (`cargo bench --bench primitives --
/// sha1-compress`: ~17 ns per block either way on the development VM's Zen 4 core, against
/// ~43 ns per block along one chain).
///
/// # Panics
/// If `out` is shorter than `n` (a caller's bug).
pub fn hmac_sha1_many_by<'a>(
    n: usize,
    job_at: impl Fn(usize) -> Option<HmacJob<'a>>,
    out: &mut [[u8; 20]],
) {
    run_lanes(n, job_at, out, super::sha1_x16::accelerated());
}

/// The lane machine; `simd` picks the AVX-512 kernel (callers pass whether the CPU has it;
/// the tests run both paths).
fn run_lanes<'a>(
    n: usize,
    job_at: impl Fn(usize) -> Option<HmacJob<'a>>,
    out: &mut [[u8; 20]],
    simd: bool,
) {
    assert!(out.len() >= n, "output slice shorter than the jobs");
    // Word by word (`states[j][lane]`), the layout the vector rounds work in.
    let mut states: StatesSoa = [[0u32; LANES]; 5];
    // Per lane: its message's last one or two blocks, and its outer block.
    let mut tails = [[[0u8; 64]; 2]; LANES];
    let mut outers = [OUTER_BLOCK; LANES];
    let mut lanes: [Option<Lane<'a>>; LANES] = [None; LANES];
    let mut order = Order::new(n, &job_at);
    loop {
        // Give idle lanes the next messages.
        let mut active = 0;
        for (l, lane) in lanes.iter_mut().enumerate() {
            while lane.is_none() {
                let Some(next) = order.next(&job_at) else {
                    break;
                };
                if let Some(job) = job_at(next) {
                    set_lane(&mut states, l, &job.key.inner_state());
                    let full = job.a.len() / 64;
                    let inner = job.inner_blocks();
                    for (t, tail) in tails[l].iter_mut().enumerate().take(inner - full) {
                        job.fill_inner(full + t, tail);
                    }
                    *lane = Some(Lane {
                        a: job.a,
                        key: job.key,
                        out: next,
                        step: 0,
                        full,
                        inner,
                    });
                }
            }
            active += usize::from(lane.is_some());
        }
        if active == 0 {
            break;
        }
        // The outer step starts from the keyed outer state, on the inner digest.
        for (l, lane) in lanes.iter().enumerate() {
            if let Some(ln) = lane {
                if ln.step == ln.inner {
                    let (digest, _) = outers[l].split_at_mut(20);
                    digest_bytes(&lane_of(&states, l), digest);
                    set_lane(&mut states, l, &ln.key.outer_state());
                }
            }
        }
        let blocks: [&[u8; 64]; LANES] = core::array::from_fn(|l| match &lanes[l] {
            Some(ln) if ln.step < ln.full => ln.a[64 * ln.step..]
                .first_chunk::<64>()
                .unwrap_or(&outers[l]),
            Some(ln) if ln.step < ln.inner => &tails[l][ln.step - ln.full],
            // The outer block; idle lanes hash it too, their states are never read.
            _ => &outers[l],
        });
        if simd && active >= MIN_ACTIVE_LANES {
            compress_x16_soa(&mut states, &blocks);
        } else {
            // Without AVX-512, or with too few busy lanes to fill the vectors: busy lanes one
            // by one (independent chains, which the core overlaps).
            for (l, lane) in lanes.iter().enumerate() {
                if lane.is_some() {
                    let mut st = lane_of(&states, l);
                    sha1::block_api::compress(&mut st, core::slice::from_ref(blocks[l]));
                    set_lane(&mut states, l, &st);
                }
            }
        }
        for (l, lane) in lanes.iter_mut().enumerate() {
            if let Some(ln) = lane {
                ln.step += 1;
                if ln.step > ln.inner {
                    digest_bytes(&lane_of(&states, l), &mut out[ln.out]);
                    *lane = None;
                }
            }
        }
    }
    // The states passed through the keyed inner and outer states (key equivalents): wiped.
    // The tails and outer blocks hold what is hashed (SRTP authenticates the packet as sent)
    // and inner digests, neither of which gives the key.
    states.zeroize();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skipped_jobs_leave_their_output_alone() {
        let key = HmacSha1State::new(b"k");
        let data = [7u8; 300];
        let mut out = vec![[0xAA; 20]; 40];
        hmac_sha1_many_by(
            40,
            |i| {
                (i % 3 != 0).then_some(HmacJob {
                    key: &key,
                    a: &data[..100 + i],
                    b: &[],
                })
            },
            &mut out,
        );
        for (i, o) in out.iter().enumerate() {
            if i % 3 == 0 {
                assert_eq!(*o, [0xAA; 20]);
            } else {
                let mut want = [0u8; 20];
                key.sign2(&data[..100 + i], &[], &mut want);
                assert_eq!(*o, want);
            }
        }
    }

    #[test]
    fn every_job_matches_the_scalar_hmac_across_lengths_and_keys() {
        let data: Vec<u8> = (0..3000u32).map(|i| (i * 31 + 7) as u8).collect();
        let keys: Vec<HmacSha1State> = (0..5u8)
            .map(|k| HmacSha1State::new(&[k.wrapping_mul(17); 20]))
            .collect();
        // Lengths crossing every padding boundary, mixed in one batch, in batches of every
        // size around the lane count (so lanes refill, finish unevenly and hit the scalar tail).
        let lens: Vec<usize> = (0..200).chain([447, 448, 1207, 1212, 1400, 2900]).collect();
        for batch in [1usize, 3, 4, 5, 15, 16, 17, 33, 64, 206] {
            let jobs: Vec<HmacJob<'_>> = (0..batch)
                .map(|i| {
                    let len = lens[(i * 7) % lens.len()];
                    let b_len = if i % 3 == 0 { 0 } else { 4 };
                    HmacJob {
                        key: &keys[i % keys.len()],
                        a: &data[i % 50..i % 50 + len],
                        b: &data[2990..2990 + b_len],
                    }
                })
                .collect();
            // The AVX-512 kernel only where the CPU has it; the portable lanes everywhere.
            let paths = [false, super::super::sha1_x16::accelerated()];
            for simd in paths {
                let mut out = vec![[0u8; 20]; batch];
                run_lanes(batch, |i| Some(jobs[i]), &mut out, simd);
                for (i, j) in jobs.iter().enumerate() {
                    let mut want = [0u8; 20];
                    j.key.sign2(j.a, j.b, &mut want);
                    assert_eq!(
                        out[i],
                        want,
                        "simd {simd} batch {batch} job {i} len {}",
                        j.a.len()
                    );
                }
            }
        }
    }
}
