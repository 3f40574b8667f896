// The one (m, l) merge of the CUDA kernels (row_state.hpp: the decode kernel's warp merge, the sink fold,
// the end of a row, the split combine), checked on the host against float64 softmax sums, without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "cuda/common/row_state.hpp"

namespace {

using kvattn::cuda::kLog2e;
using kvattn::cuda::MergeScales;
using kvattn::cuda::RowState;

// A partial over logits x[begin, end) (natural units) with values v: its state (log2 units) and its
// unnormalized O = sum 2^(x log2e - m) v, as a kernel accumulates them.
struct Partial {
  RowState st;
  double o = 0;
};
Partial partial(const std::vector<double>& x, const std::vector<double>& v, size_t begin, size_t end) {
  Partial p;
  for (size_t k = begin; k < end; ++k) p.st.m = std::fmax(p.st.m, static_cast<float>(x[k] * kLog2e));
  for (size_t k = begin; k < end; ++k) {
    const double w = std::exp2(x[k] * kLog2e - p.st.m);
    p.st.l += static_cast<float>(w);
    p.o += w * v[k];
  }
  return p;
}
void merge_into(Partial& a, const Partial& b) {
  const MergeScales s = a.st.merge(b.st.m, b.st.l);
  a.o = a.o * s.a + b.o * s.b;
}

TEST(RowState, MergedPartialsAreTheWholeSoftmax) {
  std::mt19937 rng(7);
  std::normal_distribution<double> logit(0.0, 4.0), value(0.0, 1.0);
  std::vector<double> x(300), v(300);
  for (size_t k = 0; k < x.size(); ++k) x[k] = logit(rng), v[k] = value(rng);
  double mx = -INFINITY, sum = 0, ov = 0;
  for (double xk : x) mx = std::fmax(mx, xk);
  for (size_t k = 0; k < x.size(); ++k) sum += std::exp(x[k] - mx), ov += std::exp(x[k] - mx) * v[k];
  const double lse = mx + std::log(sum), out = ov / sum;
  // Four uneven pieces, merged left to right (the split combine's order is free: merge commutes).
  Partial all = partial(x, v, 0, 10);
  for (auto [b, e] : {std::pair<size_t, size_t>{10, 11}, {11, 200}, {200, 300}})
    merge_into(all, partial(x, v, b, e));
  EXPECT_NEAR(all.st.lse(), lse, 1e-5 * std::fabs(lse) + 1e-5);
  EXPECT_NEAR(all.o / all.st.l, out, 1e-5);
  Partial rev = partial(x, v, 200, 300);
  merge_into(rev, partial(x, v, 0, 200));
  EXPECT_NEAR(rev.st.lse(), lse, 1e-5 * std::fabs(lse) + 1e-5);
  EXPECT_NEAR(rev.o / rev.st.l, out, 1e-5);
}

TEST(RowState, AnEmptyPartialChangesNothingAndTwoEmptyOnesStayEmptyWithoutNaN) {
  RowState a;
  a.m = 3.f, a.l = 2.f;
  const MergeScales s = a.merge(-INFINITY, 0.f);
  EXPECT_EQ(a.m, 3.f);
  EXPECT_EQ(a.l, 2.f);
  EXPECT_EQ(s.a, 1.f);
  EXPECT_EQ(s.b, 0.f);
  RowState e;
  const MergeScales z = e.merge(-INFINITY, 0.f);
  EXPECT_EQ(e.l, 0.f);
  EXPECT_FALSE(std::isnan(z.a) || std::isnan(z.b));
  EXPECT_EQ(e.lse(), -INFINITY);
}

TEST(RowState, TheSinkIsOneMoreStateOfWeightOne) {
  // lse over logits {1, 2} plus a sink logit 0.5: log(e + e^2 + e^0.5).
  RowState st;
  st.merge(1.f * kLog2e, 1.f);
  st.merge(2.f * kLog2e, 1.f);
  const float keep = st.merge(0.5f * kLog2e, 1.f).a;  // O's factor: O / l stays the keys' average scaled
  EXPECT_NEAR(st.lse(), std::log(std::exp(1.0) + std::exp(2.0) + std::exp(0.5)), 1e-6);
  EXPECT_EQ(keep, 1.f);  // the max did not move
  // A row with no key: the sink alone, lse = sink, O weight 0.
  RowState empty;
  const MergeScales s = empty.merge(-1.25f * kLog2e, 1.f);
  EXPECT_NEAR(empty.lse(), -1.25, 1e-6);
  EXPECT_EQ(s.a, 0.f);
}

TEST(RowState, LsePartialsMergeToTheirLogSumExp) {
  // The split combine's form: partial s is the state (lse_s log2e, 1).
  const double lses[] = {-3.0, 10.5, 10.25, -INFINITY, 0.0};
  RowState st;
  double sum = 0;
  for (double x : lses) st.merge(static_cast<float>(x * kLog2e), 1.f), sum += std::exp(x - 10.5);
  EXPECT_NEAR(st.lse(), 10.5 + std::log(sum), 1e-5);
}

TEST(RowState, AnEmptyRowFoldsToTheSinkExactly) {
  // Through log2 units and back the sink would be off by an ulp: the contract wants it exact.
  for (const float sink : {-15.5599918f, -7.78999424f, 0.1f, 123.456f}) {  // the first two do not round-trip
    RowState empty;
    const kvattn::cuda::SinkFold fold = kvattn::cuda::fold_sink(empty, sink);
    EXPECT_EQ(fold.lse, sink);
    EXPECT_EQ(fold.o_scale, 0.f);
  }
  RowState seen;
  seen.merge(2.f * kLog2e, 1.f);
  const kvattn::cuda::SinkFold fold = kvattn::cuda::fold_sink(seen, 0.5f);
  EXPECT_NEAR(fold.lse, std::log(std::exp(2.0) + std::exp(0.5)), 1e-6);
  EXPECT_EQ(fold.o_scale, 1.f);  // the max (2) did not move
}

TEST(RowState, TheEndOfARowFoldsTheSinkOnceOnlyIntoWholeRowsThatAttend) {
  using kvattn::cuda::end_row;
  using kvattn::cuda::RowEnd;
  const float sinks[2] = {0.f, -7.78999424f};  // head 1's does not round-trip through log2 units
  const double sink = sinks[1];
  RowState seen;
  seen.merge(2.f * kLog2e, 3.f);  // three keys of logit 2 (natural): lse = 2 + log 3
  // A whole unit's row: the sink counted once; out = O * o_scale with O relative to the keys' max.
  const RowEnd whole = end_row(seen, true, true, sinks, 1, 0.5f);
  EXPECT_NEAR(whole.lse, std::log(3 * std::exp(2.0) + std::exp(sink)), 1e-6);
  EXPECT_NEAR(whole.o_scale, 0.5 / (3 + std::exp(sink - 2)), 1e-7);
  // A split's partial row, or no sinks at all: O / l and m + log l, scaled by the descale.
  for (const RowEnd plain :
       {end_row(seen, true, false, sinks, 1, 0.5f), end_row(seen, true, true, nullptr, 1, 0.5f)}) {
    EXPECT_NEAR(plain.lse, 2 + std::log(3.0), 1e-6);
    EXPECT_FLOAT_EQ(plain.o_scale, 0.5f / 3);
  }
  // A row that saw no key: the sink exactly, O weight 0; without a sink -inf.
  const RowEnd empty = end_row(RowState{}, true, true, sinks, 1, 1.f);
  EXPECT_EQ(empty.lse, sinks[1]);
  EXPECT_EQ(empty.o_scale, 0.f);
  EXPECT_EQ(end_row(RowState{}, true, true, nullptr, 1, 1.f).lse, -INFINITY);
  // A +inf sink takes the whole weight (DESIGN.md, non-finite scores): out 0, lse +inf, never inf - inf.
  const float inf_sink[1] = {INFINITY};
  const RowEnd swamped = end_row(seen, true, true, inf_sink, 0, 1.f);
  EXPECT_EQ(swamped.lse, INFINITY);
  EXPECT_EQ(swamped.o_scale, 0.f);
  // A row past seqused_q: out 0 and lse -inf whatever it saw, and no sink.
  for (const float* s : {sinks, static_cast<const float*>(nullptr)}) {
    const RowEnd idle = end_row(seen, false, true, s, 1, 1.f);
    EXPECT_EQ(idle.lse, -INFINITY);
    EXPECT_EQ(idle.o_scale, 0.f);
  }
}

}  // namespace
