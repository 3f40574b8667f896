// The one merge of (O, LSE) partials, shared by split attention and cpu_combine.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

namespace kvattn::cpu {

// Partial j covers a disjoint subset of a row's keys: o_j = softmax(x over its keys) V (dv channels) and
// its log-sum-exp over its keys in two parts, lse_j = m_j + log(s_j) (m_j: the max score, s_j: the sum of
// exp(x - m_j); -inf and 0 when it has no key; s_j = 1 when `s` is nullptr, as in the public combine,
// whose partials carry lse_j alone). No partial includes the sink. The merge is CONTRACT.md step 7 over
// the union of the keys, with the sink counted once:
//   M = max(max_j m_j, sink);  w_j = exp(m_j - M) s_j;  o = sum_j w_j o_j / (sum_j w_j + exp(sink - M))
//   lse = M + log(sum_j w_j + exp(sink - M))
// Carrying (m_j, s_j) instead of lse_j keeps the weights exact for any magnitude of scores (m_j + log(s_j)
// would absorb log(s_j) once ulp(m_j) nears 1), so the result does not depend on how keys are split.
// An empty row (every m_j = -inf, no sink) gives o = 0 and lse = -inf; with a sink, o = 0 and lse = sink.
// Non-finite scores (docs/DESIGN.md): a NaN m_j or sink makes the row NaN; exp(m_j - M) is 1 when
// m_j == M, +inf included, so with M = +inf the +inf keys share the weight (s_j of them in partial j),
// a +inf sink counts as one such key with V = 0, and lse = +inf.
// m, s: (n), o: (n, dv) row-major, sink: nullptr when absent. Writes o_merged (dv), returns lse.
inline double merge_partials(int n, int dv, const double* m, const double* o, const double* sink,
                             double* o_merged, const double* s = nullptr) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  double max = sink ? *sink : -kInf;
  bool nan = sink && std::isnan(*sink);
  for (int j = 0; j < n; ++j) {
    // A NaN partial (a NaN input, or a device error on the GPU side) must poison the row, not vanish.
    nan = nan || std::isnan(m[j]);
    if (!std::isnan(m[j])) max = std::max(max, m[j]);
  }
  std::fill(o_merged, o_merged + dv, nan ? kNaN : 0.0);
  if (nan) return kNaN;
  if (max == -kInf) return -kInf;

  auto scale = [&](double m_j) { return m_j == max ? 1.0 : std::exp(m_j - max); };
  double denom = sink ? scale(*sink) : 0.0;
  for (int j = 0; j < n; ++j) {
    const double w = scale(m[j]) * (s ? s[j] : 1.0);
    if (w == 0.0) continue;  // an empty partial may hold anything in o (even NaN): skip, never multiply
    denom += w;
    for (int c = 0; c < dv; ++c) o_merged[c] += w * o[int64_t(j) * dv + c];
  }
  for (int c = 0; c < dv; ++c) o_merged[c] /= denom;
  return max + std::log(denom);
}

}  // namespace kvattn::cpu
