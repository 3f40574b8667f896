// Pure functions shared by cuda_fwd_workspace_size and the launcher: tile shapes, shared memory, the split
// count and the workspace layout. They read STATIC shapes only (never device data), so the workspace size
// is known before a CUDA-graph capture and the launch agrees with it by construction.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "api/problem.hpp"
#include "cuda/attention/balance.hpp"

namespace kvattn::cuda {

// One CTA of the attention kernel: block_m PACKED query rows (query token x group head) against block_n
// keys per tile. Each warp owns 16 rows; with warps_dv > 1, warps_dv warps share those 16 rows and split
// the dv columns of O between them (so that dv = 512 fits in registers: 128 fp32 accumulators a thread).
struct TileShape {
  int block_m;
  int block_n;
  int warps;
  int warps_dv;
  bool key_split_ok;  // the decode variant exists: 16 rows a CTA, each warp a quarter of every key tile
};

// Rows of a CTA in the decode variant (one mma row block).
constexpr int kKeySplitRows = 16;

constexpr TileShape attention_tile(int head_dim, int head_dim_v) {
  const int warps = 4;
  const int warps_dv = head_dim_v > 256 ? 2 : 1;
  // Wide heads take half-height key tiles so that two K/V stages stay near 100 KiB of shared memory; d =
  // dv = 512 (2 KiB of K + V a key in 16 bits) quarter-height ones, so that Q, two stages and qv (or the
  // fp8 converted tile) fit sm_80's 163 KiB a block and two CTAs share an sm_90 SM.
  const int block_n = head_dim >= 512 ? 16 : std::max(head_dim, head_dim_v) >= 192 ? 32 : 64;
  return {16 * (warps / warps_dv), block_n, warps, warps_dv, warps_dv == 1 && block_n / warps >= 16};
}

// Pipeline depth and residency of each variant. The decode variant keeps its 16 Q rows in registers and is
// compiled for at most 168 registers, so 3 CTAs (12 warps) share an SM and hide each other's latencies; 2
// stages let 3 CTAs fit the SM's shared memory. The general kernel: 2 stages, 2 CTAs. The developer switch
// KVATTN_DECODE_STAGES=3 trades the third CTA for a deeper pipeline (2 CTAs).
#ifndef KVATTN_DECODE_STAGES
#define KVATTN_DECODE_STAGES 2
#endif
constexpr int kDecodeStages = KVATTN_DECODE_STAGES;
constexpr int kDecodeCtasPerSm = kDecodeStages == 2 ? 3 : 2;
constexpr int kGeneralStages = 2;
constexpr int kGeneralCtasPerSm = 2;
constexpr int attention_stages(bool key_split) {
  return key_split ? kDecodeStages : kGeneralStages;
}

// Shared memory of a CTA: Q (rows, d), K (stages, block_n, d), V (stages, block_n, dv) and, with qv, Qv
// (rows, dv); every row padded by 8 elements (16 bytes) so ldmatrix reads are conflict-free. The decode
// variant has 16 rows, else block_m rows. fp8 caches: the K/V stages hold fp8 rows (1 byte an element,
// padded by 16 bytes), and one more (block_n, d) + (block_n, dv) tile holds the current stage converted
// to fp16/bf16 for the tensor cores. Static on top: the 16-byte K/V row pointers of each stage.
constexpr int kSmemPad = 8;
constexpr int kSmemPadFp8 = 16;
constexpr size_t attention_kv_stage_bytes(int head_dim, int head_dim_v, bool kv_fp8) {
  const TileShape t = attention_tile(head_dim, head_dim_v);
  return kv_fp8 ? size_t(t.block_n) * (head_dim + head_dim_v + 2 * kSmemPadFp8)
                : size_t(t.block_n) * (head_dim + head_dim_v + 2 * kSmemPad) * 2;
}
constexpr size_t attention_smem_bytes(int head_dim, int head_dim_v, bool with_qv, bool key_split,
                                      bool kv_fp8 = false) {
  const TileShape t = attention_tile(head_dim, head_dim_v);
  const size_t qk = head_dim + kSmemPad, vv = head_dim_v + kSmemPad;
  const size_t rows = key_split ? 16 : t.block_m, stages = attention_stages(key_split);
  size_t bytes = rows * qk * 2 + stages * attention_kv_stage_bytes(head_dim, head_dim_v, kv_fp8);
  if (kv_fp8) bytes += attention_kv_stage_bytes(head_dim, head_dim_v, false);  // the converted tile
  if (with_qv) bytes += rows * vv * 2;
  return bytes;
}
constexpr size_t attention_static_smem_bytes(int head_dim, int head_dim_v, bool key_split) {
  const size_t row_ptrs =
      size_t(attention_stages(key_split)) * attention_tile(head_dim, head_dim_v).block_n * 16;
  return row_ptrs + (key_split ? 128 : 0);  // the decode kernel's balanced-schedule scan
}

constexpr int kMaxSplits = 128;
// Deterministic mode splits every sequence at multiples of this many keys (scaled up when the capacity
// would need more than kMaxSplits): the split points of a sequence depend on its own keys and the static
// capacity only, never on the rest of the batch.
constexpr int64_t kDeterministicSplitKeys = 4096;
// A split reads at least this many key tiles; shorter ones cost more in the combine than they save.
constexpr int64_t kMinTilesPerSplit = 4;

struct SplitInputs {
  int64_t ctas;      // CTAs without splitting: batch * num_kv_heads * m_blocks
  int64_t max_keys;  // upper bound of keys of a sequence (capacity)
  int block_n;
  int sm_count;     // SMs available (sm_margin subtracted)
  int ctas_per_sm;  // resident CTAs per SM
  int num_splits;   // the argument: 0 = choose, 1 = none, n = at most n
  bool deterministic;
};

// Deterministic mode's static splits: kDeterministicSplitKeys keys each (more when the capacity max_keys
// would need more than `cap` of them), rounded up to whole block_n tiles: from the capacity alone.
struct DeterministicSplits {
  int splits;
  int64_t chunk_keys;  // keys a split: a multiple of block_n, splits x chunk_keys >= max_keys
};
// Keys a split when max_keys are cut into `splits` of whole block_n tiles.
inline int64_t split_chunk_keys(int64_t max_keys, int splits, int block_n) {
  const int64_t per_split = (std::max<int64_t>(1, max_keys) + splits - 1) / splits;
  return (per_split + block_n - 1) / block_n * block_n;
}
inline DeterministicSplits deterministic_splits(int64_t max_keys, int block_n, int64_t cap,
                                                int64_t split_keys = kDeterministicSplitKeys) {
  const int64_t keys = std::max<int64_t>(1, max_keys);
  const int splits = static_cast<int>(std::clamp<int64_t>((keys + split_keys - 1) / split_keys, 1, cap));
  return {splits, split_chunk_keys(keys, splits, block_n)};
}

// How many key splits each (m-block, kv head) gets.
inline int choose_splits(const SplitInputs& in) {
  if (in.num_splits == 1 || in.max_keys <= 0 || in.ctas <= 0) return 1;
  const int64_t cap = in.num_splits > 0 ? std::min(in.num_splits, kMaxSplits) : kMaxSplits;
  const int64_t tiles = (in.max_keys + in.block_n - 1) / in.block_n;
  if (in.deterministic) return deterministic_splits(in.max_keys, in.block_n, cap).splits;
  const int64_t by_length = std::max<int64_t>(1, tiles / kMinTilesPerSplit);
  const int64_t slots = std::max(1, in.sm_count * in.ctas_per_sm);
  if (in.ctas >= slots * 8 / 10) return 1;  // the grid already fills the GPU
  const int64_t limit = std::min(cap, by_length);
  // Wave quantization: efficiency = waves / ceil(waves); take the fewest splits within 90% of the best,
  // since every split adds partial-result traffic and a combine.
  double best = 0;
  for (int64_t s = 1; s <= limit; ++s) {
    const double waves = static_cast<double>(in.ctas * s) / slots;
    best = std::max(best, waves / std::ceil(waves));
  }
  for (int64_t s = 1; s <= limit; ++s) {
    const double waves = static_cast<double>(in.ctas * s) / slots;
    if (waves >= 0.8 && waves / std::ceil(waves) >= 0.9 * best) return static_cast<int>(s);
  }
  return static_cast<int>(limit);
}

// The balanced schedule's scan takes kBalancedMaxBatch sequences (attention/balance.hpp): larger batches
// take static splits.

// Everything the launch of a FwdProblem needs that depends on shapes only.
struct AttentionPlan {
  TileShape tile{};
  bool key_split = false;  // decode variant: every (sequence, kv head) has at most kKeySplitRows rows
  int64_t m_blocks = 0;    // per (sequence, kv head): ceil(max_seqlen_q * g / rows of a CTA)
  int splits = 1;
  int64_t chunk_keys = 0;        // deterministic: keys per split (multiple of block_n); 0 = balanced per CTA
  size_t smem_bytes = 0;         // dynamic shared memory of a CTA
  size_t static_smem_bytes = 0;  // static shared memory on top (the device limit covers both)
  // Balanced schedule (decode with num_splits = 0, not deterministic): a grid of balanced_ctas CTAs that
  // share the key tiles of all units evenly; splits stays 1.
  bool balanced = false;
  bool early_launch = false;  // after the append kernel on sm_90+: launched early, waits before K/V (PDL)
  // The persistent sm_90a prefill kernel behind the append: the append kernel zeroes its unit counter (no
  // memset node between them) and it is launched early too (KVATTN_SM90_COUNTER_BY_APPEND=0: the memset).
  bool counter_by_append = false;
  int64_t balanced_ctas = 0;                // the grid
  int64_t balanced_slots = 0;               // CTAs resident at once
  int64_t balanced_whole_grid = 0;          // > 0: the whole grid when each slot gets this many tiles
  int64_t balanced_min_cost = kMinCtaCost;  // a CTA's share is at least this many tiles (balance.hpp)
  int64_t balanced_unit_cost = kUnitCost;   // a unit's fixed work on the line, in tiles (balance.hpp)
  int rows_per_unit = 0;                    // max_seqlen_q * g (<= 16)
  int producer_warps = 0;  // the sm_90 decode kernel: its variant, read once (smem_bytes is for it)
  int consumer_warps = 4;  // (4; 8 for fp8 caches with one row group)
  // The sm_90 decode kernel's cluster form (decode_sm90.hpp): C CTAs a unit, no combine; 0: not used.
  int cluster_ctas = 0;
  bool cluster_tma = false;       // ... its swizzled kernel, K / V by TMA (DecodeClusterShape::kTmaMinStages)
  size_t o_partial_offset = 0;    // (splits, total_q, hq, dv) fp32; balanced: (2, G, R, dv)
  size_t lse_partial_offset = 0;  // (splits, total_q, hq) fp32; balanced: (2, G, R)
  size_t unit_pieces_offset = 0;  // balanced: (batch, kv heads, 2) int32
  // The persistent sm_90a prefill kernel: its unit counter, an int32 at the workspace's start
  // (AttnParams::unit_pieces points at it; the launcher zeroes it on the stream before the kernel).
  bool unit_counter = false;
  // The sm_90a prefill kernel under KVATTN_SM90_QROT=1: q rotated once ahead of it (append/rotate_q.cu)
  // into the workspace at q_rot_offset, (total_q, hq, d) in q's dtype; the kernel loads it as a plain q.
  bool q_rotated = false;
  size_t q_rot_offset = 0;
  size_t workspace_bytes = 0;
};

constexpr size_t kWorkspaceAlign = 256;
constexpr size_t align_up(size_t x, size_t a) {
  return (x + a - 1) / a * a;
}

// The schedule choice of plan_attention, alone (the sm_90 decode row's supports predicate asks it too):
// the key-split decode variant when p has <= kKeySplitRows packed rows a (sequence, kv head) and the
// kernel's tile allows it; the balanced schedule for those when num_splits = 0, not deterministic, and the
// batch fits the schedule's scan.
inline bool plan_key_split(const FwdProblem& p, const TileShape& tile) {
  const int64_t g = p.num_q_heads / std::max(1, p.num_kv_heads);
  return tile.key_split_ok && static_cast<int64_t>(p.max_seqlen_q) * g <= kKeySplitRows;
}
// The balanced schedule's shape: a key-split problem, no explicit num_splits, at most kBalancedMaxBatch
// sequences (the scan's rounds).
inline bool balanced_shape(const FwdProblem& p, bool key_split) {
  return key_split && p.num_splits == 0 && p.batch <= kBalancedMaxBatch;
}
inline bool plan_balanced(const FwdProblem& p, bool key_split) {
  return balanced_shape(p, key_split) && !p.deterministic;
}
// Deterministic mode on the balanced schedule (the sm_90a decode kernel by default,
// KVATTN_DECODE_SM90_DETERMINISTIC=0 turns it off): the units' chunks of the static splits' keys are the
// line's indivisible pieces (schedule.cuh), so a sequence's result depends on its chunks only.
inline bool plan_balanced_deterministic(const FwdProblem& p, bool key_split) {
  return balanced_shape(p, key_split) && p.deterministic;
}

// The workspace of split partials: O (rows, dv) and lse (rows), fp32, then with unit_pieces the balanced
// schedule's (batch, kv heads, 2) int32.
inline void plan_partials(AttentionPlan& plan, const FwdProblem& p, size_t rows, bool unit_pieces) {
  plan.o_partial_offset = 0;
  plan.lse_partial_offset = align_up(rows * p.head_dim_v * sizeof(float), kWorkspaceAlign);
  plan.workspace_bytes = plan.lse_partial_offset + align_up(rows * sizeof(float), kWorkspaceAlign);
  if (unit_pieces) {
    plan.unit_pieces_offset = plan.workspace_bytes;
    plan.workspace_bytes +=
        align_up(static_cast<size_t>(p.batch) * p.num_kv_heads * 2 * sizeof(int32_t), kWorkspaceAlign);
  }
}

// The balanced schedule's grid and workspace (plan.balanced), for `slots` CTAs resident at once: whole waves
// of CTAs of equal work: one wave when there are fewer units than resident CTAs, else about one CTA a unit
// (up to 4 waves), so that the prologues of units overlap across CTAs as they would without a schedule,
// rounded up to whole waves (a last partial wave of equal CTAs idles SMs). Partials (2, G, R, dv) and
// (2, G, R) for R = max_seqlen_q x g packed rows a unit, then unit_pieces.
inline void plan_balanced_grid(AttentionPlan& plan, const FwdProblem& p, int64_t slots) {
  const int64_t g = p.num_q_heads / std::max(1, p.num_kv_heads);
  const int64_t units = static_cast<int64_t>(p.batch) * p.num_kv_heads;
  plan.balanced = true;
  plan.splits = 1;
  plan.balanced_slots = slots;
  plan.balanced_ctas = std::min(4 * slots, slots * std::max<int64_t>(1, (units + slots - 1) / slots));
  plan.rows_per_unit = static_cast<int>(std::max<int64_t>(1, static_cast<int64_t>(p.max_seqlen_q) * g));
  plan_partials(plan, p, 2 * static_cast<size_t>(plan.balanced_ctas) * plan.rows_per_unit, true);
}

// kernel_head_dim(_v): the dims of the kernel that runs p (>= p's own when padded, see dispatch.cu).
inline AttentionPlan plan_attention(const FwdProblem& p, int kernel_head_dim, int kernel_head_dim_v,
                                    int sm_count, int smem_per_sm) {
  AttentionPlan plan;
  plan.tile = attention_tile(kernel_head_dim, kernel_head_dim_v);
  const int64_t g = p.num_q_heads / std::max(1, p.num_kv_heads);
  const int64_t rows = static_cast<int64_t>(p.max_seqlen_q) * g;
  // Decode (<= 16 packed rows): with 64-row CTAs three quarters of the tensor-core and softmax work would
  // be padding; the key-split variant spends it on keys instead.
  plan.key_split = plan_key_split(p, plan.tile);
  const int rows_per_cta = plan.key_split ? kKeySplitRows : plan.tile.block_m;
  plan.m_blocks = (rows + rows_per_cta - 1) / rows_per_cta;
  plan.smem_bytes = attention_smem_bytes(kernel_head_dim, kernel_head_dim_v, p.qv.ptr != nullptr,
                                         plan.key_split, p.kv_dtype == DType::fp8_e4m3);
  plan.static_smem_bytes = attention_static_smem_bytes(kernel_head_dim, kernel_head_dim_v, plan.key_split);
  SplitInputs in;
  in.ctas = static_cast<int64_t>(p.batch) * p.num_kv_heads * plan.m_blocks;
  in.max_keys = max_sequence_keys(p);
  in.block_n = plan.tile.block_n;
  in.sm_count = std::max(1, sm_count - std::max(0, p.sm_margin));
  // CTAs that fit an SM: the variant's register-bound residency, or fewer when shared memory says so (1 KiB
  // a CTA is reserved by the runtime).
  const size_t cta_smem = plan.smem_bytes + plan.static_smem_bytes + 1024;
  in.ctas_per_sm = static_cast<int>(std::clamp<size_t>(
      static_cast<size_t>(smem_per_sm) / cta_smem, 1, plan.key_split ? kDecodeCtasPerSm : kGeneralCtasPerSm));
  in.num_splits = p.num_splits;
  in.deterministic = p.deterministic;
  if (plan_balanced(p, plan.key_split)) {
    plan_balanced_grid(plan, p, static_cast<int64_t>(in.sm_count) * in.ctas_per_sm);
    return plan;
  }
  plan.splits = choose_splits(in);
  if (plan.splits > 1 && p.deterministic)
    plan.chunk_keys = split_chunk_keys(in.max_keys, plan.splits, in.block_n);
  if (plan.splits > 1)
    plan_partials(plan, p, static_cast<size_t>(p.total_q) * p.num_q_heads * plan.splits, false);
  return plan;
}

}  // namespace kvattn::cuda
