// Developer instrumentation of the Hopper decode kernel (off by default): compiled with
// -DKVATTN_DECODE_TIMELINE=1, every CTA stamps its phases into g_decode_timeline (kTlSlots 64-bit words a
// CTA, zeroed at the CTA's entry) and the host reads them with kvattn_debug_decode_timeline (launch.cu);
// bench/decode_timeline.py prints their distribution over the CTAs. The stamps are clock64 (cycles of the
// SM) except the entry and exit, which are %globaltimer (ns): the host aligns the CTAs on the global clock
// and converts cycles with the rate the two clocks show over the CTA's lifetime.
#pragma once

#include <cstdint>

#ifndef KVATTN_DECODE_TIMELINE
#define KVATTN_DECODE_TIMELINE 0
#endif

namespace kvattn::cuda::sm90 {

enum TimelineSlot : int {
  kTlEntryNs = 0,  // %globaltimer at the CTA's entry
  kTlEntry,        // clock64 at entry
  kTlStarted,      // balanced_start returned (the block scan)
  kTlPdl,          // wait_for_prior_grid returned
  kTlFirstIssue,   // producer warp 0, lane 0: its first stage's copies issued
  kTlFirstFull,    // the consumer warp of the CTA's first stage: that stage full
  kTlExit,         // consumer thread 0: the last piece written
  kTlExitNs,       // %globaltimer then
  kTlPieces,       // the CTA's pieces (a count, not a time)
  kTlProdPiece,    // producer of stage 0, lane 0: its first piece entered (the walk done)
  kTlProdSeq,      // ... its first piece's sequence and keys known (piece_keys)
  kTlProdAddr,     // ... its first stage's row offsets known (the page-table entries landed)
  kTlPiece0,       // then per piece (kTlPerPiece):
};
enum TimelinePieceSlot : int {
  kTlpBegin = 0,     // consumer thread 0 enters the piece
  kTlpQ,             // Q loaded (the consumers' barrier passed)
  kTlpFirstFull,     // the piece's first stage full (its consumer warp)
  kTlpLastIssued,    // the piece's last stage issued (its producer warp)
  kTlpLastConsumed,  // the piece's last stage consumed (its consumer warp)
  kTlpEnd,           // consumer thread 0: the piece written (merge + epilogue)
  kTlpKeys,          // consumer thread 0: the piece's sequence and keys known (piece_keys)
  kTlpChecked,       // ... its checks done (piece_ok)
  kTlpQRows,         // ... its own Q rows landed and stored (before the consumers' barrier)
  kTlpCluster,       // the cluster form (cluster.cuh): its inbox full (every rank's state landed)
  kTlPerPiece
};
// W2's batches put 5-30 pieces on a CTA (bench/decode_timeline.py's W2 cases): the first 14 stamped.
constexpr int kTlMaxPieces = 14;
constexpr int kTlSlots = 160;
constexpr int kTlMaxCtas = 1024;
// Producer warp 0, lane 0, the CTA's first stage: its first and its 8th warp-wide copy issued (the last
// two slots: libraries without them leave them zero).
constexpr int kTlFirstCopy = kTlSlots - 2, kTlEighthCopy = kTlSlots - 1;
static_assert(kTlPiece0 + kTlPerPiece * kTlMaxPieces <= kTlFirstCopy, "the timeline of a CTA fits its slots");

#if KVATTN_DECODE_TIMELINE
__device__ unsigned long long g_decode_timeline[kTlMaxCtas * kTlSlots];

__device__ __forceinline__ unsigned long long tl_globaltimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
// The CTA's row of the timeline: its linear index (blockIdx.x in the persistent kernel's 1-D grid; the
// cluster form's grid is (C, kv heads, batch)).
__device__ __forceinline__ unsigned tl_cta() {
  return blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
}
__device__ __forceinline__ void tl_stamp(int slot) {
  if (tl_cta() < kTlMaxCtas) g_decode_timeline[tl_cta() * kTlSlots + slot] = clock64();
}
__device__ __forceinline__ void tl_stamp_piece(int piece, int slot) {
  if (piece < kTlMaxPieces) tl_stamp(kTlPiece0 + piece * kTlPerPiece + slot);
}
__device__ __forceinline__ void tl_stamp_ns(int slot) {
  if (tl_cta() < kTlMaxCtas) g_decode_timeline[tl_cta() * kTlSlots + slot] = tl_globaltimer();
}
__device__ __forceinline__ void tl_set(int slot, unsigned long long v) {
  if (tl_cta() < kTlMaxCtas) g_decode_timeline[tl_cta() * kTlSlots + slot] = v;
}
// Thread 0 at entry, before any other stamp of the CTA (the block scan's barriers order them).
__device__ __forceinline__ void tl_enter() {
  if (threadIdx.x == 0 && tl_cta() < kTlMaxCtas) {
    for (int s = 0; s < kTlSlots; ++s) g_decode_timeline[tl_cta() * kTlSlots + s] = 0;
    tl_stamp_ns(kTlEntryNs);
    tl_stamp(kTlEntry);
  }
}
#define KVATTN_TL(stmt) \
  do {                  \
    stmt;               \
  } while (0)
#else
#define KVATTN_TL(stmt) \
  do {                  \
  } while (0)
#endif

}  // namespace kvattn::cuda::sm90
