//! The multi-buffer AES-GCM kernel gives exactly what RustCrypto's `aes-gcm` gives one packet
//! at a time (the SIMD path and the portable path both): the GCM specification's test cases
//! 1–4 and 13–16, every length 0..=64 with AAD 0..=64, random batches of mixed AES-128 and
//! AES-256 keys up to 1,500 bytes, long messages around every GHASH chunk and kernel pass
//! boundary (to 2,100 bytes of data, 1,100 of AAD). Open rejects a flipped bit of tag, AAD or
//! ciphertext and leaves that packet's data as given, while the rest of its batch opens.

use aes_gcm::aead::AeadInOut;
use aes_gcm::{Aes128Gcm, Aes256Gcm, KeyInit};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use secrelay_srtp::simd::gcm::{
    accelerated, open_many, open_many_portable, seal_many, seal_many_portable, GcmKey, OpenJob,
    SealJob,
};

type Seal = fn(&mut [SealJob<'_>]);
type Open = fn(&mut [OpenJob<'_>], &mut [bool]);
const PATHS: [(&str, Seal, Open); 2] = [
    ("best", seal_many, open_many),
    ("portable", seal_many_portable, open_many_portable),
];

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// The library, one packet.
fn reference(key: &[u8], nonce: &[u8; 12], aad: &[u8], data: &mut [u8]) -> [u8; 16] {
    let t = match key.len() {
        16 => Aes128Gcm::new_from_slice(key)
            .unwrap()
            .encrypt_inout_detached(nonce.into(), aad, data.into()),
        _ => Aes256Gcm::new_from_slice(key)
            .unwrap()
            .encrypt_inout_detached(nonce.into(), aad, data.into()),
    };
    t.unwrap().into()
}

/// A packet of a batch: key index, nonce, AAD, plaintext.
struct Pkt {
    k: usize,
    nonce: [u8; 12],
    aad: Vec<u8>,
    pt: Vec<u8>,
}

fn key_pool(rng: &mut StdRng) -> Vec<(Vec<u8>, GcmKey)> {
    (0..6)
        .map(|i| {
            let raw: Vec<u8> = (0..if i % 2 == 0 { 16 } else { 32 })
                .map(|_| rng.random())
                .collect();
            let k = GcmKey::new(&raw).unwrap();
            (raw, k)
        })
        .collect()
}

fn seal_batch(seal: Seal, keys: &[(Vec<u8>, GcmKey)], pkts: &[Pkt]) -> Vec<(Vec<u8>, [u8; 16])> {
    let mut out: Vec<(Vec<u8>, [u8; 16])> = pkts.iter().map(|p| (p.pt.clone(), [0; 16])).collect();
    let mut jobs: Vec<SealJob<'_>> = pkts
        .iter()
        .zip(out.iter_mut())
        .map(|(p, (d, t))| SealJob {
            key: &keys[p.k].1,
            nonce: p.nonce,
            aad: &p.aad,
            data: d,
            tag: t,
        })
        .collect();
    seal(&mut jobs);
    drop(jobs);
    out
}

/// Seals on every path and compares with the library; then opens the library's output on
/// every path, with some packets tampered with.
fn check(rng: &mut StdRng, keys: &[(Vec<u8>, GcmKey)], pkts: &[Pkt]) {
    let want: Vec<(Vec<u8>, [u8; 16])> = pkts
        .iter()
        .map(|p| {
            let mut d = p.pt.clone();
            let t = reference(&keys[p.k].0, &p.nonce, &p.aad, &mut d);
            (d, t)
        })
        .collect();
    for (name, seal, open) in PATHS {
        let got = seal_batch(seal, keys, pkts);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(
                g,
                w,
                "{name} seal: job {i} of {}, {}-bit key, aad {} bytes, data {} bytes",
                pkts.len(),
                keys[pkts[i].k].0.len() * 8,
                pkts[i].aad.len(),
                pkts[i].pt.len()
            );
        }
        // Tamper with about a third of the packets: one bit of tag, AAD or ciphertext.
        let mut data: Vec<Vec<u8>> = want.iter().map(|w| w.0.clone()).collect();
        let mut tags: Vec<[u8; 16]> = want.iter().map(|w| w.1).collect();
        let mut aads: Vec<Vec<u8>> = pkts.iter().map(|p| p.aad.clone()).collect();
        let mut bad = vec![false; pkts.len()];
        for i in 0..pkts.len() {
            if !rng.random_bool(0.35) {
                continue;
            }
            let bit = 1u8 << rng.random_range(0..8);
            match rng.random_range(0..3) {
                0 if !data[i].is_empty() => {
                    let at = rng.random_range(0..data[i].len());
                    data[i][at] ^= bit;
                }
                1 if !aads[i].is_empty() => {
                    let at = rng.random_range(0..aads[i].len());
                    aads[i][at] ^= bit;
                }
                _ => tags[i][rng.random_range(0..16)] ^= bit,
            }
            bad[i] = true;
        }
        let given = data.clone();
        let mut ok = vec![false; pkts.len()];
        {
            let mut jobs: Vec<OpenJob<'_>> = pkts
                .iter()
                .zip(data.iter_mut())
                .zip(tags.iter().zip(&aads))
                .map(|((p, d), (t, a))| OpenJob {
                    key: &keys[p.k].1,
                    nonce: p.nonce,
                    aad: a,
                    data: d,
                    tag: t,
                })
                .collect();
            open(&mut jobs, &mut ok);
        }
        for i in 0..pkts.len() {
            assert_eq!(ok[i], !bad[i], "{name} open: job {i} verdict");
            if bad[i] {
                assert_eq!(
                    data[i], given[i],
                    "{name} open: job {i} touched after failing"
                );
            } else {
                assert_eq!(data[i], pkts[i].pt, "{name} open: job {i} plaintext");
            }
        }
    }
}

fn random_pkt(rng: &mut StdRng, k: usize, len: usize, aad: usize) -> Pkt {
    Pkt {
        k,
        nonce: rng.random(),
        aad: (0..aad).map(|_| rng.random()).collect(),
        pt: (0..len).map(|_| rng.random()).collect(),
    }
}

#[test]
fn path_in_use() {
    eprintln!(
        "GCM SIMD path: {}",
        if accelerated() {
            "yes"
        } else {
            "no (portable path tested twice)"
        }
    );
    assert!(GcmKey::new(&[0; 16]).is_ok());
    assert!(GcmKey::new(&[0; 32]).is_ok());
    for n in [0, 12, 15, 17, 24, 31, 33] {
        assert!(GcmKey::new(&vec![0; n]).is_err(), "{n}-byte key");
    }
    let k = GcmKey::new(&[0xab; 32]).unwrap();
    assert_eq!(k.bits(), 256);
    assert_eq!(format!("{k:?}"), "GcmKey(256 bits)");
}

#[test]
fn gcm_spec_test_cases() {
    let p = concat!(
        "d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a72",
        "1c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b391aafd255"
    );
    let a = "feedfacedeadbeeffeedfacedeadbeefabaddad2";
    let k1 = "feffe9928665731c6d6a8f9467308308";
    let k2 = "feffe9928665731c6d6a8f9467308308feffe9928665731c6d6a8f9467308308";
    let iv = "cafebabefacedbaddecaf888";
    let z12 = "000000000000000000000000";
    // (key, nonce, aad, plaintext, ciphertext, tag): test cases 1–4 and 13–16.
    let cases: [(String, &str, &str, &str, &str, &str); 8] = [
        (
            "00".repeat(16),
            z12,
            "",
            "",
            "",
            "58e2fccefa7e3061367f1d57a4e7455a",
        ),
        (
            "00".repeat(16),
            z12,
            "",
            "00000000000000000000000000000000",
            "0388dace60b6a392f328c2b971b2fe78",
            "ab6e47d42cec13bdf53a67b21257bddf",
        ),
        (
            k1.into(),
            iv,
            "",
            p,
            concat!(
                "42831ec2217774244b7221b784d0d49ce3aa212f2c02a4e035c17e2329aca12e",
                "21d514b25466931c7d8f6a5aac84aa051ba30b396a0aac973d58e091473f5985"
            ),
            "4d5c2af327cd64a62cf35abd2ba6fab4",
        ),
        (
            k1.into(),
            iv,
            a,
            &p[..120],
            concat!(
                "42831ec2217774244b7221b784d0d49ce3aa212f2c02a4e035c17e2329aca12e",
                "21d514b25466931c7d8f6a5aac84aa051ba30b396a0aac973d58e091"
            ),
            "5bc94fbc3221a5db94fae95ae7121a47",
        ),
        (
            "00".repeat(32),
            z12,
            "",
            "",
            "",
            "530f8afbc74536b9a963b4f1c4cb738b",
        ),
        (
            "00".repeat(32),
            z12,
            "",
            "00000000000000000000000000000000",
            "cea7403d4d606b6e074ec5d3baf39d18",
            "d0d1c8a799996bf0265b98b5d48ab919",
        ),
        (
            k2.into(),
            iv,
            "",
            p,
            concat!(
                "522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa",
                "8cb08e48590dbb3da7b08b1056828838c5f61e6393ba7a0abcc9f662898015ad"
            ),
            "b094dac5d93471bdec1a502270e3cc6c",
        ),
        (
            k2.into(),
            iv,
            a,
            &p[..120],
            concat!(
                "522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa",
                "8cb08e48590dbb3da7b08b1056828838c5f61e6393ba7a0abcc9f662"
            ),
            "76fc6ece0f4e1768cddf8853bb2d551b",
        ),
    ];
    let keys: Vec<GcmKey> = cases
        .iter()
        .map(|c| GcmKey::new(&hex(&c.0)).unwrap())
        .collect();
    let aads: Vec<Vec<u8>> = cases.iter().map(|c| hex(c.2)).collect();
    for (name, seal, open) in PATHS {
        // All eight in one batch, then each alone.
        let mut data: Vec<Vec<u8>> = cases.iter().map(|c| hex(c.3)).collect();
        let mut tags = vec![[0u8; 16]; cases.len()];
        let mut jobs: Vec<SealJob<'_>> = (0..cases.len())
            .zip(data.iter_mut().zip(tags.iter_mut()))
            .map(|(i, (d, t))| SealJob {
                key: &keys[i],
                nonce: hex(cases[i].1).try_into().unwrap(),
                aad: &aads[i],
                data: d,
                tag: t,
            })
            .collect();
        seal(&mut jobs);
        drop(jobs);
        for (i, c) in cases.iter().enumerate() {
            assert_eq!(data[i], hex(c.4), "{name}: case {i} ciphertext");
            assert_eq!(tags[i][..], hex(c.5)[..], "{name}: case {i} tag");
            let mut one = hex(c.3);
            let mut tag = [0u8; 16];
            seal(&mut [SealJob {
                key: &keys[i],
                nonce: hex(c.1).try_into().unwrap(),
                aad: &aads[i],
                data: &mut one,
                tag: &mut tag,
            }]);
            assert_eq!(
                (one, tag.to_vec()),
                (hex(c.4), hex(c.5)),
                "{name}: case {i} alone"
            );
        }
        let mut ok = vec![false; cases.len()];
        let mut jobs: Vec<OpenJob<'_>> = (0..cases.len())
            .zip(data.iter_mut().zip(tags.iter()))
            .map(|(i, (d, t))| OpenJob {
                key: &keys[i],
                nonce: hex(cases[i].1).try_into().unwrap(),
                aad: &aads[i],
                data: d,
                tag: t,
            })
            .collect();
        open(&mut jobs, &mut ok);
        drop(jobs);
        assert!(ok.iter().all(|&o| o), "{name}: open {ok:?}");
        for (i, c) in cases.iter().enumerate() {
            assert_eq!(data[i], hex(c.3), "{name}: case {i} opened");
        }
    }
}

#[test]
fn every_length_to_64_with_every_aad_length() {
    let mut rng = StdRng::seed_from_u64(11);
    let keys = key_pool(&mut rng);
    for aad in 0..=64 {
        let pkts: Vec<Pkt> = (0..=64)
            .map(|len| {
                let k = rng.random_range(0..keys.len());
                random_pkt(&mut rng, k, len, aad)
            })
            .collect();
        check(&mut rng, &keys, &pkts);
    }
}

#[test]
fn random_batches_match_the_library() {
    let mut rng = StdRng::seed_from_u64(12);
    let keys = key_pool(&mut rng);
    for _ in 0..300 {
        let n = rng.random_range(1..=40);
        let one_key = rng.random_bool(0.3);
        let k0 = rng.random_range(0..keys.len());
        let pkts: Vec<Pkt> = (0..n)
            .map(|_| {
                let len = match rng.random_range(0..4) {
                    0 => 160,
                    1 => rng.random_range(0..=64),
                    _ => rng.random_range(0..=1500),
                };
                let aad = match rng.random_range(0..3) {
                    0 => 12,
                    _ => rng.random_range(0..=64),
                };
                let k = if one_key {
                    k0
                } else {
                    rng.random_range(0..keys.len())
                };
                random_pkt(&mut rng, k, len, aad)
            })
            .collect();
        check(&mut rng, &keys, &pkts);
    }
}

#[test]
fn batches_larger_than_one_pass() {
    // More jobs than one pass of the kernel holds (64), and AAD longer than one GHASH group.
    let mut rng = StdRng::seed_from_u64(13);
    let keys = key_pool(&mut rng);
    let pkts: Vec<Pkt> = (0..150)
        .map(|i| {
            let k = rng.random_range(0..keys.len());
            random_pkt(&mut rng, k, 160 + i, if i % 10 == 0 { 300 } else { 12 })
        })
        .collect();
    check(&mut rng, &keys, &pkts);
}

#[test]
fn long_messages_across_hash_chunks_and_passes() {
    // Messages past 32 blocks are hashed in chunks of up to eight loads of four blocks, and
    // data past 512 bytes goes through the counter-mode kernel eight registers at a time:
    // lengths around each of those boundaries, AAD from none to several loads (a long header
    // extension with no payload as well), in one batch of 180 packets (~115 KB: several passes
    // of at most 64 jobs and 16 KiB), then in video-sized batches mixed with audio-sized ones.
    let mut rng = StdRng::seed_from_u64(14);
    let keys = key_pool(&mut rng);
    let mut pkts = Vec::new();
    for aad in [0, 1, 12, 16, 60, 64, 65, 200, 520, 1100] {
        for len in [
            0, 1, 400, 447, 448, 449, 496, 511, 512, 513, 1023, 1024, 1025, 1180, 1188, 1200, 1500,
            2100,
        ] {
            let k = rng.random_range(0..keys.len());
            pkts.push(random_pkt(&mut rng, k, len, aad));
        }
    }
    check(&mut rng, &keys, &pkts);
    for _ in 0..40 {
        let n = rng.random_range(1..=100);
        let pkts: Vec<Pkt> = (0..n)
            .map(|_| {
                let len = match rng.random_range(0..8) {
                    0 => rng.random_range(40..200),
                    1 => rng.random_range(200..1100),
                    _ => rng.random_range(1100..1400),
                };
                let aad = [12, 16, 24, 36][rng.random_range(0..4)];
                let k = rng.random_range(0..keys.len());
                random_pkt(&mut rng, k, len, aad)
            })
            .collect();
        check(&mut rng, &keys, &pkts);
    }
}

#[test]
#[should_panic(expected = "one result per job")]
fn results_slice_must_match() {
    let k = GcmKey::new(&[1; 16]).unwrap();
    let mut d = [0u8; 4];
    open_many(
        &mut [OpenJob {
            key: &k,
            nonce: [0; 12],
            aad: &[],
            data: &mut d,
            tag: &[0; 16],
        }],
        &mut [],
    );
}
