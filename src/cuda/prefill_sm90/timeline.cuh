// Developer instrumentation of the Hopper prefill kernel's tile loop (off by default): compiled with
// -DKVATTN_PREFILL_TIMELINE=1, lane 0 of each consumer warp of CTAs 0..kPtlCtas-1 stamps clock64 at each
// phase of tiles kPtlTile0.. of a unit (run_tiles), into this translation unit's g_prefill_timeline; the
// launcher copies the stamps after each launch into the host buffer that
// kvattn_debug_prefill_timeline_buffer (prefill.cu) names, and bench/prefill_timeline.py prints where a
// tile's clocks go. A later unit's tiles overwrite an earlier one's: time equal-length units (W6 full).
// The TMA producer's thread 0 stamps the same tiles in slot kPtlWarps - 1: before its empty-stage wait
// (kPtlHead), past it (kPtlStage) and its copies issued (kPtlFenced).
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
  kPtlSoftmax,               // the score mods and the softmax's first kPairsBeforePv pairs done (d 128 /
                             // 256: a third; d 64 / 192: all of it)
  kPtlPv,                    // the previous tile's P V done
  kPtlEnd,                   // O rescaled, the softmax's rest (if any), P packed: the iteration's end
  kPtlStamps
};
constexpr int kPtlCtas = 8, kPtlWarps = 9, kPtlTile0 = 16, kPtlTiles = 16;  // 8 consumer warps, producer
// The units' timeline (after the tiles' words in the same buffer): per CTA < kPtlCtas, unit n < kPuUnits of
// the CTA (the persistent kernel's n-th unit; the other kernels' one unit is 0) and slot (8 consumer warps,
// lane 0; the producer's thread 0): the heads of its tiles 0..kPuTiles-1 (run_tiles, before wait_full), then
// the events below.
enum PrefillUnitEvent : int {
  kPuDesc = 0,   // consumer: the unit's descriptor read
  kPuQReady,     // consumer: Q in s_q, past the warpgroup's barrier
  kPuLastPv,     // consumer: the last P V issued
  kPuNextQ,      // consumer: the next unit's Q issued (under the last P V)
  kPuPvDone,     // consumer: the last P V done
  kPuWritten,    // consumer: out rows written
  kPuProdStart,  // producer: the unit claimed, before its sequence loads
  kPuProdDesc,   // producer: the unit checked and handed over
  kPuProdFirst,  // producer: the first tile's copies issued
  kPuProdLast,   // producer: every tile's copies issued
  kPuProdNext,   // producer: the next unit claimed
  kPuNextQMet,   // consumer: under the last P V, the next descriptor read and the warpgroup met (Q's issue
                 // next)
  kPuEvents
};
constexpr int kPuUnits = 12, kPuTiles = 40, kPuSlot = kPuTiles + kPuEvents;
constexpr int kPuWords = kPtlCtas * kPtlWarps * kPuUnits * kPuSlot;
constexpr int kPtlWords = kPtlCtas * kPtlWarps * kPtlTiles * kPtlStamps + kPuWords;

#if KVATTN_PREFILL_TIMELINE
// One copy a translation unit (static): each (dtype, head dim) file's kernels write their own.
static __device__ unsigned long long g_prefill_timeline[kPtlWords];

__device__ __forceinline__ void ptl_stamp(int64_t tile, int stamp) {
  const int warp = static_cast<int>(threadIdx.x / 32) - 4;  // the consumer warps (warpgroups 1, 2)
  const int64_t t = tile - kPtlTile0;
  if (blockIdx.x < kPtlCtas && threadIdx.x % 32 == 0 && warp >= 0 && warp < kPtlWarps - 1 && t >= 0 &&
      t < kPtlTiles) {
    g_prefill_timeline[((blockIdx.x * kPtlWarps + warp) * kPtlTiles + t) * kPtlStamps + stamp] = clock64();
  }
}
__device__ __forceinline__ void ptl_producer_stamp(int64_t tile, int stamp) {
  const int64_t t = tile - kPtlTile0;
  if (blockIdx.x < kPtlCtas && threadIdx.x == 0 && t >= 0 && t < kPtlTiles) {
    g_prefill_timeline[((blockIdx.x * kPtlWarps + kPtlWarps - 1) * kPtlTiles + t) * kPtlStamps + stamp] =
        clock64();
  }
}
// The unit a consumer thread computes (the persistent kernel sets it; 0 for the others).
static __device__ int g_prefill_unit_of[kPtlCtas][512];
__device__ __forceinline__ void pu_set_unit(int n) {
  if (blockIdx.x < kPtlCtas) g_prefill_unit_of[blockIdx.x][threadIdx.x] = n;
}
// Stamp `at` (a tile < kPuTiles, or kPuTiles + an event) of unit n (-1: the consumer's current unit).
__device__ __forceinline__ void pu_stamp(int at, int n = -1) {
  const bool producer = threadIdx.x < 128;
  if (blockIdx.x >= kPtlCtas || threadIdx.x % 32 != 0 || (producer && threadIdx.x != 0) || at < 0 ||
      at >= kPuSlot) {
    return;
  }
  if (n < 0) n = g_prefill_unit_of[blockIdx.x][threadIdx.x];
  const int slot = producer ? kPtlWarps - 1 : static_cast<int>(threadIdx.x / 32) - 4;
  // (consumers: warpgroups 1 and 2 only)
  if (n >= kPuUnits || slot < 0 || slot >= kPtlWarps || (!producer && slot >= kPtlWarps - 1)) return;
  g_prefill_timeline[kPtlCtas * kPtlWarps * kPtlTiles * kPtlStamps +
                     ((blockIdx.x * kPtlWarps + slot) * kPuUnits + n) * kPuSlot + at] = clock64();
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
