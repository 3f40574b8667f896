// Global <-> shared traffic of the attention kernel: Q (with rotary fused) and the K/V tile gather
// through the page table, one key row at a time.
#pragma once

#include "cuda/attention/config.cuh"
#include "cuda/attention/params.cuh"
#include "cuda/common/dtype.cuh"
#include "cuda/common/mma.cuh"
#include "cuda/common/rotary.cuh"

namespace kvattn::cuda {

// Q rows [m0, m0 + kRows) of a CTA into s_q (kBlockM, kHeadDim): packed row r is token r / g of query
// head kv_head * g + r % g. Rows that do not attend (past q_used) are zero. Rotary (positions already
// checked) is applied in fp32 and rounded to T once, as a rotated q would be. TQ: q's (and qv's) storage,
// T or fp8 (converted exactly; q_descale is applied to the scores, not here).
template <class Cfg, int kRows, typename TQ>
__device__ inline void load_q_as(const AttnParams& p, const Sequence& seq, int i, int kv_head, int64_t m0,
                                 typename Cfg::T* s_q, typename Cfg::T* s_qv) {
  using T = typename Cfg::T;
  const int64_t used_rows = static_cast<int64_t>(seq.q_used) * p.group;
  constexpr int kChunks = Cfg::kHeadDim / 8;
  for (int idx = threadIdx.x; idx < kRows * kChunks; idx += Cfg::kNThreads) {
    const int row = idx / kChunks, c0 = idx % kChunks * 8;
    const int64_t r = m0 + row;
    T vals[8];
    if (r < used_rows) {
      const int64_t t = r / p.group;
      const int h = kv_head * p.group + static_cast<int>(r % p.group);
      const TQ* src = static_cast<const TQ*>(p.q.ptr) + i * p.q.batch_stride +
                      (seq.q_row0 + t) * p.q.token_stride + h * p.q.head_stride;
      const int64_t pos = seq.rotary_pos + (p.seq.rotary_q_per_token ? t : 0);
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const int c = c0 + e;
        vals[e] = c >= p.head_dim           ? from_float<T>(0.f)
                  : c < p.rotary.rotary_dim ? from_float<T>(rotated_channel(src, c, pos, p.rotary))
                                            : convert_to<T>(src[c]);
      }
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) vals[e] = from_float<T>(0.f);
    }
#pragma unroll
    for (int e = 0; e < 8; ++e) s_q[row * Cfg::kStrideQK + c0 + e] = vals[e];
  }
  if (p.qv.ptr == nullptr) return;
  constexpr int kChunksV = Cfg::kHeadDimV / 8;
  for (int idx = threadIdx.x; idx < kRows * kChunksV; idx += Cfg::kNThreads) {
    const int row = idx / kChunksV, c0 = idx % kChunksV * 8;
    const int64_t r = m0 + row;
    const bool attends = r < used_rows;
    const int64_t t = attends ? r / p.group : 0;
    const int h = kv_head * p.group + (attends ? static_cast<int>(r % p.group) : 0);
    const TQ* src = static_cast<const TQ*>(p.qv.ptr) + i * p.qv.batch_stride +
                    (seq.q_row0 + t) * p.qv.token_stride + h * p.qv.head_stride;
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      s_qv[row * Cfg::kStrideV + c0 + e] =
          attends && c0 + e < p.head_dim_v ? convert_to<T>(src[c0 + e]) : from_float<T>(0.f);
    }
  }
}

// fp8 q (and qv) exist only under fp8 caches, computed in bf16: only those kernels carry that branch.
template <class Cfg, int kRows>
__device__ inline void load_q(const AttnParams& p, const Sequence& seq, int i, int kv_head, int64_t m0,
                              typename Cfg::T* s_q, typename Cfg::T* s_qv) {
  if constexpr (Cfg::kKvFp8 && std::is_same_v<typename Cfg::T, __nv_bfloat16>) {
    if (p.q_fp8) {
      load_q_as<Cfg, kRows, __nv_fp8_e4m3>(p, seq, i, kv_head, m0, s_q, s_qv);
      return;
    }
  }
  load_q_as<Cfg, kRows, typename Cfg::T>(p, seq, i, kv_head, m0, s_q, s_qv);
}

// The (page, in-page slot) of each key row of a tile, one thread per key; invalid slots (outside
// [leftpad, end) or behind an out-of-range page id) get page -1 and are zero-filled by the gather.
template <class Cfg>
__device__ inline void address_tile(const AttnParams& p, const Sequence& seq, int64_t tile_slot0,
                                    SlotAddress* s_slots) {
  if (threadIdx.x < Cfg::kBlockN) {
    const int64_t s = tile_slot0 + threadIdx.x;
    SlotAddress a{-1, 0};
    if (s >= seq.leftpad && s < seq.end) a = slot_address(p.seq, seq, s);
    s_slots[threadIdx.x] = a;
  }
}

// One (kBlockN, kChannels) tile of a cache into shared memory (row stride kStride elements of TKV, the
// cache's storage), gathered row by row in 16-byte chunks; channels past `channels` (the problem's head
// dim, <= kChannels) are zero. vec16: rows 16-byte aligned and `channels` a whole number of chunks.
template <class Cfg, int kChannels, int kStride>
__device__ inline void gather_rows(const CacheTensor& cache, int channels, int kv_head, bool vec16,
                                   const SlotAddress* s_slots, typename Cfg::TKV* dst) {
  using TKV = typename Cfg::TKV;
  constexpr int kPerChunk = 16 / static_cast<int>(sizeof(TKV));  // 8 (16-bit) or 16 (fp8) elements
  static_assert(kChannels % kPerChunk == 0, "whole 16-byte chunks");
  constexpr int kChunks = kChannels / kPerChunk;
  constexpr int kPerThread = (Cfg::kBlockN * kChunks + Cfg::kNThreads - 1) / Cfg::kNThreads;
  const TKV* base = static_cast<const TKV*>(cache.ptr);
#pragma unroll
  for (int it = 0; it < kPerThread; ++it) {
    const int idx = threadIdx.x + it * Cfg::kNThreads;
    if (Cfg::kBlockN * kChunks % Cfg::kNThreads != 0 && idx >= Cfg::kBlockN * kChunks) break;
    const int n = idx / kChunks, c0 = idx % kChunks * kPerChunk;
    const SlotAddress a = s_slots[n];
    const bool valid = a.page >= 0 && c0 < channels;
    const TKV* src = base + (valid ? a.page * cache.page_stride + a.in_page * cache.slot_stride +
                                         kv_head * cache.head_stride + c0
                                   : 0);
    TKV* d = dst + n * kStride + c0;
    if (vec16) {
      cp_async_16(smem_addr(d), src, valid);
    } else {
#pragma unroll
      for (int e = 0; e < kPerChunk; ++e) d[e] = valid && c0 + e < channels ? src[e] : from_float<TKV>(0.f);
    }
  }
}

// fp8 caches: the (kBlockN, kChannels) fp8 stage `src` (row stride kSrcStride) as T into `dst` (row stride
// kDstStride), for ldmatrix. Exact (every e4m3 value is an fp16 and a bf16); zero-filled rows stay zero.
template <class Cfg, int kChannels, int kSrcStride, int kDstStride>
__device__ inline void convert_rows(const __nv_fp8_e4m3* src, typename Cfg::T* dst) {
  using T = typename Cfg::T;
  constexpr int kChunks = kChannels / 8;
  for (int idx = threadIdx.x; idx < Cfg::kBlockN * kChunks; idx += Cfg::kNThreads) {
    const int n = idx / kChunks, c0 = idx % kChunks * 8;
    const __nv_fp8_e4m3* s = src + n * kSrcStride + c0;
    T vals[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) vals[e] = convert_to<T>(s[e]);
    T* d = dst + n * kDstStride + c0;
#pragma unroll
    for (int e = 0; e < 8; ++e) d[e] = vals[e];
  }
}

}  // namespace kvattn::cuda
