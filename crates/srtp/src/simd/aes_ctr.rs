//! AES-CTR keystreams for many packets at once, each packet with its own key and counter
//! (SRTP's AES-CM, RFC 3711 §4.1.1: a 128-bit big-endian counter starting at the packet's IV).
//!
//! One packet of 160 bytes is only ten AES blocks: encrypted one packet at a time, the AES
//! pipeline (several cycles of latency per round, one or two rounds issued per cycle) stays
//! mostly empty. Here the counter blocks of many packets are gathered into one array, 32 at a
//! time, and encrypted together, every block with its own packet's round keys: with VAES a
//! round is one instruction per four blocks, eight such registers in flight. The keystream is
//! then XORed back into each packet.
//!
//! [`apply_keystreams`] picks the fastest [`Backend`] this CPU has: VAES on 512-bit registers
//! (AVX-512F + VAES), else AES-NI on 128-bit registers (eight blocks in flight), else the
//! portable path, one packet at a time through RustCrypto's `aes` and `ctr` crates. All of
//! them give identical output; the tests check the SIMD paths against the library.
#![allow(unsafe_code)]

use aes::cipher::{InnerIvInit, KeyInit, StreamCipher};
use aes::{Aes128Enc, Aes256Enc};
use zeroize::{Zeroize, ZeroizeOnDrop};

use crate::provider::KeyError;

/// Counter blocks encrypted per pass of the round loop (eight 512-bit registers).
const CHUNK: usize = 32;

/// Expanded round keys, FIPS 197 §5.2, round `r` in bytes `16r..16r + 16` (the byte order the
/// AES instructions take).
#[derive(Clone, Zeroize)]
#[repr(C, align(64))]
struct RoundKeys([[u8; 16]; 15]);

/// The library's key schedule, for the portable path.
enum Lib {
    A128(Aes128Enc),
    A256(Aes256Enc),
}

/// An AES-128 or AES-256 encryption key, expanded once for every backend. Wiped on drop.
pub struct AesKey {
    /// Valid when the CPU has AES-NI (the SIMD backends are only used then).
    rk: RoundKeys,
    /// 10 (AES-128) or 14 (AES-256).
    rounds: usize,
    lib: Lib,
}

impl AesKey {
    /// Expands a 16-byte (AES-128) or 32-byte (AES-256) key.
    pub fn new(key: &[u8]) -> Result<Self, KeyError> {
        let lib = match key.len() {
            16 => Lib::A128(Aes128Enc::new_from_slice(key).map_err(|_| KeyError("AES-128 key"))?),
            32 => Lib::A256(Aes256Enc::new_from_slice(key).map_err(|_| KeyError("AES-256 key"))?),
            _ => return Err(KeyError("AES keys are 16 or 32 bytes")),
        };
        let mut rk = RoundKeys([[0; 16]; 15]);
        #[cfg(target_arch = "x86_64")]
        if aesni_present() {
            // SAFETY: the CPU has AES-NI (checked just above), the only target feature of
            // `expand`.
            unsafe { x86::expand(key, &mut rk) };
        }
        Ok(Self {
            rk,
            rounds: key.len() / 4 + 6,
            lib,
        })
    }

    /// Key length in bits (128 or 256).
    pub fn bits(&self) -> usize {
        match self.rounds {
            10 => 128,
            _ => 256,
        }
    }

    /// Encrypts one block (GCM's hash key and tag mask).
    pub(crate) fn encrypt_block(&self, block: &mut [u8; 16]) {
        let mut one = [(self, OneBlock(block))];
        run(&mut one[..], backend());
    }
}

impl Zeroize for AesKey {
    /// Wipes the round keys; the library's schedule is replaced by the all-zero key's (the old
    /// one wipes itself on drop).
    fn zeroize(&mut self) {
        self.rk.zeroize();
        self.lib = match self.lib {
            Lib::A128(_) => Lib::A128(Aes128Enc::new(&Default::default())),
            Lib::A256(_) => Lib::A256(Aes256Enc::new(&Default::default())),
        };
    }
}

impl Drop for AesKey {
    fn drop(&mut self) {
        // `lib` wipes itself (the `aes` crate's `zeroize` feature).
        self.rk.zeroize();
    }
}

impl ZeroizeOnDrop for AesKey {}

/// One packet's keystream: `data ^= AES-CTR(key, iv)`.
pub struct CtrJob<'a> {
    /// The packet's key.
    pub key: &'a AesKey,
    /// The first counter block (SRTP's IV); block `j` uses `iv + j` mod 2^128, big-endian.
    pub iv: [u8; 16],
    /// Encrypted or decrypted in place.
    pub data: &'a mut [u8],
}

/// Which code encrypts the blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// VAES on 512-bit registers (AVX-512F + VAES + AES-NI): four blocks per instruction.
    Vaes,
    /// AES-NI on 128-bit registers, eight blocks in flight.
    AesNi,
    /// RustCrypto's `aes` + `ctr`, one packet at a time.
    Portable,
}

#[cfg(target_arch = "x86_64")]
fn aesni_present() -> bool {
    std::arch::is_x86_feature_detected!("aes") && std::arch::is_x86_feature_detected!("sse2")
}

#[cfg(target_arch = "x86_64")]
fn vaes_present() -> bool {
    aesni_present()
        && std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("vaes")
}

/// The fastest backend this CPU runs.
pub fn backend() -> Backend {
    #[cfg(target_arch = "x86_64")]
    {
        if vaes_present() {
            return Backend::Vaes;
        }
        if aesni_present() {
            return Backend::AesNi;
        }
    }
    Backend::Portable
}

/// Whether a SIMD backend (VAES or AES-NI) runs on this CPU.
pub fn accelerated() -> bool {
    backend() != Backend::Portable
}

/// XORs each job's keystream (128-bit big-endian counter starting at `iv`, as SRTP's AES-CM)
/// into its data, on the fastest backend.
pub fn apply_keystreams(jobs: &mut [CtrJob<'_>]) {
    run(jobs, backend());
}

/// [`apply_keystreams`] on the backend asked for; one this CPU lacks runs the portable code
/// instead (so every backend can be compared with the others).
pub fn apply_keystreams_with(backend: Backend, jobs: &mut [CtrJob<'_>]) {
    run(jobs, backend);
}

/// [`apply_keystreams`] one job at a time through the `aes` and `ctr` crates (the reference
/// the tests check the SIMD backends against).
pub fn apply_keystreams_portable(jobs: &mut [CtrJob<'_>]) {
    run(jobs, Backend::Portable);
}

/// Keystreams to XOR, as the kernel sees them (CTR jobs, and GCM's pieces).
pub(crate) trait Streams<'k> {
    /// Number of streams.
    fn count(&self) -> usize;
    /// Key of stream `i`.
    fn key(&self, i: usize) -> &'k AesKey;
    /// First counter block of stream `i`, and whether only its low 32 bits count (GCM's
    /// `inc32`) rather than all 128.
    fn counter(&self, i: usize) -> ([u8; 16], bool);
    /// Bytes to XOR in stream `i`.
    fn len(&self, i: usize) -> usize;
    /// The bytes of stream `i`.
    fn buf(&mut self, i: usize) -> &mut [u8];
}

impl<'k> Streams<'k> for [CtrJob<'k>] {
    fn count(&self) -> usize {
        <[CtrJob<'k>]>::len(self)
    }
    fn key(&self, i: usize) -> &'k AesKey {
        self[i].key
    }
    fn counter(&self, i: usize) -> ([u8; 16], bool) {
        (self[i].iv, false)
    }
    fn len(&self, i: usize) -> usize {
        self[i].data.len()
    }
    fn buf(&mut self, i: usize) -> &mut [u8] {
        self[i].data
    }
}

/// A single block encrypted in place (counter = the block, XORed into zeros).
struct OneBlock<'b>(&'b mut [u8; 16]);

impl<'k> Streams<'k> for [(&'k AesKey, OneBlock<'_>)] {
    fn count(&self) -> usize {
        <[_]>::len(self)
    }
    fn key(&self, i: usize) -> &'k AesKey {
        self[i].0
    }
    fn counter(&self, i: usize) -> ([u8; 16], bool) {
        (*self[i].1 .0, false)
    }
    fn len(&self, _: usize) -> usize {
        16
    }
    fn buf(&mut self, i: usize) -> &mut [u8] {
        let b = &mut *self[i].1 .0;
        b.fill(0);
        b
    }
}

/// Runs every stream of `s` on `backend` (the portable code where the CPU lacks it).
pub(crate) fn run<'k, S: Streams<'k> + ?Sized>(s: &mut S, backend: Backend) {
    #[cfg(target_arch = "x86_64")]
    {
        let simd = match backend {
            Backend::Vaes if vaes_present() => Some(true),
            Backend::AesNi | Backend::Vaes if aesni_present() => Some(false),
            _ => None,
        };
        if let Some(vaes) = simd {
            x86::run(s, vaes);
            return;
        }
    }
    let _ = backend;
    for i in 0..s.count() {
        let key = s.key(i);
        let (iv, inc32) = s.counter(i);
        let data = s.buf(i);
        portable(key, &iv, inc32, data);
    }
}

/// One stream through the library.
fn portable(key: &AesKey, iv: &[u8; 16], inc32: bool, data: &mut [u8]) {
    // The expanded key schedule is copied, not recomputed.
    match (&key.lib, inc32) {
        (Lib::A128(k), false) => {
            ctr::Ctr128BE::<Aes128Enc>::from_core(ctr::CtrCore::inner_iv_init(k.clone(), iv.into()))
                .apply_keystream(data)
        }
        (Lib::A256(k), false) => {
            ctr::Ctr128BE::<Aes256Enc>::from_core(ctr::CtrCore::inner_iv_init(k.clone(), iv.into()))
                .apply_keystream(data)
        }
        (Lib::A128(k), true) => {
            ctr::Ctr32BE::<Aes128Enc>::from_core(ctr::CtrCore::inner_iv_init(k.clone(), iv.into()))
                .apply_keystream(data)
        }
        (Lib::A256(k), true) => {
            ctr::Ctr32BE::<Aes256Enc>::from_core(ctr::CtrCore::inner_iv_init(k.clone(), iv.into()))
                .apply_keystream(data)
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use core::arch::x86_64::*;

    use zeroize::Zeroize;

    use super::{RoundKeys, Streams, CHUNK};

    /// `SubWord` of FIPS 197 (the S-box on each byte) with the AES instruction: with four equal
    /// columns ShiftRows changes nothing, so AESENCLAST with a zero round key is SubBytes.
    #[target_feature(enable = "aes,sse2")]
    fn sub_word(w: u32) -> u32 {
        let s = _mm_aesenclast_si128(_mm_set1_epi32(w as i32), _mm_setzero_si128());
        _mm_cvtsi128_si32(s) as u32
    }

    /// FIPS 197 §5.2 key expansion (16- or 32-byte key). Words are kept little-endian so that
    /// their bytes lie in memory in the standard order; the S-box runs on the AES unit, so no
    /// key-dependent table lookups.
    #[target_feature(enable = "aes,sse2")]
    pub(super) fn expand(key: &[u8], rk: &mut RoundKeys) {
        let nk = key.len() / 4;
        let nr = nk + 6;
        let mut w = [0u32; 60];
        for (wi, k) in w.iter_mut().zip(key.chunks_exact(4)) {
            *wi = u32::from_le_bytes([k[0], k[1], k[2], k[3]]);
        }
        let mut rcon = 1u32;
        for i in nk..4 * (nr + 1) {
            let mut t = w[i - 1];
            if i % nk == 0 {
                // RotWord is a rotation by one byte towards the first.
                t = sub_word(t.rotate_right(8)) ^ rcon;
                rcon = if rcon & 0x80 != 0 {
                    (rcon << 1) ^ 0x11b
                } else {
                    rcon << 1
                };
            } else if nk > 6 && i % nk == 4 {
                t = sub_word(t);
            }
            w[i] = w[i - nk] ^ t;
        }
        for (r, out) in rk.0.iter_mut().enumerate().take(nr + 1) {
            for c in 0..4 {
                out[4 * c..4 * c + 4].copy_from_slice(&w[4 * r + c].to_le_bytes());
            }
        }
        w.zeroize();
    }

    /// Counter blocks gathered for one pass, and where their keystream goes.
    #[repr(C, align(64))]
    struct Chunk {
        blocks: [[u8; 16]; CHUNK],
        /// Round keys of each block (the first block's for unused slots).
        keys: [*const [u8; 16]; CHUNK],
        n: usize,
        /// (stream, byte offset in it, first block in `blocks`, blocks): one per piece.
        runs: [(usize, usize, usize, usize); CHUNK],
        nruns: usize,
    }

    /// Gathers the counter blocks of every stream, 32 at a time, encrypts them with each
    /// block's own round keys, and XORs the keystream back. AES-128 and AES-256 streams go in
    /// separate passes (different round counts).
    pub(super) fn run<'k, S: Streams<'k> + ?Sized>(s: &mut S, vaes: bool) {
        let mut c = Chunk {
            blocks: [[0; 16]; CHUNK],
            keys: [core::ptr::null(); CHUNK],
            n: 0,
            runs: [(0, 0, 0, 0); CHUNK],
            nruns: 0,
        };
        for rounds in [10, 14] {
            for i in 0..s.count() {
                let key = s.key(i);
                if key.rounds != rounds {
                    continue;
                }
                let rk: *const [u8; 16] = key.rk.0.as_ptr();
                let (iv, inc32) = s.counter(i);
                let base = u128::from_be_bytes(iv);
                let mask = if inc32 { 0xffff_ffff } else { u128::MAX };
                let nblocks = s.len(i).div_ceil(16);
                let mut j = 0;
                while j < nblocks {
                    let take = (nblocks - j).min(CHUNK - c.n);
                    for t in 0..take {
                        let ctr = (base & !mask) | (base.wrapping_add((j + t) as u128) & mask);
                        c.blocks[c.n + t] = ctr.to_be_bytes();
                        c.keys[c.n + t] = rk;
                    }
                    c.runs[c.nruns] = (i, 16 * j, c.n, take);
                    c.nruns += 1;
                    c.n += take;
                    j += take;
                    if c.n == CHUNK {
                        flush(s, &mut c, rounds, vaes);
                    }
                }
            }
            if c.n > 0 {
                flush(s, &mut c, rounds, vaes);
            }
        }
        // The keystream left in `c.blocks` is not wiped: it is no secret once the ciphertext is
        // out (ciphertext XOR plaintext), and wiping 512 bytes costs more than the XOR.
    }

    /// Encrypts the gathered blocks and XORs them into their streams.
    fn flush<'k, S: Streams<'k> + ?Sized>(s: &mut S, c: &mut Chunk, rounds: usize, vaes: bool) {
        let n = c.n;
        for k in n..CHUNK {
            c.keys[k] = c.keys[0];
        }
        let (blocks, keys) = (&mut c.blocks, &c.keys);
        // SAFETY: `run` is only called with `vaes` when the CPU has AVX-512F, VAES and AES-NI,
        // and otherwise when it has AES-NI and SSE2 (`super::run` checks): the target features
        // of the kernels. Every pointer in `keys` points at the 15 round keys of an `AesKey`
        // borrowed for 'k (a stream's key), read up to round `rounds` ≤ 14.
        unsafe {
            match (vaes, rounds) {
                (true, 10) => vaes_dispatch::<10>(blocks, keys, n),
                (true, _) => vaes_dispatch::<14>(blocks, keys, n),
                (false, 10) => aesni_chunk::<10>(blocks, keys, n),
                (false, _) => aesni_chunk::<14>(blocks, keys, n),
            }
        }
        let ks = c.blocks.as_flattened();
        for &(i, off, first, nb) in &c.runs[..c.nruns] {
            let buf = s.buf(i);
            let end = buf.len().min(off + 16 * nb);
            let src = &ks[16 * first..16 * first + (end - off)];
            for (d, k) in buf[off..end].iter_mut().zip(src) {
                *d ^= k;
            }
        }
        c.n = 0;
        c.nruns = 0;
    }

    /// # Safety
    /// AVX-512F, VAES and AES-NI; `keys` as in [`vaes_chunk`].
    #[target_feature(enable = "avx512f,vaes,aes")]
    unsafe fn vaes_dispatch<const NR: usize>(
        blocks: &mut [[u8; 16]; CHUNK],
        keys: &[*const [u8; 16]; CHUNK],
        n: usize,
    ) {
        // SAFETY: forwarded contract; only the registers holding the first `n` blocks run.
        unsafe {
            match n.div_ceil(4) {
                0 => {}
                1 => vaes_chunk::<NR, 1>(blocks, keys),
                2 => vaes_chunk::<NR, 2>(blocks, keys),
                3 => vaes_chunk::<NR, 3>(blocks, keys),
                4 => vaes_chunk::<NR, 4>(blocks, keys),
                5 => vaes_chunk::<NR, 5>(blocks, keys),
                6 => vaes_chunk::<NR, 6>(blocks, keys),
                7 => vaes_chunk::<NR, 7>(blocks, keys),
                _ => vaes_chunk::<NR, 8>(blocks, keys),
            }
        }
    }

    /// Round key `r` of the four blocks of register `z`: one broadcast when they share a key
    /// (most registers), else one 128-bit lane per block.
    macro_rules! lane_keys {
        ($keys:expr, $uniform:expr, $z:expr, $r:expr) => {{
            let k = $keys;
            let z = $z;
            // SAFETY (caller): each `keys` entry points at 15 round keys and `$r` ≤ 14.
            let mut v = _mm512_broadcast_i32x4(unsafe {
                _mm_loadu_si128(k[4 * z].add($r) as *const __m128i)
            });
            if !$uniform[z] {
                // SAFETY: as above.
                unsafe {
                    v = _mm512_mask_broadcast_i32x4(
                        v,
                        0x00f0,
                        _mm_loadu_si128(k[4 * z + 1].add($r) as *const __m128i),
                    );
                    v = _mm512_mask_broadcast_i32x4(
                        v,
                        0x0f00,
                        _mm_loadu_si128(k[4 * z + 2].add($r) as *const __m128i),
                    );
                    v = _mm512_mask_broadcast_i32x4(
                        v,
                        0xf000,
                        _mm_loadu_si128(k[4 * z + 3].add($r) as *const __m128i),
                    );
                }
            }
            v
        }};
    }

    /// Encrypts blocks `0..4Z` in place, `NR` rounds, block `b` with the round keys at
    /// `keys[b]`.
    ///
    /// # Safety
    /// AVX-512F, VAES and AES-NI; every `keys[b]` for `b < 4Z` points at 15 readable round keys.
    #[target_feature(enable = "avx512f,vaes,aes")]
    unsafe fn vaes_chunk<const NR: usize, const Z: usize>(
        blocks: &mut [[u8; 16]; CHUNK],
        keys: &[*const [u8; 16]; CHUNK],
    ) {
        let p = blocks.as_mut_ptr() as *mut __m512i;
        let mut st = [_mm512_setzero_si512(); Z];
        let mut uniform = [true; Z];
        for z in 0..Z {
            uniform[z] = keys[4 * z] == keys[4 * z + 1]
                && keys[4 * z] == keys[4 * z + 2]
                && keys[4 * z] == keys[4 * z + 3];
            // Four 128-bit loads, not one 512-bit load: the counters were just written block by
            // block, and a load spanning several pending stores cannot be forwarded from them.
            let q = blocks.as_ptr() as *const __m128i;
            // SAFETY: register z covers blocks 4z..4z + 4 of the 32-block array (Z ≤ 8).
            let b = unsafe {
                let b = _mm512_castsi128_si512(_mm_loadu_si128(q.add(4 * z)));
                let b = _mm512_inserti32x4::<1>(b, _mm_loadu_si128(q.add(4 * z + 1)));
                let b = _mm512_inserti32x4::<2>(b, _mm_loadu_si128(q.add(4 * z + 2)));
                _mm512_inserti32x4::<3>(b, _mm_loadu_si128(q.add(4 * z + 3)))
            };
            st[z] = _mm512_xor_si512(b, lane_keys!(keys, uniform, z, 0));
        }
        for r in 1..NR {
            for z in 0..Z {
                st[z] = _mm512_aesenc_epi128(st[z], lane_keys!(keys, uniform, z, r));
            }
        }
        for z in 0..Z {
            let v = _mm512_aesenclast_epi128(st[z], lane_keys!(keys, uniform, z, NR));
            // SAFETY: as the load above, into the exclusively borrowed array.
            unsafe { _mm512_storeu_si512(p.add(z) as *mut _, v) };
        }
    }

    /// Encrypts blocks `0..n` in place (in groups of eight), `NR` rounds.
    ///
    /// # Safety
    /// AES-NI and SSE2; every `keys[b]` points at 15 readable round keys.
    #[target_feature(enable = "aes,sse2")]
    unsafe fn aesni_chunk<const NR: usize>(
        blocks: &mut [[u8; 16]; CHUNK],
        keys: &[*const [u8; 16]; CHUNK],
        n: usize,
    ) {
        let p = blocks.as_mut_ptr() as *mut __m128i;
        for g in (0..n).step_by(8) {
            let mut st = [_mm_setzero_si128(); 8];
            for (l, s) in st.iter_mut().enumerate() {
                // SAFETY: g + l < CHUNK (g is a multiple of 8 below 32); `keys` as promised.
                unsafe {
                    *s = _mm_xor_si128(
                        _mm_loadu_si128(p.add(g + l)),
                        _mm_loadu_si128(keys[g + l] as *const __m128i),
                    );
                }
            }
            for r in 1..NR {
                for (l, s) in st.iter_mut().enumerate() {
                    // SAFETY: round r ≤ 13 of a 15-key schedule.
                    let k = unsafe { _mm_loadu_si128(keys[g + l].add(r) as *const __m128i) };
                    *s = _mm_aesenc_si128(*s, k);
                }
            }
            for (l, s) in st.iter().enumerate() {
                // SAFETY: round NR ≤ 14; the store stays inside the exclusively borrowed
                // array.
                unsafe {
                    let k = _mm_loadu_si128(keys[g + l].add(NR) as *const __m128i);
                    _mm_storeu_si128(p.add(g + l), _mm_aesenclast_si128(*s, k));
                }
            }
        }
    }
}
