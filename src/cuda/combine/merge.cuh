// One warp merges the n (O, LSE) partials of one row (CONTRACT.md step 7, the sink counted once), with
// the one merge of softmax.cuh's RowState.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "cuda/common/dtype.cuh"
#include "cuda/common/softmax.cuh"

namespace kvattn::cuda {

struct PartialRow {
  const float* lse;  // lse of split s: lse[s * lse_stride]
  int64_t lse_stride;
  const float* o;  // channel c of split s: o[s * o_stride + c]
  int64_t o_stride;
  // Optional: split 0 lives elsewhere (the balanced schedule's first piece of a unit).
  const float* lse0 = nullptr;
  const float* o0 = nullptr;

  __device__ __forceinline__ const float* lse_of(int s) const {
    return s == 0 && lse0 ? lse0 : lse + s * lse_stride;
  }
  __device__ __forceinline__ const float* o_of(int s) const { return s == 0 && o0 ? o0 : o + s * o_stride; }
};

// The longer merges (merge_row_warp past 16 partials, merge_row_block): lane t holds the LSEs of splits
// first + stride i for i = t + 32 j (j < kWideBlocks), loaded in one round trip; the weights come from
// them (not reloaded a block of 32) and kWideLoads partials' O are in flight a lane. Loaded 8 O at a time,
// with the LSEs read again for the weights, a block of 32 cost ~6 dependent round trips: 132 partials (b1
// over one kv head, the balanced schedule's whole grid on one unit) ~25 us of the call (bench/NOTES.md,
// session 46). 16 loads, not 32: 116 registers against 96 before (32: 167, fewer warps an SM).
constexpr int kWideBlocks = 8;
constexpr int kWideLoads = 16;

__device__ __forceinline__ bool rows_vec4(const PartialRow& in, int dv) {
  return dv % 4 == 0 && in.o_stride % 4 == 0 && reinterpret_cast<uintptr_t>(in.o) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(in.o0) % 16 == 0;
}

__device__ __forceinline__ void load_lses(const PartialRow& in, int first, int stride, int count,
                                          float (&lse)[kWideBlocks]) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int j = 0; j < kWideBlocks; ++j) {
    const int i = lane + 32 * j;
    lse[j] = i < count ? *in.lse_of(first + stride * i) : 0.f;
  }
}

// The weight of a partial with lse_s in a row of natural-log total `total` whose state counted `l`:
// +inf partials share the weight (inf - inf would be NaN), the others then weigh 0; zero-weight partials
// are skipped, so their O may be anything.
__device__ __forceinline__ float partial_weight(float lse_s, float total, float l) {
  if (total == INFINITY) return lse_s == INFINITY ? 1.f / l : 0.f;
  return (lse_s == -INFINITY || total == -INFINITY) ? 0.f : expf(lse_s - total);
}

// acc += the weighted O of splits first + stride i, i < count (load_lses' layout), channels lane * 4 ..
// lane * 4 + 3 on active lanes; every lane takes part in the shuffles.
__device__ __forceinline__ void accumulate_wide(const PartialRow& in, int first, int stride, int count,
                                                const float (&lse)[kWideBlocks], float total, float l,
                                                bool active, float (&acc)[4]) {
  const int lane = threadIdx.x % 32;
#pragma unroll 1
  for (int j = 0; j < kWideBlocks && 32 * j < count; ++j) {  // warp-uniform
    float lse_j = lse[0];  // lse[j], selected (an indexed register array would live in local memory)
#pragma unroll
    for (int k = 1; k < kWideBlocks; ++k) lse_j = k == j ? lse[k] : lse_j;
    const float w_mine = lane + 32 * j < count ? partial_weight(lse_j, total, l) : 0.f;
#pragma unroll 1
    for (int half = 0; half < 32 && 32 * j + half < count; half += kWideLoads) {  // warp-uniform
      float4 o[kWideLoads];
#pragma unroll
      for (int t = 0; t < kWideLoads; ++t) {  // every load of the batch before the first use
        const int i = 32 * j + half + t;
        o[t] = active && i < count ? *reinterpret_cast<const float4*>(in.o_of(first + stride * i) + lane * 4)
                                   : make_float4(0.f, 0.f, 0.f, 0.f);
      }
#pragma unroll
      for (int t = 0; t < kWideLoads; ++t) {
        const float w = __shfl_sync(0xffffffffu, w_mine, half + t);
        if (w > 0.f) {  // a zero-weight partial is selected away (its O may be anything)
          acc[0] += w * o[t].x, acc[1] += w * o[t].y, acc[2] += w * o[t].z, acc[3] += w * o[t].w;
        }
      }
    }
  }
}

// Split s's LSE into a lane's state (the state (lse_s log2(e), 1)); a NaN LSE marks the row NaN instead.
__device__ __forceinline__ void take_lse(RowState& st, bool& nan, float lse_s) {
  if (isnan(lse_s)) {
    nan = true;
  } else {
    st.merge(lse_s * kLog2e, 1.f);
  }
}

// A lane's 4 channels (lane * 4 ..) of the merged row, NaN for a NaN row.
__device__ __forceinline__ void store_lane4(void* out, DType out_dtype, int64_t out_offset,
                                            const float (&acc)[4], bool nan) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int e = 0; e < 4; ++e) store_as(out, out_dtype, out_offset + lane * 4 + e, nan ? NAN : acc[e]);
}

// Every lane's state merged into every lane's (lane order by butterfly: the same on every lane).
__device__ __forceinline__ void merge_over_warp(RowState& st) {
#pragma unroll
  for (int off = 16; off > 0; off /= 2) {
    const float m_b = __shfl_xor_sync(0xffffffffu, st.m, off);
    const float l_b = __shfl_xor_sync(0xffffffffu, st.l, off);
    st.merge(m_b, l_b);
  }
}

// out[out_offset + c] for c < dv (dtype out_dtype) and *lse_out (optional); sink in natural log units,
// has_sink false for rows that never see the sink.
__device__ inline void merge_row_warp(const PartialRow& in, int n, int dv, bool has_sink, float sink,
                                      void* out, DType out_dtype, int64_t out_offset, float* lse_out) {
  const int lane = threadIdx.x % 32;
  const bool vec4 = rows_vec4(in, dv);
  // The common short merge (<= kEarly partials, one float4 of <= 128 channels a lane): the O loads are
  // issued here, with the LSE loads below, so both land in one memory round trip (the weights need the
  // LSEs first, the loads do not need the weights).
  constexpr int kEarly = 16;
  const bool early = vec4 && n <= kEarly && dv <= 128;
  float4 o_early[kEarly];
  if (early) {
#pragma unroll
    for (int s = 0; s < kEarly; ++s) {
      o_early[s] = s < n && lane * 4 < dv ? *reinterpret_cast<const float4*>(in.o_of(s) + lane * 4)
                                          : make_float4(0.f, 0.f, 0.f, 0.f);
    }
  }
  // Longer merges (<= 32 kWideBlocks partials, one float4 of <= 128 channels a lane): load_lses.
  const bool wide = vec4 && !early && n <= 32 * kWideBlocks && dv <= 128;
  float lse_r[kWideBlocks];
  if (wide) load_lses(in, 0, 1, n, lse_r);
  // The row's state: each lane merges its partials (split s is the state (lse_s log2(e), 1)), then the
  // lanes merge theirs, then the sink. Any NaN partial makes the whole row NaN (an offending sequence
  // stays NaN through a split).
  RowState st;
  bool nan = false;
  if (wide) {
#pragma unroll
    for (int j = 0; j < kWideBlocks; ++j) {
      if (lane + 32 * j < n) take_lse(st, nan, lse_r[j]);
    }
  } else {
    for (int s = lane; s < n; s += 32) take_lse(st, nan, *in.lse_of(s));
  }
  merge_over_warp(st);
  nan = __any_sync(0xffffffffu, nan);
  // Natural log; -inf when nothing (no key, no sink) contributed.
  float total = has_sink ? fold_sink(st, sink).lse : st.lse();
  if (nan) total = NAN;
  auto weight = [&](float lse_s) { return partial_weight(lse_s, total, st.l); };
  // out = sum_s w_s O_s. The loads of O do not depend on the weights, so 8 of them are in flight at once:
  // for each block of 32 splits, lane t computes the weight of split b + t and shuffles it to the others.
  // A zero-weight partial is selected away, never multiplied in (its O may be anything, even NaN).
  auto accumulate = [&](auto width) {
    constexpr int kW = decltype(width)::value;        // channels a lane loads at once: 4 (float4) or 1
    for (int base = 0; base < dv; base += 32 * kW) {  // warp-uniform: every lane takes part in the shuffles
      const int c0 = base + lane * kW;
      const bool active = c0 < dv;
      float acc[kW] = {};
      for (int b = 0; b < n; b += 32) {
        const int mine = b + lane;
        const float w_mine = mine < n ? weight(*in.lse_of(mine)) : 0.f;
        const int count = min(32, n - b);
#pragma unroll 8
        for (int t = 0; t < count; ++t) {
          const float w = __shfl_sync(0xffffffffu, w_mine, t);
          if (!active) continue;
          const float* src = in.o_of(b + t) + c0;
          float o[kW];
          if constexpr (kW == 4) {
            const float4 v = *reinterpret_cast<const float4*>(src);
            o[0] = v.x, o[1] = v.y, o[2] = v.z, o[3] = v.w;
          } else {
            o[0] = *src;
          }
#pragma unroll
          for (int e = 0; e < kW; ++e) acc[e] += w > 0.f ? w * o[e] : 0.f;
        }
      }
      if (!active) continue;
#pragma unroll
      for (int e = 0; e < kW; ++e) store_as(out, out_dtype, out_offset + c0 + e, nan ? NAN : acc[e]);
    }
  };
  if (early) {
    const float w_mine = lane < n ? weight(*in.lse_of(lane)) : 0.f;
    float acc[4] = {};
#pragma unroll
    for (int s = 0; s < kEarly; ++s) {
      const float w = __shfl_sync(0xffffffffu, w_mine, s);
      if (s < n && w > 0.f) {  // a zero-weight partial is selected away (its O may be anything)
        acc[0] += w * o_early[s].x, acc[1] += w * o_early[s].y, acc[2] += w * o_early[s].z;
        acc[3] += w * o_early[s].w;
      }
    }
    if (lane * 4 < dv) store_lane4(out, out_dtype, out_offset, acc, nan);
  } else if (wide) {
    const bool active = lane * 4 < dv;
    float acc[4] = {};
    accumulate_wide(in, 0, 1, n, lse_r, total, st.l, active, acc);
    if (active) store_lane4(out, out_dtype, out_offset, acc, nan);
  } else if (vec4) {
    accumulate(std::integral_constant<int, 4>{});
  } else {
    accumulate(std::integral_constant<int, 1>{});
  }
  if (lse_out && lane == 0) *lse_out = total;
}

// merge_row_warp's longer merge spread over the block's kWarps warps, one row a block (call from every
// thread): warp w takes splits w, w + kWarps, ... (load_lses' layout with stride kWarps); the warps' states
// meet in shared memory, merged in warp order into the row's (every warp the same total), then each warp's
// weighted O, summed in warp order by warp 0. Many partials over few rows (b1 over one kv head: 132
// partials, 4 rows in the whole grid) otherwise leave one warp a row doing every round trip. For > 16
// and <= kWarps x 32 kWideBlocks partials of 16-byte aligned rows of <= 128 channels; else warp 0 alone.
// Not for deterministic mode: the launch shape follows the batch, and the summation order with it.
template <int kWarps>
__device__ inline void merge_row_block(const PartialRow& in, int n, int dv, bool has_sink, float sink,
                                       void* out, DType out_dtype, int64_t out_offset, float* lse_out) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (n <= 16 || n > kWarps * 32 * kWideBlocks || dv > 128 || !rows_vec4(in, dv)) {  // block-uniform
    if (warp == 0) merge_row_warp(in, n, dv, has_sink, sink, out, out_dtype, out_offset, lse_out);
    return;
  }
  __shared__ float s_state[kWarps][2];
  __shared__ int s_nan[kWarps];
  __shared__ float4 s_acc[kWarps][32];
  const int count = (n - warp + kWarps - 1) / kWarps;  // this warp's splits (n > 16 >= kWarps: >= 1)
  float lse[kWideBlocks];
  load_lses(in, warp, kWarps, count, lse);
  RowState st;
  bool nan = false;
#pragma unroll
  for (int j = 0; j < kWideBlocks; ++j) {
    if (lane + 32 * j < count) take_lse(st, nan, lse[j]);
  }
  merge_over_warp(st);
  nan = __any_sync(0xffffffffu, nan);
  if (lane == 0) {
    s_state[warp][0] = st.m, s_state[warp][1] = st.l;
    s_nan[warp] = nan;
  }
  __syncthreads();
  RowState row;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    row.merge(s_state[w][0], s_state[w][1]);
    nan = nan || s_nan[w] != 0;
  }
  float total = has_sink ? fold_sink(row, sink).lse : row.lse();
  if (nan) total = NAN;
  const bool active = lane * 4 < dv;
  float acc[4] = {};
  accumulate_wide(in, warp, kWarps, count, lse, total, row.l, active, acc);
  s_acc[warp][lane] = make_float4(acc[0], acc[1], acc[2], acc[3]);
  __syncthreads();
  if (warp != 0) return;
  float4 sum = s_acc[0][lane];
#pragma unroll
  for (int w = 1; w < kWarps; ++w) {
    const float4 a = s_acc[w][lane];
    sum.x += a.x, sum.y += a.y, sum.z += a.z, sum.w += a.w;
  }
  const float v[4] = {sum.x, sum.y, sum.z, sum.w};
  if (active) store_lane4(out, out_dtype, out_offset, v, nan);
  if (lse_out && lane == 0) *lse_out = total;
}

}  // namespace kvattn::cuda
