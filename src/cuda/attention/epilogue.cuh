// The epilogue: the only writer of out, lse and the partials, for every architecture's mainloop.
// A piece that is its whole unit writes out = O / l and lse, the sink counted here (merged into the row's
// state); a piece of a split unit writes the normalized partial (O / l, m + log l) without the sink, which
// the combine counts once. A piece that failed its checks writes NaN rows.
#pragma once

#include <cmath>
#include <cstdint>

#include "cuda/attention/params.cuh"
#include "cuda/attention/schedule.cuh"
#include "cuda/attention/score_mod.cuh"
#include "cuda/common/dtype.cuh"
#include "cuda/common/softmax.cuh"

namespace kvattn::cuda {

// Row (i, token t, head h) of out and of lse (optional, nullptr when absent).
template <typename T>
__device__ __forceinline__ T* out_row(const AttnParams& p, const Sequence& seq, int i, int64_t t, int h) {
  return token_row<T>(p.out, seq, i, t, h);
}
__device__ __forceinline__ float* lse_at(const AttnParams& p, const Sequence& seq, int i, int64_t t, int h) {
  return p.lse + i * p.lse_batch_stride + h * p.lse_head_stride + (seq.q_row0 + t) * p.lse_token_stride;
}

// Packed row r (query row q) of a piece from its state (m, l) and the O columns this thread holds:
// cols(store) calls store(c, O[c]) for each of them. o_scale multiplies O (fp8: the v descale);
// lse_writer: the one thread of the row that writes its lse.
template <typename T, class Cols>
__device__ __forceinline__ void write_row(const AttnParams& p, const Piece& w, const Sequence& seq, int64_t r,
                                          const QueryRow& q, RowState st, float o_scale, bool lse_writer,
                                          Cols cols) {
  const int64_t t = split_row(r, p.group).t;
  // end_row's rule written out: computing prow first (to call end_row) moves this kernel's register
  // allocation and main-loop instructions (tools/sass_diff.py), a change a benchmark could see.
  if (!q.attends) st.l = 0.f;  // rows past seqused_q: out 0, lse -inf, no sink
  float lse = st.lse(), rescale = 1.f;
  const int64_t prow = piece_partial_row(p, w, seq, r);
  if (prow < 0 && p.sinks && q.attends) {
    const SinkFold fold = fold_sink(st, p.sinks[q.head]);
    rescale = fold.o_scale;
    lse = fold.lse;
  }
  const float inv_l = st.l > 0.f ? rescale / st.l * o_scale : 0.f;
  if (prow >= 0) {
    float* o = p.o_partial + prow * p.head_dim_v;
    cols([&](int c, float v) {
      if (c < p.head_dim_v) o[c] = v * inv_l;
    });
    if (lse_writer) p.lse_partial[prow] = lse;
  } else {
    T* o = out_row<T>(p, seq, w.i, t, q.head);
    cols([&](int c, float v) {
      if (c < p.head_dim_v) o[c] = from_float<T>(v * inv_l);
    });
    if (p.lse && lse_writer) *lse_at(p, seq, w.i, t, q.head) = lse;
  }
}

// Rows [m0, m0 + kRows) of an offending sequence (up to q_len * g): NaN in out / lse or in the partials.
template <typename T, int kRows, int kThreads>
__device__ inline void write_nan_rows(const AttnParams& p, const Piece& w, const Sequence& seq) {
  const int64_t rows = static_cast<int64_t>(seq.q_len) * p.group;
  for (int idx = threadIdx.x; idx < kRows * p.head_dim_v; idx += kThreads) {
    const int64_t r = w.m0 + idx / p.head_dim_v;
    const int c = idx % p.head_dim_v;
    if (r >= rows) continue;
    const int64_t t = r / p.group;
    const int h = w.kv_head * p.group + static_cast<int>(r % p.group);
    const int64_t prow = piece_partial_row(p, w, seq, r);
    if (prow >= 0) {
      p.o_partial[prow * p.head_dim_v + c] = NAN;
      if (c == 0) p.lse_partial[prow] = NAN;
    } else {
      out_row<T>(p, seq, w.i, t, h)[c] = from_float<T>(NAN);
      if (c == 0 && p.lse) *lse_at(p, seq, w.i, t, h) = NAN;
    }
  }
}

}  // namespace kvattn::cuda
