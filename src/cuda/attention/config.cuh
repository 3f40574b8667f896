// Compile-time configuration of the attention kernel for one (compute dtype, cache dtype, head_dim,
// head_dim_v). The tile sizes come from heuristics.hpp so the host plan and the kernel cannot disagree.
#pragma once

#include <type_traits>

#include "cuda/common/dtype.cuh"
#include "cuda/heuristics.hpp"

namespace kvattn::cuda {

// T: the tensor-core dtype (fp16/bf16), also of out; TKV: the cache's storage, T or fp8 e4m3.
template <typename T_, typename TKV_, int kHeadDim_, int kHeadDimV_>
struct AttnConfig {
  using T = T_;
  using TKV = TKV_;
  static constexpr bool kKvFp8 = std::is_same_v<TKV, __nv_fp8_e4m3>;
  static_assert(kKvFp8 || std::is_same_v<TKV, T>, "caches are T or fp8");
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kHeadDimV = kHeadDimV_;
  static constexpr TileShape kTile = attention_tile(kHeadDim, kHeadDimV);
  static constexpr int kBlockM = kTile.block_m;
  static constexpr int kBlockN = kTile.block_n;
  static constexpr int kNWarps = kTile.warps;
  static constexpr int kWarpsDv = kTile.warps_dv;
  static constexpr int kNThreads = 32 * kNWarps;
  static constexpr int kDvPerWarp = kHeadDimV / kWarpsDv;  // O columns a warp accumulates
  static constexpr int kStrideQK = kHeadDim + kSmemPad;    // smem row of Q and K, in elements
  static constexpr int kStrideV = kHeadDimV + kSmemPad;    // smem row of V and Qv
  // Decode variant: the warps share 16 rows and split each key tile (needs 16 keys a warp).
  static constexpr bool kKeySplitOk = kTile.key_split_ok;

  static_assert(kHeadDim % 16 == 0 && kHeadDimV % 16 == 0, "mma k-steps of 16 channels");
  static_assert(kDvPerWarp % 16 == 0, "ldmatrix.x4.trans covers 16 columns of V");
  static_assert(kBlockN % 16 == 0 && kBlockN <= kNThreads, "16-key mma steps; one thread per key address");
  static_assert(kBlockM == 16 * (kNWarps / kWarpsDv), "each warp owns 16 rows");
  static_assert((kStrideQK * 2) % 16 == 0 && (kStrideV * 2) % 16 == 0, "16-byte aligned smem rows");

  // Shared memory, in elements of T.
  static constexpr int kQElems = kBlockM * kStrideQK;  // (kBlockM, kHeadDim)
  static constexpr int kKStage = kBlockN * kStrideQK;  // (kBlockN, kHeadDim)
  static constexpr int kVStage = kBlockN * kStrideV;   // (kBlockN, kHeadDimV)
  static constexpr int kQvElems = kBlockM * kStrideV;  // (kBlockM, kHeadDimV), with qv only

  // The K/V stages as stored (cp.async destinations), in elements of TKV. fp8 rows are padded by 16
  // bytes (16-byte aligned rows for cp.async); 16-bit rows are the tensor-core rows above.
  static constexpr int kStrideQKKv = kKvFp8 ? kHeadDim + kSmemPadFp8 : kStrideQK;
  static constexpr int kStrideVKv = kKvFp8 ? kHeadDimV + kSmemPadFp8 : kStrideV;
  static constexpr int kKStageKv = kBlockN * kStrideQKKv;
  static constexpr int kVStageKv = kBlockN * kStrideVKv;
  static_assert(sizeof(TKV) * (kKStageKv + kVStageKv) ==
                    attention_kv_stage_bytes(kHeadDim, kHeadDimV, kKvFp8),
                "one K/V stage is the plan's");
  static_assert((kStrideQKKv * sizeof(TKV)) % 16 == 0 && (kStrideVKv * sizeof(TKV)) % 16 == 0,
                "16-byte aligned K/V stage rows");
};

}  // namespace kvattn::cuda
