// The body of launch_wide_kernel, included by the instantiation files only (it pulls in the kernel).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "cuda/common/host.hpp"
#include "cuda/wide_sm90/kernel.cuh"
#include "cuda/wide_sm90/wide_sm90.hpp"

namespace kvattn::cuda::sm90 {

template <typename T>
bool wide_kernel_loaded() {
  if constexpr (!wide_built(dtype_of_storage<T>())) {
    return false;
  } else {
    return sm90a_binary_loaded(reinterpret_cast<const void*>(wide_kernel<WideConfig<T>>));
  }
}

// A CTA per (sequence, kv head) and split (blockIdx.y: params.num_splits, the plan's).
template <typename T>
kvattn_status launch_wide_kernel(const AttnParams& params, cudaStream_t stream, bool early_launch) {
  if constexpr (!wide_built(dtype_of_storage<T>())) {
    return fail(KVATTN_ERROR_UNSUPPORTED, "the sm_90a head-dim-512 kernel is not compiled in this build");
  } else {
    using Cfg = WideConfig<T>;
    const int64_t rows = static_cast<int64_t>(params.seq.max_seqlen_q) * params.group;
    PrefillArgs a{};
    a.p = params;
    a.m_blocks = static_cast<int32_t>((rows + Cfg::kBlockM - 1) / Cfg::kBlockM);
    a.flags = kUnitMajor;
    const int64_t ctas = static_cast<int64_t>(a.m_blocks) * params.seq.batch * params.num_kv_heads;
    if (ctas > 0x7fffffff) {
      return fail(KVATTN_ERROR_UNSUPPORTED, "q: batch * kv heads * row blocks = " + std::to_string(ctas) +
                                                " CTAs exceeds the grid limit");
    }
    const int smem = static_cast<int>(wide_smem_bytes());
    static std::atomic<uint64_t> opted_in{0};
    int device = 0;
    if (const cudaError_t err = cudaGetDevice(&device); err != cudaSuccess)
      return cuda_fail(err, "wide_kernel");
    if (const kvattn_status st = set_max_dynamic_smem_once(reinterpret_cast<const void*>(wide_kernel<Cfg>),
                                                           device, smem, &opted_in, "wide_kernel");
        st != KVATTN_OK) {
      return st;
    }
    const dim3 grid(static_cast<unsigned>(ctas), static_cast<unsigned>(params.num_splits));
    const LaunchShape shape{grid, dim3(Cfg::kThreads), static_cast<size_t>(smem), stream, early_launch};
    return launch_kernel("wide_kernel (sm_90a)", wide_kernel<Cfg>, shape, a);
  }
}

}  // namespace kvattn::cuda::sm90
