//! Protect and unprotect per packet, every profile, 172-byte (G.711, 20 ms) and 1212-byte
//! (video) RTP packets, secrelay with each crypto provider beside libsrtp 2 + OpenSSL
//! (srtp2-sys) in the same group.
//!
//! `cargo bench -p secrelay-srtp --bench srtp` (filter with e.g. `-- AES_CM_128_HMAC_SHA1_80/172`).
//!
//! Method: packets are prepared in chunks of 256 outside the timed region (a copy of the
//! plaintext for protect; packets freshly protected by the same stack for unprotect), then the
//! chunk is processed in place inside it. Sequence numbers keep rising across chunks (through
//! ROC rollovers), so no packet is refused as a replay. Throughput is one packet per element:
//! criterion's time per element is the time per packet.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use secrelay_peers::libsrtp::{Direction as LDir, LibSrtp, LibsrtpProfile};
use secrelay_srtp::provider::{self, CryptoProvider};
use secrelay_srtp::{Context, MasterKey, Policy, Profile};

const CHUNK: usize = 256;
const SSRC: u32 = 0x1234_5678;

trait Stack {
    fn protect(&mut self, buf: &mut [u8], len: usize) -> usize;
    fn unprotect(&mut self, buf: &mut [u8], len: usize) -> usize;
}

struct Ours {
    tx: Context,
    rx: Context,
}

impl Ours {
    fn new(profile: Profile, p: &'static dyn CryptoProvider) -> Self {
        let mk = MasterKey::new(
            profile,
            &vec![0x42; profile.key_len()],
            &vec![0x17; profile.salt_len()],
        )
        .unwrap();
        Ours {
            tx: Context::new(Policy::new(mk.clone()).any_outbound().provider(p)).unwrap(),
            rx: Context::new(Policy::new(mk).any_inbound().provider(p)).unwrap(),
        }
    }
}

impl Stack for Ours {
    fn protect(&mut self, buf: &mut [u8], len: usize) -> usize {
        self.tx.protect_rtp(buf, len).expect("protect")
    }
    fn unprotect(&mut self, buf: &mut [u8], len: usize) -> usize {
        self.rx.unprotect_rtp(buf, len).expect("unprotect")
    }
}

struct Lib {
    tx: LibSrtp,
    rx: LibSrtp,
}

impl Lib {
    /// `None` for the profiles libsrtp does not have (f8, NULL with a 32-bit tag).
    fn new(profile: Profile) -> Option<Self> {
        let lp = LibsrtpProfile::ALL
            .into_iter()
            .find(|l| l.sdp_name() == profile.sdp_name())?;
        let key = vec![0x42; profile.key_len()];
        let salt = vec![0x17; profile.salt_len()];
        Some(Lib {
            tx: LibSrtp::new(lp, LDir::Outbound, &key, &salt, 1024, false).unwrap(),
            rx: LibSrtp::new(lp, LDir::Inbound, &key, &salt, 1024, false).unwrap(),
        })
    }
}

impl Stack for Lib {
    fn protect(&mut self, buf: &mut [u8], len: usize) -> usize {
        self.tx.protect(buf, len).expect("libsrtp protect")
    }
    fn unprotect(&mut self, buf: &mut [u8], len: usize) -> usize {
        self.rx.unprotect(buf, len).expect("libsrtp unprotect")
    }
}

fn template(size: usize) -> Vec<u8> {
    let mut p = vec![0u8; size];
    p[0] = 0x80;
    p[1] = 0x00;
    p[8..12].copy_from_slice(&SSRC.to_be_bytes());
    for (i, b) in p[12..].iter_mut().enumerate() {
        *b = i as u8;
    }
    p
}

struct Chunks {
    bufs: Vec<Vec<u8>>,
    lens: Vec<usize>,
    seq: u16,
    plain: Vec<u8>,
}

impl Chunks {
    fn new(size: usize) -> Self {
        Chunks {
            bufs: (0..CHUNK).map(|_| vec![0u8; size + 32]).collect(),
            lens: vec![0; CHUNK],
            seq: 0,
            plain: template(size),
        }
    }

    fn fill_plain(&mut self) {
        for b in self.bufs.iter_mut() {
            b[..self.plain.len()].copy_from_slice(&self.plain);
            b[2..4].copy_from_slice(&self.seq.to_be_bytes());
            self.seq = self.seq.wrapping_add(1);
        }
        self.lens.fill(self.plain.len());
    }
}

fn time_protect(s: &mut dyn Stack, c: &mut Chunks, iters: u64) -> Duration {
    let mut total = Duration::ZERO;
    let mut left = iters as usize;
    while left > 0 {
        let n = left.min(CHUNK);
        c.fill_plain();
        let t = Instant::now();
        for i in 0..n {
            black_box(s.protect(&mut c.bufs[i], c.lens[i]));
        }
        total += t.elapsed();
        left -= n;
    }
    total
}

fn time_unprotect(s: &mut dyn Stack, c: &mut Chunks, iters: u64) -> Duration {
    let mut total = Duration::ZERO;
    let mut left = iters as usize;
    while left > 0 {
        let n = left.min(CHUNK);
        c.fill_plain();
        for i in 0..n {
            c.lens[i] = s.protect(&mut c.bufs[i], c.lens[i]);
        }
        let t = Instant::now();
        for i in 0..n {
            black_box(s.unprotect(&mut c.bufs[i], c.lens[i]));
        }
        total += t.elapsed();
        left -= n;
    }
    total
}

fn stacks(profile: Profile) -> Vec<(String, Box<dyn Stack>)> {
    let mut v: Vec<(String, Box<dyn Stack>)> = Vec::new();
    for p in provider::all() {
        let name = if p.name().starts_with("default") {
            "secrelay".to_string()
        } else {
            format!("secrelay-{}", p.name())
        };
        v.push((name, Box::new(Ours::new(profile, p))));
    }
    if let Some(lib) = Lib::new(profile) {
        v.push(("libsrtp2".into(), Box::new(lib)));
    }
    v
}

fn bench(c: &mut Criterion) {
    for profile in Profile::ALL {
        for size in [172usize, 1212] {
            for unprotect in [false, true] {
                let op = if unprotect { "unprotect" } else { "protect" };
                let mut g = c.benchmark_group(format!("{op}/{}/{size}", profile.sdp_name()));
                g.throughput(Throughput::Elements(1));
                for (name, mut stack) in stacks(profile) {
                    let mut chunks = Chunks::new(size);
                    g.bench_function(&name, |b| {
                        b.iter_custom(|iters| {
                            if unprotect {
                                time_unprotect(stack.as_mut(), &mut chunks, iters)
                            } else {
                                time_protect(stack.as_mut(), &mut chunks, iters)
                            }
                        })
                    });
                }
                g.finish();
            }
        }
    }
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
