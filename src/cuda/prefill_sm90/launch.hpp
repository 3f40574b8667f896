// The host side of the sm_90a prefill path: whether it takes a problem, and its launch. Everything it does
// not take runs on the portable kernel (src/cuda/attention), which handles every valid input.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "api/problem.hpp"
#include "api/status.hpp"
#include "cuda/attention/params.cuh"
#include "cuda/common/host.hpp"
#include "cuda/heuristics.hpp"

namespace kvattn::cuda::sm90 {

// The problem-level half of the rule (no device): fp16/bf16 q = cache = out, d = dv among the compiled head
// dims (none without a 90a target), no qv, 16-byte aligned cache rows, caches under 64 GiB each, no
// explicit num_splits > 1, and a prefill shape: >= 128 packed query rows (max_seqlen_q x hq / hk) per kv
// head and >= 64 CTAs of 128 rows (KVATTN_FORCE_SM90_PREFILL=1 drops the shape rule, for tests). The
// signature of a `supports` predicate of a kernel-table row.
bool prefill_sm90_supports(const FwdProblem& p);

// True when the sm_90a prefill kernel runs p on an sm_90 device with the portable switch off (the caller,
// dispatch.cu, checks both): the library's sm_90a binary is the one the device runs, the cache rows are
// 16-byte aligned, and prefill_sm90_supports(p). Everything else runs on the portable kernel.
bool prefill_takes(const FwdProblem& p, const AttnParams& params);

kvattn_status launch_prefill(const FwdProblem& p, const AttnParams& params, cudaStream_t stream);

// For a kernel-table dispatcher whose rows carry a plan: the portable plan made one pass (the kernel never
// splits K/V, so nothing may launch a combine after it, and it needs no workspace). The kernel reads
// only params; its own grid and shared memory come from prefill_sm90/config.hpp.
inline AttentionPlan prefill_sm90_single_pass(AttentionPlan plan) {
  plan.key_split = plan.balanced = plan.early_launch = false;
  plan.splits = 1;
  plan.chunk_keys = 0;
  plan.workspace_bytes = 0;
  return plan;
}

// One (dtype, head dim): the instantiation files define them.
template <typename T, int kHeadDim>
kvattn_status launch_prefill_kernel(const AttnParams& params, cudaStream_t stream);

// The launcher of a kernel-table row (the plan is not read: see prefill_sm90_single_pass).
template <typename T, int kHeadDim>
kvattn_status launch_prefill_row(const AttnParams& params, const AttentionPlan& /*plan*/,
                                 cudaStream_t stream) {
  return launch_prefill_kernel<T, kHeadDim>(params, stream);
}
template <typename T, int kHeadDim>
bool prefill_kernel_loaded();  // the sm_90a binary of the kernel is the one the device runs

}  // namespace kvattn::cuda::sm90
