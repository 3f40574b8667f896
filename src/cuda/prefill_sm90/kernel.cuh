// The Hopper (sm_90a) prefill kernel: wgmma on a warp-specialized CTA.
//
// One CTA computes kBlockM = 64 x kConsumers packed query rows (128; 192 at d 64: config.hpp) (GQA rows
// packed as in the portable kernel: packed row r is token r / g of query head kv_head * g + r % g) of one
// (sequence, kv head) against every key they can see; the split kernel (Cfg::kSplit: decode-like shapes
// whose CTAs leave SMs idle) against its split's share of those keys, into partials for the split combine.
// A producer warpgroup and kConsumers consumer warpgroups:
//   producer (warpgroup 0, few registers): gathers each K/V tile of kBlockN keys through the page table
//     with 16-byte cp.async, one row pointer per key (any page size, paged / contiguous / packed caches,
//     cache_batch_idx, leftpad: the addressing rule of common/sequence.cuh), into a ring of kStages shared
//     stages in the wgmma 128B-swizzled layout; slots outside [leftpad, end) are zero-filled. Each stage
//     has a "full" mbarrier (every producer thread's copies arrive on it as they land:
//     cp.async.mbarrier.arrive) and an "empty" one (every consumer thread arrives after its last wgmma
//     read of the stage). TMA instead where the layout allows (producer.cuh, produce_tma); fp8 e4m3 caches
//     (cta.cuh KvFp8) land as fp8 and are converted to f16 in place before the stage is full (produce_fp8).
//   consumers (warpgroups 1, 2 (, 3), 64 rows each, many registers): S = Q K^T by wgmma from shared memory (Q
//     loaded once, rotary applied), the score modifications and the mask (attention/score_mod.cuh, through
//     the accumulator layout's WgmmaScoreTile), online softmax in registers, O += P V by wgmma with P from
//     registers; the softmax of tile t runs while the tensor cores do P V of tile t - 1.
// Scores are in log2 units (exp2 is one instruction), as in the portable kernel.
//
// Files: cta.cuh (the argument PrefillArgs, PrefillConfig, the CTA's rows, NaN rows), producer.cuh (the
// cp.async and TMA producers), consumer.cuh (Q, the tiles' wgmma, softmax, ping-pong, the epilogue),
// persistent.cuh (the persistent kernel's loops over work units), this file (the CTA's set-up, the roles,
// the kernel).
#pragma once

#include <cstdint>

#include "cuda/attention/schedule.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/common/sequence.cuh"
#include "cuda/prefill_sm90/consumer.cuh"
#include "cuda/prefill_sm90/cta.cuh"
#include "cuda/prefill_sm90/persistent.cuh"
#include "cuda/prefill_sm90/producer.cuh"
#include "cuda/prefill_sm90/ptx.cuh"
#include "cuda/prefill_sm90/timeline.cuh"

namespace kvattn::cuda::sm90 {

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)

template <class Cfg>
__device__ __forceinline__ void prefill_cta(const PrefillArgs& a) {
  const AttnParams& p = a.p;
  extern __shared__ unsigned char smem_raw[];
  // 1024-byte aligned base: the swizzle pattern is a function of the address bits.
  const uint32_t raw = smem_addr(smem_raw);
  unsigned char* smem = smem_raw + ((1024 - raw % 1024) % 1024);
  unsigned char* s_q = smem;
  const uint32_t s_k = smem_addr(smem + Cfg::kQBytes);
  const uint32_t s_v = s_k + Cfg::kStages * Cfg::kKStageBytes;
  const uint32_t full_bar = s_v + Cfg::kStages * Cfg::kVStageBytes;
  const uint32_t empty_bar = full_bar + 8 * Cfg::kStages;
  if constexpr (Cfg::kPersistent) {
    prefill_persistent_cta<Cfg>(a, s_q, s_k, s_v, full_bar, empty_bar);
    return;
  }

  const CtaRows cta = cta_rows<Cfg>(a);  // all threads (the varlen line's scan)
  if constexpr (Cfg::kVarlen) {
    if (cta.i >= p.seq.batch) return;  // past the varlen line's end
  }
  const Sequence seq = load_sequence(p.seq, cta.i, p.errors, threadIdx.x == 0);
  if (!seq.rows_known) return;  // cu_seqlens_q is broken: no row of out is known to be ours
  if (cta.m0 >= static_cast<int64_t>(seq.q_len) * p.group) return;
  // Page ids of the whole sequence [leftpad, end): an offending sequence is NaN in every row.
  bool ok = check_unique_row(p.seq, cta.i, p.errors) && seq.ok;
  if (ok && p.seq.page_table) ok = check_pages(p.seq, seq, seq.leftpad, seq.end, p.errors);
  if (!ok) {
    if constexpr (Cfg::kSplit) {  // every split fails the same check: NaN partials (the combine's NaN)
      cuda::write_nan_rows<typename Cfg::T, Cfg::kBlockM, Cfg::kThreads>(p, split_piece(cta), seq);
    } else {
      write_nan_rows<Cfg>(p, cta, seq);
    }
    return;
  }
  KeyRange keys = key_range(p, seq, cta.m0, Cfg::kBlockM, Cfg::kBlockN);
  const bool tma = (!Cfg::kKvFp8 || Cfg::kFp8Tma) && (a.flags & kTma) != 0;
  int64_t n_tiles = unit_tiles<Cfg>(p.seq, seq, tma, keys);
  if constexpr (Cfg::kSplit) {
    // Split blockIdx.y's share of the unit's whole tiles (attention/prologue.cuh's rule: an equal share, or
    // deterministic mode's chunk_keys a split; from the aligned first tile, so a split's first tile is
    // aligned too: align divides kBlockN; the last split takes any rest): the producer and the consumers
    // then see a unit of n_tiles tiles from keys.first, as without splits.
    const int64_t per =
        p.chunk_keys > 0 ? p.chunk_keys / Cfg::kBlockN : (n_tiles + p.num_splits - 1) / p.num_splits;
    const int split = static_cast<int>(blockIdx.y);
    const int64_t begin = min(n_tiles, split * per);
    const int64_t end = split == p.num_splits - 1 ? n_tiles : min(n_tiles, begin + per);
    keys.first += begin * Cfg::kBlockN;
    n_tiles = end - begin;
  }

  if (threadIdx.x == 0) init_stage_barriers<Cfg>(full_bar, empty_bar);
  __syncthreads();

  KVATTN_PTL(pu_set_unit(0));
  if (threadIdx.x < 128) {
    regs_dealloc<Cfg::kRegsProducer>();
    wait_for_prior_grid();  // launched early after the append (PDL): the appended K/V are in place past here
    if (tma) {
      produce_tma<Cfg>(a, seq, cta.kv_head, seq.leftpad + keys.first, n_tiles, s_k, s_v, full_bar, empty_bar,
                       (a.flags & kDiagNoLoad) != 0);
    } else {
      produce<Cfg>(p, seq, cta.kv_head, seq.leftpad + keys.first, n_tiles, s_k, s_v, full_bar, empty_bar,
                   (a.flags & kDiagNoLoad) != 0);
    }
  } else {
    regs_alloc<Cfg::kRegsConsumer>();
    consume<Cfg>(p, seq, cta, keys, n_tiles, s_q, s_k, s_v, full_bar, empty_bar,
                 fence_from(reader_fence(a.flags), n_tiles), (a.flags & kDiagNoSoftmax) != 0);
  }
}

#endif  // sm_90a

// The kernel; empty in passes other than sm_90a (the launcher checks that the sm_90a binary is the one
// loaded before it launches).
template <class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, 1) prefill_kernel(const __grid_constant__ PrefillArgs a) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  if constexpr (Cfg::kSplit) allow_dependent_launch();  // the split combine may be scheduled now
  prefill_cta<Cfg>(a);
#endif
}

}  // namespace kvattn::cuda::sm90
