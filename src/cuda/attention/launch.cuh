// The body of launch_attention, included by the instantiation files only (it pulls in the kernel).
#pragma once

#include <string>

#include "cuda/attention/config.cuh"
#include "cuda/attention/kernel.cuh"
#include "cuda/attention/launch.hpp"
#include "cuda/common/dtype.cuh"
#include "cuda/common/host.hpp"

namespace kvattn::cuda {

template <DType kDType, DType kKvDType, int kHeadDim, int kHeadDimV>
kvattn_status launch_attention(const AttnParams& params, const AttentionPlan& plan, cudaStream_t stream) {
  if constexpr (!dtype_built(kDType) || !head_dim_built(kHeadDim)) {
    return fail(KVATTN_ERROR_UNSUPPORTED, "head_dim=" + std::to_string(kHeadDim) +
                                              ": not compiled in this developer build (KVATTN_DEV_HEAD_DIM / "
                                              "KVATTN_DEV_DTYPE)");
  } else {
    using Cfg =
        AttnConfig<typename StorageOf<kDType>::type, typename StorageOf<kKvDType>::type, kHeadDim, kHeadDimV>;
    const int64_t ctas = static_cast<int64_t>(plan.m_blocks) * params.seq.batch * params.num_kv_heads;
    if (ctas > 0x7fffffff) {
      return fail(KVATTN_ERROR_UNSUPPORTED, "q: batch * kv heads * row blocks = " + std::to_string(ctas) +
                                                " CTAs exceeds the grid limit");
    }
    void (*kernel)(AttnParams) = attention_kernel<Cfg>;
    if constexpr (Cfg::kKeySplitOk) {
      if (plan.key_split) kernel = attention_decode_kernel<Cfg>;
    }
    // Past 48 KiB of static + dynamic shared memory a kernel must opt in: once per (kernel, device), for
    // the most any call of it asks (with qv).
    if (plan.smem_bytes + plan.static_smem_bytes > 48 * 1024) {
      static std::atomic<uint64_t> opted_in[2] = {};  // per variant: the devices done
      const int most =
          static_cast<int>(attention_smem_bytes(kHeadDim, kHeadDimV, true, plan.key_split, Cfg::kKvFp8));
      int device = 0;
      if (const cudaError_t err = cudaGetDevice(&device); err != cudaSuccess) {
        return cuda_fail(err, "attention_kernel device");
      }
      const kvattn_status st =
          set_max_dynamic_smem_once(reinterpret_cast<const void*>(kernel), device, most,
                                    &opted_in[plan.key_split ? 1 : 0], "attention_kernel");
      if (st != KVATTN_OK) return st;
    }
    const dim3 grid = plan.balanced ? dim3(static_cast<unsigned>(plan.balanced_ctas), 1)
                                    : dim3(static_cast<unsigned>(ctas), plan.splits);
    return launch_kernel("attention_kernel", kernel,
                         {grid, dim3(Cfg::kNThreads), plan.smem_bytes, stream, plan.early_launch}, params);
  }
}

}  // namespace kvattn::cuda
