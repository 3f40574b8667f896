// L2 prefetches of the small index arrays a kernel's prologue reads first (sequence lengths, batch index,
// left padding, page-table rows): issued together by one warp at entry, they take one memory latency
// (and the TLB misses of arrays first touched) under the block's set-up, where the prologue's dependent
// loads would take one each (bench/NOTES.md, session 6: ~1.3 us a load before the decode's first copy).
#pragma once

#include "cuda/common/sequence.cuh"

namespace kvattn::cuda {

__device__ __forceinline__ void prefetch_l2(const void* ptr) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(ptr));
}

// One warp: lanes 0-8 the arrays' first lines, lanes 9-31 the first entries of page-table rows 0-22.
__device__ __forceinline__ void prefetch_sequence_arrays(const SeqParams& p, int lane) {
  const void* line = nullptr;
  switch (lane) {
    case 0:
      line = p.cache_seqlens;
      break;
    case 1:
      line = p.cache_batch_idx;
      break;
    case 2:
      line = p.cache_leftpad;
      break;
    case 3:
      line = p.cu_seqlens_q;
      break;
    case 4:
      line = p.seqused_q;
      break;
    case 5:
      line = p.cu_seqlens_k_new;
      break;
    case 6:
      line = p.cu_seqlens_k;
      break;
    case 7:
      line = p.kv_indptr;
      break;
    case 8:
      line = p.rotary_seqlens;
      break;
    default: {
      const int64_t row = lane - 9;
      if (p.page_table != nullptr && p.kv_indptr == nullptr && row < p.page_table_rows) {
        line = p.page_table + row * p.page_table_stride;
      }
    }
  }
  if (line != nullptr) prefetch_l2(line);
}

}  // namespace kvattn::cuda
