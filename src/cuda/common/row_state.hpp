// The softmax state of a row and its one merge (CONTRACT.md step 7), host and device code: the kernels
// (warp merge, sink fold, the end of a row), the split combine, and
// tests/cpp/test_row_state.cpp, which checks the merge.
#pragma once

#include <cmath>

#if defined(__CUDACC__)
#define KVATTN_STATE_FN __host__ __device__ __forceinline__
#else
#define KVATTN_STATE_FN inline
#endif

namespace kvattn::cuda {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// exp2(x - m) with the convention that a row with no visible key so far (m = -inf) contributes nothing
// and never produces inf - inf = NaN.
KVATTN_STATE_FN float safe_max_base(float m) {
  return m == -INFINITY ? 0.f : m;
}

// The softmax state of one row, the (m, l) of an (m, l, O) partial: m = the largest logit seen (log2
// units), l = sum 2^(s - m) over the keys seen. ONE merge combines two partials, wherever they meet (the
// warps of the decode kernel, the sink, the split combine):
//   m = max(m_a, m_b),  l = l_a 2^(m_a - m) + l_b 2^(m_b - m),  O = O_a 2^(m_a - m) + O_b 2^(m_b - m)
// merge() returns the two factors for the O beside it. A state with no key (m = -inf) contributes nothing
// and never makes inf - inf = NaN; states whose m is +inf share the weight equally (l counts them) and
// the others weigh 0. A partial known by its lse alone is the state (lse log2(e), 1).
struct MergeScales {
  float a;  // of this state's O
  float b;  // of the other's
};

struct RowState {
  float m = -INFINITY;
  float l = 0.f;

  KVATTN_STATE_FN MergeScales merge(float m_b, float l_b) {
    const float m_new = fmaxf(m, m_b);
    const float base = safe_max_base(m_new);
    MergeScales s{exp2f(m - base), exp2f(m_b - base)};
    if (m_new == INFINITY) {  // +inf logits share the weight equally (docs/DESIGN.md); inf - inf is NaN
      s.a = m == INFINITY ? 1.f : 0.f;
      s.b = m_b == INFINITY ? 1.f : 0.f;
    }
    m = m_new;
    l = l * s.a + l_b * s.b;
    return s;
  }
  // Natural-log LSE; -inf when nothing contributed.
  KVATTN_STATE_FN float lse() const { return l > 0.f ? (m + log2f(l)) * kLn2 : -INFINITY; }
};

// The sink (natural log: the logit of a key whose value is zero) folded into a row's state, counted once
// per row: by the attention epilogue for a whole unit, else by the split combine.
struct SinkFold {
  float lse;      // natural log; a row that saw no key gets the sink exactly, not through log2 units and back
  float o_scale;  // the factor of the row's O (0 for a row that saw no key)
};

KVATTN_STATE_FN SinkFold fold_sink(RowState& st, float sink) {
  const bool empty = st.l == 0.f;
  const float o_scale = st.merge(sink * kLog2e, 1.f).a;
  return {empty ? sink : st.lse(), o_scale};
}

// The end of a row, as the Hopper epilogues write it (the portable write_row writes the same rule out, for
// its code generation): out = O * o_scale and lse (natural log). A row that does
// not attend (past seqused_q) gets 0 and -inf and no sink; the row's sink, sinks[head] (natural log; sinks
// may be nullptr), is folded in here when the row is its unit's whole (a split's partial rows leave it to
// the combine). o_descale: the kernel's factor of O (fp8: the v descale; 1 otherwise).
struct RowEnd {
  float lse;
  float o_scale;
};

KVATTN_STATE_FN RowEnd end_row(RowState st, bool attends, bool whole_unit, const float* sinks, int head,
                               float o_descale) {
  if (!attends) st.l = 0.f;
  float lse = st.lse(), rescale = 1.f;
  if (whole_unit && sinks && attends) {
    const SinkFold fold = fold_sink(st, sinks[head]);
    rescale = fold.o_scale;
    lse = fold.lse;
  }
  return {lse, st.l > 0.f ? rescale / st.l * o_descale : 0.f};
}

}  // namespace kvattn::cuda
