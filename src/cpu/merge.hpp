// The one merge of (O, LSE) partials, shared by split attention and cpu_combine.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

namespace kvattn::cpu {

// Partial j covers a disjoint subset of a row's keys: o_j = softmax(x over its keys) V (dv channels) and
// lse_j = log sum exp(x) over its keys, -inf when it has none; no partial includes the sink. The merge is
// CONTRACT.md step 7 over the union of the keys, with the sink counted once:
//   m = max(max_j lse_j, sink);  w_j = exp(lse_j - m);  o = sum_j w_j o_j / (sum_j w_j + exp(sink - m))
//   lse = m + log(sum_j w_j + exp(sink - m))
// An empty row (every lse_j = -inf, no sink) gives o = 0 and lse = -inf; with a sink, o = 0 and lse = sink.
// lse: (n), o: (n, dv) row-major, sink: nullptr when absent. Writes o_merged (dv), returns lse.
inline double merge_partials(int n, int dv, const double* lse, const double* o, const double* sink,
                             double* o_merged) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  double m = sink ? *sink : -kInf;
  for (int j = 0; j < n; ++j) {
    // A NaN partial (a device error on the GPU side) must poison the row, not vanish with weight 0.
    if (std::isnan(lse[j])) {
      std::fill(o_merged, o_merged + dv, std::numeric_limits<double>::quiet_NaN());
      return lse[j];
    }
    m = std::max(m, lse[j]);
  }
  std::fill(o_merged, o_merged + dv, 0.0);
  if (m == -kInf) return -kInf;

  double denom = sink ? std::exp(*sink - m) : 0.0;
  for (int j = 0; j < n; ++j) {
    const double w = std::exp(lse[j] - m);
    if (w == 0.0) continue;  // an empty partial may hold anything in o (even NaN): skip, never multiply
    denom += w;
    for (int c = 0; c < dv; ++c) o_merged[c] += w * o[int64_t(j) * dv + c];
  }
  for (int c = 0; c < dv; ++c) o_merged[c] /= denom;
  return m + std::log(denom);
}

}  // namespace kvattn::cpu
