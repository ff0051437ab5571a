//! SHA-1 compression of 16 independent blocks at once, one per 32-bit lane of AVX-512
//! (FIPS 180-4 §6.1.2, the 80 rounds run on 16 messages side by side). This is the kernel under
//! multi-buffer HMAC-SHA1: packets of a batch each need 3–20 compressions, and a core does 16
//! of them in about the time SHA-NI does two or three.
//!
//! [`compress_x16`] picks the AVX-512 path when the CPU has AVX-512F and AVX-512BW, else
//! compresses lane by lane with RustCrypto's `sha1` (SHA-NI where present): results are
//! identical either way.
#![allow(unsafe_code)]

/// Lanes per call.
pub const LANES: usize = 16;

/// Whether the AVX-512 path runs on this CPU.
pub fn accelerated() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Compresses `blocks[i]` into `states[i]` for every lane i.
pub fn compress_x16(states: &mut [[u32; 5]; LANES], blocks: &[[u8; 64]; LANES]) {
    compress_x16_refs(states, &core::array::from_fn(|i| &blocks[i]));
}

/// The states of the 16 lanes word by word: `states[j][i]` is word j (A…E) of lane i, the
/// layout the AVX-512 rounds work in, so a caller that keeps its states this way between calls
/// spares the kernel a gather and a scatter per call.
pub type StatesSoa = [[u32; LANES]; 5];

/// [`compress_x16_refs`] on word-by-word states ([`StatesSoa`]).
pub fn compress_x16_soa(states: &mut StatesSoa, blocks: &[&[u8; 64]; LANES]) {
    #[cfg(target_arch = "x86_64")]
    if accelerated() {
        // SAFETY: the CPU has AVX-512F and AVX-512BW (checked just above), which is all the
        // target features of `compress_soa` require.
        unsafe { avx512::compress_soa(states, blocks) };
        return;
    }
    for (l, block) in blocks.iter().enumerate() {
        let mut st = [0u32; 5];
        for (j, w) in st.iter_mut().enumerate() {
            *w = states[j][l];
        }
        sha1::block_api::compress(&mut st, core::slice::from_ref(*block));
        for (j, w) in st.iter().enumerate() {
            states[j][l] = *w;
        }
    }
}

/// [`compress_x16`] on blocks wherever they lie (a message's full blocks are compressed where
/// they are, without a copy).
pub fn compress_x16_refs(states: &mut [[u32; 5]; LANES], blocks: &[&[u8; 64]; LANES]) {
    #[cfg(target_arch = "x86_64")]
    if accelerated() {
        // SAFETY: the CPU has AVX-512F and AVX-512BW (checked just above), which is all the
        // target features of `compress_avx512` require.
        unsafe { avx512::compress(states, blocks) };
        return;
    }
    for (st, block) in states.iter_mut().zip(blocks.iter()) {
        sha1::block_api::compress(st, core::slice::from_ref(*block));
    }
}

/// Lane by lane with the library's compression function (the reference the tests check the
/// SIMD path against).
pub fn compress_portable(states: &mut [[u32; 5]; LANES], blocks: &[[u8; 64]; LANES]) {
    for (st, block) in states.iter_mut().zip(blocks.iter()) {
        sha1::block_api::compress(st, std::slice::from_ref(block));
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use core::arch::x86_64::*;

    use super::LANES;

    const K: [u32; 4] = [0x5A82_7999, 0x6ED9_EBA1, 0x8F1B_BCDC, 0xCA62_C1D6];

    /// Transposes 16 rows of 16 words: out[c] lane k = rows[k] lane c.
    #[target_feature(enable = "avx512f")]
    fn transpose(rows: &[__m512i; 16]) -> [__m512i; 16] {
        let mut t = [_mm512_setzero_si512(); 16];
        for k in 0..8 {
            t[2 * k] = _mm512_unpacklo_epi32(rows[2 * k], rows[2 * k + 1]);
            t[2 * k + 1] = _mm512_unpackhi_epi32(rows[2 * k], rows[2 * k + 1]);
        }
        let mut u = [_mm512_setzero_si512(); 16];
        for k in 0..4 {
            u[4 * k] = _mm512_unpacklo_epi64(t[4 * k], t[4 * k + 2]);
            u[4 * k + 1] = _mm512_unpackhi_epi64(t[4 * k], t[4 * k + 2]);
            u[4 * k + 2] = _mm512_unpacklo_epi64(t[4 * k + 1], t[4 * k + 3]);
            u[4 * k + 3] = _mm512_unpackhi_epi64(t[4 * k + 1], t[4 * k + 3]);
        }
        // u[4k + j], 128-bit lane L, holds column 4L + j of rows 4k..4k+3: a 4×4 transpose of
        // 128-bit lanes across u[j], u[4 + j], u[8 + j], u[12 + j] finishes it.
        let mut out = [_mm512_setzero_si512(); 16];
        for j in 0..4 {
            let (a, b, c, d) = (u[j], u[4 + j], u[8 + j], u[12 + j]);
            let v0 = _mm512_shuffle_i32x4::<0x44>(a, b);
            let v1 = _mm512_shuffle_i32x4::<0xEE>(a, b);
            let v2 = _mm512_shuffle_i32x4::<0x44>(c, d);
            let v3 = _mm512_shuffle_i32x4::<0xEE>(c, d);
            out[j] = _mm512_shuffle_i32x4::<0x88>(v0, v2);
            out[4 + j] = _mm512_shuffle_i32x4::<0xDD>(v0, v2);
            out[8 + j] = _mm512_shuffle_i32x4::<0x88>(v1, v3);
            out[12 + j] = _mm512_shuffle_i32x4::<0xDD>(v1, v3);
        }
        out
    }

    /// # Safety
    /// The CPU must support AVX-512F and AVX-512BW.
    #[target_feature(enable = "avx512f,avx512bw")]
    pub(super) unsafe fn compress(states: &mut [[u32; 5]; LANES], blocks: &[&[u8; 64]; LANES]) {
        // Byte offset of lane i's state: states are 20 bytes apart.
        let lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
        let state_off = _mm512_mullo_epi32(lane, _mm512_set1_epi32(20));
        let sp = states.as_mut_ptr() as *mut u8;
        let mut h = [_mm512_setzero_si512(); 5];
        for (j, hj) in h.iter_mut().enumerate() {
            let idx = _mm512_add_epi32(state_off, _mm512_set1_epi32(4 * j as i32));
            // SAFETY: lane i reads word j of `states[i]`, at 20·i + 4·j ≤ 316, inside the
            // 320-byte `states` array.
            *hj = unsafe { _mm512_i32gather_epi32::<1>(idx, sp as *const i32) };
        }
        let out = rounds(h, blocks);
        for (j, v) in out.into_iter().enumerate() {
            let idx = _mm512_add_epi32(state_off, _mm512_set1_epi32(4 * j as i32));
            // SAFETY: the same in-bounds offsets as the gather above, into the exclusively
            // borrowed `states`.
            unsafe { _mm512_i32scatter_epi32::<1>(sp as *mut i32, idx, v) };
        }
    }

    /// # Safety
    /// The CPU must support AVX-512F and AVX-512BW.
    #[target_feature(enable = "avx512f,avx512bw")]
    pub(super) unsafe fn compress_soa(states: &mut super::StatesSoa, blocks: &[&[u8; 64]; LANES]) {
        let mut h = [_mm512_setzero_si512(); 5];
        for (hj, row) in h.iter_mut().zip(states.iter()) {
            // SAFETY: a 64-byte unaligned load of the 16 words of `row`.
            *hj = unsafe { _mm512_loadu_si512(row.as_ptr() as *const _) };
        }
        let out = rounds(h, blocks);
        for (row, v) in states.iter_mut().zip(out) {
            // SAFETY: a 64-byte unaligned store into the 16 words of `row`.
            unsafe { _mm512_storeu_si512(row.as_mut_ptr() as *mut _, v) };
        }
    }

    /// The 80 rounds on word-by-word states `h` (`h[j]` lane i = word j of lane i), the
    /// feed-forward added: the new states.
    #[target_feature(enable = "avx512f,avx512bw")]
    fn rounds(h: [__m512i; 5], blocks: &[&[u8; 64]; LANES]) -> [__m512i; 5] {
        // Reverses the bytes of each 32-bit word (message words are big-endian).
        let bswap = _mm512_set_epi8(
            12, 13, 14, 15, 8, 9, 10, 11, 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11, 4,
            5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11, 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14,
            15, 8, 9, 10, 11, 4, 5, 6, 7, 0, 1, 2, 3,
        );
        // One load per block (row i = lane i's 16 message words), then a 16×16 transpose of
        // 32-bit words so that w[t] holds word t of every lane (gathers are slow on some cores).
        let mut r = [_mm512_setzero_si512(); 16];
        for (ri, block) in r.iter_mut().zip(blocks.iter()) {
            // SAFETY: a 64-byte unaligned load from a 64-byte array.
            let v = unsafe { _mm512_loadu_si512(block.as_ptr() as *const _) };
            *ri = _mm512_shuffle_epi8(v, bswap);
        }
        let mut w = transpose(&r);
        let [mut a, mut b, mut c, mut d, mut e] = h;
        for t in 0..80 {
            if t >= 16 {
                let x = _mm512_ternarylogic_epi32::<0x96>(
                    w[(t + 13) & 15],
                    w[(t + 8) & 15],
                    w[(t + 2) & 15],
                );
                w[t & 15] = _mm512_rol_epi32::<1>(_mm512_xor_si512(x, w[t & 15]));
            }
            let f = match t / 20 {
                0 => _mm512_ternarylogic_epi32::<0xCA>(b, c, d),
                2 => _mm512_ternarylogic_epi32::<0xE8>(b, c, d),
                _ => _mm512_ternarylogic_epi32::<0x96>(b, c, d),
            };
            let k = _mm512_set1_epi32(K[t / 20] as i32);
            let tmp = _mm512_add_epi32(
                _mm512_add_epi32(_mm512_rol_epi32::<5>(a), f),
                _mm512_add_epi32(_mm512_add_epi32(e, k), w[t & 15]),
            );
            e = d;
            d = c;
            c = _mm512_rol_epi32::<30>(b);
            b = a;
            a = tmp;
        }
        let mut out = [_mm512_setzero_si512(); 5];
        for (j, v) in [a, b, c, d, e].into_iter().enumerate() {
            out[j] = _mm512_add_epi32(h[j], v);
        }
        out
    }
}
