// The Hopper (sm_90a) MLA decode kernel for <= 16 packed rows a kv head (MLA's 16 query heads on one kv
// head, 8 heads x 2 speculative tokens, ...): the 64-row kernel (kernel.cuh) would compute 48 padding rows
// of its 64, so here the rows lie along wgmma's N and the keys / channels along its M:
//   S^T (64 keys x 16 rows) = [k v]_t [q qv]^T: 36 wgmma m64n16k16, A = the stage's key rows as stored
//     (K-major), B = Q's 16 rows (K-major);
//   the score mods and the online softmax per column (a row's keys lie across the warpgroup: lanes by
//     shuffles, the four warps through shared memory once a tile);
//   P^T into shared memory as [row][key] (K-major B), O^T (512 channels x 16 rows) += v_t^T P^T: 8 x 4
//     wgmma m64n16k16, A = v's panels read transposed (MN-major), 64 fp32 accumulators a thread.
// A quarter of the 64-row kernel's tensor work (2.2 MFLOP a 64-key tile against 8.9). One consumer
// warpgroup (rows_sm90/consumer.cuh, shared with the d 512 kernel); the producer warpgroup, the stages (two
// of 72 KiB), the splits and the epilogue's rule are the 64-row kernel's. Accumulator layout of m64n16
// (wgmma.cuh): element e of a thread holds M row 16 warp + lane / 4 + 8 ((e / 2) % 2), N column 8 (e / 4) + 2
// (lane % 4) + e % 2.
#pragma once

#include <cmath>
#include <cstdint>

#include "cuda/attention/epilogue.cuh"
#include "cuda/attention/prologue.cuh"
#include "cuda/attention/schedule.cuh"
#include "cuda/attention/score_mod.cuh"
#include "cuda/common/dtype.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/common/row_state.hpp"
#include "cuda/common/sequence.cuh"
#include "cuda/mla_sm90/config.hpp"
#include "cuda/mla_sm90/kernel.cuh"
#include "cuda/prefill_sm90/consumer.cuh"
#include "cuda/prefill_sm90/cta.cuh"
#include "cuda/prefill_sm90/ptx.cuh"
#include "cuda/prefill_sm90/wgmma.cuh"
#include "cuda/rows_sm90/consumer.cuh"

namespace kvattn::cuda::sm90 {

template <typename T_>
struct MlaRowsConfig : MlaRowsTile {
  using T = T_;
  static constexpr bool kVarlen = false;  // (cta_rows: the fixed-q grid)
  static constexpr int kThreads = 256;    // producer + one consumer warpgroup
  static constexpr int kChunksK = kDimK / 8, kChunks = (kDimK + kDimV) / 8;
  static constexpr int kQChunks = kChunksK;  // (rows_consume: q's chunks, then qv's)
  static constexpr int kSPanels = kPanels;   // S^T over [k v]: 9 panels
  // A stage's full barrier counts the producer's 4 warps, its empty the consumer's 4. Named barrier 1: the
  // consumer warpgroup (Q, a tile's maxima, P written).
  static constexpr int kFullArrivals = 4, kEmptyArrivals = 4;
  static constexpr int kBarrier = 1;
};

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)

// The MLA ring: a stage holds a tile's [k v] (panel 0: k, 1-8: v), S's operand and v's at once; the stage is
// released when P v is done (S^T's reads of it are done before).
template <class Cfg>
struct MlaStagesRing {
  uint32_t base, full, empty;  // stage s at base + s kStageBytes, its barriers at full / empty + 8 s
  __device__ __forceinline__ static int stage(int64_t t) {
    return static_cast<int>(static_cast<uint32_t>(t) % Cfg::kStages);
  }
  __device__ __forceinline__ uint32_t wait_s(int64_t t) const {
    const uint32_t t32 = static_cast<uint32_t>(t);
    mbar_wait(full + 8 * stage(t), (t32 / Cfg::kStages) & 1);
    fence_proxy_async();  // the stage was written by cp.async (generic proxy)
    return stage(t) * Cfg::kStageBytes;
  }
  __device__ __forceinline__ void done_s(int64_t) const {}
  __device__ __forceinline__ uint32_t wait_v(int64_t t) const {  // (full since wait_s(t))
    return stage(t) * Cfg::kStageBytes + Cfg::kPanelBytes;
  }
  __device__ __forceinline__ void done_v(int64_t t) const { warp_arrive(empty + 8 * stage(t)); }
};

// The CTA's shared memory (config.hpp's order), 1024-byte aligned: the consumer's, the stages and their
// barriers.
struct MlaRowsSmem {
  RowsSmem rows;
  uint32_t kv;  // stage s at kv + s * kStageBytes
  uint32_t full, empty;
};

template <class Cfg>
__device__ __forceinline__ MlaRowsSmem mla_rows_smem(unsigned char* base) {
  MlaRowsSmem s;
  s.rows.q = base;
  s.rows.q_addr = smem_addr(base);
  s.kv = s.rows.q_addr + Cfg::kQBytes;
  s.rows.p = s.kv + Cfg::kStages * Cfg::kStageBytes;
  s.rows.red =
      reinterpret_cast<float*>(base + Cfg::kQBytes + Cfg::kStages * Cfg::kStageBytes + 2 * Cfg::kPBytes);
  s.rows.sums = s.rows.red + 2 * 4 * Cfg::kRows;
  s.full = smem_addr(s.rows.sums + 4 * Cfg::kRows);
  s.empty = s.full + 8 * Cfg::kStages;
  return s;
}

template <class Cfg>
__device__ __forceinline__ void mla_rows_cta(const PrefillArgs& a) {
  const AttnParams& p = a.p;
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw = smem_addr(smem_raw);  // 1024-byte aligned: the swizzle is a function of the address
  const MlaRowsSmem sm = mla_rows_smem<Cfg>(smem_raw + ((1024 - raw % 1024) % 1024));

  RowsCta c;
  if (!rows_cta_setup<Cfg>(a, c)) return;
  const Piece& w = c.w;
  const Sequence& seq = c.seq;
  const PieceKeys& k = c.k;
  const int64_t n_tiles = k.tile_end - k.tile_begin;
  if (threadIdx.x == 0) {
    for (int s = 0; s < Cfg::kStages; ++s) {
      mbar_init(sm.full + 8 * s, Cfg::kFullArrivals);
      mbar_init(sm.empty + 8 * s, Cfg::kEmptyArrivals);
    }
  }
  __syncthreads();
  // (Warp-uniform to the compiler through the shuffle: wgmma in a branch it cannot prove warpgroup-uniform
  // is serialized, ptxas C7520.)
  const int wg = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x / 128), 0);
  if (wg == 0) {
    wait_for_prior_grid();  // launched early after the append (PDL): the appended K/V are in place past here
    MlaSmem stages{};       // the 64-row kernel's producer: its stages and their barriers
    stages.kv = sm.kv;
    stages.full = sm.full;
    stages.empty = sm.empty;
    mla_produce<Cfg>(p, seq, w.kv_head, k.slot0 + k.tile_begin * Cfg::kBlockN, n_tiles, stages);
    return;
  }
  rows_consume<Cfg>(p, seq, w, k, sm.rows, MlaStagesRing<Cfg>{sm.kv, sm.full, sm.empty});
}

#endif  // sm_90a

// The kernel; empty in passes other than sm_90a (the launcher checks that the sm_90a binary is loaded).
template <class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, 1) mla_rows_kernel(const __grid_constant__ PrefillArgs a) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  allow_dependent_launch();  // the split combine may be scheduled now; it waits for this grid's end
  mla_rows_cta<Cfg>(a);
#endif
}

}  // namespace kvattn::cuda::sm90
