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

// The softmax state of one row, the (m, l) of an (m, l, O) partial: m = the largest logit seen (log2
// units), l = sum 2^(s - m) over the keys seen. ONE merge combines two partials, wherever they meet (the
// warps of the decode kernel, the sink, the split combine):
//   m = max(m_a, m_b),  l = l_a 2^(m_a - m) + l_b 2^(m_b - m),  O = O_a 2^(m_a - m) + O_b 2^(m_b - m)
// merge() returns the two factors for the O beside it. A state with no key (m = -inf) contributes nothing
// and never makes inf - inf = NaN. A partial known by its lse alone is the state (lse log2(e), 1).
struct MergeScales {
  float a;  // of this state's O
  float b;  // of the other's
};

struct RowState {
  float m = -INFINITY;
  float l = 0.f;

  __device__ __forceinline__ MergeScales merge(float m_b, float l_b) {
    const float m_new = fmaxf(m, m_b);
    const float base = safe_max_base(m_new);
    const MergeScales s{exp2f(m - base), exp2f(m_b - base)};
    m = m_new;
    l = l * s.a + l_b * s.b;
    return s;
  }
  // Natural-log LSE; -inf when nothing contributed.
  __device__ __forceinline__ float lse() const { return l > 0.f ? (m + log2f(l)) * kLn2 : -INFINITY; }
};

}  // namespace kvattn::cuda
