// The score modifications (CONTRACT.md step 6) of the Hopper decode kernel, in one place, mapped onto its
// layout: element (n, e) of a consumer warp's (16 rows, keys) S fragment (mma C layout, lane = 4 group +
// quad) is query row group + 8 (e / 2), at logical query position qp[e / 2], against the key at logical
// position kp0 + 8 n + 2 quad + (e & 1); slope[e / 2] is the ALiBi slope of that row's query head.
#pragma once

#include <cmath>
#include <cstdint>

#include "cuda/attention/params.cuh"
#include "cuda/common/softmax.cuh"

namespace kvattn::cuda::sm90 {

// Per thread: its two rows' logical query positions and ALiBi slopes (log2 units; 0 without ALiBi).
struct RowScores {
  int32_t qp[2];
  float slope[2];
};

// S (the raw dot products, fp8 descales applied) -> log2-unit logits: softcap (with the softmax scale
// inside) or the softmax scale, minus ALiBi's slope x |qp - kp|, then -inf for keys the row does not see
// (the mask), keys past kv_len and keys past the piece's last (kp_end: rows copied to fill a stage).
// `inside`: every key of the fragment is visible to every row (the mask is skipped).
template <int kNTiles>
__device__ __forceinline__ void apply_score_mods(float (&s)[kNTiles][4], const AttnParams& p,
                                                 const RowScores& rows, int32_t kp0, int quad, bool inside,
                                                 int32_t kp_end, int32_t kv_len) {
  auto key_of = [&](int n, int e) { return kp0 + n * 8 + 2 * quad + (e & 1); };
  if (p.softcap > 0.f) {
    const float inner = p.scale / p.softcap, outer = p.softcap * kLog2e;
#pragma unroll
    for (int n = 0; n < kNTiles; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) s[n][e] = outer * tanhf(s[n][e] * inner);
    }
  } else {
#pragma unroll
    for (int n = 0; n < kNTiles; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) s[n][e] *= p.scale_log2;
    }
  }
  if (p.alibi_slopes) {
#pragma unroll
    for (int n = 0; n < kNTiles; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e)
        s[n][e] -= rows.slope[e / 2] * fabsf(static_cast<float>(rows.qp[e / 2] - key_of(n, e)));
    }
  }
  if (!inside) {
#pragma unroll
    for (int n = 0; n < kNTiles; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int32_t kp = key_of(n, e);
        if (kp >= kp_end || kp >= kv_len || !p.mask.visible(rows.qp[e / 2], kp)) s[n][e] = -INFINITY;
      }
    }
  }
}

}  // namespace kvattn::cuda::sm90
