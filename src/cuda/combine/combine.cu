// The combine kernels: the split-KV merge after the attention kernel, and kvattn_combine. Both are one
// warp per row around merge_row_warp (the split merge: 4 warps a row around merge_row_block where a unit
// spans many CTAs).
#include <cstdlib>
#include <cstring>
#include <string>

#include "api/backend.hpp"
#include "cuda/attention/launch.hpp"
#include "cuda/attention/schedule.cuh"
#include "cuda/combine/merge.cuh"
#include "cuda/common/host.hpp"
#include "cuda/common/pdl.cuh"

namespace kvattn::cuda {
namespace {

constexpr int kRowsPerBlock = 4;  // one warp a row

// Rows (i, t, h) for t < max_seqlen_q; rows outside sequence i's q are not ours and stay untouched.
// Launched early (PDL): everything that reads the call's inputs only (the sequence, the row's place) runs
// before the wait, under the attention kernel; past it, one round trip for the unit's pieces (balanced)
// and one for the partials (merge_row_warp issues the O loads with the LSE loads; past 16 partials two a
// block of 32). 116 registers (4 blocks an SM; 96 before the longer merge: forcing 5 spills).
// kWarpsPerRow 4: one row a block, its partials shared out over the 4 warps (merge_row_block): for units
// spread over >= 32 CTAs (launch_split_combine). Every early return below is then block-uniform.
template <int kWarpsPerRow>
__global__ void __launch_bounds__(32 * kRowsPerBlock)
    split_combine_kernel(const __grid_constant__ AttnParams p, int head_dim_v, DType out_dtype) {
  static_assert(kRowsPerBlock % kWarpsPerRow == 0, "whole rows a block");
  const int64_t row =
      static_cast<int64_t>(blockIdx.x) * (kRowsPerBlock / kWarpsPerRow) + threadIdx.x / 32 / kWarpsPerRow;
  const int64_t per_seq = static_cast<int64_t>(p.seq.max_seqlen_q) * p.num_q_heads;
  if (row >= per_seq * p.seq.batch) return;
  const int i = static_cast<int>(row / per_seq);
  const int64_t t = row % per_seq / p.num_q_heads;
  const int h = static_cast<int>(row % p.num_q_heads);
  const Sequence seq = load_sequence(p.seq, i, nullptr, false);  // inputs: neither kernel writes them
  if (!seq.rows_known || t >= seq.q_len) return;
  const bool attends = t < seq.q_used;  // rows past seqused_q: out 0, lse -inf, no sink
  const int64_t out_offset =
      i * p.out.batch_stride + (seq.q_row0 + t) * p.out.token_stride + h * p.out.head_stride;
  float* lse_out =
      p.lse ? p.lse + i * p.lse_batch_stride + h * p.lse_head_stride + (seq.q_row0 + t) * p.lse_token_stride
            : nullptr;
  const bool has_sink = attends && p.sinks;
  const float sink = has_sink ? p.sinks[h] : 0.f;
  wait_for_prior_grid();  // the partials (and the unit's pieces) are complete only past this point
  PartialRow in;
  int n = p.num_splits;
  if (p.balanced && p.chunk_keys > 0) {
    // Deterministic mode on the balanced schedule (schedule.cuh, walk_balanced_pieces): the unit's chunks of
    // chunk_keys keys, in the static splits' layout; a unit of one chunk was written directly.
    const KeyRange keys = key_range(p, seq, 0, p.rows_per_unit, 1);
    n = static_cast<int>((keys.tiles + p.chunk_keys - 1) / p.chunk_keys);
    if (n <= 1) return;
    const int64_t prow = partial_row(p.seq, seq, i, t) * p.num_q_heads + h;
    const int64_t split_rows = p.seq.total_q * p.num_q_heads;
    in = {p.lse_partial + prow, split_rows, p.o_partial + prow * head_dim_v, split_rows * head_dim_v};
  } else if (p.balanced) {
    // The pieces of unit (i, kv head): slot 1 of CTA k_a, then slot 0 of CTAs k_a + 1 ... (schedule.cuh).
    // A unit of one piece was written directly.
    const int64_t u = static_cast<int64_t>(i) * p.num_kv_heads + h / p.group;
    const int64_t k_a = p.unit_pieces[2 * u];
    n = p.unit_pieces[2 * u + 1];
    if (n <= 1) return;
    const int64_t r = t * p.group + h % p.group, rows = p.rows_per_unit;
    const int64_t first = (p.balanced_ctas + k_a) * rows + r, base = k_a * rows + r;
    in = {p.lse_partial + base,
          rows,
          p.o_partial + base * head_dim_v,
          rows * head_dim_v,
          p.lse_partial + first,
          p.o_partial + first * head_dim_v};
  } else {
    const int64_t prow = partial_row(p.seq, seq, i, t) * p.num_q_heads + h;
    const int64_t split_rows = p.seq.total_q * p.num_q_heads;
    in = {p.lse_partial + prow, split_rows, p.o_partial + prow * head_dim_v, split_rows * head_dim_v};
  }
  if constexpr (kWarpsPerRow == 1) {
    merge_row_warp(in, n, head_dim_v, has_sink, sink, p.out.ptr, out_dtype, out_offset, lse_out);
  } else if (p.chunk_keys > 0) {  // deterministic: one warp's order whatever the launch (never launched so)
    if (threadIdx.x < 32)
      merge_row_warp(in, n, head_dim_v, has_sink, sink, p.out.ptr, out_dtype, out_offset, lse_out);
  } else {
    merge_row_block<kWarpsPerRow>(in, n, head_dim_v, has_sink, sink, p.out.ptr, out_dtype, out_offset,
                                  lse_out);
  }
}

__global__ void __launch_bounds__(32 * kRowsPerBlock)
    combine_kernel(const __grid_constant__ CombineProblem p) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  if (row >= p.row_shape[0] * p.row_shape[1] * p.row_shape[2]) return;
  const int64_t i2 = row % p.row_shape[2];
  const int64_t i1 = row / p.row_shape[2] % p.row_shape[1];
  const int64_t i0 = row / (p.row_shape[2] * p.row_shape[1]);
  auto offset = [&](const int64_t(&s)[3]) { return i0 * s[0] + i1 * s[1] + i2 * s[2]; };
  const PartialRow in{p.lse_partials + offset(p.lp_row_strides), p.lp_split_stride,
                      p.out_partials + offset(p.op_row_strides), p.op_split_stride};
  float* lse_out = p.lse ? p.lse + offset(p.lse_row_strides) : nullptr;
  merge_row_warp(in, p.num_splits, p.head_dim_v, p.sinks != nullptr, p.sinks ? p.sinks[i2] : 0.f, p.out,
                 p.out_dtype, offset(p.out_row_strides), lse_out);
}

int64_t blocks_for(int64_t rows) {
  return (rows + kRowsPerBlock - 1) / kRowsPerBlock;
}

}  // namespace

// A unit spread over >= 32 CTAs of the balanced schedule (batch 1 over 1-4 kv heads on 132 SMs: 33-132
// partials a row, 4-16 rows in the whole grid) gets 4 warps a row; deterministic mode keeps one warp a row
// (its bits may not follow the batch). H100 (bench/NOTES.md, session 47), one warp -> 4 warps a row: W1
// 4/1 b1 32k 29.6-30.2 -> 26.5 us, b1 128k 46.6 -> 43.0, 8/2 b1 128k 67.5 -> 64.9, 4/1 b4 32k 42.9 -> 41.1,
// 32/8 b4 32k level. KVATTN_COMBINE_WIDE_ROWS=0: one warp a row (A/B; read at every launch).
static bool combine_wide_rows() {
  const char* e = std::getenv("KVATTN_COMBINE_WIDE_ROWS");
  return e == nullptr || std::strcmp(e, "0") != 0;
}
kvattn_status launch_split_combine(const AttnParams& params, int head_dim_v, DType out_dtype,
                                   bool early_launch, cudaStream_t stream) {
  const int64_t rows = static_cast<int64_t>(params.seq.batch) * params.seq.max_seqlen_q * params.num_q_heads;
  const int64_t units = static_cast<int64_t>(params.seq.batch) * params.num_kv_heads;
  const bool wide_rows =
      combine_wide_rows() && params.balanced && params.chunk_keys == 0 && params.balanced_ctas >= 32 * units;
  const int64_t blocks = wide_rows ? rows : blocks_for(rows);
  if (blocks == 0) return KVATTN_OK;
  if (blocks > 0x7fffffff) return fail(KVATTN_ERROR_UNSUPPORTED, "q: too many rows for the split combine");
  const LaunchShape shape{dim3(static_cast<unsigned>(blocks)), dim3(32 * kRowsPerBlock), 0, stream,
                          early_launch};
  return wide_rows ? launch_kernel("split_combine_kernel", split_combine_kernel<4>, shape, params, head_dim_v,
                                   out_dtype)
                   : launch_kernel("split_combine_kernel", split_combine_kernel<1>, shape, params, head_dim_v,
                                   out_dtype);
}

}  // namespace kvattn::cuda

namespace kvattn {
using namespace cuda;

kvattn_status cuda_combine(const CombineProblem& p) {
  DeviceGuard guard(p.device_id);
  if (const kvattn_status s = device_status(guard, p.device_id); s != KVATTN_OK) return s;
  const int64_t blocks = blocks_for(p.row_shape[0] * p.row_shape[1] * p.row_shape[2]);
  if (blocks == 0) return KVATTN_OK;
  if (blocks > 0x7fffffff) return fail(KVATTN_ERROR_UNSUPPORTED, "lse_partials: too many rows");
  combine_kernel<<<static_cast<unsigned>(blocks), 32 * kRowsPerBlock, 0,
                   static_cast<cudaStream_t>(p.stream)>>>(p);
  return check_launch("combine_kernel");
}

}  // namespace kvattn
