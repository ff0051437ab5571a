/*
 * srtp.cu — batch SRTP packet processing, one GPU thread per packet.
 *
 *   kind 0: RFC 3711 SRTP, AES-CM (128/256) or NULL cipher + HMAC-SHA1 (tag 4/10)
 *   kind 1: RFC 7714 SRTP AES-GCM (128/256), 16-byte tag
 * and the same for SRTCP (RFC 3711 §3.4, RFC 7714 §9): PacketDesc.op 2/3.
 *
 * This file is compiled two ways:
 *   - by NVRTC for the GPU (no system headers: nothing is #included);
 *   - as plain host C++ through host_shim.cpp, which defines the CUDA keywords
 *     as macros (SRTP_HOST defined) and emulates a launch by looping over
 *     every block/thread index on the calling CPU thread.
 * Hence only __device__, __global__, __shared__, __constant__, threadIdx,
 * blockIdx, blockDim, gridDim and __syncthreads() are used from CUDA (plus
 * __noinline__ and `#pragma unroll`, behind macros that are empty when
 * SRTP_HOST is defined), and all memory accesses to byte buffers go through
 * ld32/st32/ld64/ld128 (memcpy on the host, so no strict-aliasing or
 * alignment problems there).
 *
 * Kernels (see README.md for the launch shapes):
 *   srtp_tables_init  — computes AES T-tables and the GHASH reduction table
 *   srtp_keys_setup   — expands RawKeys into 1024-byte device key slots
 *   srtp_packets      — protects / unprotects a batch of packets in place
 *
 * Word convention: every 32-bit quantity used by the AES, SHA-1 and GHASH code
 * is the BIG-endian reading of 4 bytes (as in the specifications); bswap32()
 * converts from/to the little-endian machine words of GPU and x86 memory.
 */

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;

/* ------------------------------------------------------------------------ */
/* ABI constants (must match the Rust host code)                            */
/* ------------------------------------------------------------------------ */

#define SRTP_KEY_SLOT_BYTES 1024

/* Layout of the `tables` buffer (u32 words), filled by srtp_tables_init.
 * Te0..Te3 are the usual combined SubBytes+MixColumns tables,
 * Te_k[x] = ror32(Te0[x], 8k), Te0[x] = {2s, s, s, 3s} with s = S[x].
 * No separate S-box is stored: S[x] == (Te0[x] >> 8) & 0xff, and the final
 * AES round extracts it from the T-tables with a byte mask.
 * GREM[r] (16 entries) is the Shoup 4-bit GHASH reduction constant for the
 * nibble r shifted out, as the top 16 bits of the 128-bit value. */
#define SRTP_TE0 0
#define SRTP_TE1 256
#define SRTP_TE2 512
#define SRTP_TE3 768
#define SRTP_GREM 1024
#define SRTP_TABLE_WORDS 1040

/* Packet status values written to PacketDesc.status */
#define SRTP_STATUS_DONE 1      /* processed */
#define SRTP_STATUS_AUTH_FAIL 2 /* unprotect: tag mismatch, buffer untouched */
#define SRTP_STATUS_BAD_DESC 3  /* descriptor/slot inconsistent, buffer untouched
                                   (never produced for inputs the host guarantees) */

/* Values of the `kind` byte */
#define SRTP_KIND_HMAC 0
#define SRTP_KIND_GCM 1
#define SRTP_KIND_INVALID 0xff /* stored in a slot whose RawKeys were unusable */

struct RawKeys {  /* 80 bytes */
  u8 enc[32];     /* AES session key, first enc_len bytes used */
  u8 auth[20];    /* HMAC-SHA1 session key (kind 0) */
  u8 salt[14];    /* session salt (kind 0: 14 bytes; kind 1: first 12) */
  u8 enc_len;     /* 0 = NULL cipher, 16 = AES-128, 32 = AES-256 */
  u8 kind;        /* 0 = HMAC-SHA1 profiles, 1 = AES-GCM */
  u8 pad[12];
};

struct PacketDesc { /* 32 bytes */
  u32 offset;       /* byte offset of the packet in `data` (multiple of 16) */
  u32 slot;         /* key slot index */
  u16 len;          /* input length (RTP/RTCP for protect, SRTP/SRTCP for unprotect) */
  u16 hdr;          /* RTP header length = start of the encrypted part (SRTCP: 8) */
  u8 op;            /* 0 = SRTP protect, 1 = SRTP unprotect, 2 = SRTCP protect, 3 = SRTCP unprotect */
  u8 tag_len;       /* 4 or 10 (kind 0), 16 (kind 1) */
  u8 status;        /* OUT */
  u8 pad0;
  u32 ssrc;
  u32 roc;          /* SRTP: ROC. SRTCP: the trailer word E || index (E = bit 31) */
  u16 seq;          /* SRTP: SEQ. SRTCP: unused */
  u16 pad1;
  u32 pad2;
};

static_assert(sizeof(RawKeys) == 80, "RawKeys must be 80 bytes");
static_assert(sizeof(PacketDesc) == 32, "PacketDesc must be 32 bytes");
/* Field offsets (abi.rs writes these bytes): checked by the host C++ build, which the emulated
   engine's tests run. NVRTC 13.0, the one that comes with CUDA 13.0 drivers, has no
   __builtin_offsetof; the layout is the same plain C struct layout there. */
#ifndef __CUDACC_RTC__
static_assert(__builtin_offsetof(RawKeys, enc_len) == 66 && __builtin_offsetof(RawKeys, kind) == 67,
              "RawKeys layout");
static_assert(__builtin_offsetof(PacketDesc, len) == 8 && __builtin_offsetof(PacketDesc, op) == 12 &&
                  __builtin_offsetof(PacketDesc, status) == 14 && __builtin_offsetof(PacketDesc, ssrc) == 16 &&
                  __builtin_offsetof(PacketDesc, roc) == 20 && __builtin_offsetof(PacketDesc, seq) == 24,
              "PacketDesc layout");
#endif

/* ------------------------------------------------------------------------ */
/* Key slot layout (internal: only these kernels read or write it).          */
/* All words are stored in machine (little-endian) order; every field is     */
/* 16-byte aligned so a future vectorised reader can use 128-bit loads.      */
/* ------------------------------------------------------------------------ */
#define SLOT_KIND 0      /* u32: SRTP_KIND_* */
#define SLOT_ENC_LEN 4   /* u32: 0/16/32 */
#define SLOT_NR 8        /* u32: AES rounds 0 (NULL)/10/14 */
#define SLOT_RK 16       /* 60 u32: AES encryption round keys (BE words) */
#define SLOT_HMAC_I 256  /* 5 u32: SHA-1 state after the key^0x36 block */
#define SLOT_HMAC_O 288  /* 5 u32: SHA-1 state after the key^0x5c block */
#define SLOT_IV 320      /* 4 u32: salt-derived IV base (BE words), see below */
#define SLOT_H 336       /* 4 u32: GHASH key H = E_K(0^128) (BE words) */
#define SLOT_HTABLE 384  /* 16 x {u64 hi, u64 lo}: Shoup table i*H */
#define SLOT_END 640
static_assert(SLOT_RK + 60 * 4 <= SLOT_HMAC_I, "slot layout");
static_assert(SLOT_HMAC_I + 20 <= SLOT_HMAC_O && SLOT_HMAC_O + 20 <= SLOT_IV, "slot layout");
static_assert(SLOT_IV + 16 <= SLOT_H && SLOT_H + 16 <= SLOT_HTABLE, "slot layout");
static_assert(SLOT_HTABLE + 16 * 16 == SLOT_END, "slot layout");
static_assert(SLOT_END <= SRTP_KEY_SLOT_BYTES, "key slot must fit in SRTP_KEY_SLOT_BYTES");

/* ------------------------------------------------------------------------ */
/* Compile-time switches                                                     */
/* ------------------------------------------------------------------------ */

/* Cooperative shared-memory copy: on the GPU every thread of the block copies
 * a strided part; the sequential host emulation defines these as 0 and 1 so
 * that each emulated thread copies the whole table into its own thread_local
 * "shared" array. */
#ifndef SRTP_SHARED_FIRST
#define SRTP_SHARED_FIRST threadIdx.x
#endif
#ifndef SRTP_SHARED_STEP
#define SRTP_SHARED_STEP blockDim.x
#endif

/* SRTP_AES_ONE_TABLE: keep only Te0 in shared memory (1 KiB instead of 4 KiB)
 * and derive Te1..Te3 with rotations (one extra instruction per lookup). */
#ifdef SRTP_AES_ONE_TABLE
#define SRTP_SH_TE_WORDS 256
#else
#define SRTP_SH_TE_WORDS 1024
#endif
#define SRTP_SH_WORDS (SRTP_SH_TE_WORDS + 16) /* + GHASH reduction table */

/* `#pragma unroll` and __noinline__ only for the device compiler (g++ would
 * warn about the pragma; inlining choices do not matter on the host). */
#ifdef SRTP_HOST
#define SRTP_UNROLL
#define SRTP_NOINLINE
#else
#define SRTP_UNROLL _Pragma("unroll")
#define SRTP_NOINLINE __noinline__
#endif

#ifdef SRTP_HOST
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "host emulation assumes a little-endian CPU");
#endif

/* ------------------------------------------------------------------------ */
/* Small helpers                                                             */
/* ------------------------------------------------------------------------ */

struct alignas(16) U4 {
  u32 x, y, z, w;
};

/* Native-order loads/stores. On the device the pointer must be naturally
 * aligned (guaranteed by the callers); on the host memcpy makes any
 * alignment legal and sidesteps strict aliasing. */
__device__ __forceinline__ u32 ld32(const u8* p) {
#ifdef SRTP_HOST
  u32 v;
  __builtin_memcpy(&v, p, 4);
  return v;
#else
  return *(const u32*)p;
#endif
}
__device__ __forceinline__ void st32(u8* p, u32 v) {
#ifdef SRTP_HOST
  __builtin_memcpy(p, &v, 4);
#else
  *(u32*)p = v;
#endif
}
__device__ __forceinline__ u64 ld64(const u8* p) {
#ifdef SRTP_HOST
  u64 v;
  __builtin_memcpy(&v, p, 8);
  return v;
#else
  return *(const u64*)p;
#endif
}
__device__ __forceinline__ void st64(u8* p, u64 v) {
#ifdef SRTP_HOST
  __builtin_memcpy(p, &v, 8);
#else
  *(u64*)p = v;
#endif
}
__device__ __forceinline__ U4 ld128(const u8* p) { /* p must be 16-aligned on the device */
#ifdef SRTP_HOST
  U4 v;
  __builtin_memcpy(&v, p, 16);
  return v;
#else
  return *(const U4*)p;
#endif
}

/* Written with shifts so that it stays portable; nvcc turns it into PRMT. */
__device__ __forceinline__ u32 bswap32(u32 x) {
  return (x >> 24) | ((x >> 8) & 0x0000ff00u) | ((x << 8) & 0x00ff0000u) | (x << 24);
}
__device__ __forceinline__ u32 ld_be32(const u8* p) { return bswap32(ld32(p)); }
__device__ __forceinline__ void st_be32(u8* p, u32 v) { st32(p, bswap32(v)); }

__device__ __forceinline__ u32 rotl32(u32 x, int n) { return (x << n) | (x >> (32 - n)); }
__device__ __forceinline__ u32 ror32(u32 x, int n) { return (x >> n) | (x << (32 - n)); }

/* Mask selecting the first n bytes (big-endian order) of a word; n may be
 * <= 0 (nothing) or >= 4 (everything). */
__device__ __forceinline__ u32 mask_n(int n) {
  return n >= 4 ? 0xffffffffu : (n <= 0 ? 0u : ~(0xffffffffu >> (8 * n)));
}

/* Byte-wise fallbacks for the (never expected) case of a payload or tag that
 * does not start at a multiple of 4 bytes. Out of line so they cost one call
 * instruction at each site instead of an inlined byte loop. */
static SRTP_NOINLINE __device__ u32 ld_be_bytes(const u8* q, int n) {
  u32 w = 0;
  const int m = n < 4 ? n : 4;
  for (int b = 0; b < m; ++b) w |= (u32)q[b] << (24 - 8 * b);
  return w;
}
static SRTP_NOINLINE __device__ void st_be_bytes(u8* q, u32 w, int n) {
  const int m = n < 4 ? n : 4;
  for (int b = 0; b < m; ++b) q[b] = (u8)(w >> (24 - 8 * b));
}

/* Big-endian word made of the first min(n,4) bytes at q, zero padded.
 * al: q is 4-byte aligned. In the aligned case a whole word is read even if
 * n < 4; callers guarantee those bytes lie inside the packet's room
 * (len + 16 bytes from the packet start), and they are masked off. */
__device__ __forceinline__ u32 ld_be_part(const u8* q, int n, bool al) {
  if (n <= 0) return 0u;
  if (al) return ld_be32(q) & mask_n(n);
  return ld_be_bytes(q, n);
}

/* Store the first min(n,4) bytes of the big-endian word w at q. Aligned
 * partial words are read-modify-written, so bytes past n keep their value
 * (they are inside the packet room and no other thread owns them). */
__device__ __forceinline__ void st_be_part(u8* q, u32 w, int n, bool al) {
  if (n <= 0) return;
  if (!al) {
    st_be_bytes(q, w, n);
  } else if (n >= 4) {
    st_be32(q, w);
  } else {
    const u32 m = mask_n(n);
    st_be32(q, (ld_be32(q) & ~m) | (w & m));
  }
}

/* ------------------------------------------------------------------------ */
/* GF(2^8) arithmetic for the AES tables (computed, not pasted)              */
/* ------------------------------------------------------------------------ */

__device__ __forceinline__ u32 gf_xtime(u32 a) { return ((a << 1) ^ ((a >> 7) * 0x1bu)) & 0xffu; }

__device__ __forceinline__ u32 gf_mul(u32 a, u32 b) {
  u32 r = 0;
  for (int i = 0; i < 8; ++i) {
    if (b & 1u) r ^= a;
    a = gf_xtime(a);
    b >>= 1;
  }
  return r;
}

/* Multiplicative inverse as a^254 (maps 0 to 0, as AES requires). */
__device__ __forceinline__ u32 gf_inv(u32 a) {
  u32 r = 1, base = a;
  for (u32 e = 254; e != 0; e >>= 1) {
    if (e & 1u) r = gf_mul(r, base);
    base = gf_mul(base, base);
  }
  return r;
}

__device__ __forceinline__ u32 aes_sbox_compute(u32 x) {
  const u32 b = gf_inv(x);
  u32 s = b;
  for (int k = 1; k <= 4; ++k) s ^= ((b << k) | (b >> (8 - k))) & 0xffu; /* rotl8 */
  return s ^ 0x63u;
}

/* ------------------------------------------------------------------------ */
/* Shared-memory tables                                                      */
/* ------------------------------------------------------------------------ */

/* File-scope so that the out-of-line AES and GHASH functions address it by
 * name (LDS instructions) rather than through a generic pointer. In the host
 * emulation this is a static thread_local array (one copy per host thread). */
__shared__ u32 srtp_sh[SRTP_SH_WORDS];

/* Cooperative copy of Te0..Te3 (or Te0 only) and the GHASH reduction table;
 * every caller follows it with __syncthreads(). */
__device__ __forceinline__ void load_shared_tables(const u32* tables) {
  for (u32 i = SRTP_SHARED_FIRST; i < SRTP_SH_WORDS; i += SRTP_SHARED_STEP)
    srtp_sh[i] = tables[i < SRTP_SH_TE_WORDS ? i : SRTP_GREM + (i - SRTP_SH_TE_WORDS)];
}

/* ------------------------------------------------------------------------ */
/* AES encryption (T-table implementation)                                   */
/* ------------------------------------------------------------------------ */

__device__ __forceinline__ u32 te0(u32 x) { return srtp_sh[x]; }
#ifdef SRTP_AES_ONE_TABLE
__device__ __forceinline__ u32 te1(u32 x) { return ror32(srtp_sh[x], 8); }
__device__ __forceinline__ u32 te2(u32 x) { return ror32(srtp_sh[x], 16); }
__device__ __forceinline__ u32 te3(u32 x) { return ror32(srtp_sh[x], 24); }
#else
__device__ __forceinline__ u32 te1(u32 x) { return srtp_sh[SRTP_TE1 + x]; }
__device__ __forceinline__ u32 te2(u32 x) { return srtp_sh[SRTP_TE2 + x]; }
__device__ __forceinline__ u32 te3(u32 x) { return srtp_sh[SRTP_TE3 + x]; }
#endif
/* S-box from the T-table: Te0[x] = {2s, s, s, 3s}. */
__device__ __forceinline__ u32 sbox(u32 x) { return (srtp_sh[x] >> 8) & 0xffu; }
__device__ __forceinline__ u32 sub_word(u32 t) {
  return (sbox(t >> 24) << 24) | (sbox((t >> 16) & 0xff) << 16) | (sbox((t >> 8) & 0xff) << 8) | sbox(t & 0xff);
}

/* Encrypt one block given as four big-endian words. rk: the round keys in the
 * key slot (4*(NR+1) words). NR is a template parameter so the round loop is
 * fully unrolled; the function is kept out of line so that each AES variant
 * exists once in the binary (instruction-cache footprint) however many call
 * sites use it. */
template <int NR>
SRTP_NOINLINE __device__ U4 aes_block(const u8* rk, U4 in) {
  u32 s0 = in.x ^ ld32(rk + 0);
  u32 s1 = in.y ^ ld32(rk + 4);
  u32 s2 = in.z ^ ld32(rk + 8);
  u32 s3 = in.w ^ ld32(rk + 12);
  SRTP_UNROLL
  for (int r = 1; r < NR; ++r) {
    const u8* k = rk + 16 * r;
    const u32 t0 = te0(s0 >> 24) ^ te1((s1 >> 16) & 0xff) ^ te2((s2 >> 8) & 0xff) ^ te3(s3 & 0xff) ^ ld32(k + 0);
    const u32 t1 = te0(s1 >> 24) ^ te1((s2 >> 16) & 0xff) ^ te2((s3 >> 8) & 0xff) ^ te3(s0 & 0xff) ^ ld32(k + 4);
    const u32 t2 = te0(s2 >> 24) ^ te1((s3 >> 16) & 0xff) ^ te2((s0 >> 8) & 0xff) ^ te3(s1 & 0xff) ^ ld32(k + 8);
    const u32 t3 = te0(s3 >> 24) ^ te1((s0 >> 16) & 0xff) ^ te2((s1 >> 8) & 0xff) ^ te3(s2 & 0xff) ^ ld32(k + 12);
    s0 = t0;
    s1 = t1;
    s2 = t2;
    s3 = t3;
  }
  /* Final round (SubBytes + ShiftRows, no MixColumns). The S-box value sits
   * in byte 0 of Te2, byte 1 of Te3, byte 2 of Te0 and byte 3 of Te1, so a
   * mask picks it out of the same tables: no separate S-box in shared memory. */
  const u8* k = rk + 16 * NR;
  U4 out;
  out.x = (te2(s0 >> 24) & 0xff000000u) ^ (te3((s1 >> 16) & 0xff) & 0x00ff0000u) ^ (te0((s2 >> 8) & 0xff) & 0x0000ff00u) ^
          (te1(s3 & 0xff) & 0x000000ffu) ^ ld32(k + 0);
  out.y = (te2(s1 >> 24) & 0xff000000u) ^ (te3((s2 >> 16) & 0xff) & 0x00ff0000u) ^ (te0((s3 >> 8) & 0xff) & 0x0000ff00u) ^
          (te1(s0 & 0xff) & 0x000000ffu) ^ ld32(k + 4);
  out.z = (te2(s2 >> 24) & 0xff000000u) ^ (te3((s3 >> 16) & 0xff) & 0x00ff0000u) ^ (te0((s0 >> 8) & 0xff) & 0x0000ff00u) ^
          (te1(s1 & 0xff) & 0x000000ffu) ^ ld32(k + 8);
  out.w = (te2(s3 >> 24) & 0xff000000u) ^ (te3((s0 >> 16) & 0xff) & 0x00ff0000u) ^ (te0((s1 >> 8) & 0xff) & 0x0000ff00u) ^
          (te1(s2 & 0xff) & 0x000000ffu) ^ ld32(k + 12);
  return out;
}

__device__ __forceinline__ U4 make_u4(u32 a, u32 b, u32 c, u32 d) {
  U4 v;
  v.x = a;
  v.y = b;
  v.z = c;
  v.w = d;
  return v;
}

/* AES key expansion (FIPS-197 §5.2) into the slot, nk = 4 or 8 key words. */
__device__ __forceinline__ void aes_expand_key(const u8* key, u32 nk, u32 nr, u8* rk) {
  const u32 total = 4 * (nr + 1);
  for (u32 i = 0; i < nk; ++i)
    st32(rk + 4 * i, ((u32)key[4 * i] << 24) | ((u32)key[4 * i + 1] << 16) | ((u32)key[4 * i + 2] << 8) | key[4 * i + 3]);
  u32 rcon = 1;
  for (u32 i = nk; i < total; ++i) {
    u32 t = ld32(rk + 4 * (i - 1));
    if (i % nk == 0) {
      t = sub_word((t << 8) | (t >> 24)) ^ (rcon << 24); /* SubWord(RotWord(t)) ^ Rcon */
      rcon = gf_xtime(rcon);
    } else if (nk > 6 && i % nk == 4) {
      t = sub_word(t);
    }
    st32(rk + 4 * i, ld32(rk + 4 * (i - nk)) ^ t);
  }
}

/* ------------------------------------------------------------------------ */
/* SHA-1 / HMAC-SHA1                                                         */
/* ------------------------------------------------------------------------ */

/* SHA-1 compression with a rolling 16-word schedule. Once the 80 rounds are
 * unrolled every w[] index is a compile-time constant, so w stays in
 * registers (no local memory). */
__device__ __forceinline__ void sha1_compress(u32 h[5], u32 w[16]) {
  u32 a = h[0], b = h[1], c = h[2], d = h[3], e = h[4];
  SRTP_UNROLL
  for (int t = 0; t < 80; ++t) {
    u32 wt;
    if (t < 16) {
      wt = w[t];
    } else {
      wt = rotl32(w[(t - 3) & 15] ^ w[(t - 8) & 15] ^ w[(t - 14) & 15] ^ w[t & 15], 1);
      w[t & 15] = wt;
    }
    u32 f, k;
    if (t < 20) {
      f = d ^ (b & (c ^ d)); /* Ch */
      k = 0x5a827999u;
    } else if (t < 40) {
      f = b ^ c ^ d;
      k = 0x6ed9eba1u;
    } else if (t < 60) {
      f = (b & c) | (d & (b | c)); /* Maj */
      k = 0x8f1bbcdcu;
    } else {
      f = b ^ c ^ d;
      k = 0xca62c1d6u;
    }
    const u32 tmp = rotl32(a, 5) + f + e + k + wt;
    e = d;
    d = c;
    c = rotl32(b, 30);
    b = a;
    a = tmp;
  }
  h[0] += a;
  h[1] += b;
  h[2] += c;
  h[3] += d;
  h[4] += e;
}

struct Sha1Out {
  u32 h0, h1, h2, h3, h4;
};

/* HMAC-SHA1(auth_key, p[0..L) || roc_be32) from the slot's precomputed inner
 * and outer states (SRTCP passes its trailer word E || index as `roc`).
 * p must be 16-byte aligned (it is a packet start).
 *
 * The inner message after the key block is M = p[0..L) || roc || 0x80 ||
 * 0.. || bitlen64, bitlen = (64 + L + 4) * 8, in nblocks blocks. Blocks lying
 * entirely inside p use 128-bit loads; the 1 or 2 tail blocks are assembled
 * word by word: with q = L/4, s = L%4, word q holds the last s packet bytes
 * followed by the first 4-s ROC bytes, word q+1 the remaining ROC bytes and
 * the 0x80 byte. The extra last iteration is the outer hash (inner digest ||
 * padding), so the 80-round compression exists only once in the code. */
static SRTP_NOINLINE __device__ Sha1Out hmac_sha1(const u8* slot, const u8* p, u32 L, u32 roc) {
  u32 h[5];
  SRTP_UNROLL
  for (int k = 0; k < 5; ++k) h[k] = ld32(slot + SLOT_HMAC_I + 4 * k);

  const u32 nfull = L >> 6;
  const u32 nblocks = (L + 4 + 1 + 8 + 63) >> 6; /* data, ROC, 0x80, length */
  const u32 q = L >> 2, s = L & 3;
  const u32 bitlen = (64 + L + 4) * 8;

  for (u32 b = 0; b <= nblocks; ++b) {
    u32 w[16];
    if (b < nfull) {
      const u8* blk = p + 64 * b;
      SRTP_UNROLL
      for (int k = 0; k < 4; ++k) {
        const U4 v = ld128(blk + 16 * k);
        w[4 * k + 0] = bswap32(v.x);
        w[4 * k + 1] = bswap32(v.y);
        w[4 * k + 2] = bswap32(v.z);
        w[4 * k + 3] = bswap32(v.w);
      }
    } else if (b < nblocks) {
      SRTP_UNROLL
      for (int t = 0; t < 16; ++t) {
        const u32 k = 16 * b + (u32)t;
        u32 x;
        if (k < q)
          x = ld_be32(p + 4 * k);
        else if (k == q) /* may read up to 3 bytes past L: inside the packet room, masked */
          x = (s ? (ld_be32(p + 4 * k) & mask_n((int)s)) : 0u) | (roc >> (8 * s));
        else if (k == q + 1)
          x = (s ? (roc << (32 - 8 * s)) : 0u) | (0x80000000u >> (8 * s));
        else
          x = 0u;
        /* word 15 of the last block: low half of the 64-bit length (the high
           half, word 14, is 0); never one of words q, q+1 by choice of nblocks */
        if (t == 15 && b == nblocks - 1) x = bitlen;
        w[t] = x;
      }
    } else {
      /* outer hash: one block = inner digest || 0x80 || 0.. || (64+20)*8 */
      SRTP_UNROLL
      for (int k = 0; k < 5; ++k) {
        w[k] = h[k];
        h[k] = ld32(slot + SLOT_HMAC_O + 4 * k);
      }
      w[5] = 0x80000000u;
      SRTP_UNROLL
      for (int k = 6; k < 15; ++k) w[k] = 0u;
      w[15] = (64 + 20) * 8;
    }
    sha1_compress(h, w);
  }
  Sha1Out o;
  o.h0 = h[0];
  o.h1 = h[1];
  o.h2 = h[2];
  o.h3 = h[3];
  o.h4 = h[4];
  return o;
}

/* SHA-1 state after compressing (key || zero padding) ^ (pad byte repeated). */
__device__ __forceinline__ void hmac_key_state(const u8* key20, u32 pad, u32 st[5]) {
  u32 w[16];
  for (int k = 0; k < 16; ++k) {
    u32 x = 0;
    if (k < 5) x = ((u32)key20[4 * k] << 24) | ((u32)key20[4 * k + 1] << 16) | ((u32)key20[4 * k + 2] << 8) | key20[4 * k + 3];
    w[k] = x ^ pad;
  }
  st[0] = 0x67452301u;
  st[1] = 0xefcdab89u;
  st[2] = 0x98badcfeu;
  st[3] = 0x10325476u;
  st[4] = 0xc3d2e1f0u;
  sha1_compress(st, w);
}

/* ------------------------------------------------------------------------ */
/* GHASH (Shoup's 4-bit table method)                                        */
/*                                                                           */
/* A 128-bit field element is held as (hi, lo): hi = bytes 0..7, lo = bytes  */
/* 8..15, each big-endian; the MSB of byte 0 is the coefficient of x^0 (GCM's */
/* reflected convention), so multiplying by x is a right shift of (hi, lo)   */
/* followed by reduction with 0xE1 << 120.                                   */
/* ------------------------------------------------------------------------ */

struct G128 {
  u64 h, l;
};

/* Returns X * H. ht: the key's table ht[i] = i * H for every 4-bit i (bit 3
 * of i is the lowest degree); the 16 reduction constants are in shared
 * memory after the T-tables. Horner's scheme over the 32 nibbles, from the
 * highest-degree one (low nibble of byte 15), i.e. the nibbles of lo then hi
 * taken from the least significant end. Out of line: one copy in the code. */
static SRTP_NOINLINE __device__ G128 gmul(const u8* ht, u64 xh, u64 xl) {
  const u32* R = srtp_sh + SRTP_SH_TE_WORDS;
  u64 zh = 0, zl = 0;
  u64 v = xl;
  SRTP_UNROLL
  for (int half = 0; half < 2; ++half) {
    SRTP_UNROLL
    for (int i = 0; i < 16; ++i) {
      const u32 nib = (u32)v & 15u;
      v >>= 4;
      const u32 r = (u32)zl & 15u; /* the 4 coefficients pushed past x^127... */
      zl = (zh << 60) | (zl >> 4);
      zh = (zh >> 4) ^ ((u64)R[r] << 48); /* ...are reduced back in */
      zh ^= ld64(ht + 16 * nib);
      zl ^= ld64(ht + 16 * nib + 8);
    }
    v = xh;
  }
  G128 z;
  z.h = zh;
  z.l = zl;
  return z;
}

/* Reduction constant for nibble r shifted out by a right shift of 4: bit j of
 * r stands for x^(131-j) = x^(3-j) * (x^7 + x^2 + x + 1) mod P, which is
 * 0xE100 >> (3-j) in the top 16 bits. */
__device__ __forceinline__ u32 ghash_rem(u32 r) {
  u32 v = 0;
  for (int j = 0; j < 4; ++j)
    if (r & (1u << j)) v ^= 0xe100u >> (3 - j);
  return v;
}

/* GHASH-absorb p[a..b), zero-padded to whole blocks. */
__device__ __forceinline__ void ghash_range(const u8* ht, const u8* p, u32 a, u32 b, u64& xh, u64& xl) {
  const bool al = (a & 3u) == 0;
  for (u32 pos = a; pos < b; pos += 16) {
    const int n = (int)(b - pos);
    const u8* q = p + pos;
    const u32 w0 = ld_be_part(q, n, al), w1 = ld_be_part(q + 4, n - 4, al);
    const u32 w2 = ld_be_part(q + 8, n - 8, al), w3 = ld_be_part(q + 12, n - 12, al);
    const G128 z = gmul(ht, xh ^ (((u64)w0 << 32) | w1), xl ^ (((u64)w2 << 32) | w3));
    xh = z.h;
    xl = z.l;
  }
}

/* GHASH-absorb the AAD p[0..b) || tr, zero-padded to whole blocks, where tr
 * is the 4 bytes of the big-endian word `tr` when tn == 4 (the SRTCP trailer
 * E || index, which is not stored right after p[0..b)) and nothing when
 * tn == 0 (SRTP; tr must then be 0). p is 16-aligned, so every word is read
 * aligned; the last partial one reads up to 3 bytes past b (inside the
 * packet or its room) and masks them off. */
__device__ __forceinline__ void ghash_aad(const u8* ht, const u8* p, u32 b, u32 tr, u32 tn, u64& xh, u64& xl) {
  for (u32 pos = 0; pos < b + tn; pos += 16) {
    u32 w[4];
    SRTP_UNROLL
    for (int i = 0; i < 4; ++i) {
      const int o = (int)pos + 4 * i, r = o - (int)b; /* r: position of this word relative to tr */
      u32 x = ld_be_part(p + o, -r, true);
      if (r > -4 && r < 0)
        x |= tr >> (-8 * r); /* the word straddles b: data bytes, then the first trailer bytes */
      else if (r >= 0 && r < 4)
        x |= tr << (8 * r); /* the remaining trailer bytes, then zeros */
      w[i] = x;
    }
    const G128 z = gmul(ht, xh ^ (((u64)w[0] << 32) | w[1]), xl ^ (((u64)w[2] << 32) | w[3]));
    xh = z.h;
    xl = z.l;
  }
}

/* ------------------------------------------------------------------------ */
/* Counter mode                                                              */
/* ------------------------------------------------------------------------ */

/* One AES block with the slot's key (nr = 10 or 14). */
__device__ __forceinline__ U4 aes_nr(const u8* rk, u32 nr, U4 in) {
  return nr == 10 ? aes_block<10>(rk, in) : aes_block<14>(rk, in);
}

/* XOR the keystream into p[start..end). Keystream block j = E_K(counter j)
 * with counter j = (v0, v1, v2, v3 + j):
 *   AES-CM: (v0..v3) = IV. Its low 16 bits are 0 and j < 4096 for packets
 *           < 64 KiB, so adding j to the low word never carries: identical
 *           to RFC 3711's 128-bit addition.
 *   GCM:    (v0, v1, v2) = IV, v3 = 2 (J0 + 1); the 32-bit add is inc32.
 * absorb: GHASH the produced ciphertext (GCM protect, single pass).
 * A 4-aligned start (always the case for RTP headers) uses 32-bit accesses;
 * any other start falls back to byte accesses. */
__device__ __forceinline__ void ctr_range(const u8* rk, u32 nr, u8* p, u32 start, u32 end, u32 v0, u32 v1, u32 v2,
                                          u32 v3, const u8* ht, bool absorb, u64& xh, u64& xl) {
  const bool al = (start & 3u) == 0;
  u32 j = 0;
  for (u32 pos = start; pos < end; pos += 16, ++j) {
    const U4 ks = aes_nr(rk, nr, make_u4(v0, v1, v2, v3 + j));
    const int n = (int)(end - pos);
    u8* q = p + pos;
    const u32 c0 = ld_be_part(q, n, al) ^ ks.x;
    const u32 c1 = ld_be_part(q + 4, n - 4, al) ^ ks.y;
    const u32 c2 = ld_be_part(q + 8, n - 8, al) ^ ks.z;
    const u32 c3 = ld_be_part(q + 12, n - 12, al) ^ ks.w;
    st_be_part(q, c0, n, al);
    st_be_part(q + 4, c1, n - 4, al);
    st_be_part(q + 8, c2, n - 8, al);
    st_be_part(q + 12, c3, n - 12, al);
    if (absorb) {
      const G128 z = gmul(ht, xh ^ (((u64)(c0 & mask_n(n)) << 32) | (c1 & mask_n(n - 4))),
                          xl ^ (((u64)(c2 & mask_n(n - 8)) << 32) | (c3 & mask_n(n - 12))));
      xh = z.h;
      xl = z.l;
    }
  }
}

/* GCM tag = E_K(J0) ^ GHASH after the length block (AAD = alen bytes,
 * ciphertext = clen bytes), J0 = IV || 1. */
__device__ __forceinline__ U4 gcm_tag(const u8* rk, u32 nr, const u8* ht, u32 alen, u32 clen, u32 i0, u32 i1, u32 i2, u64 xh,
                                      u64 xl) {
  const G128 z = gmul(ht, xh ^ ((u64)alen * 8), xl ^ ((u64)clen * 8));
  const U4 e = aes_nr(rk, nr, make_u4(i0, i1, i2, 1u));
  return make_u4((u32)(z.h >> 32) ^ e.x, (u32)z.h ^ e.y, (u32)(z.l >> 32) ^ e.z, (u32)z.l ^ e.w);
}

/* ------------------------------------------------------------------------ */
/* Packet processing                                                         */
/*                                                                           */
/* Written as one flow for both kinds and for SRTP and SRTCP so that every   */
/* heavy step (counter pass, HMAC, tag compare, tag write) has a single call */
/* site: small code.                                                         */
/*                                                                           */
/* Packet layouts (hdr = 8 for SRTCP, tx = 4 trailer bytes E || index):      */
/*   SRTP          [hdr][payload][tag]                                       */
/*   SRTCP kind 0  [hdr][payload][E||index][tag]   MAC over all but the tag  */
/*   SRTCP kind 1  [hdr][payload][tag][E||index]   AAD = hdr || E||index     */
/*                 (E clear: AAD = hdr || payload || E||index, no ciphertext)*/
/* `end` is the end of the payload, `cs` the start of the encrypted part:    */
/* hdr, or end when nothing is encrypted (NULL cipher, SRTCP with E clear).  */
/* ------------------------------------------------------------------------ */
__device__ __forceinline__ u8 process_packet(const u8* slots, const PacketDesc& d, u8* data) {
  const u8* slot = slots + (u64)d.slot * SRTP_KEY_SLOT_BYTES;
  const u32 kind = ld32(slot + SLOT_KIND), nr = ld32(slot + SLOT_NR);
  const u32 len = d.len, hdr = d.hdr, tl = d.tag_len;
  const bool rtcp = d.op >= 2;
  const bool protect = (d.op & 1u) == 0;
  const u32 tx = rtcp ? 4u : 0u; /* SRTCP trailer bytes */

  /* Reject what the host promises never to send; the buffer is not touched. */
  if (d.op > 3 || hdr > len) return SRTP_STATUS_BAD_DESC;
  if (rtcp && hdr != 8) return SRTP_STATUS_BAD_DESC;
  if (!protect && len < hdr + tx + tl) return SRTP_STATUS_BAD_DESC;
  if (kind == SRTP_KIND_HMAC) {
    /* the tag must fit the room (len+16, SRTCP protect len+4+16) */
    if (tl == 0 || tl > 16 || (rtcp && tl < 4)) return SRTP_STATUS_BAD_DESC;
  } else if (kind == SRTP_KIND_GCM) {
    if (tl != 16) return SRTP_STATUS_BAD_DESC;
  } else {
    return SRTP_STATUS_BAD_DESC; /* slot set up from unusable RawKeys */
  }

  const bool gcm = kind == SRTP_KIND_GCM;
  /* SRTCP: the trailer word E || index. The IV formulas below take the SRTP
   * (roc, seq) pair; the 31-bit SRTCP index maps to roc = index >> 16,
   * seq = index & 0xffff in both kinds (kind 0: index << 16 spans words 2
   * and 3 like the 48-bit SRTP index; GCM: 00 00 || index in the last 6 IV
   * bytes, since index >> 16 < 2^15 leaves the top half of roc zero). */
  const u32 tr = rtcp ? d.roc : 0u;
  const u32 roc = rtcp ? (tr & 0x7fffffffu) >> 16 : d.roc;
  const u32 seq = rtcp ? tr & 0xffffu : (u32)d.seq;
  const bool e_bit = (tr >> 31) != 0;
  if (rtcp && protect && e_bit && nr == 0) return SRTP_STATUS_BAD_DESC; /* E set without a cipher */
  const bool enc = nr != 0 && (!rtcp || e_bit);
  if (rtcp && !protect) {
    /* SRTCP unprotect: the descriptor's word must be the packet's own trailer
     * (the host reads it from there); anything else is a host bug. Byte
     * loads: the trailer need not be 4-aligned. */
    const u8* q = data + d.offset + (len - 4u - (gcm ? 0u : tl));
    if ((((u32)q[0] << 24) | ((u32)q[1] << 16) | ((u32)q[2] << 8) | q[3]) != tr) return SRTP_STATUS_BAD_DESC;
  }

  u8* p = data + d.offset;
  const u32 end = protect ? len : len - tl - tx; /* end of the payload */
  const u32 cs = enc ? hdr : end;                /* start of the encrypted part */
  const u32 tag_at = end + (gcm ? 0u : tx);      /* tag position */
  const u32 tr_at = end + (gcm ? 16u : 0u);      /* SRTCP trailer position */

  const int n = (int)tl;
  const u8* rk = slot + SLOT_RK;
  const u8* ht = slot + SLOT_HTABLE;

  /* Counter block / IV words (big-endian). */
  const u32 b0 = ld32(slot + SLOT_IV + 0), b1 = ld32(slot + SLOT_IV + 4), b2 = ld32(slot + SLOT_IV + 8);
  u32 v0, v1, v2, v3;
  if (gcm) {
    /* RFC 7714: IV = salt[0..12] ^ (00 00 || ssrc || roc || seq);
     * SRTCP (§9.1): salt[0..12] ^ (00 00 || ssrc || 00 00 || index) */
    v0 = b0 ^ (d.ssrc >> 16);
    v1 = b1 ^ ((d.ssrc << 16) | (roc >> 16));
    v2 = b2 ^ ((roc << 16) | seq);
    v3 = 2u;
  } else {
    /* RFC 3711 §4.1.1: IV = (salt << 16) ^ (ssrc << 64) ^ (index << 16);
     * index << 16 puts roc in word 2 and seq in the top half of word 3. */
    v0 = b0;
    v1 = b1 ^ d.ssrc;
    v2 = b2 ^ roc;
    v3 = ld32(slot + SLOT_IV + 12) ^ (seq << 16);
  }

  u64 xh = 0, xl = 0; /* GHASH accumulator */
  if (gcm) ghash_aad(ht, p, cs, tr, tx, xh, xl); /* AAD = p[0..cs) || SRTCP trailer */

  /* Kind 0 MAC input: p[0..end) || word, word = the ROC (SRTP) or the
   * trailer E || index (SRTCP; for unprotect these are the packet's own
   * trailer bytes, checked above). Both are d.roc. */
  if (!protect) {
    /* Authenticate first; nothing is written unless the tag matches. */
    U4 e;
    if (gcm) {
      ghash_range(ht, p, cs, end, xh, xl);
      e = gcm_tag(rk, nr, ht, cs + tx, end - cs, v0, v1, v2, xh, xl);
    } else {
      const Sha1Out m = hmac_sha1(slot, p, end, d.roc);
      e = make_u4(m.h0, m.h1, m.h2, m.h3);
    }
    /* constant-time compare of the first tl bytes: OR of XORs, no early exit */
    const bool al = (tag_at & 3u) == 0;
    u32 diff = 0;
    diff |= (ld_be_part(p + tag_at, n, al) ^ e.x) & mask_n(n);
    diff |= (ld_be_part(p + tag_at + 4, n - 4, al) ^ e.y) & mask_n(n - 4);
    diff |= (ld_be_part(p + tag_at + 8, n - 8, al) ^ e.z) & mask_n(n - 8);
    diff |= (ld_be_part(p + tag_at + 12, n - 12, al) ^ e.w) & mask_n(n - 12);
    if (diff != 0) return SRTP_STATUS_AUTH_FAIL;
  }

  /* Encrypt or decrypt in place (NULL cipher, SRTCP with E clear: nothing to
   * do). GCM protect GHASHes the ciphertext in the same pass. */
  if (enc) ctr_range(rk, nr, p, cs, end, v0, v1, v2, v3, ht, gcm && protect, xh, xl);

  if (protect) {
    U4 t;
    if (gcm) {
      t = gcm_tag(rk, nr, ht, cs + tx, end - cs, v0, v1, v2, xh, xl);
    } else {
      const Sha1Out m = hmac_sha1(slot, p, end, d.roc);
      t = make_u4(m.h0, m.h1, m.h2, m.h3);
    }
    /* tag -> p[tag_at..tag_at+tl); tl <= 16 keeps even the read-modify-write
       of an aligned partial last word inside the room (len+16, or len+4+16
       for SRTCP kind 0) */
    const bool al = (tag_at & 3u) == 0;
    st_be_part(p + tag_at, t.x, n, al);
    st_be_part(p + tag_at + 4, t.y, n - 4, al);
    st_be_part(p + tag_at + 8, t.z, n - 8, al);
    st_be_part(p + tag_at + 12, t.w, n - 12, al);
    if (rtcp) st_be_part(p + tr_at, tr, 4, (tr_at & 3u) == 0); /* SRTCP trailer */
  }
  return SRTP_STATUS_DONE;
}

/* ------------------------------------------------------------------------ */
/* Kernels                                                                   */
/* ------------------------------------------------------------------------ */

/* Launched with 1 block of 256 threads: entry i by thread i (any launch
 * totalling >= 1 thread works thanks to the grid-stride loop). */
extern "C" __global__ void srtp_tables_init(u32* tables) {
  for (u32 i = blockIdx.x * blockDim.x + threadIdx.x; i < 256; i += blockDim.x * gridDim.x) {
    const u32 s = aes_sbox_compute(i);
    const u32 s2 = gf_xtime(s), s3 = s2 ^ s;
    const u32 t = (s2 << 24) | (s << 16) | (s << 8) | s3; /* {2s, s, s, 3s} */
    tables[SRTP_TE0 + i] = t;
    tables[SRTP_TE1 + i] = ror32(t, 8);
    tables[SRTP_TE2 + i] = ror32(t, 16);
    tables[SRTP_TE3 + i] = ror32(t, 24);
    if (i < 16) tables[SRTP_GREM + i] = ghash_rem(i);
  }
}

/* Expand one RawKeys into a key slot (uses the shared tables). */
__device__ __forceinline__ void key_setup_one(const RawKeys& r, u8* slot) {
  for (u32 k = 0; k < SRTP_KEY_SLOT_BYTES; k += 4) st32(slot + k, 0u);
  const u32 el = r.enc_len, kind = r.kind;
  const u32 nr = el == 16 ? 10u : (el == 32 ? 14u : 0u);
  const bool ok = (el == 0 || el == 16 || el == 32) && (kind == SRTP_KIND_HMAC || (kind == SRTP_KIND_GCM && el != 0));
  if (!ok) {
    st32(slot + SLOT_KIND, SRTP_KIND_INVALID);
    return;
  }
  st32(slot + SLOT_ENC_LEN, el);
  st32(slot + SLOT_NR, nr);
  if (nr != 0) aes_expand_key(r.enc, el / 4, nr, slot + SLOT_RK);

  const u8* s = r.salt;
  st32(slot + SLOT_IV + 0, ((u32)s[0] << 24) | ((u32)s[1] << 16) | ((u32)s[2] << 8) | s[3]);
  st32(slot + SLOT_IV + 4, ((u32)s[4] << 24) | ((u32)s[5] << 16) | ((u32)s[6] << 8) | s[7]);
  st32(slot + SLOT_IV + 8, ((u32)s[8] << 24) | ((u32)s[9] << 16) | ((u32)s[10] << 8) | s[11]);
  if (kind == SRTP_KIND_HMAC) {
    /* IV base = 112-bit salt << 16 (GCM uses only the first 12 bytes) */
    st32(slot + SLOT_IV + 12, ((u32)s[12] << 24) | ((u32)s[13] << 16));
    u32 st[5];
    hmac_key_state(r.auth, 0x36363636u, st);
    for (int k = 0; k < 5; ++k) st32(slot + SLOT_HMAC_I + 4 * k, st[k]);
    hmac_key_state(r.auth, 0x5c5c5c5cu, st);
    for (int k = 0; k < 5; ++k) st32(slot + SLOT_HMAC_O + 4 * k, st[k]);
  } else {
    /* H = E_K(0^128) */
    const U4 h = nr == 10 ? aes_block<10>(slot + SLOT_RK, make_u4(0, 0, 0, 0)) : aes_block<14>(slot + SLOT_RK, make_u4(0, 0, 0, 0));
    st32(slot + SLOT_H + 0, h.x);
    st32(slot + SLOT_H + 4, h.y);
    st32(slot + SLOT_H + 8, h.z);
    st32(slot + SLOT_H + 12, h.w);
    /* Shoup table: ht[8] = H, ht[4] = H*x, ht[2] = H*x^2, ht[1] = H*x^3,
     * the others by linearity; ht[0] = 0 (the slot was zeroed). */
    u8* ht = slot + SLOT_HTABLE;
    u64 vh = ((u64)h.x << 32) | h.y, vl = ((u64)h.z << 32) | h.w;
    st64(ht + 16 * 8, vh);
    st64(ht + 16 * 8 + 8, vl);
    for (u32 i = 4; i >= 1; i >>= 1) {
      const u64 red = (vl & 1u) ? 0xe100000000000000ull : 0ull;
      vl = (vh << 63) | (vl >> 1);
      vh = (vh >> 1) ^ red;
      st64(ht + 16 * i, vh);
      st64(ht + 16 * i + 8, vl);
    }
    for (u32 i = 2; i <= 8; i <<= 1)
      for (u32 j = 1; j < i; ++j) {
        st64(ht + 16 * (i + j), ld64(ht + 16 * i) ^ ld64(ht + 16 * j));
        st64(ht + 16 * (i + j) + 8, ld64(ht + 16 * i + 8) ^ ld64(ht + 16 * j + 8));
      }
  }
  st32(slot + SLOT_KIND, kind);
}

/* Thread i expands raw[i] into slot slot_ids[i]. Launched with blocks of 128
 * threads (grid-stride, so any shape works). */
extern "C" __global__ void srtp_keys_setup(const u32* __restrict__ tables, const RawKeys* __restrict__ raw,
                                           const u32* __restrict__ slot_ids, u32 n, u8* __restrict__ slots) {
  load_shared_tables(tables);
  __syncthreads();
  for (u32 i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
    key_setup_one(raw[i], slots + (u64)slot_ids[i] * SRTP_KEY_SLOT_BYTES);
}

/* One thread per packet (grid-stride). The block first copies the T-tables
 * and the GHASH reduction constants into shared memory. */
extern "C" __global__ void srtp_packets(const u32* __restrict__ tables, const u8* __restrict__ slots,
                                        PacketDesc* __restrict__ descs, u32 n, u8* __restrict__ data) {
  load_shared_tables(tables);
  __syncthreads();
  for (u32 i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
    const PacketDesc d = descs[i];
    descs[i].status = process_packet(slots, d, data);
  }
}
