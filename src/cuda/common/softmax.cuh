// (O, LSE) partial results and their merge (CONTRACT.md step 7), shared by the split combine and the
// public combine. Scores live in log2 units inside the kernels (exp2 is one instruction); LSE leaves them
// in natural log units.
#pragma once

#include <cmath>
#include <cstdint>

namespace kvattn::cuda {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// exp2(x - m) with the convention that a row with no visible key so far (m = -inf) contributes nothing
// and never produces inf - inf = NaN.
__device__ __forceinline__ float safe_max_base(float m) {
  return m == -INFINITY ? 0.f : m;
}

// 2^x in one MUFU instruction (ex2.approx.ftz: about 2 ulp, results below 2^-126 flushed to 0), for the
// per-key exponentials of the online softmax, where exp2f's denormal handling would cost more instructions
// than the rest of the softmax.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Merge weights of n partial LSEs (natural log) plus an optional sink logit:
//   lse = log(sum_s exp(lse_s) + exp(sink)),  w_s = exp(lse_s - lse)
// Any NaN partial makes the whole row NaN (an offending sequence stays NaN through a split).
struct MergeState {
  float max_lse = -INFINITY;
  float sum = 0.f;  // sum of exp(lse_s - max_lse), sink included
  bool nan = false;

  __device__ __forceinline__ void add_max(float lse) {
    if (isnan(lse))
      nan = true;
    else
      max_lse = fmaxf(max_lse, lse);
  }
  // lse == max_lse: exp(0) = 1, also when both are +inf (docs/DESIGN.md: +inf partials share the weight).
  __device__ __forceinline__ void add_sum(float lse) {
    if (!isnan(lse) && lse != -INFINITY) sum += lse == max_lse ? 1.f : expf(lse - max_lse);
  }
  // Natural-log LSE of the row; -inf when nothing (no key, no sink) contributed.
  __device__ __forceinline__ float lse() const {
    if (nan) return NAN;
    return sum > 0.f ? max_lse + logf(sum) : -INFINITY;
  }
  // Weight of a partial with `lse_s`; zero-weight partials are skipped so their out may be anything.
  __device__ __forceinline__ float weight(float lse_s, float total) const {
    if (total == INFINITY) return lse_s == INFINITY ? 1.f / sum : 0.f;  // inf - inf would be NaN
    return (lse_s == -INFINITY || total == -INFINITY) ? 0.f : expf(lse_s - total);
  }
};

}  // namespace kvattn::cuda
