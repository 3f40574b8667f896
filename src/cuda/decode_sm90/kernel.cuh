// The Hopper decode kernel (decode_sm90.hpp says what it is for). One CTA an SM, 4 consumer warps (8 for
// fp8 caches with one row group, with P = 4) and P = 2, 4 or 8 producer warps; a ring
// of 10 (P = 2) or 8 stages of 16 KB (16 of 8 KB for fp8 on 8 consumer warps) in shared memory, each with
// a full and an empty mbarrier:
//   producers (warps C.., C the consumer warps, producer.cuh): walk the CTA's pieces of the balanced
//     schedule (pieces.cuh); warp C + (s mod P) fills stage s: it waits for the ring slot to be free (empty
//     mbarrier), issues 16-byte cp.async copies (through L1 where DecodeCfg::kCopyViaL1), one warp
//     instruction per 2 (16-bit) or 4 (fp8) whole rows, and arms the slot's full mbarrier with one
//     cp.async.mbarrier.arrive a lane. Lane k owns key k (its page id is loaded kAhead of the warp's stages
//     early) and hands its row offset to the lanes copying that row (shuffles). The producers never wait for
//     the consumers except on a full ring, so the next piece's K/V stream in while the consumers finish the
//     current one. (One cp.async.bulk a row was tried first: 4x slower.)
//   consumers (warps 0..C-1, consumer.cuh): per piece, load the sequence, check the page ids outside the
//     piece's keys (those of its keys stage by stage), load Q; then, with G row groups of 16 packed rows
//     (G = 1 or 2 for up to 16 or 32 rows), warp w computes row group w / (C / G) of the stages
//     w mod (C / G), + C / G, ... of the piece (the stage's full mbarrier is the only wait) with the
//     portable decode kernel's key-split online softmax and score modifications (attention/score_mod.cuh);
//     at the piece's end the (m, l, O) of each row group's warps merge through shared memory and the
//     32 C consumer threads write out / lse, or the partial.
// Invalid key slots of a stage (past the piece's keys) copy the piece's last valid row instead of a row
// of zeros, so every stage moves the same bytes, and the mask sets their scores to -inf (P = 0 times a
// finite row). fp8 caches: K and V are converted in registers (cvt e4m3x2 -> f16x2, [-> bf16x2]) from
// ldmatrix fragments of the fp8 rows; K's channels are read in a permuted order that Q's fragments follow,
// V's channels come out as even / odd 8-column tiles that the merge puts back in place.
#pragma once

#include "cuda/common/pdl.cuh"
#include "cuda/decode_sm90/consumer.cuh"
#include "cuda/decode_sm90/producer.cuh"
#include "cuda/decode_sm90/timeline.cuh"

namespace kvattn::cuda::sm90 {

template <class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, 1) decode_sm90_kernel(const __grid_constant__ AttnParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(128) unsigned char smem_raw[];
  unsigned char* ring = smem_raw;
  float* s_state = reinterpret_cast<float*>(ring + Cfg::kStages * Cfg::kStageBytes);
  using T = typename Cfg::T;
  T* s_q = reinterpret_cast<T*>(s_state + Cfg::kConsumerWarps * Cfg::kStateFloats);
  uint64_t* full = reinterpret_cast<uint64_t*>(s_q + Cfg::kRows * Cfg::kQStride);
  uint64_t* empty = full + Cfg::kStages;
  allow_dependent_launch();  // the split combine may be scheduled now; it waits for this grid's end
  KVATTN_TL(tl_enter());
  if (threadIdx.x < Cfg::kStages) {
    mbar_init(&full[threadIdx.x], 32);                  // the 32 lanes of the stage's producer warp
    mbar_init(&empty[threadIdx.x], 32 * Cfg::kGroups);  // the lanes of its consumer warps
  }
  mbar_init_fence();
  // (block-wide barriers)
  const BalancedStart st = balanced_start<Cfg::kRows, Cfg::kBlockN, Cfg::kThreads, Cfg::kKnownSequences>(p);
  KVATTN_TL(if (threadIdx.x == 0) tl_stamp(kTlStarted));
  wait_for_prior_grid();  // launched early after the append (PDL): the appended K/V are in place past here
  KVATTN_TL(if (threadIdx.x == 0) tl_stamp(kTlPdl));
  // 384 threads (168 registers each at launch: 8 producer warps, or 8 consumer warps with 4 producers): the
  // producers' warpgroups give registers back and the consumers' take them (DecodeCfg's kProducerRegs,
  // kConsumerRegs).
  if (threadIdx.x >= 32 * Cfg::kConsumerWarps) {
    if constexpr (Cfg::kProducerRegs > 0)
      asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(Cfg::kProducerRegs) : "memory");
    produce<Cfg>(p, st, ring, full, empty);
  } else {
    if constexpr (Cfg::kConsumerRegs > 0)
      asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(Cfg::kConsumerRegs) : "memory");
    consume<Cfg>(p, st, ring, full, empty, s_state, s_q, reinterpret_cast<float*>(empty + Cfg::kStages));
    KVATTN_TL(if (threadIdx.x == 0) {
      tl_stamp(kTlExit);
      tl_stamp_ns(kTlExitNs);
    });
  }
#endif
}

}  // namespace kvattn::cuda::sm90
