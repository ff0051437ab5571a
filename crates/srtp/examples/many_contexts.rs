//! Cost per packet against the number of contexts a batch's packets are spread over: every
//! context protects one 172-byte AES_CM_128_HMAC_SHA1_80 packet per pass, in a scattered
//! order, in batches of B packets, so past a few hundred contexts each packet's context,
//! stream and keys come from memory rather than the caches (a gateway's case, and `lab
//! calls`'). Serial and multi-buffer engines side by side, each on its own contexts, three
//! timed passes after a warm-up one; the figure is the best of `REPEATS` (default 3).
//!
//! `cargo run --release -p secrelay-srtp --example many_contexts [CONTEXTS,...] [BATCH]`
//! (defaults: 100,1000,4000,16000,64000 and 16). A quick look; `secrelay lab calls` holds the
//! measurement of record.

use std::time::Instant;

use secrelay_srtp::batch::PacketResult;
use secrelay_srtp::{
    Context, Engine, MasterKey, Op, Packet, Policy, Profile, SerialEngine, SimdEngine,
};

const SIZE: usize = 172;
const PROFILE: Profile = Profile::AesCm128HmacSha1_80;

fn key(seed: u64) -> MasterKey {
    let mut raw = vec![0u8; PROFILE.key_len() + PROFILE.salt_len()];
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    for b in &mut raw {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    MasterKey::from_concatenated(PROFILE, &raw).expect("lengths from the profile")
}

/// Nanoseconds per packet for `engine` over `n` fresh contexts.
fn run(engine: &dyn Engine, n: usize, batch: usize) -> f64 {
    let mut contexts: Vec<Context> = (0..n)
        .map(|i| Context::new(Policy::new(key(i as u64)).any_outbound()).expect("valid policy"))
        .collect();
    // A scattered order (a stride coprime with most n), each buffer kept with its packet.
    let order: Vec<usize> = (0..n).map(|i| i.wrapping_mul(7_919_011) % n).collect();
    let mut bufs: Vec<Vec<u8>> = order
        .iter()
        .map(|&c| {
            let mut b = vec![0u8; SIZE + PROFILE.rtp_overhead()];
            b[0] = 0x80;
            b[8..12].copy_from_slice(&(c as u32).to_be_bytes());
            b
        })
        .collect();
    let mut results: Vec<PacketResult> = vec![Ok(0); batch];
    let mut timed_ns = 0u128;
    for pass in 0..4u16 {
        let t = Instant::now();
        for (ctxs, chunk) in order.chunks(batch).zip(bufs.chunks_mut(batch)) {
            let mut packets: Vec<Packet<'_>> = ctxs
                .iter()
                .zip(chunk.iter_mut())
                .map(|(&c, b)| {
                    b[2..4].copy_from_slice(&pass.to_be_bytes());
                    Packet {
                        context: c,
                        op: Op::ProtectRtp,
                        buf: b.as_mut_slice(),
                        len: SIZE,
                    }
                })
                .collect();
            let results = &mut results[..packets.len()];
            engine.process(&mut contexts, &mut packets, results);
            if let Some(Err(e)) = results.iter().find(|r| r.is_err()) {
                panic!("{}: a packet failed: {e}", engine.name());
            }
        }
        if pass > 0 {
            timed_ns += t.elapsed().as_nanos();
        }
    }
    timed_ns as f64 / (3 * n) as f64
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let counts: Vec<usize> = args
        .get(1)
        .map_or(vec![100, 1000, 4000, 16000, 64000], |s| {
            s.split(',')
                .map(|v| v.parse().expect("CONTEXTS: comma-separated numbers"))
                .collect()
        });
    let batch: usize = args
        .get(2)
        .map_or(16, |s| s.parse().expect("BATCH: a number"))
        .max(1);
    let repeats: usize = std::env::var("REPEATS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
        .max(1);
    let serial = SerialEngine;
    let simd = SimdEngine::new();
    println!("contexts  batch  serial ns/packet  simd ns/packet  serial ÷ simd");
    for &n in &counts {
        let (mut a, mut b) = (f64::MAX, f64::MAX);
        for _ in 0..repeats {
            a = a.min(run(&serial, n, batch));
            b = b.min(run(&simd, n, batch));
        }
        println!("{n:8}  {batch:5}  {a:16.0}  {b:14.0}  {:12.2}", a / b);
    }
}
