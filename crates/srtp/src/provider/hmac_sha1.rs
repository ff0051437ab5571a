//! HMAC-SHA1 (RFC 2104) on RustCrypto's SHA-1 compression function.
//!
//! The keyed inner and outer states (the compression of `K ⊕ ipad` and `K ⊕ opad`) are computed
//! once per key; each message then costs its own blocks and one outer block, with no buffering
//! copies of the whole message: full 64-byte blocks are compressed straight from the caller's
//! slice. Checked against the `hmac` crate in the tests below.

use sha1::block_api::compress;
use zeroize::{Zeroize, ZeroizeOnDrop};

const H0: [u32; 5] = [
    0x6745_2301,
    0xEFCD_AB89,
    0x98BA_DCFE,
    0x1032_5476,
    0xC3D2_E1F0,
];

/// The outer hash's one block with room for the 20-byte inner digest, then its padding (0x80,
/// zeros, the bit length of the keyed block and the digest).
pub(crate) const OUTER_BLOCK: [u8; 64] = {
    let mut b = [0u8; 64];
    b[20] = 0x80;
    let bits = ((64u64 + 20) * 8).to_be_bytes();
    let mut i = 0;
    while i < 8 {
        b[56 + i] = bits[i];
        i += 1;
    }
    b
};

/// A SHA-1 state as its big-endian digest bytes (the first 20 bytes of `out`).
#[inline]
pub(crate) fn digest_bytes(st: &[u32; 5], out: &mut [u8]) {
    for (o, w) in out.chunks_exact_mut(4).zip(st.iter()) {
        o.copy_from_slice(&w.to_be_bytes());
    }
}

/// Precomputed HMAC-SHA1 key state.
#[derive(Clone, Zeroize, ZeroizeOnDrop)]
pub struct HmacSha1State {
    inner: [u32; 5],
    outer: [u32; 5],
}

impl core::fmt::Debug for HmacSha1State {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        // Keyed state: never printed.
        f.write_str("HmacSha1State(..)")
    }
}

impl HmacSha1State {
    /// Keys HMAC-SHA1 (keys longer than 64 bytes are hashed first, per RFC 2104).
    pub fn new(key: &[u8]) -> Self {
        let mut k0 = [0u8; 64];
        if key.len() > 64 {
            let mut st = H0;
            let mut tail = Tail::default();
            let (blocks, rest) = key.as_chunks::<64>();
            compress(&mut st, blocks);
            tail.push(rest);
            tail.finish(&mut st, key.len() as u64);
            digest_bytes(&st, &mut k0[..20]);
            st.zeroize();
        } else {
            k0[..key.len()].copy_from_slice(key);
        }
        let mut ipad = [0u8; 64];
        let mut opad = [0u8; 64];
        for i in 0..64 {
            ipad[i] = k0[i] ^ 0x36;
            opad[i] = k0[i] ^ 0x5c;
        }
        let mut inner = H0;
        let mut outer = H0;
        compress(&mut inner, &[ipad]);
        compress(&mut outer, &[opad]);
        k0.zeroize();
        ipad.zeroize();
        opad.zeroize();
        HmacSha1State { inner, outer }
    }

    /// The state after the keyed inner block (`K ⊕ ipad`), where every message starts.
    #[inline]
    pub(crate) fn inner_state(&self) -> [u32; 5] {
        self.inner
    }

    /// The state after the keyed outer block (`K ⊕ opad`), where the outer hash starts.
    #[inline]
    pub(crate) fn outer_state(&self) -> [u32; 5] {
        self.outer
    }

    /// HMAC-SHA1 over `a ‖ b`.
    #[inline]
    pub fn sign2(&self, a: &[u8], b: &[u8], out: &mut [u8; 20]) {
        let mut st = self.inner;
        let (blocks, rest) = a.as_chunks::<64>();
        compress(&mut st, blocks);
        let mut tail = Tail::default();
        if rest.len() + b.len() < 64 {
            tail.push(rest);
            tail.push(b);
        } else {
            tail.push(rest);
            tail.push_stream(&mut st, b);
        }
        tail.finish(&mut st, 64 + (a.len() + b.len()) as u64);
        // Outer hash: one block holding the 20-byte inner digest and the padding.
        let mut block = OUTER_BLOCK;
        digest_bytes(&st, &mut block[..20]);
        let mut o = self.outer;
        compress(&mut o, &[block]);
        digest_bytes(&o, out);
    }
}

/// Up to one partial block plus room for padding.
struct Tail {
    buf: [u8; 128],
    len: usize,
}

impl Default for Tail {
    fn default() -> Self {
        Tail {
            buf: [0; 128],
            len: 0,
        }
    }
}

impl Tail {
    /// Appends bytes known to fit (len + data < 64).
    #[inline]
    fn push(&mut self, data: &[u8]) {
        self.buf[self.len..self.len + data.len()].copy_from_slice(data);
        self.len += data.len();
    }

    /// Appends any amount, compressing full blocks as they fill.
    fn push_stream(&mut self, st: &mut [u32; 5], mut data: &[u8]) {
        if self.len > 0 {
            let take = (64 - self.len).min(data.len());
            self.push(&data[..take]);
            data = &data[take..];
            if self.len == 64 {
                let mut block = [0u8; 64];
                block.copy_from_slice(&self.buf[..64]);
                compress(st, &[block]);
                self.len = 0;
            }
        }
        let (blocks, rest) = data.as_chunks::<64>();
        compress(st, blocks);
        self.push(rest);
    }

    /// Pads (0x80, zeros, 64-bit big-endian bit length) and compresses the last 1–2 blocks.
    #[inline]
    fn finish(&mut self, st: &mut [u32; 5], total_len: u64) {
        let n = self.len;
        self.buf[n] = 0x80;
        let end = if n < 56 { 64 } else { 128 };
        self.buf[n + 1..end].fill(0);
        self.buf[end - 8..end].copy_from_slice(&(total_len * 8).to_be_bytes());
        let (blocks, _) = self.buf[..end].as_chunks::<64>();
        compress(st, blocks);
    }
}

impl Drop for Tail {
    fn drop(&mut self) {
        // The tail holds message bytes, not key bytes, but the packet may be plaintext.
        self.buf.zeroize();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hmac::{KeyInit, Mac};

    fn reference(key: &[u8], a: &[u8], b: &[u8]) -> [u8; 20] {
        let mut m = <hmac::Hmac<sha1::Sha1> as KeyInit>::new_from_slice(key).unwrap();
        m.update(a);
        m.update(b);
        m.finalize().into_bytes().into()
    }

    #[test]
    fn matches_the_hmac_crate_at_every_length() {
        let data: Vec<u8> = (0..400u32).map(|i| (i * 7 + 3) as u8).collect();
        for key_len in [0usize, 1, 20, 64, 65, 100] {
            let key: Vec<u8> = (0..key_len as u32).map(|i| (i * 13) as u8).collect();
            let st = HmacSha1State::new(&key);
            for a_len in 0..=200 {
                for b_len in [0usize, 4, 60, 130] {
                    let (a, b) = (&data[..a_len], &data[200..200 + b_len]);
                    let mut out = [0u8; 20];
                    st.sign2(a, b, &mut out);
                    assert_eq!(
                        out,
                        reference(&key, a, b),
                        "key {key_len} a {a_len} b {b_len}"
                    );
                }
            }
        }
    }

    #[test]
    fn rfc2202_test_case_1() {
        let st = HmacSha1State::new(&[0x0b; 20]);
        let mut out = [0u8; 20];
        st.sign2(b"Hi ", b"There", &mut out);
        let want = [
            0xb6, 0x17, 0x31, 0x86, 0x55, 0x05, 0x72, 0x64, 0xe2, 0x8b, 0xc0, 0xb6, 0xfb, 0x37,
            0x8c, 0x8e, 0xf1, 0x46, 0xbe, 0x00,
        ];
        assert_eq!(out, want);
    }
}
