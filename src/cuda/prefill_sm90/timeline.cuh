// Developer instrumentation of the Hopper prefill kernel's tile loop (off by default): compiled with
// -DKVATTN_PREFILL_TIMELINE=1, lane 0 of each consumer warp of CTAs 0..kPtlCtas-1 stamps clock64 at each
// phase of tiles kPtlTile0.. of a unit (run_tiles), into this translation unit's g_prefill_timeline; the
// launcher copies the stamps after each launch into the host buffer that
// kvattn_debug_prefill_timeline_buffer (prefill.cu) names, and bench/prefill_timeline.py prints where a
// tile's clocks go. A later unit's tiles overwrite an earlier one's: time equal-length units (W6 full).
#pragma once

#include <cstdint>

#ifndef KVATTN_PREFILL_TIMELINE
#define KVATTN_PREFILL_TIMELINE 0
#endif

namespace kvattn::cuda::sm90 {

enum PrefillTlStamp : int {  // in the order an iteration passes them
  kPtlHead = 0,              // the iteration's start (before wait_full)
  kPtlStage,                 // the tile's stage full (wait_full returned)
  kPtlFenced,                // wgmma.fence passed, before the first wgmma (ptxas adds an arrive: C7519)
  kPtlIssued,                // its Q K^T (and the previous tile's P V) issued
  kPtlS,                     // S landed (wgmma wait)
  kPtlSoftmax,               // the score mods and the online softmax done
  kPtlPv,                    // the previous tile's P V done
  kPtlEnd,                   // O rescaled and P packed: the iteration's end
  kPtlStamps
};
constexpr int kPtlCtas = 8, kPtlWarps = 8, kPtlTile0 = 16, kPtlTiles = 16;
constexpr int kPtlWords = kPtlCtas * kPtlWarps * kPtlTiles * kPtlStamps;

#if KVATTN_PREFILL_TIMELINE
// One copy a translation unit (static): each (dtype, head dim) file's kernels write their own.
static __device__ unsigned long long g_prefill_timeline[kPtlWords];

__device__ __forceinline__ void ptl_stamp(int64_t tile, int stamp) {
  const int warp = static_cast<int>(threadIdx.x / 32) - 4;  // the consumer warps (warpgroups 1, 2)
  const int64_t t = tile - kPtlTile0;
  if (blockIdx.x < kPtlCtas && threadIdx.x % 32 == 0 && warp >= 0 && warp < kPtlWarps && t >= 0 &&
      t < kPtlTiles) {
    g_prefill_timeline[((blockIdx.x * kPtlWarps + warp) * kPtlTiles + t) * kPtlStamps + stamp] = clock64();
  }
}
#define KVATTN_PTL(stmt) \
  do {                   \
    stmt;                \
  } while (0)
#else
#define KVATTN_PTL(stmt) \
  do {                   \
  } while (0)
#endif

}  // namespace kvattn::cuda::sm90
