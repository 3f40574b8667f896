// The online softmax's device pieces; the (m, l) state and its one merge are in row_state.hpp (host and
// device, so GoogleTest checks the merge without a GPU). Scores live in log2 units inside the kernels
// (exp2 is one instruction); LSE leaves them in natural log units.
#pragma once

#include <cmath>
#include <cstdint>

#include "cuda/common/row_state.hpp"

namespace kvattn::cuda {

// 2^x in one MUFU instruction (ex2.approx.ftz: about 2 ulp, results below 2^-126 flushed to 0), for the
// per-key exponentials of the online softmax, where exp2f's denormal handling would cost more instructions
// than the rest of the softmax.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace kvattn::cuda
