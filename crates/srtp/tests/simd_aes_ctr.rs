//! The multi-buffer AES-CTR kernel gives exactly what RustCrypto's `aes` + `ctr` give one
//! packet at a time, on every backend this CPU runs: every length 0..=64, random lengths up to
//! 1,500, random batches of mixed AES-128 and AES-256 keys, counters that carry across 64 bits
//! and wrap at 2^128; and the NIST SP 800-38A and RFC 3711 known answers.

use ctr::cipher::{KeyIvInit, StreamCipher};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use secrelay_srtp::simd::aes_ctr::{
    accelerated, apply_keystreams, apply_keystreams_portable, apply_keystreams_with, backend,
    AesKey, Backend, CtrJob,
};

const BACKENDS: [Backend; 3] = [Backend::Vaes, Backend::AesNi, Backend::Portable];

fn reference(key: &[u8], iv: &[u8; 16], data: &mut [u8]) {
    match key.len() {
        16 => ctr::Ctr128BE::<aes::Aes128>::new_from_slices(key, iv)
            .unwrap()
            .apply_keystream(data),
        _ => ctr::Ctr128BE::<aes::Aes256>::new_from_slices(key, iv)
            .unwrap()
            .apply_keystream(data),
    }
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// An IV: random, or one whose low 64 bits (or all 128) are about to carry.
fn iv(rng: &mut StdRng) -> [u8; 16] {
    let mut iv: [u8; 16] = rng.random();
    match rng.random_range(0..6) {
        0 => iv[8..].iter_mut().for_each(|b| *b = 0xff),
        1 => iv.iter_mut().for_each(|b| *b = 0xff),
        2 => iv[12..].iter_mut().for_each(|b| *b = 0xff),
        _ => {}
    }
    if rng.random_bool(0.5) {
        iv[15] = iv[15].wrapping_sub(rng.random_range(0..8));
    }
    iv
}

/// Runs one batch (key index, iv, data) through `backend` and through the library, and
/// compares.
fn check(backend: Backend, keys: &[(Vec<u8>, AesKey)], batch: &[(usize, [u8; 16], Vec<u8>)]) {
    let mut got: Vec<Vec<u8>> = batch.iter().map(|b| b.2.clone()).collect();
    {
        let mut jobs: Vec<CtrJob<'_>> = batch
            .iter()
            .zip(got.iter_mut())
            .map(|((k, iv, _), d)| CtrJob {
                key: &keys[*k].1,
                iv: *iv,
                data: d,
            })
            .collect();
        apply_keystreams_with(backend, &mut jobs);
    }
    for (i, (k, iv, data)) in batch.iter().enumerate() {
        let mut want = data.clone();
        reference(&keys[*k].0, iv, &mut want);
        assert_eq!(
            got[i],
            want,
            "{backend:?}: job {i} of {}, {}-bit key, {} bytes, iv {iv:02x?}",
            batch.len(),
            keys[*k].0.len() * 8,
            data.len()
        );
    }
}

fn key_pool(rng: &mut StdRng) -> Vec<(Vec<u8>, AesKey)> {
    (0..6)
        .map(|i| {
            let raw: Vec<u8> = (0..if i % 2 == 0 { 16 } else { 32 })
                .map(|_| rng.random())
                .collect();
            let k = AesKey::new(&raw).unwrap();
            (raw, k)
        })
        .collect()
}

#[test]
fn backends_available() {
    eprintln!(
        "best backend: {:?} (accelerated: {})",
        backend(),
        accelerated()
    );
    assert_eq!(accelerated(), backend() != Backend::Portable);
}

#[test]
fn key_lengths() {
    assert!(AesKey::new(&[0; 16]).is_ok());
    assert!(AesKey::new(&[0; 32]).is_ok());
    for n in [0, 1, 15, 17, 24, 31, 33, 64] {
        assert!(AesKey::new(&vec![0; n]).is_err(), "{n}-byte key");
    }
    assert_eq!(AesKey::new(&[0; 16]).unwrap().bits(), 128);
    assert_eq!(AesKey::new(&[0; 32]).unwrap().bits(), 256);
    assert_eq!(
        format!("{:?}", AesKey::new(&[0xab; 16]).unwrap()),
        "AesKey(128 bits)"
    );
}

#[test]
fn nist_sp800_38a_ctr() {
    let pt = hex(concat!(
        "6bc1bee22e409f96e93d7e117393172a",
        "ae2d8a571e03ac9c9eb76fac45af8e51",
        "30c81c46a35ce411e5fbc1191a0a52ef",
        "f69f2445df4f9b17ad2b417be66c3710"
    ));
    let iv: [u8; 16] = hex("f0f1f2f3f4f5f6f7f8f9fafbfcfdfeff").try_into().unwrap();
    let cases = [
        (
            "2b7e151628aed2a6abf7158809cf4f3c",
            concat!(
                "874d6191b620e3261bef6864990db6ce",
                "9806f66b7970fdff8617187bb9fffdff",
                "5ae4df3edbd5d35e5b4f09020db03eab",
                "1e031dda2fbe03d1792170a0f3009cee"
            ),
        ),
        (
            "603deb1015ca71be2b73aef0857d77811f352c073b6108d72d9810a30914dff4",
            concat!(
                "601ec313775789a5b7a7f504bbf3d228",
                "f443e3ca4d62b59aca84e990cacaf5c5",
                "2b0930daa23de94ce87017ba2d84988d",
                "dfc9c58db67aada613c2dd08457941a6"
            ),
        ),
    ];
    for b in BACKENDS {
        for (key, ct) in cases {
            let k = AesKey::new(&hex(key)).unwrap();
            let mut data = pt.clone();
            apply_keystreams_with(
                b,
                &mut [CtrJob {
                    key: &k,
                    iv,
                    data: &mut data,
                }],
            );
            assert_eq!(data, hex(ct), "{b:?}");
        }
    }
}

#[test]
fn rfc3711_aes_cm_keystream() {
    // RFC 3711 B.2: session key and IV, keystream segments 0–2 and 0xfeff–0xff01.
    let k = AesKey::new(&hex("2b7e151628aed2a6abf7158809cf4f3c")).unwrap();
    let iv: [u8; 16] = hex("f0f1f2f3f4f5f6f7f8f9fafbfcfd0000").try_into().unwrap();
    for b in BACKENDS {
        let mut data = vec![0u8; 16 * 0xff02];
        apply_keystreams_with(
            b,
            &mut [CtrJob {
                key: &k,
                iv,
                data: &mut data,
            }],
        );
        assert_eq!(
            data[..48],
            hex(concat!(
                "e03ead0935c95e80e166b16dd92b4eb4",
                "d23513162b02d0f72a43a2fe4a5f97ab",
                "41e95b3bb0a2e8dd477901e4fca894c0"
            ))[..],
            "{b:?}"
        );
        assert_eq!(
            data[16 * 0xfeff..],
            hex(concat!(
                "ec8cdf7398607cb0f2d21675ea9ea1e4",
                "362b7c3c6773516318a077d7fc5073ae",
                "6a2cc3787889374fbeb4c81b17ba6c44"
            ))[..],
            "{b:?}"
        );
    }
}

#[test]
fn every_length_to_64_in_one_batch() {
    let mut rng = StdRng::seed_from_u64(1);
    let keys = key_pool(&mut rng);
    for b in BACKENDS {
        for round in 0..4 {
            let batch: Vec<_> = (0..=64usize)
                .map(|len| {
                    // Rounds 0 and 1: one key size per batch; then mixed.
                    let k = match round {
                        0 => 2 * rng.random_range(0..3),
                        1 => 2 * rng.random_range(0..3) + 1,
                        _ => rng.random_range(0..keys.len()),
                    };
                    let data = (0..len).map(|_| rng.random()).collect();
                    (k, iv(&mut rng), data)
                })
                .collect();
            check(b, &keys, &batch);
        }
    }
}

#[test]
fn random_batches_match_the_library() {
    let mut rng = StdRng::seed_from_u64(2);
    let keys = key_pool(&mut rng);
    for _ in 0..300 {
        let n = rng.random_range(1..=40);
        let one_key = rng.random_bool(0.3);
        let k0 = rng.random_range(0..keys.len());
        let batch: Vec<_> = (0..n)
            .map(|_| {
                let len = match rng.random_range(0..4) {
                    0 => 160,
                    1 => rng.random_range(0..=64),
                    _ => rng.random_range(0..=1500),
                };
                let k = if one_key {
                    k0
                } else {
                    rng.random_range(0..keys.len())
                };
                (k, iv(&mut rng), (0..len).map(|_| rng.random()).collect())
            })
            .collect();
        for b in BACKENDS {
            check(b, &keys, &batch);
        }
    }
}

#[test]
fn default_entry_points_agree() {
    let mut rng = StdRng::seed_from_u64(3);
    let keys = key_pool(&mut rng);
    let data: Vec<Vec<u8>> = (0..17)
        .map(|i| (0..100 * i).map(|_| rng.random()).collect())
        .collect();
    let ivs: Vec<[u8; 16]> = (0..17).map(|_| iv(&mut rng)).collect();
    let run = |f: fn(&mut [CtrJob<'_>])| {
        let mut d = data.clone();
        let mut jobs: Vec<CtrJob<'_>> = d
            .iter_mut()
            .enumerate()
            .map(|(i, d)| CtrJob {
                key: &keys[i % keys.len()].1,
                iv: ivs[i],
                data: d,
            })
            .collect();
        f(&mut jobs);
        drop(jobs);
        d
    };
    assert_eq!(run(apply_keystreams), run(apply_keystreams_portable));
    assert_ne!(run(apply_keystreams), data);
}
