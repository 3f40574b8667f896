// The attention kernel's parameters: only what it reads, strides in elements.
#pragma once

#include <cstdint>

#include "api/problem.hpp"
#include "cuda/common/device_error.cuh"
#include "cuda/common/mask.cuh"
#include "cuda/common/rotary.cuh"
#include "cuda/common/sequence.cuh"
#include "cuda/heuristics.hpp"

namespace kvattn::cuda {

struct AttnParams {
  SeqParams seq;
  int32_t num_q_heads;
  int32_t num_kv_heads;
  int32_t group;  // g = hq / hk; packed row r is query token r / g of head kv_head * g + r % g
  // The problem's head dims; the kernel's kHeadDim / kHeadDimV may be larger (the channels past them are
  // zero in shared memory and never written).
  int32_t head_dim;
  int32_t head_dim_v;

  TokenTensor q;    // (i, t, h, 0..d)
  TokenTensor qv;   // (i, t, h, 0..dv), ptr == nullptr without qv
  TokenTensor out;  // (i, t, h, 0..dv), out_dtype == q's dtype
  CacheTensor k_cache;
  CacheTensor v_cache;
  bool
      kv_vec16;  // K/V rows 16-byte aligned and d, dv whole 16-byte chunks: cp.async, else element by element
  bool q_fp8;    // q (and qv) stored in fp8 (kernels with fp8 caches and bf16 compute only)

  // fp8 descales, element (i, kv_head) = ptr[i * strides[0] + kv_head * strides[1]]; nullptr = 1. Read by
  // the fp8-cache kernels only: x = scale * (qd kd (q.k) + qd vd (qv.v)), out = vd * P V.
  const float* q_descale;
  const float* k_descale;
  const float* v_descale;
  int64_t q_descale_strides[2];
  int64_t k_descale_strides[2];
  int64_t v_descale_strides[2];

  RotaryParams rotary;  // rotary.rotary_dim == 0: none
  float scale;          // softmax_scale
  float scale_log2;     // softmax_scale * log2(e): scores are kept in log2 units
  float softcap;        // 0 = off
  MaskPolicy mask;
  const float* alibi_slopes;  // optional, slope(i, h) = alibi_slopes[i * alibi_batch_stride + h]
  int64_t alibi_batch_stride;
  const float* sinks;  // optional (hq)

  float* lse;  // optional, element (i, h, t) = lse + i * batch + h * head + row(i, t) * token
  int64_t lse_batch_stride;
  int64_t lse_head_stride;
  int64_t lse_token_stride;

  int32_t m_blocks;
  int32_t num_splits;
  int64_t chunk_keys;  // > 0: deterministic: every split covers this many keys (balanced: a unit's chunks)
  float* o_partial;    // splits > 1: (splits, total_q, hq, head_dim_v) fp32; balanced: (2, G, R, dv)
  float* lse_partial;  // splits > 1: (splits, total_q, hq) fp32, natural log, no sink; balanced: (2, G, R)
  // The balanced schedule (schedule.cuh; decode kernel): G = gridDim.x CTAs, R = rows_per_unit rows of a
  // unit, unit_pieces (batch, kv heads, 2): the CTA of each unit's first piece and the number of pieces.
  bool balanced;
  int32_t balanced_ctas;
  int32_t balanced_slots;
  int32_t balanced_whole_grid;  // > 0: the whole grid when each slot gets this many tiles (balance.hpp)
  int32_t balanced_min_cost;    // a CTA's share is at least this many tiles (balance.hpp)
  int32_t balanced_unit_cost;   // a unit's fixed work on the line, in tiles (balance.hpp, kUnitCost)
  int32_t rows_per_unit;
  int32_t* unit_pieces;  // (the persistent sm_90a prefill: its unit counter, AttentionPlan::unit_counter)

  DeviceErrorRecord* errors;
};

RotaryParams make_rotary_params(const FwdProblem& p);
AttnParams make_attn_params(const FwdProblem& p, const AttentionPlan& plan, DeviceErrorRecord* errors);
// AttnParams::kv_vec16 of p (the sm_90 rows' supports predicates ask it before any params exist).
bool kv_rows_vec16(const FwdProblem& p);

// An fp8 descale of (sequence i, kv head h), 1 when absent.
__device__ __forceinline__ float descale_at(const float* ptr, const int64_t (&strides)[2], int i, int h) {
  return ptr ? ptr[i * strides[0] + h * strides[1]] : 1.f;
}

// Packed row r >= 0 of a (sequence, kv head) as its token r / group and head offset r % group, in 32 bits: a
// sequence's packed rows number fewer than 2^32 (q holds that many rows of >= 64 channels), and a 64-bit
// division is a ~70-instruction call in code that runs once a unit or piece, i.e. cold (bench/NOTES.md).
struct RowSplit {
  int64_t t;
  int g;
};
__device__ __forceinline__ RowSplit split_row(int64_t r, int group) {
  const uint32_t r32 = static_cast<uint32_t>(r), g32 = static_cast<uint32_t>(group);
  const uint32_t t = r32 / g32;
  return {static_cast<int64_t>(t), static_cast<int>(r32 - t * g32)};
}

// Row (sequence i, token t, head h) of a query-side TokenTensor (q, qv, out): problem.hpp's rule.
template <typename T>
__device__ __forceinline__ T* token_row(const TokenTensor& x, const Sequence& seq, int i, int64_t t, int h) {
  return static_cast<T*>(x.ptr) + i * x.batch_stride + (seq.q_row0 + t) * x.token_stride + h * x.head_stride;
}

// Row of (sequence, token) in the workspace partials: the row of q when varlen, else i * sq + t.
__device__ __forceinline__ int64_t partial_row(const SeqParams& p, const Sequence& seq, int i, int64_t t) {
  return (p.cu_seqlens_q ? seq.q_row0 : static_cast<int64_t>(i) * p.max_seqlen_q) + t;
}

}  // namespace kvattn::cuda
