//! Every batch engine against the serial one at every packet size: protect or unprotect of
//! batches of RTP packets of 100, 172 and 1,200 bytes and a video-like mix, spread over 64 or
//! 4,096 contexts (each with its own master key), every profile the multi-buffer engine has
//! kernels for. Engines, sizes and context counts of one profile and operation run
//! interleaved, run after run; the figure is the median, the ratio is serial ÷ engine in the
//! same run (above 1: faster than serial).
//!
//! `cargo run --release -p secrelay-srtp --example engine_sizes [-- FILTER...]`: a quick look
//! while working on the kernels; with filters, only the cells whose line (profile, operation,
//! size, context count, engine) contains every one of them, e.g. `AEAD_AES_128_GCM unprotect
//! 1200`; `BATCH=N` in the environment for batches of N (default 64). `secrelay lab srtp`
//! holds the measurement of record (table `srtp_engine_sizes`).
//!
//! The video-like mix is `lab srtp`'s: of every 16 packets, 12 full ones of 1,100–1,200 bytes
//! (an encoder's packetizer filling the MTU), 2 frame tails of 200–1,100 bytes and 2 small
//! ones of 60–200 bytes (padding probes, a bundled audio stream, retransmissions of short
//! packets), in a fixed pseudo-random order; ~960 bytes on average.

use std::hint::black_box;
use std::time::{Duration, Instant};

use secrelay_srtp::batch::PacketResult;
use secrelay_srtp::{
    Context, Engine, MasterKey, Op, Packet, Policy, Profile, SerialEngine, SimdEngine,
    ThreadedEngine,
};

/// Runs per cell (interleaved), and the time each run lasts at least.
const RUNS: usize = 7;
const RUN_TIME: Duration = Duration::from_millis(60);

fn key(profile: Profile, seed: u64) -> MasterKey {
    let mut raw = vec![0u8; profile.key_len() + profile.salt_len()];
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    for b in &mut raw {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    MasterKey::from_concatenated(profile, &raw).expect("lengths from the profile")
}

/// The sizes of a batch's packets: one size, or the video-like mix.
#[derive(Clone, Copy)]
enum Sizes {
    Fixed(usize),
    Video,
}

impl Sizes {
    fn name(self) -> String {
        match self {
            Sizes::Fixed(n) => format!("{n} B"),
            Sizes::Video => "video mix".into(),
        }
    }
    /// Packet `i`'s length (header included).
    fn of(self, i: usize) -> usize {
        match self {
            Sizes::Fixed(n) => n,
            Sizes::Video => {
                let h = (i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                let r = (h >> 32) as usize;
                match (h >> 16) % 16 {
                    0 | 1 => 60 + r % 141,
                    2 | 3 => 200 + r % 901,
                    _ => 1100 + r % 101,
                }
            }
        }
    }
}

struct Cell {
    profile: Profile,
    protect: bool,
    sizes: Sizes,
    engine: &'static str,
    contexts: usize,
    run: Run,
}

struct Run {
    engine: Box<dyn Engine>,
    tx: Vec<Context>,
    rx: Vec<Context>,
    bufs: Vec<Vec<u8>>,
    lens: Vec<usize>,
    of: Vec<usize>,
    seqs: Vec<u16>,
    results: Vec<PacketResult>,
    filled: usize,
    protect: bool,
    sizes: Sizes,
}

impl Run {
    fn new(
        profile: Profile,
        engine: Box<dyn Engine>,
        contexts: usize,
        batch: usize,
        protect: bool,
        sizes: Sizes,
    ) -> Run {
        let tx = (0..contexts)
            .map(|i| Context::new(Policy::new(key(profile, i as u64)).any_outbound()).unwrap())
            .collect();
        let rx = if protect {
            Vec::new()
        } else {
            (0..contexts)
                .map(|i| Context::new(Policy::new(key(profile, i as u64)).any_inbound()).unwrap())
                .collect()
        };
        Run {
            engine,
            tx,
            rx,
            bufs: (0..batch).map(|_| vec![0u8; 1300]).collect(),
            lens: vec![0; batch],
            of: vec![0; batch],
            seqs: vec![0; contexts],
            results: vec![Ok(0); batch],
            filled: 0,
            protect,
            sizes,
        }
    }

    /// The next batch: plaintext (protect) or protected by the senders, serially (unprotect).
    fn fill(&mut self) {
        let n = self.tx.len();
        let base = self.filled * self.bufs.len();
        self.filled += 1;
        for (i, b) in self.bufs.iter_mut().enumerate() {
            let c = (base + i).wrapping_mul(7_919) % n;
            let len = self.sizes.of(base + i);
            self.of[i] = c;
            b[0] = 0x80;
            b[1] = 96;
            b[2..4].copy_from_slice(&self.seqs[c].to_be_bytes());
            b[8..12].copy_from_slice(&(0x5EC0_0000 + c as u32).to_be_bytes());
            for (k, x) in b[12..len].iter_mut().enumerate() {
                *x = k as u8;
            }
            self.seqs[c] = self.seqs[c].wrapping_add(1);
            self.lens[i] = len;
            if !self.protect {
                self.lens[i] = self.tx[c].protect_rtp(b, len).expect("protects");
            }
        }
    }

    fn process(&mut self) {
        let op = if self.protect {
            Op::ProtectRtp
        } else {
            Op::UnprotectRtp
        };
        let mut packets: Vec<Packet<'_>> = self
            .bufs
            .iter_mut()
            .enumerate()
            .map(|(i, b)| Packet {
                context: self.of[i],
                op,
                buf: &mut b[..],
                len: self.lens[i],
            })
            .collect();
        let contexts = if self.protect {
            &mut self.tx
        } else {
            &mut self.rx
        };
        self.engine
            .process(contexts, &mut packets, &mut self.results);
        assert!(
            self.results.iter().all(|r| r.is_ok()),
            "{}: {:?}",
            self.engine.name(),
            self.results.iter().find(|r| r.is_err())
        );
        black_box(&self.results);
    }

    /// ns per packet over at least `RUN_TIME`.
    fn once(&mut self) -> f64 {
        let mut spent = Duration::ZERO;
        let mut done = 0usize;
        while spent < RUN_TIME {
            self.fill();
            let t = Instant::now();
            self.process();
            spent += t.elapsed();
            done += self.bufs.len();
        }
        spent.as_secs_f64() * 1e9 / done as f64
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let filters: Vec<String> = std::env::args().skip(1).collect();
    let batch: usize = std::env::var("BATCH")
        .ok()
        .and_then(|b| b.parse().ok())
        .unwrap_or(64);
    let profiles = Profile::ALL;
    let sizes = [
        Sizes::Fixed(100),
        Sizes::Fixed(172),
        Sizes::Fixed(1200),
        Sizes::Video,
    ];
    type Make = fn() -> Box<dyn Engine>;
    let engines: [(&'static str, Make); 4] = [
        ("serial", || Box::new(SerialEngine)),
        ("simd", || Box::new(SimdEngine::new())),
        ("simd, GCM kernel off", || {
            Box::new(SimdEngine::new().with_gcm_kernel(false))
        }),
        ("threaded", || {
            Box::new(ThreadedEngine::with_default_workers().expect("threads"))
        }),
    ];
    println!("batches of {batch}; median of {RUNS} interleaved runs; × = serial ÷ engine");
    for profile in profiles {
        for protect in [true, false] {
            let op = if protect { "protect" } else { "unprotect" };
            let mut cells: Vec<Cell> = Vec::new();
            for sizes in sizes {
                for contexts in [64usize, 4096] {
                    for (name, make) in engines {
                        let line = format!(
                            "{} {op} {} {contexts} {name}",
                            profile.sdp_name(),
                            sizes.name()
                        );
                        if !filters.iter().all(|f| line.contains(f.as_str())) {
                            continue;
                        }
                        if name.contains("GCM") && !profile.sdp_name().contains("GCM") {
                            continue;
                        }
                        cells.push(Cell {
                            profile,
                            protect,
                            sizes,
                            engine: name,
                            contexts,
                            run: Run::new(profile, make(), contexts, batch, protect, sizes),
                        });
                    }
                }
            }
            if cells.is_empty() {
                continue;
            }
            for c in cells.iter_mut() {
                c.run.once();
            }
            let mut samples = vec![Vec::new(); cells.len()];
            for r in 0..RUNS {
                let n = cells.len();
                for k in 0..n {
                    let i = (r + k) % n;
                    samples[i].push(cells[i].run.once());
                }
            }
            let med: Vec<f64> = samples.iter_mut().map(|s| median(s)).collect();
            for (i, c) in cells.iter().enumerate() {
                let serial = cells.iter().zip(&med).find(|(s, _)| {
                    s.engine == "serial"
                        && s.contexts == c.contexts
                        && s.sizes.name() == c.sizes.name()
                });
                let ratio = serial.map_or(f64::NAN, |(_, s)| s / med[i]);
                println!(
                    "{:<24} {:<9} {:<10} {:>5} ctx  {:<22} {:>8.1} ns  {:>5.2}×",
                    c.profile.sdp_name(),
                    if c.protect { "protect" } else { "unprotect" },
                    c.sizes.name(),
                    c.contexts,
                    c.engine,
                    med[i],
                    ratio
                );
            }
        }
    }
}
