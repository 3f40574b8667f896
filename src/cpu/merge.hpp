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
// Non-finite scores (docs/DESIGN.md): a NaN partial or sink makes the row NaN; when m = +inf the partials
// with lse_j = +inf share the weight by their number of +inf keys (`inf_keys[j]`, 1 each when nullptr),
// a +inf sink counts as one such key with V = 0, and lse = +inf.
// lse: (n), o: (n, dv) row-major, sink: nullptr when absent. Writes o_merged (dv), returns lse.
inline double merge_partials(int n, int dv, const double* lse, const double* o, const double* sink,
                             double* o_merged, const double* inf_keys = nullptr) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  double m = sink ? *sink : -kInf;
  bool nan = sink && std::isnan(*sink);
  for (int j = 0; j < n; ++j) {
    // A NaN partial (a NaN input, or a device error on the GPU side) must poison the row, not vanish.
    nan = nan || std::isnan(lse[j]);
    if (!std::isnan(lse[j])) m = std::max(m, lse[j]);
  }
  std::fill(o_merged, o_merged + dv, nan ? kNaN : 0.0);
  if (nan) return kNaN;
  if (m == -kInf) return -kInf;

  // exp(lse_j - m), except that the +inf ones (only when m = +inf) weigh their +inf keys.
  auto weight = [&](double lse_j, double keys_at_inf) {
    return lse_j == kInf ? keys_at_inf : std::exp(lse_j - m);
  };
  double denom = sink ? weight(*sink, 1.0) : 0.0;
  for (int j = 0; j < n; ++j) {
    const double w = weight(lse[j], inf_keys ? inf_keys[j] : 1.0);
    if (w == 0.0) continue;  // an empty partial may hold anything in o (even NaN): skip, never multiply
    denom += w;
    for (int c = 0; c < dv; ++c) o_merged[c] += w * o[int64_t(j) * dv + c];
  }
  for (int c = 0; c < dv; ++c) o_merged[c] /= denom;
  return m + std::log(denom);
}

}  // namespace kvattn::cpu
