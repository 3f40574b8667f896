// The host side of the sm_90a MLA decode kernel (kernel.cuh): its table rows' supports predicate, plan and
// launch. What it declines runs on the portable (64, 512) rows, which handle every valid input.
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
#include "cuda/heuristics.hpp"
#include "cuda/kernel_table.hpp"
#include "cuda/mla_sm90/config.hpp"
#include "cuda/prefill_sm90/launch.hpp"
#include "cuda/rows_sm90/host.hpp"

namespace kvattn::cuda::sm90 {

// The supports predicate (dispatch.cu: arch kArchSm90, (d, dv) = (64, 512)): q = cache = out in fp16 / bf16
// with qv, d = 64 and dv = 512 exactly, q not varlen (cu_seqlens_q), 16-byte aligned cache rows spanning
// < 64 GiB each (the prefill kernel's rule) and the sm_90a binaries loaded. Any row count: <= 16 packed
// rows (max_seqlen_q x hq / hk) a kv head run the rows kernel, more the 64-row kernel; small batches take
// static key splits (plan_mla_sm90). On by default; KVATTN_SM90_MLA=0 declines it (KVATTN_FORCE_SM90_MLA=1,
// for tests, takes it anyway; mla.cu says why).
bool mla_sm90_supports(const FwdProblem& p);

// <= 16 packed rows a kv head run the rows kernel (rows_kernel.cuh: rows along wgmma's N), unless
// KVATTN_SM90_MLA_ROWS=0 (A/B: the 64-row kernel, 48 of its rows padding). The plan and the launcher both
// ask.
inline bool mla_rows_selected(int64_t rows) {
  if (rows > MlaRowsTile::kRows) return false;
  const char* v = std::getenv("KVATTN_SM90_MLA_ROWS");
  return v == nullptr || std::strcmp(v, "0") != 0;
}

// The kernel's own shared memory (the rows kernel's for <= 16 rows) and static key splits on 64-key tiles
// (plan_split_grid).
inline AttentionPlan plan_mla_sm90(const FwdProblem& p, const AttentionKernel& row,
                                   const DeviceShape& device) {
  AttentionPlan plan = prefill_sm90_single_pass(plan_portable(p, row, device));
  const int64_t rows = static_cast<int64_t>(p.max_seqlen_q) * (p.num_q_heads / std::max(1, p.num_kv_heads));
  const bool rows_kernel = mla_rows_selected(rows);
  plan.smem_bytes = rows_kernel ? mla_rows_smem_bytes() : mla_smem_bytes();
  plan.static_smem_bytes = 0;
  plan_split_grid(plan, p, device, rows_kernel ? MlaRowsTile::kBlockM : MlaTile::kBlockM,
                  rows_kernel ? MlaRowsTile::kBlockN : MlaTile::kBlockN);
  return plan;
}

template <typename T>
kvattn_status launch_mla_kernel(const AttnParams& params, cudaStream_t stream, bool early_launch);
template <typename T>
bool mla_kernel_loaded();  // the sm_90a binaries of the kernels are the ones the device runs

template <DType kDType>
kvattn_status launch_mla_sm90_row(const AttnParams& params, const AttentionPlan& plan, cudaStream_t stream) {
  using T = std::conditional_t<kDType == DType::bf16, __nv_bfloat16, half>;
  return launch_mla_kernel<T>(params, stream, plan.early_launch);
}

}  // namespace kvattn::cuda::sm90
