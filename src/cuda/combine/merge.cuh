// One warp merges the n (O, LSE) partials of one row (CONTRACT.md step 7, the sink counted once).
#pragma once

#include <cmath>
#include <cstdint>

#include "cuda/common/dtype.cuh"
#include "cuda/common/softmax.cuh"

namespace kvattn::cuda {

struct PartialRow {
  const float* lse;  // lse of split s: lse[s * lse_stride]
  int64_t lse_stride;
  const float* o;  // channel c of split s: o[s * o_stride + c]
  int64_t o_stride;
};

// out[out_offset + c] for c < dv (dtype out_dtype) and *lse_out (optional); sink in natural log units,
// has_sink false for rows that never see the sink.
__device__ inline void merge_row_warp(const PartialRow& in, int n, int dv, bool has_sink, float sink,
                                      void* out, DType out_dtype, int64_t out_offset, float* lse_out) {
  const int lane = threadIdx.x % 32;
  MergeState st;
  for (int s = lane; s < n; s += 32) st.add_max(in.lse[s * in.lse_stride]);
#pragma unroll
  for (int off = 16; off > 0; off /= 2) {
    st.max_lse = fmaxf(st.max_lse, __shfl_xor_sync(0xffffffffu, st.max_lse, off));
  }
  st.nan = __any_sync(0xffffffffu, st.nan);
  if (has_sink) st.max_lse = fmaxf(st.max_lse, sink);
  for (int s = lane; s < n; s += 32) st.add_sum(in.lse[s * in.lse_stride]);
#pragma unroll
  for (int off = 16; off > 0; off /= 2) st.sum += __shfl_xor_sync(0xffffffffu, st.sum, off);
  if (has_sink && sink != -INFINITY) st.sum += expf(sink - st.max_lse);
  const float total = st.lse();
  for (int c = lane; c < dv; c += 32) {
    float acc = 0.f;
    for (int s = 0; s < n; ++s) {
      const float w = st.weight(in.lse[s * in.lse_stride], total);
      if (w > 0.f) acc += w * in.o[s * in.o_stride + c];
    }
    store_as(out, out_dtype, out_offset + c, st.nan ? NAN : acc);
  }
  if (lse_out && lane == 0) *lse_out = total;
}

}  // namespace kvattn::cuda
