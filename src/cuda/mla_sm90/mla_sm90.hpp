// The host side of the sm_90a MLA decode kernel (kernel.cuh): its table rows' supports predicate, plan and
// launch. What it declines runs on the portable (64, 512) rows, which handle every valid input.
#pragma once

#include <cuda_runtime.h>

#include <type_traits>

#include "api/problem.hpp"
#include "api/status.hpp"
#include "cuda/attention/params.cuh"
#include "cuda/heuristics.hpp"
#include "cuda/kernel_table.hpp"
#include "cuda/mla_sm90/config.hpp"
#include "cuda/prefill_sm90/launch.hpp"

namespace kvattn::cuda::sm90 {

// The supports predicate (dispatch.cu: arch kArchSm90, (d, dv) = (64, 512)): q = cache = out in fp16 / bf16
// with qv, d = 64 and dv = 512 exactly, q not varlen (cu_seqlens_q), no explicit num_splits > 1, 16-byte
// aligned cache rows spanning < 64 GiB each (the prefill kernel's rule), the sm_90a binary loaded, and
// enough rows and CTAs that a CTA without a key split fills its SM: >= 64 packed rows (max_seqlen_q x
// hq / hk) a kv head and >= 64 CTAs of 64 rows, as the prefill kernel's rule (KVATTN_FORCE_SM90_MLA=1
// drops it, for tests). MLA's 16-head shapes (16 rows: a quarter of a CTA) and small batches keep the
// portable kernel's split-KV schedule. Opt-in for now: KVATTN_SM90_MLA=1 (mla.cu says why).
bool mla_sm90_supports(const FwdProblem& p);

// One pass (no split, no combine, no workspace), the kernel's own shared memory.
inline AttentionPlan plan_mla_sm90(const FwdProblem& p, const AttentionKernel& row,
                                   const DeviceShape& device) {
  AttentionPlan plan = prefill_sm90_single_pass(plan_portable(p, row, device));
  plan.smem_bytes = mla_smem_bytes();
  plan.static_smem_bytes = 0;
  return plan;
}

template <typename T>
kvattn_status launch_mla_kernel(const AttnParams& params, cudaStream_t stream, bool early_launch);
template <typename T>
bool mla_kernel_loaded();  // the sm_90a binary of the kernel is the one the device runs

template <DType kDType>
kvattn_status launch_mla_sm90_row(const AttnParams& params, const AttentionPlan& plan, cudaStream_t stream) {
  using T = std::conditional_t<kDType == DType::bf16, __nv_bfloat16, half>;
  return launch_mla_kernel<T>(params, stream, plan.early_launch);
}

}  // namespace kvattn::cuda::sm90
