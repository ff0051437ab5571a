//! AES-CTR keystreams for many packets at once, each packet with its own key and counter
//! (SRTP's AES-CM, RFC 3711 §4.1.1: a 128-bit big-endian counter starting at the packet's IV).
//!
//! One packet of 160 bytes is only ten AES blocks: encrypted one packet at a time, the AES
//! pipeline (several cycles of latency per round, one or two rounds issued per cycle) stays
//! mostly empty. Here the blocks of many packets go through the rounds together. With VAES
//! each 512-bit register holds four consecutive counter blocks of one packet (its round keys
//! broadcast to the four lanes), eight registers from any packets of one key size are in
//! flight at once, counters are made in the registers and the keystream is XORed straight
//! into the packets with byte-masked loads and stores (so a 160-byte packet is three
//! registers, the last half full). A long stream (a video packet) goes 512 bytes at a time
//! through eight registers of its own, its round keys loaded once per round for all eight;
//! only its last registers share the slots. With AES-NI alone, the counter blocks of many packets are
//! gathered 32 at a time into one array and encrypted eight in flight, each block with its
//! own packet's round keys.
//!
//! [`apply_keystreams`] picks the fastest [`Backend`] this CPU has: VAES (AVX-512F/BW + VAES),
//! else AES-NI, else the portable path, one packet at a time through RustCrypto's `aes` and
//! `ctr` crates. All of them give identical output; the tests check the SIMD paths against
//! the library.
#![allow(unsafe_code)]

use aes::cipher::{InnerIvInit, KeyInit, StreamCipher};
use aes::{Aes128Enc, Aes256Enc};
use zeroize::{Zeroize, ZeroizeOnDrop};

use crate::provider::KeyError;

/// Counter blocks gathered per pass of the AES-NI engine (four rounds loops of eight).
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
///
/// `repr(C)`: the round keys the kernels read come first, so that the batch engines can start
/// loading them from the key's address alone ([`AesKey::HOT_BYTES`]).
#[repr(C)]
pub struct AesKey {
    /// Valid when the CPU has AES-NI (the SIMD backends are only used then).
    rk: RoundKeys,
    /// 10 (AES-128) or 14 (AES-256).
    rounds: usize,
    lib: Lib,
}

impl AesKey {
    /// The bytes from the start of the key that the SIMD backends read.
    pub(crate) const HOT_BYTES: usize = core::mem::size_of::<RoundKeys>();

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

impl core::fmt::Debug for AesKey {
    /// The key size only: key material never goes to logs.
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "AesKey({} bits)", self.bits())
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
    /// VAES on 512-bit registers (AVX-512F/BW + VAES + AES-NI): four blocks per instruction.
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
        && std::arch::is_x86_feature_detected!("avx512bw")
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
///
/// ```
/// use secrelay_srtp::simd::aes_ctr::{apply_keystreams, AesKey, CtrJob};
///
/// let (k1, k2) = (AesKey::new(&[1; 16]).unwrap(), AesKey::new(&[2; 32]).unwrap());
/// let (mut a, mut b) = (vec![0u8; 160], vec![0u8; 1200]);
/// let mut jobs = [
///     CtrJob { key: &k1, iv: [7; 16], data: &mut a },
///     CtrJob { key: &k2, iv: [8; 16], data: &mut b },
/// ];
/// apply_keystreams(&mut jobs);
/// apply_keystreams(&mut jobs); // the same keystream again: back to the input
/// assert!(a.iter().chain(&b).all(|&x| x == 0));
/// ```
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
    /// Whether stream `i` starts with a mask block: its first keystream block is written
    /// there (GCM's E(K, J0)) and the data takes the keystream from the second block on.
    fn has_mask(&self, i: usize) -> bool;
    /// Data bytes to XOR in stream `i`.
    fn len(&self, i: usize) -> usize;
    /// The mask block (when [`Streams::has_mask`]) and the data of stream `i`.
    fn bufs(&mut self, i: usize) -> (Option<&mut [u8; 16]>, &mut [u8]);
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
    fn has_mask(&self, _: usize) -> bool {
        false
    }
    fn len(&self, i: usize) -> usize {
        self[i].data.len()
    }
    fn bufs(&mut self, i: usize) -> (Option<&mut [u8; 16]>, &mut [u8]) {
        (None, self[i].data)
    }
}

/// A single block encrypted in place (counter = the block, the mask its output).
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
    fn has_mask(&self, _: usize) -> bool {
        true
    }
    fn len(&self, _: usize) -> usize {
        0
    }
    fn bufs(&mut self, i: usize) -> (Option<&mut [u8; 16]>, &mut [u8]) {
        (Some(&mut *self[i].1 .0), &mut [])
    }
}

/// Runs every stream of `s` on `backend` (the portable code where the CPU lacks it).
pub(crate) fn run<'k, S: Streams<'k> + ?Sized>(s: &mut S, backend: Backend) {
    #[cfg(target_arch = "x86_64")]
    {
        if backend == Backend::Vaes && vaes_present() {
            // SAFETY: the CPU has AVX-512F/BW, VAES and AES-NI (just checked), the target
            // features of `run_vaes`.
            unsafe { x86::run_vaes(s) };
            return;
        }
        if matches!(backend, Backend::AesNi | Backend::Vaes) && aesni_present() {
            x86::run(s);
            return;
        }
    }
    let _ = backend;
    for i in 0..s.count() {
        let key = s.key(i);
        let (iv, inc32) = s.counter(i);
        let (mask, data) = s.bufs(i);
        portable(key, &iv, inc32, mask, data);
    }
}

/// One stream through the library.
fn portable(
    key: &AesKey,
    iv: &[u8; 16],
    inc32: bool,
    mask: Option<&mut [u8; 16]>,
    data: &mut [u8],
) {
    fn go<C: StreamCipher>(mut c: C, mask: Option<&mut [u8; 16]>, data: &mut [u8]) {
        if let Some(m) = mask {
            m.fill(0);
            c.apply_keystream(m);
        }
        c.apply_keystream(data);
    }
    // The expanded key schedule is copied, not recomputed.
    match (&key.lib, inc32) {
        (Lib::A128(k), false) => go(
            ctr::Ctr128BE::<Aes128Enc>::from_core(ctr::CtrCore::inner_iv_init(
                k.clone(),
                iv.into(),
            )),
            mask,
            data,
        ),
        (Lib::A256(k), false) => go(
            ctr::Ctr128BE::<Aes256Enc>::from_core(ctr::CtrCore::inner_iv_init(
                k.clone(),
                iv.into(),
            )),
            mask,
            data,
        ),
        (Lib::A128(k), true) => go(
            ctr::Ctr32BE::<Aes128Enc>::from_core(ctr::CtrCore::inner_iv_init(k.clone(), iv.into())),
            mask,
            data,
        ),
        (Lib::A256(k), true) => go(
            ctr::Ctr32BE::<Aes256Enc>::from_core(ctr::CtrCore::inner_iv_init(k.clone(), iv.into())),
            mask,
            data,
        ),
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

    /// Registers in flight in the VAES engine.
    const SLOTS: usize = 8;

    /// Four consecutive counter blocks of one stream, one register, and where their keystream
    /// goes: `len` ≤ 64 bytes at `dst`, after the first block is written to `mask` (when not
    /// null; then `len` ≤ 48).
    struct Slots {
        ctr: [__m512i; SLOTS],
        rk: [*const [u8; 16]; SLOTS],
        dst: [*mut u8; SLOTS],
        mask: [*mut u8; SLOTS],
        len: [usize; SLOTS],
        n: usize,
    }

    impl Slots {
        #[target_feature(enable = "avx512f")]
        fn new() -> Self {
            Slots {
                ctr: [_mm512_setzero_si512(); SLOTS],
                rk: [core::ptr::null(); SLOTS],
                dst: [core::ptr::null_mut(); SLOTS],
                mask: [core::ptr::null_mut(); SLOTS],
                len: [0; SLOTS],
                n: 0,
            }
        }
    }

    /// The VAES engine: every stream is cut into groups of four blocks, one 512-bit register
    /// each with the stream's round keys broadcast to its four lanes; eight registers (from as
    /// many groups, of any streams of one key size) go through the rounds together, and each
    /// XORs its keystream straight into its packet with byte-masked loads and stores. Counters
    /// are made in the registers (a 32-bit add on byte-swapped words) unless a carry leaves
    /// the low 32 bits, which only happens in full-counter mode and falls back to scalar
    /// arithmetic.
    ///
    /// # Safety
    /// The CPU must have AVX-512F, AVX-512BW, VAES and AES-NI.
    #[target_feature(enable = "avx512f,avx512bw,vaes,aes")]
    pub(super) unsafe fn run_vaes<'k, S: Streams<'k> + ?Sized>(s: &mut S) {
        let (mut s128, mut s256) = (Slots::new(), Slots::new());
        // Byte-swaps the last 32-bit word of each block (the big-endian counter word).
        let swap = _mm512_set_epi64(
            0x0c0d_0e0f_0b0a_0908,
            0x0706_0504_0302_0100,
            0x0c0d_0e0f_0b0a_0908,
            0x0706_0504_0302_0100,
            0x0c0d_0e0f_0b0a_0908,
            0x0706_0504_0302_0100,
            0x0c0d_0e0f_0b0a_0908,
            0x0706_0504_0302_0100,
        );
        let lanes = _mm512_set_epi32(3, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0);
        let four = _mm512_set_epi32(4, 0, 0, 0, 4, 0, 0, 0, 4, 0, 0, 0, 4, 0, 0, 0);
        for i in 0..s.count() {
            let key = s.key(i);
            let (iv, inc32) = s.counter(i);
            let has_mask = s.has_mask(i);
            let len = s.len(i);
            let nblocks = has_mask as usize + len.div_ceil(16);
            if nblocks == 0 {
                continue;
            }
            let rk: *const [u8; 16] = key.rk.0.as_ptr();
            let (mask, data) = s.bufs(i);
            let mask: *mut u8 = mask.map_or(core::ptr::null_mut(), |m| m.as_mut_ptr());
            let dp = data.as_mut_ptr();
            let low = u32::from_be_bytes([iv[12], iv[13], iv[14], iv[15]]);
            let in_regs = inc32 || low as u64 + nblocks as u64 <= 1 << 32;
            // SAFETY: a 16-byte load from a 16-byte array.
            let ivv = unsafe { _mm_loadu_si128(iv.as_ptr() as *const __m128i) };
            let mut v = _mm512_add_epi32(
                _mm512_shuffle_epi8(_mm512_broadcast_i32x4(ivv), swap),
                lanes,
            );
            let slots = if key.rounds == 10 {
                &mut s128
            } else {
                &mut s256
            };
            let (mut j, mut off) = (0, 0);
            while j < nblocks {
                if in_regs && !(j == 0 && has_mask) && len - off >= RUN_BYTES {
                    // A long stream: eight registers of it at once, its round keys loaded once
                    // per round for all eight (the slots load them per register).
                    let dst = dp.wrapping_add(off);
                    // SAFETY: `dst` starts `RUN_BYTES` ≤ len - off writable bytes of the
                    // stream's data; `rk` is its key's schedule. CPU features: ours.
                    unsafe {
                        if key.rounds == 10 {
                            run8::<10>(rk, &mut v, swap, four, dst);
                        } else {
                            run8::<14>(rk, &mut v, swap, four, dst);
                        }
                    }
                    off += RUN_BYTES;
                    j += 4 * SLOTS;
                    continue;
                }
                let ctr = if in_regs {
                    _mm512_shuffle_epi8(v, swap)
                } else {
                    let base = u128::from_be_bytes(iv);
                    let mut c = [0u8; 64];
                    for (t, b) in c.chunks_exact_mut(16).enumerate() {
                        b.copy_from_slice(&base.wrapping_add((j + t) as u128).to_be_bytes());
                    }
                    // SAFETY: a 64-byte load from a 64-byte array.
                    unsafe { _mm512_loadu_si512(c.as_ptr() as *const _) }
                };
                v = _mm512_add_epi32(v, four);
                let first = j == 0 && has_mask;
                let take = (len - off).min(if first { 48 } else { 64 });
                let k = slots.n;
                slots.ctr[k] = ctr;
                slots.rk[k] = rk;
                // `off` ≤ len: in bounds of `data` (one past its end at most).
                slots.dst[k] = dp.wrapping_add(off);
                slots.mask[k] = if first { mask } else { core::ptr::null_mut() };
                slots.len[k] = take;
                slots.n += 1;
                off += take;
                j += 4;
                if slots.n == SLOTS {
                    // SAFETY: the slots point into the streams' buffers, borrowed for this call
                    // and written nowhere else while the kernel runs; the round keys are the
                    // streams' keys, borrowed for 'k. CPU features: ours.
                    unsafe { flush_slots(slots, key.rounds) };
                }
            }
        }
        // SAFETY: as above.
        unsafe {
            flush_slots(&mut s128, 10);
            flush_slots(&mut s256, 14);
        }
    }

    /// Bytes of one stream that [`run8`] takes at once.
    const RUN_BYTES: usize = 64 * SLOTS;

    /// Eight registers of one stream (32 consecutive counter blocks), its round keys loaded
    /// once per round, the keystream XORed into the [`RUN_BYTES`] bytes at `dst`. `v` holds
    /// the stream's next four counters with their counter words byte-swapped (as [`run_vaes`]
    /// keeps them, the caller having checked that no carry leaves those words), and moves on
    /// by 32.
    ///
    /// # Safety
    /// AVX-512F/BW, VAES, AES-NI; `rk` points at 15 round keys, `dst` at [`RUN_BYTES`]
    /// writable bytes.
    #[target_feature(enable = "avx512f,avx512bw,vaes,aes")]
    unsafe fn run8<const NR: usize>(
        rk: *const [u8; 16],
        v: &mut __m512i,
        swap: __m512i,
        four: __m512i,
        dst: *mut u8,
    ) {
        let key = |r: usize| {
            // SAFETY: `rk` points at 15 round keys and r ≤ NR ≤ 14.
            unsafe { _mm512_broadcast_i32x4(_mm_loadu_si128(rk.add(r) as *const __m128i)) }
        };
        let k0 = key(0);
        let mut st = [_mm512_setzero_si512(); SLOTS];
        for s in st.iter_mut() {
            *s = _mm512_xor_si512(_mm512_shuffle_epi8(*v, swap), k0);
            *v = _mm512_add_epi32(*v, four);
        }
        for r in 1..NR {
            let k = key(r);
            for s in st.iter_mut() {
                *s = _mm512_aesenc_epi128(*s, k);
            }
        }
        let k = key(NR);
        for (z, s) in st.iter().enumerate() {
            let ks = _mm512_aesenclast_epi128(*s, k);
            // SAFETY: bytes 64z..64z + 64 of the RUN_BYTES at `dst`.
            unsafe {
                let p = dst.add(64 * z);
                let d = _mm512_loadu_si512(p as *const _);
                _mm512_storeu_si512(p as *mut _, _mm512_xor_si512(d, ks));
            }
        }
    }

    /// Runs the filled slots and empties them.
    ///
    /// # Safety
    /// AVX-512F/BW, VAES, AES-NI; every filled slot's `rk` points at 15 round keys, its `dst`
    /// at `len` writable bytes, its `mask` (when not null) at 16 writable bytes.
    #[target_feature(enable = "avx512f,avx512bw,vaes,aes")]
    unsafe fn flush_slots(sl: &mut Slots, rounds: usize) {
        // SAFETY: forwarded contract; only the filled slots run.
        unsafe {
            match (rounds, sl.n) {
                (_, 0) => {}
                (10, 1) => slot_kernel::<10, 1>(sl),
                (10, 2) => slot_kernel::<10, 2>(sl),
                (10, 3) => slot_kernel::<10, 3>(sl),
                (10, 4) => slot_kernel::<10, 4>(sl),
                (10, 5) => slot_kernel::<10, 5>(sl),
                (10, 6) => slot_kernel::<10, 6>(sl),
                (10, 7) => slot_kernel::<10, 7>(sl),
                (10, _) => slot_kernel::<10, 8>(sl),
                (_, 1) => slot_kernel::<14, 1>(sl),
                (_, 2) => slot_kernel::<14, 2>(sl),
                (_, 3) => slot_kernel::<14, 3>(sl),
                (_, 4) => slot_kernel::<14, 4>(sl),
                (_, 5) => slot_kernel::<14, 5>(sl),
                (_, 6) => slot_kernel::<14, 6>(sl),
                (_, 7) => slot_kernel::<14, 7>(sl),
                (_, _) => slot_kernel::<14, 8>(sl),
            }
        }
        sl.n = 0;
    }

    /// Encrypts the counters of slots `0..Z` (`NR` rounds) and XORs them into their packets.
    ///
    /// # Safety
    /// As [`flush_slots`], for slots `0..Z`.
    #[target_feature(enable = "avx512f,avx512bw,vaes,aes")]
    unsafe fn slot_kernel<const NR: usize, const Z: usize>(sl: &Slots) {
        let key = |z: usize, r: usize| {
            // SAFETY: `rk[z]` points at 15 round keys and r ≤ NR ≤ 14.
            unsafe { _mm512_broadcast_i32x4(_mm_loadu_si128(sl.rk[z].add(r) as *const __m128i)) }
        };
        let mut st = [_mm512_setzero_si512(); Z];
        for (z, s) in st.iter_mut().enumerate() {
            *s = _mm512_xor_si512(sl.ctr[z], key(z, 0));
        }
        for r in 1..NR {
            for (z, s) in st.iter_mut().enumerate() {
                *s = _mm512_aesenc_epi128(*s, key(z, r));
            }
        }
        for (z, s) in st.iter().enumerate() {
            let mut ks = _mm512_aesenclast_epi128(*s, key(z, NR));
            if !sl.mask[z].is_null() {
                // SAFETY: `mask[z]` points at 16 writable bytes.
                unsafe { _mm_storeu_si128(sl.mask[z] as *mut __m128i, _mm512_castsi512_si128(ks)) };
                ks = _mm512_alignr_epi32::<4>(_mm512_setzero_si512(), ks);
            }
            let len = sl.len[z];
            if len == 0 {
                // Nothing to XOR (a mask block alone, or an empty packet). Not even a fully
                // masked access: its address may be a dangling empty slice's, and a masked
                // access whose masked-off bytes would fault costs a microcode assist.
                continue;
            }
            let m: u64 = if len >= 64 { !0 } else { (1 << len) - 1 };
            // SAFETY: the byte mask covers the `len` bytes at `dst[z]`, which are writable;
            // masked-off bytes are not accessed.
            unsafe {
                let d = _mm512_maskz_loadu_epi8(m, sl.dst[z] as *const i8);
                _mm512_mask_storeu_epi8(sl.dst[z] as *mut i8, m, _mm512_xor_si512(d, ks));
            }
        }
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

    /// The AES-NI engine: gathers the counter blocks of every stream, 32 at a time, encrypts
    /// them (eight in flight) with each block's own round keys, and XORs the keystream back.
    /// AES-128 and AES-256 streams go in separate passes (different round counts).
    pub(super) fn run<'k, S: Streams<'k> + ?Sized>(s: &mut S) {
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
                let nblocks = s.has_mask(i) as usize + s.len(i).div_ceil(16);
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
                        flush(s, &mut c, rounds);
                    }
                }
            }
            if c.n > 0 {
                flush(s, &mut c, rounds);
            }
        }
        // The keystream left in `c.blocks` is not wiped: it is no secret once the ciphertext is
        // out (ciphertext XOR plaintext), and wiping 512 bytes costs more than the XOR.
    }

    /// Encrypts the gathered blocks and XORs them into their streams.
    fn flush<'k, S: Streams<'k> + ?Sized>(s: &mut S, c: &mut Chunk, rounds: usize) {
        let n = c.n;
        for k in n..CHUNK {
            c.keys[k] = c.keys[0];
        }
        let (blocks, keys) = (&mut c.blocks, &c.keys);
        // SAFETY: `run` is only called when the CPU has AES-NI and SSE2 (`super::run`
        // checks): the target features of the kernel. Every pointer in `keys` points at the 15 round keys of an `AesKey`
        // borrowed for 'k (a stream's key), read up to round `rounds` ≤ 14.
        unsafe {
            match rounds {
                10 => aesni_chunk::<10>(blocks, keys, n),
                _ => aesni_chunk::<14>(blocks, keys, n),
            }
        }
        let ks = c.blocks.as_flattened();
        for &(i, off, first, nb) in &c.runs[..c.nruns] {
            // `off` counts from the mask block when there is one.
            let mut ks = &ks[16 * first..16 * (first + nb)];
            let (mask, data) = s.bufs(i);
            let mut off = off;
            if let Some(m) = mask {
                if off == 0 {
                    m.copy_from_slice(&ks[..16]);
                    ks = &ks[16..];
                    off = 16;
                }
                off -= 16;
            }
            let end = data.len().min(off + ks.len());
            for (d, k) in data[off..end].iter_mut().zip(ks) {
                *d ^= k;
            }
        }
        c.n = 0;
        c.nruns = 0;
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

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::*;

    /// GCM's shape: some streams start with a mask block, some count in 32 bits only (with
    /// counters about to wrap).
    struct Shaped<'k> {
        keys: Vec<&'k AesKey>,
        ivs: Vec<([u8; 16], bool)>,
        masks: Vec<[u8; 16]>,
        data: Vec<Vec<u8>>,
    }

    impl<'k> Streams<'k> for Shaped<'k> {
        fn count(&self) -> usize {
            self.keys.len()
        }
        fn key(&self, i: usize) -> &'k AesKey {
            self.keys[i]
        }
        fn counter(&self, i: usize) -> ([u8; 16], bool) {
            self.ivs[i]
        }
        fn has_mask(&self, i: usize) -> bool {
            !i.is_multiple_of(3)
        }
        fn len(&self, i: usize) -> usize {
            self.data[i].len()
        }
        fn bufs(&mut self, i: usize) -> (Option<&mut [u8; 16]>, &mut [u8]) {
            let mask = if !i.is_multiple_of(3) {
                Some(&mut self.masks[i])
            } else {
                None
            };
            (mask, &mut self.data[i])
        }
    }

    #[test]
    fn masked_and_32_bit_streams_agree_on_every_backend() {
        let mut rng = StdRng::seed_from_u64(7);
        let keys: Vec<AesKey> = (0..4)
            .map(|i| {
                let raw: Vec<u8> = (0..16 + 16 * (i % 2)).map(|_| rng.random()).collect();
                AesKey::new(&raw).unwrap()
            })
            .collect();
        for _ in 0..100 {
            let n = rng.random_range(1..=40);
            let make = |rng: &mut StdRng| Shaped {
                keys: (0..n).map(|_| &keys[rng.random_range(0..4)]).collect(),
                ivs: (0..n)
                    .map(|_| {
                        let mut iv: [u8; 16] = rng.random();
                        if rng.random_bool(0.5) {
                            iv[12..].copy_from_slice(
                                &(u32::MAX - rng.random_range(0..20)).to_be_bytes(),
                            );
                        }
                        (iv, rng.random_bool(0.5))
                    })
                    .collect(),
                masks: vec![[0x55; 16]; n],
                data: (0..n)
                    .map(|_| {
                        // Short streams go through the shared slots; from 512 bytes on, runs of
                        // eight registers of one stream (their 32-bit counters wrapping too).
                        let len = match rng.random_range(0..4) {
                            0 => rng.random_range(500..=1300),
                            _ => rng.random_range(0..=300),
                        };
                        (0..len).map(|_| rng.random()).collect()
                    })
                    .collect(),
            };
            let want = {
                let mut s = make(&mut StdRng::seed_from_u64(n as u64));
                run(&mut s, Backend::Portable);
                (s.masks, s.data)
            };
            for b in [Backend::Vaes, Backend::AesNi] {
                let mut s = make(&mut StdRng::seed_from_u64(n as u64));
                run(&mut s, b);
                assert_eq!((&s.masks, &s.data), (&want.0, &want.1), "{b:?}");
            }
        }
    }

    #[test]
    fn one_block() {
        // FIPS 197 Appendix C.1 and C.3.
        let k = AesKey::new(&(0..16).collect::<Vec<u8>>()).unwrap();
        let mut b: [u8; 16] = core::array::from_fn(|i| (i * 0x11) as u8);
        k.encrypt_block(&mut b);
        assert_eq!(
            b,
            [
                0x69, 0xc4, 0xe0, 0xd8, 0x6a, 0x7b, 0x04, 0x30, 0xd8, 0xcd, 0xb7, 0x80, 0x70, 0xb4,
                0xc5, 0x5a
            ]
        );
        let k = AesKey::new(&(0..32).collect::<Vec<u8>>()).unwrap();
        let mut b: [u8; 16] = core::array::from_fn(|i| (i * 0x11) as u8);
        k.encrypt_block(&mut b);
        assert_eq!(
            b,
            [
                0x8e, 0xa2, 0xb7, 0xca, 0x51, 0x67, 0x45, 0xbf, 0xea, 0xfc, 0x49, 0x90, 0x4b, 0x49,
                0x60, 0x89
            ]
        );
    }
}
