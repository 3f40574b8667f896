// Compile-time configuration of the attention kernel for one (dtype, head_dim, head_dim_v). The tile
// sizes come from heuristics.hpp so the host plan and the kernel cannot disagree.
#pragma once

#include "cuda/heuristics.hpp"

namespace kvattn::cuda {

template <typename T_, int kHeadDim_, int kHeadDimV_>
struct AttnConfig {
  using T = T_;
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
};

}  // namespace kvattn::cuda
