//! The batch engines side by side: the serial engine, the multi-buffer (SIMD) engine and the
//! worker-thread engine (one lane per available core), protecting batches of 16 and 256 RTP packets of 172 bytes
//! (G.711, 20 ms) spread over 64 contexts, AES_CM_128_HMAC_SHA1_80 and AEAD_AES_128_GCM.
//!
//! `cargo bench -p secrelay-srtp --bench engines` (filter with e.g. `-- AEAD_AES_128_GCM/256`).
//!
//! Method: each iteration is one `Engine::process` call on a whole batch; refilling the batch
//! with plaintext (rising sequence numbers per context) is outside the timing, building the
//! batch's packet list inside it. Throughput is one element per packet, so criterion's time per
//! element is the time per packet and its elements/s the engine's packets per second; the
//! threaded engine's figure over the serial one's is the scaling over one core.
//!
//! `engines/contexts/16384/…`: batches of 64 spread over 16,384 contexts in a scattered order
//! that moves on every batch, so each packet's context, stream and keys come from memory (a
//! gateway's case): what the multi-buffer engine's cache hints are for.
//!
//! `engines/size/PROFILE/SIZE/64`: batches of 64 over 64 contexts at 100, 172 and 1,200 bytes
//! and the video-like mix of `lab srtp` (issue 17: no engine slower than the serial one at
//! any size); `examples/engine_sizes.rs` and `lab srtp` cover every profile, unprotect and
//! cold contexts.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Bencher, Criterion, Throughput};
use secrelay_srtp::batch::PacketResult;
use secrelay_srtp::{
    Context, Engine, MasterKey, Op, Packet, Policy, Profile, SerialEngine, SimdEngine,
    ThreadedConfig, ThreadedEngine,
};

const CONTEXTS: usize = 64;
const SIZE: usize = 172;

/// Packet `i`'s length in the video-like mix of `lab srtp` (`srtp_engine_sizes`): of every 16
/// packets, 12 of 1,100–1,200 bytes, 2 of 200–1,100, 2 of 60–200.
fn video_mix(i: usize) -> usize {
    let h = (i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let r = (h >> 32) as usize;
    match (h >> 16) % 16 {
        0 | 1 => 60 + r % 141,
        2 | 3 => 200 + r % 901,
        _ => 1100 + r % 101,
    }
}

/// A packet's length by its place in the run.
type SizeOf = fn(usize) -> usize;

struct Batch {
    contexts: Vec<Context>,
    /// Each packet's context in the current batch.
    of: Vec<usize>,
    /// Batches filled so far (the many-contexts case moves on by one batch each time).
    filled: usize,
    bufs: Vec<Vec<u8>>,
    seqs: Vec<u16>,
    results: Vec<PacketResult>,
    plain: Vec<u8>,
    /// Packet `i`'s length (`i` counted over the batches filled).
    size: SizeOf,
    lens: Vec<usize>,
}

impl Batch {
    fn new(profile: Profile, n: usize) -> Self {
        Self::with_contexts(profile, n, CONTEXTS)
    }

    fn with_contexts(profile: Profile, n: usize, contexts: usize) -> Self {
        let mk = MasterKey::new(
            profile,
            &vec![0x42; profile.key_len()],
            &vec![0x17; profile.salt_len()],
        )
        .unwrap();
        let mut plain = vec![0u8; 1200];
        plain[0] = 0x80;
        for (i, b) in plain[12..].iter_mut().enumerate() {
            *b = i as u8;
        }
        Batch {
            contexts: (0..contexts)
                .map(|_| Context::new(Policy::new(mk.clone()).any_outbound()).unwrap())
                .collect(),
            of: vec![0; n],
            filled: 0,
            bufs: (0..n).map(|_| vec![0u8; 1200 + 32]).collect(),
            seqs: vec![0; contexts],
            results: vec![Ok(0); n],
            plain,
            size: |_| SIZE,
            lens: vec![SIZE; n],
        }
    }

    /// Packets of `size(i)` bytes instead of 172.
    fn sized(mut self, size: SizeOf) -> Self {
        self.size = size;
        self
    }

    /// Plaintext in every buffer: packet i belongs to context i % CONTEXTS (one SSRC each),
    /// with that context's next sequence number; with more contexts than that, to the next
    /// ones of a scattered walk over all of them (a stride coprime with their number).
    fn fill(&mut self) {
        let n_ctx = self.contexts.len();
        let base = self.filled * self.bufs.len();
        self.filled += 1;
        for (i, b) in self.bufs.iter_mut().enumerate() {
            let c = if n_ctx == CONTEXTS {
                i % CONTEXTS
            } else {
                (base + i).wrapping_mul(7_919) % n_ctx
            };
            self.of[i] = c;
            let len = (self.size)(base + i);
            self.lens[i] = len;
            b[..len].copy_from_slice(&self.plain[..len]);
            b[2..4].copy_from_slice(&self.seqs[c].to_be_bytes());
            b[8..12].copy_from_slice(&(0x5EC0_0000 + c as u32).to_be_bytes());
            self.seqs[c] = self.seqs[c].wrapping_add(1);
        }
    }

    /// Criterion's timing of `engine` on this batch: each iteration refills the batch (not
    /// timed), then processes it (timed).
    fn time(&mut self, b: &mut Bencher<'_>, engine: &dyn Engine) {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                self.fill();
                let t = Instant::now();
                self.process(engine);
                total += t.elapsed();
            }
            total
        })
    }

    fn process(&mut self, engine: &dyn Engine) {
        let mut packets: Vec<Packet<'_>> = self
            .bufs
            .iter_mut()
            .enumerate()
            .map(|(i, b)| Packet {
                context: self.of[i],
                op: Op::ProtectRtp,
                buf: &mut b[..],
                len: self.lens[i],
            })
            .collect();
        engine.process(&mut self.contexts, &mut packets, &mut self.results);
        black_box(&self.results);
    }
}

fn bench(c: &mut Criterion) {
    let threaded = ThreadedEngine::with_default_workers().expect("worker threads start");
    let lanes = threaded.config().worker_count();
    // The defaults: the lanes and the GCM kernel where the CPU runs them in AVX-512.
    let simd = SimdEngine::new();
    // Every packet in the lanes or the GCM kernel, whatever the CPU.
    let simd_lanes = SimdEngine::all_lanes();
    // The GCM kernel off: AEAD packets through the provider one by one (what `simd` does too
    // on a CPU without AVX-512).
    let simd_no_gcm = SimdEngine::new().with_gcm_kernel(false);
    let engines: [(String, &dyn Engine); 5] = [
        ("serial".into(), &SerialEngine),
        ("simd".into(), &simd),
        ("simd-lanes".into(), &simd_lanes),
        ("simd-no-gcm-kernel".into(), &simd_no_gcm),
        (format!("threaded-{lanes}"), &threaded),
    ];
    for profile in [Profile::AesCm128HmacSha1_80, Profile::AeadAes128Gcm] {
        for n in [16usize, 256] {
            let mut g = c.benchmark_group(format!("engines/{}/{n}", profile.sdp_name()));
            g.throughput(Throughput::Elements(n as u64));
            for (name, engine) in &engines {
                let mut batch = Batch::new(profile, n);
                batch.fill();
                batch.process(*engine);
                assert!(
                    batch
                        .results
                        .iter()
                        .all(|r| *r == Ok(SIZE + profile.rtp_tag_len())),
                    "{name} protects every packet"
                );
                g.bench_function(name.as_str(), |b| batch.time(b, *engine));
            }
            g.finish();
        }
    }
    // Packet sizes (issue 17), batches of 64 over 64 contexts.
    let sizes: [(&str, SizeOf); 4] = [
        ("100", |_| 100),
        ("172", |_| 172),
        ("1200", |_| 1200),
        ("video-mix", video_mix),
    ];
    for profile in [Profile::AesCm128HmacSha1_80, Profile::AeadAes128Gcm] {
        for (label, size) in sizes {
            let mut g =
                c.benchmark_group(format!("engines/size/{}/{label}/64", profile.sdp_name()));
            g.throughput(Throughput::Elements(64));
            for (name, engine) in &engines {
                let mut batch = Batch::new(profile, 64).sized(size);
                g.bench_function(name.as_str(), |b| batch.time(b, *engine));
                assert!(
                    batch.results.iter().all(|r| r.is_ok()),
                    "{name} protects every packet"
                );
            }
            g.finish();
        }
    }
    // Many contexts, cold: serial against multi-buffer (its cache hints).
    let mut g = c.benchmark_group("engines/contexts/16384/AES_CM_128_HMAC_SHA1_80/64");
    g.throughput(Throughput::Elements(64));
    for (name, engine) in [
        ("serial", &SerialEngine as &dyn Engine),
        ("simd", &simd),
        ("simd-lanes", &simd_lanes),
    ] {
        let mut batch = Batch::with_contexts(Profile::AesCm128HmacSha1_80, 64, 16_384);
        g.bench_function(name, |b| batch.time(b, engine));
        assert!(
            batch.results.iter().all(|r| r.is_ok()),
            "{name} protects every packet"
        );
    }
    g.finish();
    // The same split on one lane handed to one pool thread: the hand-over's own cost.
    let handed = ThreadedEngine::new(
        ThreadedConfig::new()
            .workers(1)
            .caller_works(false)
            .parallel_threshold(0),
    )
    .expect("worker thread starts");
    let mut g = c.benchmark_group("engines/handover/AES_CM_128_HMAC_SHA1_80/16");
    g.throughput(Throughput::Elements(16));
    for (name, engine) in [
        ("serial", &SerialEngine as &dyn Engine),
        ("one-pool-thread", &handed),
    ] {
        let mut batch = Batch::new(Profile::AesCm128HmacSha1_80, 16);
        g.bench_function(name, |b| batch.time(b, engine));
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(30);
    targets = bench
}
criterion_main!(benches);
