// The host side of the sm_90a head-dim-512 decode kernel (kernel.cuh): its table rows' supports predicate,
// plan and launch. What it declines runs on the portable (512, 512) rows, which handle every valid input.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "api/problem.hpp"
#include "api/status.hpp"
#include "cuda/attention/params.cuh"
#include "cuda/heuristics.hpp"
#include "cuda/kernel_table.hpp"
#include "cuda/prefill_sm90/launch.hpp"
#include "cuda/rows_sm90/host.hpp"
#include "cuda/wide_sm90/config.hpp"

namespace kvattn::cuda::sm90 {

// The supports predicate (dispatch.cu: arch kArchSm90, (d, dv) = (512, 512)): q = cache = out in fp16 /
// bf16, d = dv = 512 exactly (smaller dims padded to 512 stay on the portable kernel), no qv, q not varlen
// (cu_seqlens_q), <= 16 packed rows (max_seqlen_q x hq / hk) a kv head, 16-byte aligned cache rows spanning
// < 64 GiB each (the prefill kernel's rule), the sm_90a binary loaded. KVATTN_SM90_WIDE=0 declines every
// problem (A/B against the portable kernel).
bool wide_sm90_supports(const FwdProblem& p);

// The kernel's shared memory and static key splits on 64-key tiles (plan_split_grid).
inline AttentionPlan plan_wide_sm90(const FwdProblem& p, const AttentionKernel& row,
                                    const DeviceShape& device) {
  AttentionPlan plan = prefill_sm90_single_pass(plan_portable(p, row, device));
  plan.smem_bytes = wide_smem_bytes();
  plan.static_smem_bytes = 0;
  plan_split_grid(plan, p, device, WideTile::kBlockM, WideTile::kBlockN);
  return plan;
}

template <typename T>
kvattn_status launch_wide_kernel(const AttnParams& params, cudaStream_t stream, bool early_launch);
template <typename T>
bool wide_kernel_loaded();  // the sm_90a binary of the kernel is the one the device runs

template <DType kDType>
kvattn_status launch_wide_sm90_row(const AttnParams& params, const AttentionPlan& plan, cudaStream_t stream) {
  using T = std::conditional_t<kDType == DType::bf16, __nv_bfloat16, half>;
  return launch_wide_kernel<T>(params, stream, plan.early_launch);
}

}  // namespace kvattn::cuda::sm90
