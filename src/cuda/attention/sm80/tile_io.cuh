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
      const TQ* src = token_row<const TQ>(p.q, seq, i, t, h);
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
    const TQ* src = token_row<const TQ>(p.qv, seq, i, t, h);
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

// Where key row n of a tile starts in each cache (kv head included). A slot that is not valid (outside
// [leftpad, end) or behind an out-of-range page id) points at a row of zeros instead, so the gather
// copies every row the same way and NaN garbage in unused slots never reaches S or P V. Computed once per
// key row: a 16-byte chunk then costs one add, whatever the layout.
struct KvRowPtrs {
  const unsigned char* k;
  const unsigned char* v;
};

// The longest row a kernel reads (dv = 512 16-bit elements); zero-initialized, never written.
static __device__ __align__(16) uint4 g_zero_row[64];

// The raw page-table entry of this thread's key row in the tile starting at tile_slot0 (one thread per
// key; paged caches only, 0 otherwise). Loaded a tile before address_tile needs it.
template <class Cfg>
__device__ __forceinline__ int32_t prefetch_page(const AttnParams& p, const Sequence& seq,
                                                 int64_t tile_slot0) {
  const int64_t s = tile_slot0 + threadIdx.x;
  if (!p.seq.page_table || threadIdx.x >= Cfg::kBlockN || s < seq.leftpad || s >= seq.end) return 0;
  return page_entry(p.seq, seq, s);
}

// The row pointers of a tile, one thread per key; `entry` is this thread's prefetch_page of the tile.
template <class Cfg>
__device__ inline void address_tile(const AttnParams& p, const Sequence& seq, int kv_head, int64_t tile_slot0,
                                    int32_t entry, KvRowPtrs* s_rows) {
  using TKV = typename Cfg::TKV;
  if (threadIdx.x < Cfg::kBlockN) {
    const int64_t s = tile_slot0 + threadIdx.x;
    const unsigned char* zero = reinterpret_cast<const unsigned char*>(g_zero_row);
    KvRowPtrs r{zero, zero};
    if (s >= seq.leftpad && s < seq.end) {
      const SlotAddress a = slot_address_at(p.seq, seq, s, entry);
      if (a.page >= 0) {
        const auto at = [&](const CacheTensor& c) {
          return static_cast<const unsigned char*>(c.ptr) +
                 (a.page * c.page_stride + a.in_page * c.slot_stride + kv_head * c.head_stride) * sizeof(TKV);
        };
        r = {at(p.k_cache), at(p.v_cache)};
      }
    }
    s_rows[threadIdx.x] = r;
  }
}

// One (kBlockN, kChannels) tile of a cache into shared memory at dst (row stride kStride elements of TKV,
// the cache's storage), in 16-byte chunks; channels past `channels` (the problem's head dim, <= kChannels)
// are zero. kV: the V cache (the v pointers of s_rows), else K. Needs 16-byte aligned rows and `channels`
// a whole number of chunks (p.kv_vec16); gather_rows_unaligned does the rest.
template <class Cfg, int kChannels, int kStride, bool kV>
__device__ __forceinline__ void gather_rows(int channels, const KvRowPtrs* s_rows, typename Cfg::TKV* dst) {
  using TKV = typename Cfg::TKV;
  constexpr int kPerChunk = 16 / static_cast<int>(sizeof(TKV));  // 8 (16-bit) or 16 (fp8) elements
  static_assert(kChannels % kPerChunk == 0, "whole 16-byte chunks");
  constexpr int kChunks = kChannels / kPerChunk;
  if constexpr (Cfg::kNThreads % kChunks == 0 && Cfg::kBlockN % (Cfg::kNThreads / kChunks) == 0) {
    // A thread copies chunk c of rows r0, r0 + kRowStep, ...: its shared-memory addresses differ by
    // constants, so each chunk is one shared load (the row pointer), one add and one copy.
    constexpr int kRowStep = Cfg::kNThreads / kChunks;
    const int r0 = threadIdx.x / kChunks, c = threadIdx.x % kChunks;
    const bool valid = c * kPerChunk < channels;
    const uint32_t d0 = smem_addr(dst + r0 * kStride + c * kPerChunk);
#pragma unroll
    for (int j = 0; j < Cfg::kBlockN / kRowStep; ++j) {
      const KvRowPtrs& row = s_rows[r0 + j * kRowStep];
      cp_async_16(d0 + j * kRowStep * kStride * sizeof(TKV), (kV ? row.v : row.k) + c * 16, valid);
    }
  } else {
    constexpr int kPerThread = (Cfg::kBlockN * kChunks + Cfg::kNThreads - 1) / Cfg::kNThreads;
#pragma unroll
    for (int it = 0; it < kPerThread; ++it) {
      const int idx = threadIdx.x + it * Cfg::kNThreads;
      if (Cfg::kBlockN * kChunks % Cfg::kNThreads != 0 && idx >= Cfg::kBlockN * kChunks) break;
      const int n = idx / kChunks, c = idx % kChunks;
      const KvRowPtrs& row = s_rows[n];
      cp_async_16(smem_addr(dst + n * kStride + c * kPerChunk), (kV ? row.v : row.k) + c * 16,
                  c * kPerChunk < channels);
    }
  }
}

// The same tile element by element, for caches whose rows are not 16-byte aligned.
template <class Cfg, int kChannels, int kStride, bool kV>
__device__ __noinline__ void gather_rows_unaligned(int channels, const KvRowPtrs* s_rows,
                                                   typename Cfg::TKV* dst) {
  using TKV = typename Cfg::TKV;
  for (int idx = threadIdx.x; idx < Cfg::kBlockN * kChannels; idx += Cfg::kNThreads) {
    const int n = idx / kChannels, c = idx % kChannels;
    const TKV* row = reinterpret_cast<const TKV*>(kV ? s_rows[n].v : s_rows[n].k);
    dst[n * kStride + c] = c < channels ? row[c] : from_float<TKV>(0.f);
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
