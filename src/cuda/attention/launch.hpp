// The attention launchers: one per (compute dtype, cache dtype, head_dim, head_dim_v), explicitly
// instantiated in the attention_*.cu files and listed once in dispatch.cu's table. The compute dtype is
// q's (and out's), bf16 for fp8 q; the cache dtype is the compute dtype or fp8 e4m3.
#pragma once

#include <cuda_runtime.h>

#include "api/status.hpp"
#include "cuda/attention/params.cuh"
#include "cuda/heuristics.hpp"

namespace kvattn::cuda {

// The developer build (KVATTN_DEV_HEAD_DIM, KVATTN_DEV_DTYPE_<f16|bf16>) compiles the kernels of one head
// dim and/or dtype only; the other table entries stay, and say so when asked.
constexpr bool dtype_built(DType dt) {
#if defined(KVATTN_DEV_DTYPE_f16)
  return dt == DType::f16;
#elif defined(KVATTN_DEV_DTYPE_bf16)
  return dt == DType::bf16;
#else
  return dt == DType::f16 || dt == DType::bf16;
#endif
}
constexpr bool head_dim_built(int head_dim) {
#if defined(KVATTN_DEV_HEAD_DIM)
  return head_dim == KVATTN_DEV_HEAD_DIM;
#else
  return head_dim > 0;
#endif
}

using AttentionLauncher = kvattn_status (*)(const AttnParams& params, const AttentionPlan& plan,
                                            cudaStream_t stream);

template <DType kDType, DType kKvDType, int kHeadDim, int kHeadDimV>
kvattn_status launch_attention(const AttnParams& params, const AttentionPlan& plan, cudaStream_t stream);

// The split-KV combine of the attention's partials into out / lse (combine/combine.cu).
// early_launch (sm_90+): programmatic dependent launch, so that the combine's CTAs are resident and waiting
// when the attention kernel ends instead of being launched then.
kvattn_status launch_split_combine(const AttnParams& params, int head_dim_v, DType out_dtype,
                                   bool early_launch, cudaStream_t stream);

}  // namespace kvattn::cuda
