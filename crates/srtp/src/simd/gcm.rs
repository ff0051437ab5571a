//! AES-GCM seal and open for many packets at once (NIST SP 800-38D with a 12-byte nonce and a
//! 16-byte tag, as SRTP uses it: RFC 7714), each packet with its own key, nonce and AAD.
//!
//! The counter-mode part runs on the VAES engine of [`super::aes_ctr`]: a packet's tag mask
//! E(K, J0) rides in the first lane of its first register, its data in the rest, registers of
//! many packets in flight together (a long packet's data eight registers of its own at a
//! time). GHASH runs with VPCLMULQDQ on 512-bit registers: the hash key's powers H¹…H³² are
//! computed once per key, and a packet's blocks (AAD, ciphertext, lengths; 12 blocks for a
//! 160-byte SRTP payload with a 12-byte header) are read straight from the packet four per
//! byte-masked load, multiplied by the powers counted from the end of their chunk of up to 32
//! blocks and summed unreduced, one reduction per chunk (one for an audio packet, three for a
//! 1,200-byte video packet). The arithmetic is POLYVAL's (RFC 8452 Appendix A: GHASH is
//! POLYVAL on byte-reversed blocks with the key multiplied by x), which suits the carry-less
//! multiply's bit order.
//!
//! Jobs go in passes of at most 64 jobs and 16 KiB of data, so that GHASH reads the
//! ciphertext the counter-mode pass has just left in the first-level cache.
//!
//! Open computes every tag mask (and the keystream of the first 48 bytes, kept aside) first,
//! checks every tag over the ciphertext in constant time, and only then decrypts, only the
//! packets that verified: a packet that fails keeps its bytes as given.
//!
//! [`seal_many`] and [`open_many`] take that path when the CPU has AVX-512F/BW, VAES and
//! VPCLMULQDQ, else they run RustCrypto's `aes-gcm` one packet at a time ([`seal_many_portable`],
//! [`open_many_portable`]); the tests check that both give identical bytes.
#![allow(unsafe_code)]

use aes_gcm::aead::AeadInOut;
use aes_gcm::{Aes128Gcm, Aes256Gcm, KeyInit};
use zeroize::{Zeroize, ZeroizeOnDrop};

use super::aes_ctr::{self, AesKey, Backend, Streams};
use crate::provider::KeyError;

/// Jobs per pass at most (their tag masks are kept on the stack).
const PASS: usize = 64;

/// Data bytes per pass at most (a pass takes at least one job, however long): the hash pass
/// then reads the ciphertext that the counter-mode pass left in the first-level cache, and
/// open's counter-mode pass the data its hash pass read. 64 video packets (~77 KB) would not
/// stay there; 13 still keep the AES pipeline full.
const PASS_BYTES: usize = 16 * 1024;

/// Jobs in the next pass, given the data lengths of the jobs left (at least one if any).
fn pass_len(lens: impl Iterator<Item = usize>) -> usize {
    let mut bytes = 0;
    let mut n = 0;
    for len in lens.take(PASS) {
        bytes += len;
        if n > 0 && bytes > PASS_BYTES {
            break;
        }
        n += 1;
    }
    n
}

/// Powers of the hash key kept per key: a message of up to this many blocks (AAD, data and
/// lengths; 512 bytes) is hashed with one reduction.
const NPOW: usize = 32;

/// H³², H³¹, …, H¹ in POLYVAL form, then four zero blocks (multipliers of the unused lanes of
/// a register).
#[derive(Clone, Zeroize)]
#[repr(C, align(64))]
struct Powers([[u8; 16]; NPOW + 4]);

/// The library's AES-GCM, for the portable path.
enum Lib {
    A128(Box<Aes128Gcm>),
    A256(Box<Aes256Gcm>),
}

/// An AES-128-GCM or AES-256-GCM key: the AES key schedule, the GHASH key H and its powers.
/// Wiped on drop.
///
/// `repr(C)`, the powers first and the round keys right after them (an [`AesKey`] starts with
/// them): what the kernel reads for one packet is one run of cache lines, the powers it needs
/// (the last ones for a short packet) then the round keys, which `GcmKey::prefetch` asks
/// for from the key's address alone.
#[repr(C)]
pub struct GcmKey {
    /// Valid when [`accelerated`].
    powers: Powers,
    aes: AesKey,
    lib: Lib,
}

impl GcmKey {
    /// Expands a 16-byte (AES-128-GCM) or 32-byte (AES-256-GCM) key.
    pub fn new(key: &[u8]) -> Result<Self, KeyError> {
        let lib = match key.len() {
            16 => Lib::A128(Box::new(
                Aes128Gcm::new_from_slice(key).map_err(|_| KeyError("AES-128-GCM key"))?,
            )),
            32 => Lib::A256(Box::new(
                Aes256Gcm::new_from_slice(key).map_err(|_| KeyError("AES-256-GCM key"))?,
            )),
            _ => return Err(KeyError("AES-GCM keys are 16 or 32 bytes")),
        };
        let aes = AesKey::new(key)?;
        let mut powers = Powers([[0; 16]; NPOW + 4]);
        #[cfg(target_arch = "x86_64")]
        if accelerated() {
            let mut h = [0u8; 16];
            aes.encrypt_block(&mut h);
            // SAFETY: `accelerated` checked PCLMULQDQ and SSE2, the target features of
            // `powers`.
            unsafe { x86::powers(&h, &mut powers) };
            h.zeroize();
        }
        Ok(Self { powers, aes, lib })
    }

    /// Starts loading (a hint: nothing changes) the lines the kernel reads to seal or open a
    /// message of `aad_and_data` bytes (header and payload) under this key: the powers of H
    /// its blocks take, and the round keys.
    #[inline]
    pub(crate) fn prefetch(&self, aad_and_data: usize) {
        // Blocks hashed: the header's, the payload's (a block more at most for the split
        // between them) and the lengths block; past NPOW, every power.
        let blocks = (aad_and_data.div_ceil(16) + 2).min(NPOW);
        let first = NPOW - blocks;
        let start = (&raw const self.powers.0[first]).cast::<u8>();
        let len = (NPOW + 4 - first) * 16 + AesKey::HOT_BYTES;
        super::prefetch::prefetch_bytes(start, len, 16);
    }

    /// Key length in bits (128 or 256).
    pub fn bits(&self) -> usize {
        self.aes.bits()
    }
}

impl core::fmt::Debug for GcmKey {
    /// The key size only: key material never goes to logs.
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "GcmKey({} bits)", self.bits())
    }
}

impl Zeroize for GcmKey {
    /// Wipes the key schedules and the hash key; the library's state is replaced by the
    /// all-zero key's (the old one wipes itself on drop).
    fn zeroize(&mut self) {
        self.aes.zeroize();
        self.powers.zeroize();
        self.lib = match self.lib {
            Lib::A128(_) => Lib::A128(Box::new(Aes128Gcm::new(&Default::default()))),
            Lib::A256(_) => Lib::A256(Box::new(Aes256Gcm::new(&Default::default()))),
        };
    }
}

impl Drop for GcmKey {
    fn drop(&mut self) {
        // `aes` and `lib` wipe themselves.
        self.powers.zeroize();
    }
}

impl ZeroizeOnDrop for GcmKey {}

/// One packet to encrypt and authenticate.
pub struct SealJob<'a> {
    /// The packet's key.
    pub key: &'a GcmKey,
    /// The 12-byte IV (RFC 7714 §8.1).
    pub nonce: [u8; 12],
    /// Authenticated, not encrypted (the RTP header).
    pub aad: &'a [u8],
    /// Plaintext in, ciphertext out.
    pub data: &'a mut [u8],
    /// The tag out.
    pub tag: &'a mut [u8; 16],
}

/// One packet to check and decrypt.
pub struct OpenJob<'a> {
    /// The packet's key.
    pub key: &'a GcmKey,
    /// The 12-byte IV.
    pub nonce: [u8; 12],
    /// Authenticated, not encrypted (the RTP header).
    pub aad: &'a [u8],
    /// Ciphertext in, plaintext out when the tag verifies (left as given when it does not).
    pub data: &'a mut [u8],
    /// The tag received.
    pub tag: &'a [u8; 16],
}

/// Whether the SIMD path (AVX-512F/BW, VAES, VPCLMULQDQ) runs on this CPU.
pub fn accelerated() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        aes_ctr::backend() == Backend::Vaes
            && has!("avx512bw")
            && has!("avx2")
            && has!("vpclmulqdq")
            && has!("pclmulqdq")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Encrypts each job's data in place and writes its tag.
///
/// ```
/// use secrelay_srtp::simd::gcm::{open_many, seal_many, GcmKey, OpenJob, SealJob};
///
/// let key = GcmKey::new(&[3; 16]).unwrap();
/// let header = [0x80u8, 0x60, 0, 1, 0, 0, 0, 160, 0xca, 0xfe, 0xba, 0xbe];
/// let mut payload = vec![0x55u8; 160];
/// let mut tag = [0u8; 16];
/// seal_many(&mut [SealJob { key: &key, nonce: [9; 12], aad: &header, data: &mut payload, tag: &mut tag }]);
///
/// let mut ok = [false];
/// open_many(&mut [OpenJob { key: &key, nonce: [9; 12], aad: &header, data: &mut payload, tag: &tag }], &mut ok);
/// assert!(ok[0]);
/// assert_eq!(payload, vec![0x55u8; 160]);
/// ```
pub fn seal_many(jobs: &mut [SealJob<'_>]) {
    #[cfg(target_arch = "x86_64")]
    if accelerated() {
        let mut rest = jobs;
        while !rest.is_empty() {
            let n = pass_len(rest.iter().map(|j| j.data.len()));
            let (pass, tail) = rest.split_at_mut(n);
            x86::seal(pass);
            rest = tail;
        }
        return;
    }
    seal_many_portable(jobs);
}

/// Checks each tag in constant time (subtle) and decrypts only jobs whose tag verified;
/// `ok[i]` says which. A job that fails keeps its data as given.
///
/// # Panics
/// If `ok` and `jobs` differ in length (a caller's bug, not a packet's).
pub fn open_many(jobs: &mut [OpenJob<'_>], ok: &mut [bool]) {
    assert_eq!(jobs.len(), ok.len(), "one result per job");
    #[cfg(target_arch = "x86_64")]
    if accelerated() {
        let (mut rest, mut ok) = (jobs, ok);
        while !rest.is_empty() {
            let n = pass_len(rest.iter().map(|j| j.data.len()));
            let (pass, tail) = rest.split_at_mut(n);
            let (pass_ok, ok_tail) = ok.split_at_mut(n);
            x86::open(pass, pass_ok);
            (rest, ok) = (tail, ok_tail);
        }
        return;
    }
    open_many_portable(jobs, ok);
}

/// [`seal_many`] one job at a time with RustCrypto's `aes-gcm` (the reference the tests check
/// the SIMD path against).
pub fn seal_many_portable(jobs: &mut [SealJob<'_>]) {
    for j in jobs {
        let nonce = (&j.nonce).into();
        let t = match &j.key.lib {
            Lib::A128(k) => k.encrypt_inout_detached(nonce, j.aad, (&mut *j.data).into()),
            Lib::A256(k) => k.encrypt_inout_detached(nonce, j.aad, (&mut *j.data).into()),
        };
        // Encryption fails only for messages over 2^36 bytes, which no packet is.
        match t {
            Ok(t) => j.tag.copy_from_slice(&t),
            Err(_) => j.tag.fill(0),
        }
    }
}

/// [`open_many`] one job at a time with RustCrypto's `aes-gcm` (constant-time tag check;
/// decrypts only after the tag verified).
///
/// # Panics
/// If `ok` and `jobs` differ in length.
pub fn open_many_portable(jobs: &mut [OpenJob<'_>], ok: &mut [bool]) {
    assert_eq!(jobs.len(), ok.len(), "one result per job");
    for (j, ok) in jobs.iter_mut().zip(ok.iter_mut()) {
        let nonce = (&j.nonce).into();
        let tag = j.tag.into();
        let r = match &j.key.lib {
            Lib::A128(k) => k.decrypt_inout_detached(nonce, j.aad, (&mut *j.data).into(), tag),
            Lib::A256(k) => k.decrypt_inout_detached(nonce, j.aad, (&mut *j.data).into(), tag),
        };
        *ok = r.is_ok();
    }
}

/// Counter block `n` of a 12-byte nonce: nonce ‖ n (32-bit big-endian); J0 is n = 1.
fn counter_block(nonce: &[u8; 12], n: u32) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[..12].copy_from_slice(nonce);
    b[12..].copy_from_slice(&n.to_be_bytes());
    b
}

/// Seal's keystreams: job i from J0 on, E(K, J0) into `masks[i]` and the data from counter 2.
struct SealStreams<'s, 'k> {
    jobs: &'s mut [SealJob<'k>],
    masks: &'s mut [[u8; 16]],
}

impl<'k> Streams<'k> for SealStreams<'_, 'k> {
    fn count(&self) -> usize {
        self.jobs.len()
    }
    fn key(&self, i: usize) -> &'k AesKey {
        let k: &'k GcmKey = self.jobs[i].key;
        &k.aes
    }
    fn counter(&self, i: usize) -> ([u8; 16], bool) {
        (counter_block(&self.jobs[i].nonce, 1), true)
    }
    fn has_mask(&self, _: usize) -> bool {
        true
    }
    fn len(&self, i: usize) -> usize {
        self.jobs[i].data.len()
    }
    fn bufs(&mut self, i: usize) -> (Option<&mut [u8; 16]>, &mut [u8]) {
        (Some(&mut self.masks[i]), self.jobs[i].data)
    }
}

/// Data bytes whose keystream open's first pass makes (with E(K, J0) they fill one register).
const HEAD: usize = 48;

/// Open's first pass: E(K, J0) of every job into `masks`, and the keystream of its first
/// [`HEAD`] data bytes into `heads` (zeros in), not into the data: nothing is decrypted
/// before the tag is checked.
struct OpenHeads<'s, 'k> {
    jobs: &'s [OpenJob<'k>],
    masks: &'s mut [[u8; 16]],
    heads: &'s mut [[u8; HEAD]],
}

impl<'k> Streams<'k> for OpenHeads<'_, 'k> {
    fn count(&self) -> usize {
        self.jobs.len()
    }
    fn key(&self, i: usize) -> &'k AesKey {
        let k: &'k GcmKey = self.jobs[i].key;
        &k.aes
    }
    fn counter(&self, i: usize) -> ([u8; 16], bool) {
        (counter_block(&self.jobs[i].nonce, 1), true)
    }
    fn has_mask(&self, _: usize) -> bool {
        true
    }
    fn len(&self, i: usize) -> usize {
        self.jobs[i].data.len().min(HEAD)
    }
    fn bufs(&mut self, i: usize) -> (Option<&mut [u8; 16]>, &mut [u8]) {
        let len = self.jobs[i].data.len().min(HEAD);
        (Some(&mut self.masks[i]), &mut self.heads[i][..len])
    }
}

/// Open's second pass: the data after the first [`HEAD`] bytes (counter 2 + HEAD/16 on) of the
/// jobs whose tag verified; the others are left alone.
struct OpenTails<'s, 'k> {
    jobs: &'s mut [OpenJob<'k>],
    ok: &'s [bool],
}

impl<'k> Streams<'k> for OpenTails<'_, 'k> {
    fn count(&self) -> usize {
        self.jobs.len()
    }
    fn key(&self, i: usize) -> &'k AesKey {
        let k: &'k GcmKey = self.jobs[i].key;
        &k.aes
    }
    fn counter(&self, i: usize) -> ([u8; 16], bool) {
        (
            counter_block(&self.jobs[i].nonce, 2 + HEAD as u32 / 16),
            true,
        )
    }
    fn has_mask(&self, _: usize) -> bool {
        false
    }
    fn len(&self, i: usize) -> usize {
        if self.ok[i] {
            self.jobs[i].data.len().saturating_sub(HEAD)
        } else {
            0
        }
    }
    fn bufs(&mut self, i: usize) -> (Option<&mut [u8; 16]>, &mut [u8]) {
        let d = &mut *self.jobs[i].data;
        if self.ok[i] && d.len() > HEAD {
            (None, &mut d[HEAD..])
        } else {
            (None, &mut [])
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use core::arch::x86_64::*;

    use subtle::ConstantTimeEq;

    use super::{
        aes_ctr, Backend, OpenHeads, OpenJob, OpenTails, Powers, SealJob, SealStreams, HEAD, NPOW,
        PASS,
    };

    /// x¹²⁸ + x¹²⁷ + x¹²⁶ + x¹²¹ + 1 without its top term, as the reduction uses it.
    const POLY: u128 = 0xc200_0000_0000_0000_0000_0000_0000_0001;

    /// `a · b · x⁻¹²⁸` in POLYVAL's field (Gueron's two-fold Montgomery reduction).
    #[target_feature(enable = "pclmulqdq,sse2")]
    fn polyval_mul(a: __m128i, b: __m128i) -> __m128i {
        let lo = _mm_clmulepi64_si128::<0x00>(a, b);
        let hi = _mm_clmulepi64_si128::<0x11>(a, b);
        let mid = _mm_xor_si128(
            _mm_clmulepi64_si128::<0x01>(a, b),
            _mm_clmulepi64_si128::<0x10>(a, b),
        );
        reduce(
            _mm_xor_si128(lo, _mm_slli_si128::<8>(mid)),
            _mm_xor_si128(hi, _mm_srli_si128::<8>(mid)),
        )
    }

    /// `(hi·x¹²⁸ + lo) · x⁻¹²⁸` mod the POLYVAL polynomial: twice, the low 64 bits are
    /// cancelled by adding a multiple of the polynomial (whose low 64 bits are 1) and the whole
    /// shifted down 64 bits.
    #[target_feature(enable = "pclmulqdq,sse2")]
    fn reduce(lo: __m128i, hi: __m128i) -> __m128i {
        let poly = _mm_set_epi64x((POLY >> 64) as i64, POLY as i64);
        let t = _mm_clmulepi64_si128::<0x10>(lo, poly);
        let lo = _mm_xor_si128(_mm_shuffle_epi32::<0x4e>(lo), t);
        let t = _mm_clmulepi64_si128::<0x10>(lo, poly);
        let lo = _mm_xor_si128(_mm_shuffle_epi32::<0x4e>(lo), t);
        _mm_xor_si128(hi, lo)
    }

    fn load(b: &[u8; 16]) -> __m128i {
        // SAFETY: a 16-byte unaligned load from a 16-byte array (SSE2 is x86_64's baseline).
        unsafe { _mm_loadu_si128(b.as_ptr() as *const __m128i) }
    }

    fn store(v: __m128i) -> [u8; 16] {
        let mut b = [0u8; 16];
        // SAFETY: a 16-byte unaligned store into a 16-byte array.
        unsafe { _mm_storeu_si128(b.as_mut_ptr() as *mut __m128i, v) };
        b
    }

    /// The hash key's powers for [`ghash`]: `H' = mulX_POLYVAL(ByteReverse(H))` (RFC 8452
    /// Appendix A), `out[NPOW - k] = H'^k · x^(-128(k-1))` for k = 1..=NPOW.
    ///
    /// # Safety
    /// The CPU must have PCLMULQDQ and SSE2.
    #[target_feature(enable = "pclmulqdq,sse2")]
    pub(super) unsafe fn powers(h: &[u8; 16], out: &mut Powers) {
        let v = u128::from_be_bytes(*h);
        let hx = (v << 1) ^ if v >> 127 == 1 { POLY } else { 0 };
        let h1 = load(&hx.to_le_bytes());
        let mut p = h1;
        for k in 1..=NPOW {
            out.0[NPOW - k] = store(p);
            p = polyval_mul(p, h1);
        }
        out.0[NPOW..].iter_mut().for_each(|b| *b = [0; 16]);
    }

    /// Loads (of up to four blocks each) per reduction: at most 32 blocks, the powers kept.
    const LOADS: usize = NPOW / 4;

    /// GHASH(H, A ‖ pad ‖ C ‖ pad ‖ len(A) ‖ len(C)) (SP 800-38D §7.1 steps 5–6), in GHASH's
    /// byte order.
    #[target_feature(enable = "avx512f,avx512bw,avx2,vpclmulqdq,pclmulqdq")]
    fn ghash(powers: &Powers, aad: &[u8], ct: &[u8]) -> [u8; 16] {
        let na = aad.len().div_ceil(16);
        let n = na + ct.len().div_ceil(16) + 1;
        if n <= NPOW {
            ghash_short(powers, aad, ct, na, n)
        } else {
            ghash_long(powers, aad, ct)
        }
    }

    /// [`ghash`] of a message of `n` ≤ [`NPOW`] blocks: block b (of the whole message) times
    /// H'^(n-b), summed unreduced, one reduction. The blocks are read straight from `aad` and
    /// `ct`, four per load, the partial last load of each byte-masked (which zero-pads it;
    /// the full ones are plain loads, which cost less).
    #[target_feature(enable = "avx512f,avx512bw,avx2,vpclmulqdq,pclmulqdq")]
    fn ghash_short(powers: &Powers, aad: &[u8], ct: &[u8], na: usize, n: usize) -> [u8; 16] {
        let rev = _mm512_set_epi64(
            0x0001_0203_0405_0607,
            0x0809_0a0b_0c0d_0e0f,
            0x0001_0203_0405_0607,
            0x0809_0a0b_0c0d_0e0f,
            0x0001_0203_0405_0607,
            0x0809_0a0b_0c0d_0e0f,
            0x0001_0203_0405_0607,
            0x0809_0a0b_0c0d_0e0f,
        );
        let pp = powers.0.as_ptr() as *const __m128i;
        // Unreduced sums of the products' low, middle and high 64-bit parts.
        let mut acc = [_mm512_setzero_si512(); 3];
        // Block b needs H'^(n-b), at index NPOW - n + b; b < n ≤ NPOW, so the four powers read
        // are within NPOW + 3.
        let h = |b: usize| {
            // SAFETY: as just said, inside the NPOW + 4 blocks of `powers`.
            unsafe { _mm512_loadu_si512(pp.add(NPOW - n + b) as *const _) }
        };
        for (seg, first) in [(aad, 0), (ct, na)] {
            let (full, tail) = seg.as_chunks::<64>();
            for (k, c) in full.iter().enumerate() {
                // SAFETY: a 64-byte load from a 64-byte array.
                let x = unsafe { _mm512_loadu_si512(c.as_ptr() as *const _) };
                mul_acc(&mut acc, _mm512_shuffle_epi8(x, rev), h(first + 4 * k));
            }
            if !tail.is_empty() {
                let m: u64 = (1 << tail.len()) - 1;
                // SAFETY: the mask covers the tail's bytes, all inside it; masked-off bytes
                // are not read (and come back zero).
                let x = unsafe { _mm512_maskz_loadu_epi8(m, tail.as_ptr() as *const i8) };
                mul_acc(
                    &mut acc,
                    _mm512_shuffle_epi8(x, rev),
                    h(first + 4 * full.len()),
                );
            }
        }
        let mut lens = [0u8; 16];
        lens[..8].copy_from_slice(&(aad.len() as u64 * 8).to_be_bytes());
        lens[8..].copy_from_slice(&(ct.len() as u64 * 8).to_be_bytes());
        let x = _mm512_shuffle_epi8(_mm512_zextsi128_si512(load(&lens)), rev);
        mul_acc(&mut acc, x, h(n - 1));
        let [lo, mid, hi] = acc;
        let lo = _mm512_xor_si512(lo, _mm512_bslli_epi128::<8>(mid));
        let hi = _mm512_xor_si512(hi, _mm512_bsrli_epi128::<8>(mid));
        let s = store(reduce(fold(lo), fold(hi)));
        u128::from_le_bytes(s).to_be_bytes()
    }

    /// [`ghash`] of a message of more than [`NPOW`] blocks. Its blocks are read as in
    /// [`ghash_short`], the loads in chunks of [`LOADS`] (at most [`NPOW`] blocks): in a chunk
    /// of `m` blocks, block `p` is multiplied by H'^(m-p), the products summed unreduced and
    /// reduced once per chunk; the state so far is added to the chunk's first block (Horner's
    /// rule, with H'^m per step). A 1,200-byte packet's message is three chunks.
    #[target_feature(enable = "avx512f,avx512bw,avx2,vpclmulqdq,pclmulqdq")]
    fn ghash_long(powers: &Powers, aad: &[u8], ct: &[u8]) -> [u8; 16] {
        let rev = _mm512_set_epi64(
            0x0001_0203_0405_0607,
            0x0809_0a0b_0c0d_0e0f,
            0x0001_0203_0405_0607,
            0x0809_0a0b_0c0d_0e0f,
            0x0001_0203_0405_0607,
            0x0809_0a0b_0c0d_0e0f,
            0x0001_0203_0405_0607,
            0x0809_0a0b_0c0d_0e0f,
        );
        let mut lens = [0u8; 16];
        lens[..8].copy_from_slice(&(aad.len() as u64 * 8).to_be_bytes());
        lens[8..].copy_from_slice(&(ct.len() as u64 * 8).to_be_bytes());
        let mut h = Horner::new(powers, aad.len(), ct.len());
        for seg in [aad, ct] {
            let (full, tail) = seg.as_chunks::<64>();
            for c in full {
                // SAFETY: a 64-byte load from a 64-byte array.
                let x = unsafe { _mm512_loadu_si512(c.as_ptr() as *const _) };
                h.feed(_mm512_shuffle_epi8(x, rev), 4);
            }
            if !tail.is_empty() {
                let m: u64 = (1 << tail.len()) - 1;
                // SAFETY: the mask covers the tail's bytes, all inside it; masked-off bytes
                // are not read (and come back zero).
                let x = unsafe { _mm512_maskz_loadu_epi8(m, tail.as_ptr() as *const i8) };
                h.feed(_mm512_shuffle_epi8(x, rev), tail.len().div_ceil(16));
            }
        }
        h.feed(
            _mm512_shuffle_epi8(_mm512_zextsi128_si512(load(&lens)), rev),
            1,
        );
        u128::from_le_bytes(store(h.state)).to_be_bytes()
    }

    /// [`ghash_long`]'s state: the loads of the message fed in order, [`LOADS`] to a chunk.
    struct Horner<'p> {
        powers: &'p Powers,
        /// Loads of the message: AAD, data, the lengths block.
        la: usize,
        lc: usize,
        total: usize,
        /// Blocks in the last load of the AAD and of the data.
        tail_a: usize,
        tail_c: usize,
        /// The POLYVAL state after the chunks done.
        state: __m128i,
        /// The chunk under way: unreduced sums, its first load, its end, its blocks, and the
        /// blocks fed so far.
        acc: [__m512i; 3],
        first: usize,
        end: usize,
        m: usize,
        p: usize,
        /// Loads fed.
        k: usize,
    }

    impl<'p> Horner<'p> {
        #[target_feature(enable = "avx512f")]
        fn new(powers: &'p Powers, aad: usize, ct: usize) -> Self {
            let (la, lc) = (aad.div_ceil(64), ct.div_ceil(64));
            let mut h = Horner {
                powers,
                la,
                lc,
                total: la + lc + 1,
                tail_a: (aad - 64 * la.saturating_sub(1)).div_ceil(16),
                tail_c: (ct - 64 * lc.saturating_sub(1)).div_ceil(16),
                state: _mm_setzero_si128(),
                acc: [_mm512_setzero_si512(); 3],
                first: 0,
                end: 0,
                m: 0,
                p: 0,
                k: 0,
            };
            h.start();
            h
        }

        /// Opens the chunk of loads `k..` (at most [`LOADS`]): its blocks are four per load
        /// but for the last load of the AAD and of the data and the lengths block.
        fn start(&mut self) {
            let (k, end) = (self.k, (self.k + LOADS).min(self.total));
            let mut m = 4 * (end - k);
            // (whether the segment has loads, its last load, that load's blocks)
            for (some, last, blocks) in [
                (self.la > 0, self.la.wrapping_sub(1), self.tail_a),
                (
                    self.lc > 0,
                    (self.la + self.lc).wrapping_sub(1),
                    self.tail_c,
                ),
                (true, self.total - 1, 1),
            ] {
                if some && (k..end).contains(&last) {
                    m -= 4 - blocks;
                }
            }
            (self.first, self.end, self.m, self.p) = (k, end, m, 0);
        }

        /// Adds the next load, `x` (byte-reversed), of `blocks` blocks.
        #[inline]
        #[target_feature(enable = "avx512f,avx512bw,avx2,vpclmulqdq,pclmulqdq")]
        fn feed(&mut self, x: __m512i, blocks: usize) {
            let x = if self.k == self.first {
                _mm512_xor_si512(x, _mm512_zextsi128_si512(self.state))
            } else {
                x
            };
            // SAFETY: block p of the chunk (p < m ≤ NPOW) takes H'^(m-p), at index NPOW - m + p;
            // the four powers read end at NPOW - m + p + 3 ≤ NPOW + 3, inside the NPOW + 4
            // blocks of `powers` (lanes past the load's blocks are zero, whatever they meet).
            let h = unsafe {
                _mm512_loadu_si512(
                    (self.powers.0.as_ptr() as *const __m128i).add(NPOW - self.m + self.p)
                        as *const _,
                )
            };
            mul_acc(&mut self.acc, x, h);
            self.p += blocks;
            self.k += 1;
            if self.k == self.end {
                let [lo, mid, hi] = self.acc;
                let lo = _mm512_xor_si512(lo, _mm512_bslli_epi128::<8>(mid));
                let hi = _mm512_xor_si512(hi, _mm512_bsrli_epi128::<8>(mid));
                self.state = reduce(fold(lo), fold(hi));
                self.acc = [_mm512_setzero_si512(); 3];
                if self.k < self.total {
                    self.start();
                }
            }
        }
    }

    /// XOR of the four 128-bit lanes.
    #[target_feature(enable = "avx512f,avx2")]
    fn fold(v: __m512i) -> __m128i {
        let y = _mm256_xor_si256(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64::<1>(v));
        _mm_xor_si128(_mm256_castsi256_si128(y), _mm256_extracti128_si256::<1>(y))
    }

    /// `acc += x · h` lane by lane, unreduced (schoolbook: low, middle, high parts).
    #[target_feature(enable = "avx512f,vpclmulqdq")]
    fn mul_acc(acc: &mut [__m512i; 3], x: __m512i, h: __m512i) {
        acc[0] = _mm512_xor_si512(acc[0], _mm512_clmulepi64_epi128::<0x00>(x, h));
        acc[1] = _mm512_ternarylogic_epi64::<0x96>(
            acc[1],
            _mm512_clmulepi64_epi128::<0x01>(x, h),
            _mm512_clmulepi64_epi128::<0x10>(x, h),
        );
        acc[2] = _mm512_xor_si512(acc[2], _mm512_clmulepi64_epi128::<0x11>(x, h));
    }

    fn xor16(a: [u8; 16], b: &[u8; 16]) -> [u8; 16] {
        (u128::from_ne_bytes(a) ^ u128::from_ne_bytes(*b)).to_ne_bytes()
    }

    /// Seals up to [`PASS`] jobs: counter mode (and the tag masks) in one multi-buffer pass,
    /// then GHASH of each ciphertext.
    pub(super) fn seal(jobs: &mut [SealJob<'_>]) {
        let mut masks = [[0u8; 16]; PASS];
        let n = jobs.len();
        aes_ctr::run(
            &mut SealStreams {
                jobs: &mut *jobs,
                masks: &mut masks[..n],
            },
            Backend::Vaes,
        );
        for (j, mask) in jobs.iter_mut().zip(&masks) {
            // SAFETY: `seal` is only called when `accelerated()` (AVX-512F/BW, AVX2,
            // VPCLMULQDQ, PCLMULQDQ: the target features of `ghash`).
            let s = unsafe { ghash(&j.key.powers, j.aad, j.data) };
            *j.tag = xor16(s, mask);
        }
    }

    /// Opens up to [`PASS`] jobs: the tag masks and the keystream of the first [`HEAD`] bytes
    /// in one multi-buffer pass (one register per packet), GHASH of each ciphertext and a
    /// constant-time tag check, then counter mode over the rest of the jobs that passed.
    pub(super) fn open(jobs: &mut [OpenJob<'_>], ok: &mut [bool]) {
        let mut masks = [[0u8; 16]; PASS];
        let mut heads = [[0u8; HEAD]; PASS];
        let n = jobs.len();
        aes_ctr::run(
            &mut OpenHeads {
                jobs: &*jobs,
                masks: &mut masks[..n],
                heads: &mut heads[..n],
            },
            Backend::Vaes,
        );
        for ((j, mask), (ok, head)) in jobs.iter_mut().zip(&masks).zip(ok.iter_mut().zip(&heads)) {
            // SAFETY: as in `seal`.
            let s = unsafe { ghash(&j.key.powers, j.aad, j.data) };
            // One 128-bit comparison (subtle's per-byte compare costs a call per byte).
            *ok = u128::from_ne_bytes(xor16(s, mask))
                .ct_eq(&u128::from_ne_bytes(*j.tag))
                .into();
            if *ok {
                for (d, k) in j.data.iter_mut().zip(head) {
                    *d ^= k;
                }
            }
        }
        aes_ctr::run(&mut OpenTails { jobs, ok: &*ok }, Backend::Vaes);
    }
}
