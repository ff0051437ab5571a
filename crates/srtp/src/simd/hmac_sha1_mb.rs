//! Multi-buffer HMAC-SHA1: the tags of many messages computed side by side in the lanes of
//! [`super::sha1_x16`], each message keyed on its own.
//!
//! A single message's HMAC is one chain of compressions, each waiting for the last, so a core
//! runs it at the latency of its SHA-1 rounds. Sixteen messages in sixteen lanes are sixteen
//! independent chains: the core runs at its throughput instead. A lane takes the next message
//! as soon as its own is finished, so messages of different lengths share a batch (lanes
//! simply finish at different steps). A message's full blocks are compressed where they lie;
//! only its last blocks (padding, ROC) and the outer block are built. When fewer than
//! [`MIN_ACTIVE_LANES`] lanes are left busy, they finish one by one on the scalar compression
//! function (SHA-NI where present) rather than paying for sixteen lanes to run three.
//!
//! Each message is `a ‖ b` (SRTP authenticates the packet followed by its rollover counter),
//! hashed from the keyed inner state of its [`HmacSha1State`], then the outer block from the
//! keyed outer state: the same function as [`HmacSha1State::sign2`], checked against it by the
//! tests.

use zeroize::Zeroize;

use super::sha1_x16::{compress_x16_refs, LANES};
use crate::provider::HmacSha1State;

/// Below this many busy lanes (with AVX-512), the remaining messages finish on the scalar path.
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

impl<'a> HmacJob<'a> {
    fn total(&self) -> usize {
        self.a.len() + self.b.len()
    }

    /// Number of inner-hash blocks: the message, 0x80 and the 64-bit length, padded.
    fn inner_blocks(&self) -> usize {
        (self.total() + 9).div_ceil(64)
    }

    /// Inner block `k` of the padded message: in place when it lies wholly in `a`, else
    /// written into `scratch`.
    #[inline]
    fn inner_block(&self, k: usize, scratch: &mut [u8; 64]) -> Option<&'a [u8; 64]> {
        let start = 64 * k;
        if let Some(block) = self.a.get(start..).and_then(|r| r.first_chunk::<64>()) {
            return Some(block);
        }
        self.fill_inner(k, scratch);
        None
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

/// The outer block: the 20-byte inner digest and its padding.
fn fill_outer(inner: &[u32; 5], block: &mut [u8; 64]) {
    block.fill(0);
    for (i, w) in inner.iter().enumerate() {
        block[i * 4..i * 4 + 4].copy_from_slice(&w.to_be_bytes());
    }
    block[20] = 0x80;
    block[56..].copy_from_slice(&((64u64 + 20) * 8).to_be_bytes());
}

fn digest_bytes(st: &[u32; 5], out: &mut [u8; 20]) {
    for (i, w) in st.iter().enumerate() {
        out[i * 4..i * 4 + 4].copy_from_slice(&w.to_be_bytes());
    }
}

/// A lane's message and where it is in it: inner block `step` while `step < inner_blocks`,
/// the outer block at `step == inner_blocks`.
#[derive(Clone, Copy)]
struct Lane<'a> {
    job: HmacJob<'a>,
    out: usize,
    step: usize,
    inner_blocks: usize,
}

impl<'a> Lane<'a> {
    /// The lane's block for its current step (switching to the outer state before the outer
    /// block): in place, or written into `scratch`.
    #[inline]
    fn block(&self, state: &mut [u32; 5], scratch: &mut [u8; 64]) -> Option<&'a [u8; 64]> {
        if self.step < self.inner_blocks {
            self.job.inner_block(self.step, scratch)
        } else {
            fill_outer(state, scratch);
            *state = self.job.key.outer_state();
            None
        }
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
    let mut states = [[0u32; 5]; LANES];
    let mut scratch = [[0u8; 64]; LANES];
    let mut lanes: [Option<Lane<'a>>; LANES] = [None; LANES];
    let mut next = 0;
    loop {
        // Give idle lanes the next messages.
        let mut active = 0;
        for (l, lane) in lanes.iter_mut().enumerate() {
            while lane.is_none() && next < n {
                if let Some(job) = job_at(next) {
                    states[l] = job.key.inner_state();
                    *lane = Some(Lane {
                        job,
                        out: next,
                        step: 0,
                        inner_blocks: job.inner_blocks(),
                    });
                }
                next += 1;
            }
            active += usize::from(lane.is_some());
        }
        if active == 0 {
            break;
        }
        if simd && active < MIN_ACTIVE_LANES {
            // Too few to fill the vector lanes: finish them one by one.
            for (l, lane) in lanes.iter_mut().enumerate() {
                if let Some(mut ln) = lane.take() {
                    while ln.step <= ln.inner_blocks {
                        let direct = ln.block(&mut states[l], &mut scratch[l]);
                        let block = direct.unwrap_or(&scratch[l]);
                        sha1::block_api::compress(&mut states[l], core::slice::from_ref(block));
                        ln.step += 1;
                    }
                    digest_bytes(&states[l], &mut out[ln.out]);
                }
            }
            continue;
        }
        let mut direct: [Option<&'a [u8; 64]>; LANES] = [None; LANES];
        for (l, lane) in lanes.iter().enumerate() {
            if let Some(ln) = lane {
                direct[l] = ln.block(&mut states[l], &mut scratch[l]);
            }
        }
        if simd {
            // Idle lanes hash whatever their scratch holds; their states are never read.
            let blocks: [&[u8; 64]; LANES] =
                core::array::from_fn(|l| direct[l].unwrap_or(&scratch[l]));
            compress_x16_refs(&mut states, &blocks);
        } else {
            for (l, lane) in lanes.iter().enumerate() {
                if lane.is_some() {
                    let block = direct[l].unwrap_or(&scratch[l]);
                    sha1::block_api::compress(&mut states[l], core::slice::from_ref(block));
                }
            }
        }
        for (l, lane) in lanes.iter_mut().enumerate() {
            if let Some(ln) = lane {
                ln.step += 1;
                if ln.step > ln.inner_blocks {
                    digest_bytes(&states[l], &mut out[ln.out]);
                    *lane = None;
                }
            }
        }
    }
    // The states passed through keyed values; the scratch held message bytes.
    states.zeroize();
    scratch.zeroize();
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
