//! The primitives behind SRTP, per provider, at packet sizes: how the default provider was
//! chosen. `cargo bench -p secrelay-srtp --bench primitives`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use secrelay_srtp::provider;

fn bench(c: &mut Criterion) {
    let provs = [provider::rustcrypto()]
        .into_iter()
        .chain(
            provider::all()
                .into_iter()
                .filter(|p| matches!(p.name(), "aws-lc" | "ring")),
        )
        .collect::<Vec<_>>();
    for (size, label) in [(176usize, "176"), (1216, "1216")] {
        let mut g = c.benchmark_group(format!("hmac-sha1/{label}"));
        g.throughput(Throughput::Elements(1));
        let data = vec![7u8; size - 4];
        for p in &provs {
            let h = p.hmac_sha1(&[1; 20]).unwrap();
            let mut out = [0u8; 20];
            g.bench_function(p.name(), |b| {
                b.iter(|| h.sign2(black_box(&data), &[0, 0, 0, 1], &mut out))
            });
        }
        g.finish();
    }
    for size in [160usize, 1200] {
        let mut g = c.benchmark_group(format!("aes-128-ctr/{size}"));
        g.throughput(Throughput::Elements(1));
        let mut data = vec![7u8; size];
        for p in &provs {
            let k = p.aes_ctr(&[1; 16]).unwrap();
            g.bench_function(p.name(), |b| {
                b.iter(|| k.apply_keystream(&[3; 16], black_box(&mut data)))
            });
        }
        g.finish();
        let mut g = c.benchmark_group(format!("aes-128-gcm-seal/{size}"));
        g.throughput(Throughput::Elements(1));
        for p in &provs {
            let k = p.aes_gcm(&[1; 16]).unwrap();
            let mut tag = [0u8; 16];
            g.bench_function(p.name(), |b| {
                b.iter(|| k.seal(&[3; 12], &[9; 12], black_box(&mut data), &mut tag))
            });
        }
        g.finish();
    }
    // SHA-1 compressions, 16 blocks: the multi-buffer kernel of the batch engines against the
    // library's one-block-at-a-time function (SHA-NI here). Throughput is one block.
    {
        use secrelay_srtp::simd::sha1_x16::{accelerated, compress_portable, compress_x16, LANES};
        let mut g = c.benchmark_group("sha1-compress-16-blocks");
        g.throughput(Throughput::Elements(LANES as u64));
        let blocks = [[0x5au8; 64]; LANES];
        let mut states = [[0x0123_4567u32; 5]; LANES];
        g.bench_function("sha1 crate, one by one", |b| {
            b.iter(|| compress_portable(black_box(&mut states), black_box(&blocks)))
        });
        let name = if accelerated() {
            "x16 AVX-512"
        } else {
            "x16 (portable fallback)"
        };
        g.bench_function(name, |b| {
            b.iter(|| compress_x16(black_box(&mut states), black_box(&blocks)))
        });
        // States kept word by word between calls (as the HMAC lane machine does): no gather
        // or scatter of the states per call.
        let mut soa = [[0x0123_4567u32; LANES]; 5];
        let refs: [&[u8; 64]; LANES] = core::array::from_fn(|i| &blocks[i]);
        g.bench_function(format!("{name}, word-by-word states"), |b| {
            b.iter(|| {
                secrelay_srtp::simd::sha1_x16::compress_x16_soa(
                    black_box(&mut soa),
                    black_box(&refs),
                )
            })
        });
        // One message's blocks are a chain: each compression waits for the one before. This
        // is what a single packet's HMAC costs per block.
        g.bench_function("sha1 crate, one chain of 16", |b| {
            b.iter(|| {
                let st = &mut black_box(&mut states)[0];
                for block in black_box(&blocks).iter() {
                    sha1::block_api::compress(st, core::slice::from_ref(block));
                }
            })
        });
        g.finish();
    }
    // AES-CTR and AES-GCM over batches of 160-byte packets, each with its own key and IV:
    // the multi-buffer kernels against the default provider one packet at a time.
    batches::<16>(c);
    batches::<64>(c);
}

/// Batch groups for `N` packets of 160 bytes. Throughput is one packet (criterion's
/// elements/s is packets/s; time per iteration / N is the time per packet). The jobs are
/// built inside the timed loop, on the stack, as an engine would.
fn batches<const N: usize>(c: &mut Criterion) {
    use secrelay_srtp::simd::aes_ctr::{apply_keystreams_with, AesKey, Backend, CtrJob};
    let raw: Vec<[u8; 16]> = (0..N as u8)
        .map(|i| [i.wrapping_mul(37) ^ 0x5a; 16])
        .collect();
    let ivs: Vec<[u8; 16]> = (0..N as u8).map(|i| [i; 16]).collect();
    let mut bufs = vec![vec![7u8; 160]; N];

    let keys: Vec<AesKey> = raw.iter().map(|k| AesKey::new(k).unwrap()).collect();
    let prov: Vec<_> = raw
        .iter()
        .map(|k| provider::default().aes_ctr(k).unwrap())
        .collect();
    let mut g = c.benchmark_group(format!("aes-128-ctr-batch/{N}x160"));
    g.throughput(Throughput::Elements(N as u64));
    g.bench_function("default provider, per packet", |b| {
        b.iter(|| {
            for ((k, iv), d) in prov.iter().zip(&ivs).zip(bufs.iter_mut()) {
                k.apply_keystream(iv, black_box(d));
            }
        })
    });
    for backend in [Backend::Vaes, Backend::AesNi, Backend::Portable] {
        g.bench_function(format!("apply_keystreams {backend:?}"), |b| {
            b.iter(|| {
                let mut it = bufs.iter_mut();
                let mut jobs: [CtrJob<'_>; N] = std::array::from_fn(|i| CtrJob {
                    key: &keys[i],
                    iv: ivs[i],
                    data: it.next().expect("N buffers"),
                });
                apply_keystreams_with(backend, black_box(&mut jobs));
            })
        });
    }
    g.finish();

    // AES-128-GCM seal, 12-byte AAD (an RTP header) and 160-byte payload per packet.
    use secrelay_srtp::simd::gcm::{accelerated, seal_many, seal_many_portable, GcmKey, SealJob};
    let gkeys: Vec<GcmKey> = raw.iter().map(|k| GcmKey::new(k).unwrap()).collect();
    let gprov: Vec<_> = raw
        .iter()
        .map(|k| provider::default().aes_gcm(k).unwrap())
        .collect();
    let nonces: Vec<[u8; 12]> = (0..N as u8).map(|i| [i; 12]).collect();
    let aad = [9u8; 12];
    let mut tags = vec![[0u8; 16]; N];
    let mut g = c.benchmark_group(format!("aes-128-gcm-seal-batch/{N}x160"));
    g.throughput(Throughput::Elements(N as u64));
    g.bench_function("default provider, per packet", |b| {
        b.iter(|| {
            for (((k, n), d), t) in gprov
                .iter()
                .zip(&nonces)
                .zip(bufs.iter_mut())
                .zip(&mut tags)
            {
                k.seal(n, &aad, black_box(d), t);
            }
        })
    });
    let fast = if accelerated() {
        "seal_many VAES+VPCLMULQDQ"
    } else {
        "seal_many (portable fallback)"
    };
    for (name, f) in [
        (fast, seal_many as fn(&mut [SealJob<'_>])),
        ("seal_many_portable", seal_many_portable),
    ] {
        g.bench_function(name, |b| {
            b.iter(|| {
                let mut it = bufs.iter_mut().zip(tags.iter_mut());
                let mut jobs: [SealJob<'_>; N] = std::array::from_fn(|i| {
                    let (data, tag) = it.next().expect("N buffers");
                    SealJob {
                        key: &gkeys[i],
                        nonce: nonces[i],
                        aad: &aad,
                        data,
                        tag,
                    }
                });
                f(black_box(&mut jobs));
            })
        });
    }
    g.finish();

    // Opening what was just sealed (every tag verifies): the multi-buffer kernel against the
    // default provider one packet at a time.
    use secrelay_srtp::simd::gcm::{open_many, OpenJob};
    let mut sealed: Vec<Vec<u8>> = Vec::new();
    for (i, k) in gprov.iter().enumerate() {
        let mut d = vec![7u8; 160];
        let mut t = [0u8; 16];
        k.seal(&nonces[i], &aad, &mut d, &mut t);
        d.extend_from_slice(&t);
        sealed.push(d);
    }
    let mut g = c.benchmark_group(format!("aes-128-gcm-open-batch/{N}x160"));
    g.throughput(Throughput::Elements(N as u64));
    let mut work = sealed.clone();
    g.bench_function("default provider, per packet", |b| {
        b.iter(|| {
            for ((k, n), (w, s)) in gprov.iter().zip(&nonces).zip(work.iter_mut().zip(&sealed)) {
                w.copy_from_slice(s);
                k.open(n, &aad, black_box(w)).expect("sealed here");
            }
        })
    });
    let name = if accelerated() {
        "open_many VAES+VPCLMULQDQ"
    } else {
        "open_many (portable fallback)"
    };
    let mut ok = [false; N];
    g.bench_function(name, |b| {
        b.iter(|| {
            let mut it = work.iter_mut().zip(&sealed);
            let mut jobs: [OpenJob<'_>; N] = std::array::from_fn(|i| {
                let (w, s) = it.next().expect("N buffers");
                w.copy_from_slice(s);
                let (data, tag) = w.split_at_mut(160);
                OpenJob {
                    key: &gkeys[i],
                    nonce: nonces[i],
                    aad: &aad,
                    data,
                    tag: (&*tag).try_into().expect("16 bytes"),
                }
            });
            open_many(black_box(&mut jobs), &mut ok);
        })
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .sample_size(20);
    targets = bench
}
criterion_main!(benches);
