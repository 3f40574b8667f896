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
};

// Packed row r of (sequence i, kv_head): token r / g of head kv_head * g + r % g.
__device__ __forceinline__ QueryRow query_row(const AttnParams& p, const Sequence& seq, int i, int kv_head,
                                              int64_t r) {
  const int64_t kv_len = seq.end - seq.leftpad;
  QueryRow q;
  q.attends = r < static_cast<int64_t>(seq.q_used) * p.group;
  q.qp = static_cast<int32_t>(r / p.group + kv_len - seq.q_used);
  q.head = kv_head * p.group + static_cast<int>(r % p.group);
  q.alibi_slope =
      p.alibi_slopes && q.attends ? p.alibi_slopes[i * p.alibi_batch_stride + q.head] * kLog2e : 0.f;
  return q;
}

// S (the dot products, descaled) -> logits in log2 units, -inf where the key is invisible:
//   x = softcap ? softcap tanh(S scale / softcap) : S scale;  x -= slope |qp - kp|;  mask
// tile.for_each(f) calls f(float& s, const QueryRow& row, int32_t kp) on every score of the tile.
// `inside`: every key of the tile is visible to every row and lies in [0, kv_len) (the mask is skipped).
// Each feature is tested once per tile, not per score.
template <class ScoreTile>
__device__ __forceinline__ void apply_score_mods(const AttnParams& p, int32_t kv_len, bool inside,
                                                 ScoreTile& tile) {
  if (p.softcap > 0.f) {
    const float inner = p.scale / p.softcap, outer = p.softcap * kLog2e;
    tile.for_each([&](float& s, const QueryRow&, int32_t) { s = outer * tanhf(s * inner); });
  } else {
    tile.for_each([&](float& s, const QueryRow&, int32_t) { s *= p.scale_log2; });
  }
  if (p.alibi_slopes) {
    tile.for_each([&](float& s, const QueryRow& q, int32_t kp) {
      s -= q.alibi_slope * fabsf(static_cast<float>(q.qp - kp));
    });
  }
  if (!inside) {
    tile.for_each([&](float& s, const QueryRow& q, int32_t kp) {
      if (!(kp < kv_len && p.mask.visible(q.qp, kp))) s = -INFINITY;
    });
  }
}

}  // namespace kvattn::cuda
