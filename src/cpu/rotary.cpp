#include "cpu/rotary.hpp"

#include "cpu/numeric.hpp"

namespace kvattn::cpu {

void rotate(const FwdProblem& p, int64_t pos, double* x) {
  const int half = p.rotary_dim / 2;
  for (int m = 0; m < half; ++m) {
    const double cos = load(p.rotary_dtype, p.rotary_cos, pos * p.rotary_cos_stride + m);
    const double sin = load(p.rotary_dtype, p.rotary_sin, pos * p.rotary_sin_stride + m);
    const int i0 = p.rotary_interleaved ? 2 * m : m;
    const int i1 = p.rotary_interleaved ? 2 * m + 1 : m + half;
    const double x0 = x[i0];
    const double x1 = x[i1];
    x[i0] = x0 * cos - x1 * sin;
    x[i1] = x0 * sin + x1 * cos;
  }
}

}  // namespace kvattn::cpu
