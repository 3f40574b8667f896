// The score modifications of CONTRACT.md (softmax scale, softcap, ALiBi, causal / window / chunk mask) as
// one function of the logical (query position qp, key position kp, query head), applied to a tile of
// scores, in the manner of FlashInfer's LogitsTransform. The mainloop of each architecture says which
// (row, kp) each of its registers holds (a ScoreTile); no feature knows a register layout.
#pragma once

#include <cmath>
#include <cstdint>

#include "cuda/attention/params.cuh"
#include "cuda/common/sequence.cuh"
#include "cuda/common/softmax.cuh"

namespace kvattn::cuda {

// A packed query row as the score modifications see it.
struct QueryRow {
  int32_t qp;         // logical query position: keys at kp <= qp are its past (causal)
  int head;           // query head
  float alibi_slope;  // log2 units; 0 without ALiBi or when the row does not attend
  bool attends;       // false past seqused_q (such rows are written as 0 / -inf)
  // The keys the mask shows this row, [key_first, key_last] within [0, kv_len) (empty: last < first): the
  // causal / window / chunk mask is one interval a row (MaskPolicy), found once here, so that a masked tile
  // costs two compares a score instead of the policy's branches (its chunk division inlined 64 times a
  // tile made the masked tile's code ~80 KB, fetched cold once a unit: bench/NOTES.md, session 17).
  int32_t key_first, key_last;
};

// Packed row r of (sequence i, kv_head): token r / g of head kv_head * g + r % g.
__device__ __forceinline__ QueryRow query_row(const AttnParams& p, const Sequence& seq, int i, int kv_head,
                                              int64_t r) {
  const int64_t kv_len = seq.end - seq.leftpad;
  QueryRow q;
  q.attends = r < static_cast<int64_t>(seq.q_used) * p.group;
  const RowSplit split = split_row(r, p.group);
  q.qp = static_cast<int32_t>(split.t + kv_len - seq.q_used);
  q.head = kv_head * p.group + split.g;
  q.alibi_slope =
      p.alibi_slopes && q.attends ? p.alibi_slopes[i * p.alibi_batch_stride + q.head] * kLog2e : 0.f;
  // (kp < 0, the decode cluster form's run-aligned first stage, is below key_first >= 0: a first key past
  // int32 or a last key below -1 hides every key all the same.)
  q.key_first = static_cast<int32_t>(min(p.mask.first_key(q.qp), int64_t{INT32_MAX}));
  q.key_last = static_cast<int32_t>(max(p.mask.last_key(q.qp, kv_len), int64_t{-1}));
  return q;
}

// What takes the scores that apply_score_mods<true> leaves to log2 units: scale * log2(e) when neither
// softcap nor ALiBi is on (the mods then leave the raw dot products alone and the softmax folds the scale
// into its exp2 argument, one FFMA a score), else 1. Uniform over a call.
__device__ __forceinline__ bool score_mods_scale(const AttnParams& p) {  // softcap or ALiBi: the mods scale
  return p.softcap > 0.f || p.alibi_slopes;
}
__device__ __forceinline__ float score_factor(const AttnParams& p) {
  return score_mods_scale(p) ? 1.f : p.scale_log2;
}

// S (the dot products, descaled) -> logits in log2 units, -inf where the key is invisible:
//   x = softcap ? softcap tanh(S scale / softcap) : S scale;  x -= slope |qp - kp|;  mask
// tile.for_each(f) calls f(float& s, const QueryRow& row, int32_t kp) on every score of the tile.
// `inside`: every key of the tile is visible to every row and lies in [0, kv_len) (the mask is skipped);
// else a key outside [0, kv_len) is invisible too (kv_len may be any bound <= the sequence's keys, e.g. a
// piece's last key + 1). kScaleLater: without softcap and ALiBi the scale is left to the caller
// (score_factor). Each feature is tested once per tile, not per score.
template <bool kScaleLater = false, class ScoreTile>
__device__ __forceinline__ void apply_score_mods(const AttnParams& p, int32_t kv_len, bool inside,
                                                 ScoreTile& tile) {
  if (p.softcap > 0.f) {
    const float inner = p.scale / p.softcap, outer = p.softcap * kLog2e;
    tile.for_each([&](float& s, const QueryRow&, int32_t) { s = outer * tanhf(s * inner); });
  } else if (!kScaleLater || p.alibi_slopes) {
    tile.for_each([&](float& s, const QueryRow&, int32_t) { s *= p.scale_log2; });
  }
  if (p.alibi_slopes) {
    tile.for_each([&](float& s, const QueryRow& q, int32_t kp) {
      s -= q.alibi_slope * fabsf(static_cast<float>(q.qp - kp));
    });
  }
  if (!inside) {
    // The row's interval (query_row), cut at kv_len: a key outside it is invisible.
    tile.for_each([&](float& s, const QueryRow& q, int32_t kp) {
      if (kp < q.key_first || kp > min(q.key_last, kv_len - 1)) s = -INFINITY;
    });
  }
}

// The ScoreTile of the mma.sync m16n8 C-fragment layout (the sm80 mainloop, the sm_90 decode kernel): a
// warp's (16 rows, 8 kNTiles keys) S; element e of 8-key tile n is the thread's row e / 2 (lane / 4 and
// lane / 4 + 8), key column 8 n + 2 (lane % 4) + e % 2.
template <int kNTiles>
struct MmaScoreTile {
  float (&s)[kNTiles][4];
  const QueryRow (&rows)[2];
  int32_t kp0;  // kp of this thread's first column (the tile's first key + 2 (lane % 4))
  template <class F>
  __device__ __forceinline__ void for_each(F f) {
#pragma unroll
    for (int n = 0; n < kNTiles; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) f(s[n][e], rows[e / 2], kp0 + n * 8 + (e & 1));
    }
  }
};

}  // namespace kvattn::cuda
