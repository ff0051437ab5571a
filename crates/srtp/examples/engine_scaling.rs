//! Serial, multi-buffer and threaded engine throughput at a few batch sizes (best of 7 interleaved runs
//! of 40 ms each), and first what the machine gives two threads right now (two serial engines,
//! then two multi-buffer engines, at once on their own data: the ceilings for 2-lane engines
//! with scalar and multi-buffer lanes):
//! `cargo run --release -p secrelay-srtp --example engine_scaling [LANES] [THRESHOLD] [caller-works]`
//! (`NOPIN=1` leaves the pool threads unpinned, `SCALAR_LANES=1` runs the scalar code in the
//! lanes instead of the multi-buffer engine, `SCOPED=1` replaces the engine by a thread
//! spawned per batch).
//! A quick look for a shared machine; `secrelay lab srtp` holds the measurement of record.

use std::time::{Duration, Instant};

use secrelay_srtp::batch::PacketResult;
use secrelay_srtp::{
    Context, Engine, MasterKey, Op, Packet, Policy, Profile, SerialEngine, SimdEngine,
    ThreadedConfig, ThreadedEngine,
};

const CONTEXTS: usize = 64;
const SIZE: usize = 172;

/// The ceiling: two serial engines on two threads at once, each on its own contexts, 40
/// batches of 2,048 packets each; overall time per packet.
fn two_independent(mk: &MasterKey, engine: fn() -> Box<dyn Engine>) -> f64 {
    let t = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                let engine = engine();
                let mut ctxs: Vec<Context> = (0..CONTEXTS)
                    .map(|_| Context::new(Policy::new(mk.clone()).any_outbound()).expect("ok"))
                    .collect();
                let mut bufs = vec![vec![0u8; SIZE + 16]; 2048];
                let mut results: Vec<PacketResult> = vec![Ok(0); 2048];
                for round in 0..40u16 {
                    for (i, b) in bufs.iter_mut().enumerate() {
                        b[0] = 0x80;
                        b[2..4]
                            .copy_from_slice(&(round * 32 + (i / CONTEXTS) as u16).to_be_bytes());
                        b[8..12].copy_from_slice(&(i as u32 % CONTEXTS as u32).to_be_bytes());
                    }
                    let mut packets: Vec<Packet<'_>> = bufs
                        .iter_mut()
                        .enumerate()
                        .map(|(i, b)| Packet {
                            context: i % CONTEXTS,
                            op: Op::ProtectRtp,
                            buf: &mut b[..],
                            len: SIZE,
                        })
                        .collect();
                    engine.process(&mut ctxs, &mut packets, &mut results);
                    assert!(results.iter().all(|r| r.is_ok()));
                }
            });
        }
    });
    t.elapsed().as_secs_f64() * 1e9 / (2.0 * 40.0 * 2048.0)
}

/// The same two-lane split with a thread spawned per batch (`std::thread::scope`), as a check
/// on the pool's hand-over: if this scales and the pool does not, the pool is to blame.
struct ScopedSplit;

fn run_lane(ctxs: &mut [&mut Context], items: &mut [(&mut Packet<'_>, &mut PacketResult)]) {
    for (p, r) in items.iter_mut() {
        let c = &mut *ctxs[p.context / 2];
        **r = c.protect_rtp(p.buf, p.len);
    }
}

impl Engine for ScopedSplit {
    fn name(&self) -> &'static str {
        "scoped-split"
    }
    fn process(
        &self,
        contexts: &mut [Context],
        packets: &mut [Packet<'_>],
        results: &mut [PacketResult],
    ) {
        let (mut c0, mut c1) = (Vec::new(), Vec::new());
        for (i, c) in contexts.iter_mut().enumerate() {
            if i % 2 == 0 {
                c0.push(c)
            } else {
                c1.push(c)
            }
        }
        let (mut l0, mut l1) = (Vec::new(), Vec::new());
        for (p, r) in packets.iter_mut().zip(results.iter_mut()) {
            if p.context % 2 == 0 {
                l0.push((p, r))
            } else {
                l1.push((p, r))
            }
        }
        std::thread::scope(|s| {
            s.spawn(|| run_lane(&mut c1, &mut l1));
            run_lane(&mut c0, &mut l0);
        });
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let lanes = args.next().and_then(|a| a.parse().ok()).unwrap_or(2);
    let threshold = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(secrelay_srtp::threaded::DEFAULT_PARALLEL_THRESHOLD);
    let caller_works = args.next().is_some_and(|a| a == "caller-works");
    let pin = std::env::var_os("NOPIN").is_none();
    let threaded = ThreadedEngine::new(
        ThreadedConfig::new()
            .workers(lanes)
            .parallel_threshold(threshold)
            .caller_works(caller_works)
            .pin_workers(pin)
            .multi_buffer(std::env::var_os("SCALAR_LANES").is_none()),
    )
    .expect("threads start");
    let profile = Profile::AesCm128HmacSha1_80;
    let mk = MasterKey::new(profile, &[0x42; 16], &[0x17; 14]).expect("valid key");
    println!(
        "two serial engines on two threads at once: {:.1} ns/pkt overall",
        two_independent(&mk, || Box::new(SerialEngine))
    );
    println!(
        "two simd engines on two threads at once: {:.1} ns/pkt overall",
        two_independent(&mk, || Box::new(SimdEngine::new()))
    );
    for batch in [16usize, 64, 256, 1024, 4096] {
        let scoped = ScopedSplit;
        let simd = SimdEngine::new();
        let engines: [&dyn Engine; 3] = if std::env::var_os("SCOPED").is_some() {
            [&SerialEngine, &simd, &scoped]
        } else {
            [&SerialEngine, &simd, &threaded]
        };
        let mut best = [f64::MAX; 3];
        let mut ctxs: Vec<Vec<Context>> = (0..3)
            .map(|_| {
                (0..CONTEXTS)
                    .map(|_| Context::new(Policy::new(mk.clone()).any_outbound()).expect("ok"))
                    .collect()
            })
            .collect();
        let mut bufs = vec![vec![0u8; SIZE + 16]; batch];
        let mut results: Vec<PacketResult> = vec![Ok(0); batch];
        // A sequence counter per engine: each engine's contexts see their own packets' numbers
        // move on a little per batch, never the jump of another engine's whole run (past
        // 2^15 it would read as an old packet).
        let mut seqs = [0u16; 3];
        for _round in 0..7 {
            for (k, e) in engines.iter().enumerate() {
                let seq = &mut seqs[k];
                let mut spent = Duration::ZERO;
                let mut done = 0usize;
                while spent < Duration::from_millis(40) {
                    for (i, b) in bufs.iter_mut().enumerate() {
                        b[0] = 0x80;
                        b[2..4].copy_from_slice(&seq.to_be_bytes());
                        b[8..12].copy_from_slice(&(i as u32 % CONTEXTS as u32).to_be_bytes());
                        if i % CONTEXTS == CONTEXTS - 1 {
                            *seq = seq.wrapping_add(1);
                        }
                    }
                    *seq = seq.wrapping_add(1);
                    let mut packets: Vec<Packet<'_>> = bufs
                        .iter_mut()
                        .enumerate()
                        .map(|(i, b)| Packet {
                            context: i % CONTEXTS,
                            op: Op::ProtectRtp,
                            buf: &mut b[..],
                            len: SIZE,
                        })
                        .collect();
                    let t = Instant::now();
                    e.process(&mut ctxs[k], &mut packets, &mut results);
                    spent += t.elapsed();
                    done += batch;
                    assert!(results.iter().all(|r| r.is_ok()), "{:?}", results[0]);
                }
                best[k] = best[k].min(spent.as_secs_f64() * 1e9 / done as f64);
            }
        }
        println!(
            "batch {batch:5}: serial {:6.1} ns/pkt, simd {:6.1}, threaded({lanes}) {:6.1}; threaded ÷ serial {:.2}, threaded ÷ simd {:.2}",
            best[0],
            best[1],
            best[2],
            best[0] / best[2],
            best[1] / best[2]
        );
    }
}
