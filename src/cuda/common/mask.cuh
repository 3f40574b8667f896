// The mask of CONTRACT.md step 6 as a small policy: which logical key positions kp a query at logical
// position qp sees, as an interval (tile skipping and splitting, and per score: attention/score_mod.cuh's
// QueryRow holds each row's interval).
#pragma once

#include <cstdint>

namespace kvattn::cuda {

template <typename I>
__device__ __forceinline__ I floor_div(I a, I b) {
  const I q = a / b;
  return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

struct MaskPolicy {
  int32_t window_left;   // -1 = unbounded (causal is already window_right = 0)
  int32_t window_right;  // -1 = unbounded
  int32_t chunk;         // attention_chunk, 0 = off

  // Visible kp of a query at qp: [first, last] (empty when last < first), within [0, kv_len).
  __device__ __forceinline__ int64_t first_key(int64_t qp) const {
    int64_t lo = 0;
    if (window_left >= 0) lo = max(lo, qp - window_left);
    if (chunk > 0) lo = max(lo, floor_div<int64_t>(qp, chunk) * chunk);
    return lo;
  }
  __device__ __forceinline__ int64_t last_key(int64_t qp, int64_t kv_len) const {
    int64_t hi = kv_len - 1;
    if (window_right >= 0) hi = min(hi, qp + window_right);
    if (chunk > 0) hi = min(hi, floor_div<int64_t>(qp, chunk) * chunk + chunk - 1);
    return hi;
  }
};

}  // namespace kvattn::cuda
