// The host side of the sm_90a prefill kernel: its table rows' supports predicate, plan and launch.
// Everything it declines runs on the portable rows (src/cuda/attention), which handle every valid input.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "api/problem.hpp"
#include "api/status.hpp"
#include "cuda/attention/params.cuh"
#include "cuda/common/cache_rows.hpp"
#include "cuda/common/host.hpp"
#include "cuda/heuristics.hpp"
#include "cuda/kernel_table.hpp"
#include "cuda/prefill_sm90/config.hpp"

namespace kvattn::cuda::sm90 {

// ---- host helpers of the sm_90a kernels' rows (the prefill kernel's and the MLA kernel's)

inline bool env_is_1(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && std::strcmp(v, "1") == 0;
}
template <typename T>
constexpr DType dtype_of_storage() {
  return std::is_same_v<T, half> ? DType::f16 : DType::bf16;
}
// The kernel's sm_90a binary is the one the device runs (not an sm_80 one picked for lack of it).
inline bool sm90a_binary_loaded(const void* kernel) {
  cudaFuncAttributes attr{};
  if (cudaFuncGetAttributes(&attr, kernel) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return attr.binaryVersion == 90;
}

// The supports predicate of the kernel's table rows (dispatch.cu: arch kArchSm90, fp16 / bf16, a row per head
// dim): q = cache = out in fp16/bf16, d = dv among the compiled head dims or (d, dv) = (192, 128) (none
// without a 90a target), no qv, 16-byte aligned cache rows (kv_rows_vec16), caches under 64 GiB each, the
// library's sm_90a binary is the one the device runs, and the shape rule (prefill.cu: >= 64 packed query rows
// a kv head for fixed q, key splits added by the plan; varlen q >= 128 rows and >= 64 CTAs;
// KVATTN_FORCE_SM90_PREFILL=1 drops it, for tests). The table asks it on sm_90 devices only, never under the
// portable switch.
bool prefill_sm90_supports(const FwdProblem& p);

// The plan of its rows: the portable plan made one pass (plan_prefill_sm90 then adds the split kernel's key
// splits and partials, or the persistent kernel's workspace, and the rotated q). The kernel reads only
// params; its own grid and shared memory come from prefill_sm90/config.hpp.
inline AttentionPlan prefill_sm90_single_pass(AttentionPlan plan) {
  plan.key_split = plan.balanced = plan.early_launch = false;
  plan.splits = 1;
  plan.chunk_keys = 0;
  plan.workspace_bytes = 0;
  return plan;
}
// The tile of p's kernel (config.hpp: per head dim and, at d 192, the cache dtype).
inline PrefillTile prefill_tile_of(const FwdProblem& p) {
  return prefill_tile(p.head_dim, p.kv_dtype == DType::fp8_e4m3);
}
// A fixed q with at least two of the kernel's units (64 rows a consumer) an SM: where the persistent
// kernel, which walks those units, was measured to pay.
inline bool prefill_fills_sms_twice(const FwdProblem& p, int sm_count) {
  if (p.cu_seqlens_q != nullptr) return false;
  const int64_t block_m = 64 * prefill_tile_of(p).consumers;
  const int64_t g = p.num_q_heads / std::max(1, p.num_kv_heads);
  const int64_t units = static_cast<int64_t>(p.batch) * p.num_kv_heads *
                        ((static_cast<int64_t>(p.max_seqlen_q) * g + block_m - 1) / block_m);
  return units >= 2 * static_cast<int64_t>(sm_count);
}
// q with rotary rotated once ahead of the kernel (append/rotate_q.cu) into the workspace, which the kernel
// then loads as a q without rotary: only under KVATTN_SM90_QROT=1 (A/B), 16-bit q (fp8 q, on the fp8-cache
// kernel, is rotated as it is read: load_q_fp8), rounded once to q's dtype as the Q load does, so the same
// bits. Not by default since session 18: the persistent kernel rotates its next unit's Q itself under the
// last P V (RotaryChunk), and on the H200 that was level with the extra pass or faster (W3 b8 +512 over 4k
// p16 623 -> 610 us, the other W3 cases within their spread) while the pass costs a launch and a workspace
// the size of q (33.5 MB at b8 +512); rotated ahead it had paid in session 8, when the Q load rotated channel
// by channel.
inline bool prefill_q_rotated_ahead(const FwdProblem& p) {
  if (p.rotary_dim == 0 || p.total_q == 0 || p.qv.ptr != nullptr) return false;
  if (p.q_dtype != DType::f16 && p.q_dtype != DType::bf16) return false;
  const char* v = std::getenv("KVATTN_SM90_QROT");
  return v != nullptr && std::strcmp(v, "1") == 0;
}
// The persistent kernel (persistent.cuh) for q without cu_seqlens_q where it was measured to pay (bench/
// NOTES.md, session 7, H200: W6 dense prefill 3-7% faster, 64 units on 132 SMs 12% slower): at least two
// units an SM, with or without rotary (session 18). KVATTN_SM90_PERSISTENT=1 takes it for every fixed q,
// =0 never (A/B). The plan and the launcher agree through the plan's unit counter (the launcher takes this
// kernel exactly when it has one).
inline bool prefill_persistent_selected(const FwdProblem& p, int sm_count) {
  if (p.cu_seqlens_q != nullptr) return false;
  if (const char* v = std::getenv("KVATTN_SM90_PERSISTENT"); v != nullptr) return std::strcmp(v, "1") == 0;
  return prefill_fills_sms_twice(p, sm_count);
}
// Packed rows a (sequence, kv head): max_seqlen_q x hq / hk.
inline int64_t prefill_rows(const FwdProblem& p) {
  return static_cast<int64_t>(p.max_seqlen_q) * (p.num_q_heads / std::max(1, p.num_kv_heads));
}
// A unit of fixed q whose rows leave at least one consumer without rows: the split kernel (launch.cuh), which
// idles it, even without splits (the persistent kernel would compute its padding rows).
inline bool prefill_split_kernel_rows(const FwdProblem& p) {
  return p.cu_seqlens_q == nullptr && prefill_rows(p) <= 64 * (prefill_tile_of(p).consumers - 1);
}
// Deterministic mode's split kernel takes units of at most this many rows (decode-like shapes and short
// chunks, whose partials stay small: 1024 rows x 8 splits x 128 fp32 channels = 4 MiB a kv head); larger
// units run one pass.
constexpr int64_t kPrefillDeterministicSplitRows = 1024;
// Static key splits for q without cu_seqlens_q. Default: when the CTAs (one an SM: the kernel's shared
// memory) would leave SMs idle, the general kernel's rule (choose_splits: the fewest splits within 90% of the
// best wave efficiency, >= 4 key tiles a split; an explicit num_splits caps it). Deterministic mode: from
// the sequence's shape and the capacity only, never the batch (so a sequence's bits do not depend on the
// rest of the batch): units of <= kPrefillDeterministicSplitRows rows in the static splits' chunks of the
// capacity (deterministic_splits, as the portable kernel), larger units one pass.
inline int prefill_sm90_splits(const FwdProblem& p, int sm_count) {
  if (p.cu_seqlens_q != nullptr) return 1;
  if (p.deterministic && prefill_rows(p) > kPrefillDeterministicSplitRows) return 1;
  const PrefillTile tile = prefill_tile_of(p);
  const int64_t block_m = 64 * tile.consumers;
  SplitInputs in;
  in.ctas = (prefill_rows(p) + block_m - 1) / block_m * p.batch * p.num_kv_heads;
  in.max_keys = max_sequence_keys(p);
  in.block_n = tile.block_n;
  in.sm_count = std::max(1, sm_count - std::max(0, p.sm_margin));
  in.ctas_per_sm = 1;
  in.num_splits = p.num_splits;
  in.deterministic = p.deterministic;
  return choose_splits(in);
}
// The workspace: the split partials (AttentionPlan::splits > 1), or the persistent kernel's int32 unit
// counter (AttentionPlan::unit_counter) in its first 256 bytes; then the rotated q
// (AttentionPlan::q_rotated).
inline AttentionPlan plan_prefill_sm90(const FwdProblem& p, const AttentionKernel& row,
                                       const DeviceShape& device) {
  AttentionPlan plan = prefill_sm90_single_pass(plan_portable(p, row, device));
  plan.smem_bytes = prefill_smem_bytes(row.head_dim, false, row.kv_dtype == DType::fp8_e4m3);
  plan.static_smem_bytes = 0;
  const bool q_rotated = prefill_q_rotated_ahead(p);
  plan.splits = prefill_sm90_splits(p, device.sm_count);
  if (plan.splits > 1) {    // the split kernel (launch.cuh), its partials and the split combine
    if (p.deterministic) {  // whole tiles of the capacity a split (kernel.cuh)
      plan.chunk_keys = split_chunk_keys(max_sequence_keys(p), plan.splits, prefill_tile_of(p).block_n);
    }
    plan_partials(plan, p, static_cast<size_t>(p.total_q) * p.num_q_heads * plan.splits, false);
  } else if (prefill_persistent_selected(p, device.sm_count) &&
             (!prefill_split_kernel_rows(p) || env_is_1("KVATTN_SM90_PERSISTENT"))) {
    // (Units that leave a consumer idle take the split kernel unless the switch asks for the persistent
    // kernel, which computes their padding rows but overlaps a unit's start with the last one's tiles: A/B.)
    plan.unit_counter = true;
    plan.workspace_bytes = kWorkspaceAlign;
    plan.smem_bytes = prefill_smem_bytes(row.head_dim, true, row.kv_dtype == DType::fp8_e4m3);
  }
  if (q_rotated) {
    plan.q_rotated = true;
    plan.q_rot_offset = plan.workspace_bytes;
    const size_t q_bytes = static_cast<size_t>(p.total_q) * p.num_q_heads * p.head_dim * 2;  // 16-bit q
    plan.workspace_bytes += align_up(q_bytes, kWorkspaceAlign);
  }
  return plan;
}

// One (dtype, head dim, cache elements: T or fp8 e4m3): the instantiation files define them. early_launch:
// programmatic dependent launch behind the append kernel (launch_prefill_row decides); counter_by_append: the
// append zeroed the persistent kernel's unit counter (else a memset node does, between the two kernels).
template <typename T, int kHeadDim, typename TKV = T>
kvattn_status launch_prefill_kernel(const AttnParams& params, cudaStream_t stream, bool early_launch,
                                    bool counter_by_append);

// The launcher of a row (the plan is read for the early launch only: see prefill_sm90_single_pass). Early
// behind the append (the plan's early_launch) except behind q rotated ahead (KVATTN_SM90_QROT=1: the
// consumers read that q before the kernel's wait) and, for the persistent kernel (the plan's unit
// counter), unless the append zeroes its counter (counter_by_append): a memset node sits between them.
template <DType kDType, int kHeadDim, DType kKvDType = kDType>
kvattn_status launch_prefill_row(const AttnParams& params, const AttentionPlan& plan, cudaStream_t stream) {
  using T = std::conditional_t<kDType == DType::bf16, __nv_bfloat16, half>;
  using TKV = std::conditional_t<kKvDType == DType::fp8_e4m3, __nv_fp8_e4m3, T>;
  const bool early = plan.early_launch && !plan.q_rotated && (!plan.unit_counter || plan.counter_by_append);
  return launch_prefill_kernel<T, kHeadDim, TKV>(params, stream, early, plan.counter_by_append);
}
template <typename T, int kHeadDim, typename TKV = T>
bool prefill_kernel_loaded();  // the sm_90a binary of the kernel is the one the device runs

#if defined(KVATTN_PREFILL_TIMELINE) && KVATTN_PREFILL_TIMELINE
// The developer timeline's host buffer (timeline.cuh; prefill.cu sets it), kPtlWords words, or nullptr.
extern unsigned long long* g_prefill_timeline_host;
#endif

}  // namespace kvattn::cuda::sm90
