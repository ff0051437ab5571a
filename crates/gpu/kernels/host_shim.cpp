/*
 * host_shim.cpp — runs the kernels of srtp.cu on the CPU.
 *
 * The CUDA keywords used by srtp.cu are defined as macros, then srtp.cu is
 * #included inside namespace srtp_dev (so its helper functions cannot clash
 * with other code linked into the same program). A "launch" loops over every
 * block and thread index on the calling thread, one emulated thread after the
 * other. This is faithful because:
 *   - __syncthreads() only follows the shared-table copy, and with
 *     SRTP_SHARED_FIRST = 0 / SRTP_SHARED_STEP = 1 each emulated thread copies
 *     the whole table itself before using it;
 *   - __shared__ data is `static thread_local`: concurrent host threads
 *     calling these functions each have their own copy.
 * Every exported function is reentrant and thread-safe (they only touch the
 * caller's buffers and thread_local state).
 */
#include <cstddef>

namespace srtp_dev {
struct Dim3 {
  unsigned int x, y, z;
};
static thread_local Dim3 threadIdx, blockIdx, blockDim, gridDim;
}  // namespace srtp_dev

#define SRTP_HOST 1
#define SRTP_SHARED_FIRST 0u
#define SRTP_SHARED_STEP 1u
/* kernels keep C linkage (as on the GPU) but are not exported from the shim */
#define __global__ __attribute__((visibility("hidden")))
#define __device__
#define __forceinline__ inline
#define __shared__ static thread_local
#define __constant__
#define __syncthreads() ((void)0)

namespace srtp_dev {
#include "srtp.cu"
}  // namespace srtp_dev

#undef __global__
#undef __device__
#undef __forceinline__
#undef __shared__
#undef __constant__
#undef __syncthreads

using srtp_dev::PacketDesc;
using srtp_dev::RawKeys;
using srtp_dev::u32;
using srtp_dev::u8;

/* ABI checks against the specification the Rust side is written to. */
static_assert(sizeof(RawKeys) == 80, "RawKeys size");
static_assert(offsetof(RawKeys, enc) == 0 && offsetof(RawKeys, auth) == 32 && offsetof(RawKeys, salt) == 52 &&
                  offsetof(RawKeys, enc_len) == 66 && offsetof(RawKeys, kind) == 67 && offsetof(RawKeys, pad) == 68,
              "RawKeys layout");
static_assert(sizeof(PacketDesc) == 32, "PacketDesc size");
static_assert(offsetof(PacketDesc, offset) == 0 && offsetof(PacketDesc, slot) == 4 && offsetof(PacketDesc, len) == 8 &&
                  offsetof(PacketDesc, hdr) == 10 && offsetof(PacketDesc, op) == 12 && offsetof(PacketDesc, tag_len) == 13 &&
                  offsetof(PacketDesc, status) == 14 && offsetof(PacketDesc, pad0) == 15 && offsetof(PacketDesc, ssrc) == 16 &&
                  offsetof(PacketDesc, roc) == 20 && offsetof(PacketDesc, seq) == 24 && offsetof(PacketDesc, pad1) == 26 &&
                  offsetof(PacketDesc, pad2) == 28,
              "PacketDesc layout");
static_assert(SRTP_KEY_SLOT_BYTES == 1024, "slot size");

/* Emulate kernel<<<grid, block>>>(...): run `body` once per (block, thread). */
template <class F>
static void emulate_launch(u32 grid, u32 block, F body) {
  using namespace srtp_dev;
  gridDim = Dim3{grid, 1, 1};
  blockDim = Dim3{block, 1, 1};
  for (u32 b = 0; b < grid; ++b) {
    blockIdx = Dim3{b, 0, 0};
    for (u32 t = 0; t < block; ++t) {
      threadIdx = Dim3{t, 0, 0};
      body();
    }
  }
}

/* Grid used for srtp_host_packets: the GPU host launches ceil(n/256) blocks;
 * here the grid is capped so the (sequential) emulation does not copy the
 * shared table once per packet, and so the grid-stride loop is exercised. */
static const u32 kHostMaxGrid = 4;

extern "C" {

void srtp_host_tables_init(u32* tables) {
  emulate_launch(1, 256, [&] { srtp_dev::srtp_tables_init(tables); });
}

void srtp_host_keys_setup(const u32* tables, const RawKeys* raw, const u32* slot_ids, u32 n, u8* slots) {
  if (n == 0) return;
  emulate_launch((n + 127) / 128, 128, [&] { srtp_dev::srtp_keys_setup(tables, raw, slot_ids, n, slots); });
}

/* Same as srtp_host_packets with an explicit launch shape (for tests). */
void srtp_host_packets_launch(u32 grid, u32 block, const u32* tables, const u8* slots, PacketDesc* descs, u32 n,
                              u8* data) {
  if (grid == 0 || block == 0) return;
  emulate_launch(grid, block, [&] { srtp_dev::srtp_packets(tables, slots, descs, n, data); });
}

void srtp_host_packets(const u32* tables, const u8* slots, PacketDesc* descs, u32 n, u8* data) {
  if (n == 0) return;
  u32 grid = (n + 255) / 256;
  if (grid > kHostMaxGrid) grid = kHostMaxGrid;
  srtp_host_packets_launch(grid, 256, tables, slots, descs, n, data);
}

u32 srtp_host_abi(u32 which) {
  switch (which) {
    case 0:
      return SRTP_TABLE_WORDS;
    case 1:
      return SRTP_KEY_SLOT_BYTES;
    case 2:
      return (u32)sizeof(PacketDesc);
    case 3:
      return (u32)sizeof(RawKeys);
    default:
      return 0;
  }
}

}  // extern "C"
