//! The multi-buffer kernels against the default provider one packet at a time, by packet
//! size: AES-GCM seal and open, AES-CTR keystreams and HMAC-SHA1 tags over 64 packets, each
//! with its own key. Interleaved runs, median per packet; ratio = provider ÷ kernel (above 1:
//! the kernel is faster). Where the batch engines' time goes, piece by piece.
//!
//! `cargo run --release -p secrelay-srtp --example kernel_sizes [-- SIZE...]` (default sizes
//! 100 172 600 1200).

use std::hint::black_box;
use std::time::{Duration, Instant};

use secrelay_srtp::provider::{self, HmacSha1State};
use secrelay_srtp::simd::aes_ctr::{apply_keystreams, AesKey, CtrJob};
use secrelay_srtp::simd::gcm::{open_many, seal_many, GcmKey, OpenJob, SealJob};
use secrelay_srtp::simd::hmac_sha1_mb::{hmac_sha1_many, HmacJob};

const N: usize = 64;

/// A named operation over `N` packets.
type Timed<'a> = (&'static str, Box<dyn FnMut() + 'a>);
const RUNS: usize = 9;
const RUN_TIME: Duration = Duration::from_millis(40);

fn key(i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|k| (i * 31 + k * 7) as u8).collect()
}

/// ns per packet of `f` (which processes `N` packets) over at least `RUN_TIME`.
fn once(f: &mut dyn FnMut()) -> f64 {
    let t = Instant::now();
    let mut n = 0;
    while t.elapsed() < RUN_TIME {
        f();
        n += N;
    }
    t.elapsed().as_secs_f64() * 1e9 / n as f64
}

fn compare(label: &str, ops: &mut [Timed<'_>]) {
    for (_, f) in ops.iter_mut() {
        once(f.as_mut());
    }
    let mut s = vec![Vec::new(); ops.len()];
    for r in 0..RUNS {
        for k in 0..ops.len() {
            let i = (r + k) % ops.len();
            s[i].push(once(ops[i].1.as_mut()));
        }
    }
    let med: Vec<f64> = s
        .iter_mut()
        .map(|v| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        })
        .collect();
    for (i, (name, _)) in ops.iter().enumerate() {
        println!(
            "{label:<22} {name:<26} {:>7.1} ns  {:>5.2}×",
            med[i],
            med[0] / med[i]
        );
    }
}

fn main() {
    let sizes: Vec<usize> = {
        let v: Vec<usize> = std::env::args()
            .skip(1)
            .filter_map(|a| a.parse().ok())
            .collect();
        if v.is_empty() {
            vec![100, 172, 600, 1200]
        } else {
            v
        }
    };
    let prov = provider::default();
    for size in sizes {
        let payload = size - 12;
        let hdr = [0x80u8, 96, 0, 1, 0, 0, 0, 9, 0xca, 0xfe, 0xba, 0xbe];
        // AES-128-GCM.
        let gk: Vec<GcmKey> = (0..N).map(|i| GcmKey::new(&key(i, 16)).unwrap()).collect();
        let pk: Vec<_> = (0..N).map(|i| prov.aes_gcm(&key(i, 16)).unwrap()).collect();
        let mut bufs = vec![vec![5u8; payload]; N];
        let mut tags = vec![[0u8; 16]; N];
        {
            let (b1, t1) = (
                std::cell::RefCell::new(&mut bufs),
                std::cell::RefCell::new(&mut tags),
            );
            let mut ops: Vec<Timed<'_>> = vec![
                (
                    "provider seal",
                    Box::new(|| {
                        let (mut b, mut t) = (b1.borrow_mut(), t1.borrow_mut());
                        for i in 0..N {
                            pk[i].seal(&[i as u8; 12], &hdr, &mut b[i], &mut t[i]);
                        }
                        black_box(&t);
                    }),
                ),
                (
                    "seal_many",
                    Box::new(|| {
                        let (mut b, mut t) = (b1.borrow_mut(), t1.borrow_mut());
                        let mut jobs: Vec<SealJob<'_>> = b
                            .iter_mut()
                            .zip(t.iter_mut())
                            .enumerate()
                            .map(|(i, (d, tag))| SealJob {
                                key: &gk[i],
                                nonce: [i as u8; 12],
                                aad: &hdr,
                                data: d,
                                tag,
                            })
                            .collect();
                        seal_many(&mut jobs);
                        black_box(&jobs.len());
                    }),
                ),
            ];
            compare(&format!("gcm seal {size}"), &mut ops);
        }
        // Open: sealed once, opened (and re-sealed between runs would change the bytes: open
        // a copy each time).
        {
            let sealed: Vec<Vec<u8>> = pk
                .iter()
                .enumerate()
                .map(|(i, k)| {
                    let mut d = vec![5u8; payload + 16];
                    let mut tag = [0u8; 16];
                    k.seal(&[i as u8; 12], &hdr, &mut d[..payload], &mut tag);
                    d[payload..].copy_from_slice(&tag);
                    d
                })
                .collect();
            let work = std::cell::RefCell::new(sealed.clone());
            let mut ok = vec![false; N];
            let okc = std::cell::RefCell::new(&mut ok);
            let sealed = &sealed;
            let mut ops: Vec<Timed<'_>> = vec![
                (
                    "provider open",
                    Box::new(|| {
                        let mut w = work.borrow_mut();
                        for i in 0..N {
                            w[i].copy_from_slice(&sealed[i]);
                            pk[i].open(&[i as u8; 12], &hdr, &mut w[i]).unwrap();
                        }
                    }),
                ),
                (
                    "open_many",
                    Box::new(|| {
                        let mut w = work.borrow_mut();
                        for i in 0..N {
                            w[i].copy_from_slice(&sealed[i]);
                        }
                        let mut jobs: Vec<OpenJob<'_>> = w
                            .iter_mut()
                            .enumerate()
                            .map(|(i, d)| {
                                let (data, tag) = d.split_at_mut(payload);
                                OpenJob {
                                    key: &gk[i],
                                    nonce: [i as u8; 12],
                                    aad: &hdr,
                                    data,
                                    tag: (&*tag).try_into().unwrap(),
                                }
                            })
                            .collect();
                        let mut okb = okc.borrow_mut();
                        open_many(&mut jobs, &mut okb);
                        assert!(okb.iter().all(|&o| o));
                    }),
                ),
            ];
            compare(&format!("gcm open {size} (+copy)"), &mut ops);
        }
        // AES-128-CTR.
        {
            let ak: Vec<AesKey> = (0..N).map(|i| AesKey::new(&key(i, 16)).unwrap()).collect();
            let pc: Vec<_> = (0..N).map(|i| prov.aes_ctr(&key(i, 16)).unwrap()).collect();
            let b1 = std::cell::RefCell::new(vec![vec![5u8; payload]; N]);
            let mut ops: Vec<Timed<'_>> = vec![
                (
                    "provider ctr",
                    Box::new(|| {
                        let mut b = b1.borrow_mut();
                        for i in 0..N {
                            pc[i].apply_keystream(&[i as u8; 16], &mut b[i]);
                        }
                    }),
                ),
                (
                    "apply_keystreams",
                    Box::new(|| {
                        let mut b = b1.borrow_mut();
                        let mut jobs: Vec<CtrJob<'_>> = b
                            .iter_mut()
                            .enumerate()
                            .map(|(i, d)| CtrJob {
                                key: &ak[i],
                                iv: [i as u8; 16],
                                data: d,
                            })
                            .collect();
                        apply_keystreams(&mut jobs);
                    }),
                ),
            ];
            compare(&format!("aes-ctr {size}"), &mut ops);
        }
        // HMAC-SHA1 over the packet and a ROC.
        {
            let hk: Vec<HmacSha1State> = (0..N).map(|i| HmacSha1State::new(&key(i, 20))).collect();
            let ph: Vec<_> = (0..N)
                .map(|i| prov.hmac_sha1(&key(i, 20)).unwrap())
                .collect();
            let data = vec![vec![5u8; size]; N];
            let out = std::cell::RefCell::new(vec![[0u8; 20]; N]);
            let mut ops: Vec<Timed<'_>> = vec![
                (
                    "provider hmac",
                    Box::new(|| {
                        let mut o = out.borrow_mut();
                        for i in 0..N {
                            ph[i].sign2(&data[i], &[0, 0, 0, 1], &mut o[i]);
                        }
                    }),
                ),
                (
                    "hmac_sha1_many",
                    Box::new(|| {
                        let mut o = out.borrow_mut();
                        let jobs: Vec<HmacJob<'_>> = (0..N)
                            .map(|i| HmacJob {
                                key: &hk[i],
                                a: &data[i],
                                b: &[0, 0, 0, 1],
                            })
                            .collect();
                        hmac_sha1_many(&jobs, &mut o);
                    }),
                ),
            ];
            compare(&format!("hmac-sha1 {size}"), &mut ops);
        }
    }
}
