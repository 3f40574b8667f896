// The Hopper (sm_90a) decode kernel for head dim 512 (d = dv = 512, Gemma's global layers) and <= 16 packed
// rows a kv head (GQA group x query tokens). The portable (512, 512) kernel reads ~3.3 TB/s with ~64 KB in
// flight an SM; here a producer warpgroup streams each 64-key tile's K and V rows (1 KiB each) by cp.async
// into slots of their own, a ring of three 64-KiB slots (K_t in slot 2t % 3, V_t in (2t + 1) % 3: the
// producer up to a tile and a half ahead of the consumer), and the consumer warpgroup
// (rows_sm90/consumer.cuh) computes S^T = K Q^T and O^T += V^T P^T with the rows along wgmma's N (m64n16k16):
// the tensor work is small (64 FLOP a byte at 16 rows), the stream is the bound. Static key splits, the split
// combine and the epilogue's rule are the MLA kernels' (attention/prologue.cuh, schedule.cuh).
#pragma once

#include <cstdint>

#include "cuda/attention/epilogue.cuh"
#include "cuda/attention/prologue.cuh"
#include "cuda/attention/schedule.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/common/sequence.cuh"
#include "cuda/prefill_sm90/cta.cuh"
#include "cuda/prefill_sm90/producer.cuh"
#include "cuda/prefill_sm90/ptx.cuh"
#include "cuda/rows_sm90/consumer.cuh"
#include "cuda/wide_sm90/config.hpp"

namespace kvattn::cuda::sm90 {

template <typename T_>
struct WideConfig : WideTile {
  using T = T_;
  static constexpr bool kVarlen = false;  // (cta_rows: the fixed-q grid)
  static constexpr int kThreads = 256;    // producer + one consumer warpgroup
  // rows_consume: S^T over K's 8 panels, O^T over V's 512 channels, q's 64 chunks a row (no qv).
  static constexpr int kSPanels = kPanels;
  static constexpr int kDimV = kDim;
  static constexpr int kQChunks = kDim / 8, kChunks = kDim / 8;
  // A slot's full barrier counts the producer's 4 warps, its empty the consumer's 4; named barrier 1: the
  // consumer warpgroup.
  static constexpr int kFullArrivals = 4, kEmptyArrivals = 4;
  static constexpr int kBarrier = 1;
};

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)

// The ring: operand j (K_t: j = 2t, V_t: j = 2t + 1) in slot j % 3, the slot's (j / 3)-th use.
template <class Cfg>
struct WideSlotsRing {
  uint32_t base, full, empty;  // slot s at base + s kSlotBytes, its barriers at full / empty + 8 s
  __device__ __forceinline__ static int slot(uint32_t j) { return static_cast<int>(j % Cfg::kSlots); }
  __device__ __forceinline__ uint32_t wait(uint32_t j) const {
    mbar_wait(full + 8 * slot(j), (j / Cfg::kSlots) & 1);
    fence_proxy_async();  // the slot was written by cp.async (generic proxy)
    return slot(j) * Cfg::kSlotBytes;
  }
  __device__ __forceinline__ uint32_t wait_s(int64_t t) const { return wait(2 * static_cast<uint32_t>(t)); }
  __device__ __forceinline__ void done_s(int64_t t) const {
    warp_arrive(empty + 8 * slot(2 * static_cast<uint32_t>(t)));
  }
  __device__ __forceinline__ uint32_t wait_v(int64_t t) const {
    return wait(2 * static_cast<uint32_t>(t) + 1);
  }
  __device__ __forceinline__ void done_v(int64_t t) const {
    warp_arrive(empty + 8 * slot(2 * static_cast<uint32_t>(t) + 1));
  }
};

// The producer warpgroup: tile t's K rows into slot 2t % 3, then its V rows into (2t + 1) % 3, each slot
// once the consumer has released its previous use; lane < 16 of warp w addresses key row 16 w + lane (its
// page-table entry a tile ahead, as the MLA producer), the warp copies its 16 rows' 64 chunks each in
// 16-byte cp.async (consecutive lanes, consecutive chunks of a row), 128B-swizzled into 8 panels; slots
// outside [leftpad, end) zero-filled.
template <class Cfg>
__device__ __forceinline__ void wide_produce(const AttnParams& p, const Sequence& seq, int kv_head,
                                             int64_t slot0, int64_t n_tiles, const WideSlotsRing<Cfg>& ring) {
  constexpr int kRowsPerWarp = Cfg::kBlockN / 4;
  constexpr int kChunksRow = Cfg::kDim / 8;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const unsigned char* k_base = static_cast<const unsigned char*>(p.k_cache.ptr);
  const unsigned char* v_base = static_cast<const unsigned char*>(p.v_cache.ptr);
  const TileKeyRow<Cfg::kBlockN> key(p, seq, kv_head, slot0, n_tiles);
  int32_t entry = key.entry(0);
  uint32_t k_off, v_off;
  key.offsets(0, entry, k_off, v_off);
  entry = key.entry(1);
  for (int64_t tile = 0; tile < n_tiles; ++tile) {
    uint32_t k_next, v_next;
    key.offsets(tile + 1, entry, k_next, v_next);
    entry = key.entry(tile + 2);
#pragma unroll 1
    for (int which = 0; which < 2; ++which) {  // K, then V
      const uint32_t j = 2 * static_cast<uint32_t>(tile) + which;
      const int slot = WideSlotsRing<Cfg>::slot(j);
      mbar_wait(ring.empty + 8 * slot, ((j / Cfg::kSlots) & 1) ^ 1u);
      const uint32_t dst = ring.base + slot * Cfg::kSlotBytes;
      const uint32_t off = which == 0 ? k_off : v_off;
      const unsigned char* src = which == 0 ? k_base : v_base;
#pragma unroll 8
      for (int jj = 0; jj < kRowsPerWarp * kChunksRow / 32; ++jj) {
        const int idx = jj * 32 + lane, row_in_warp = idx / kChunksRow, c = idx % kChunksRow;
        const uint32_t row = __shfl_sync(0xffffffffu, off, row_in_warp);
        const bool ok = row != kNoRow;
        cp_async_16(dst + swizzled(warp * kRowsPerWarp + row_in_warp, c, Cfg::kPanelBytes),
                    src + static_cast<uint64_t>(ok ? row + c : 0) * 16, ok);
      }
      warp_arrive_after_copies(ring.full + 8 * slot);  // full once every producer thread's copies have landed
    }
    k_off = k_next;
    v_off = v_next;
  }
  cp_async_wait_all();  // nothing in flight when the producer leaves
}

template <class Cfg>
__device__ __forceinline__ void wide_cta(const PrefillArgs& a) {
  const AttnParams& p = a.p;
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw = smem_addr(smem_raw);  // 1024-byte aligned: the swizzle is a function of the address
  unsigned char* base = smem_raw + ((1024 - raw % 1024) % 1024);
  RowsSmem sm;
  sm.q = base;
  sm.q_addr = smem_addr(base);
  const uint32_t slots = sm.q_addr + Cfg::kQBytes;
  sm.p = slots + Cfg::kSlots * Cfg::kSlotBytes;
  sm.red = reinterpret_cast<float*>(base + Cfg::kQBytes + Cfg::kSlots * Cfg::kSlotBytes + 2 * Cfg::kPBytes);
  sm.sums = sm.red + 2 * 4 * Cfg::kRows;
  const uint32_t full = smem_addr(sm.sums + 4 * Cfg::kRows), empty = full + 8 * Cfg::kSlots;
  const WideSlotsRing<Cfg> ring{slots, full, empty};

  RowsCta c;
  if (!rows_cta_setup<Cfg>(a, c)) return;
  const Piece& w = c.w;
  const Sequence& seq = c.seq;
  const PieceKeys& k = c.k;
  const int64_t n_tiles = k.tile_end - k.tile_begin;
  if (threadIdx.x == 0) {
    for (int s = 0; s < Cfg::kSlots; ++s) {
      mbar_init(full + 8 * s, Cfg::kFullArrivals);
      mbar_init(empty + 8 * s, Cfg::kEmptyArrivals);
    }
  }
  __syncthreads();
  // (Warp-uniform to the compiler through the shuffle: wgmma in a branch it cannot prove warpgroup-uniform
  // is serialized, ptxas C7520.)
  const int wg = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x / 128), 0);
  if (wg == 0) {
    wait_for_prior_grid();  // launched early after the append (PDL): the appended K/V are in place past here
    wide_produce<Cfg>(p, seq, w.kv_head, k.slot0 + k.tile_begin * Cfg::kBlockN, n_tiles, ring);
    return;
  }
  rows_consume<Cfg>(p, seq, w, k, sm, ring);
}

#endif  // sm_90a

// The kernel; empty in passes other than sm_90a (the launcher checks that the sm_90a binary is loaded).
template <class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, 1) wide_kernel(const __grid_constant__ PrefillArgs a) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  allow_dependent_launch();  // the split combine may be scheduled now; it waits for this grid's end
  wide_cta<Cfg>(a);
#endif
}

}  // namespace kvattn::cuda::sm90
