// Rotary embedding (CONTRACT.md step 2) of one channel of a row, in fp32.
#pragma once

#include <cstdint>

#include "cuda/common/dtype.cuh"

namespace kvattn::cuda {

struct RotaryParams {
  const void* cos;  // (seqlen_ro, rotary_dim / 2), fp32 or the dtype of q
  const void* sin;
  int64_t cos_stride;
  int64_t sin_stride;
  int32_t rotary_dim;  // 0 = no rotary
  bool table_f32;
  bool interleaved;  // pairs (2m, 2m + 1) (GPT-J); else (m, m + rotary_dim / 2) (GPT-NeoX)
};

// Channel c (< rotary_dim) of row x rotated at position pos (already checked < seqlen_ro):
//   x0' = x0 cos - x1 sin,  x1' = x0 sin + x1 cos  for the pair (x0, x1) holding c.
template <typename T>
__device__ __forceinline__ float rotated_channel(const T* x, int c, int64_t pos, const RotaryParams& r) {
  const int half = r.rotary_dim / 2;
  int m, c0, c1;
  if (r.interleaved) {
    m = c / 2;
    c0 = 2 * m;
    c1 = c0 + 1;
  } else {
    m = c < half ? c : c - half;
    c0 = m;
    c1 = m + half;
  }
  const float cs = load_as_float<T>(r.cos, r.table_f32, pos * r.cos_stride + m);
  const float sn = load_as_float<T>(r.sin, r.table_f32, pos * r.sin_stride + m);
  const float x0 = to_float(x[c0]), x1 = to_float(x[c1]);
  return c == c0 ? x0 * cs - x1 * sn : x0 * sn + x1 * cs;
}

}  // namespace kvattn::cuda
