// The body of launch_wide_kernel, included by the instantiation files only (it pulls in the kernel).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "cuda/common/host.hpp"
#include "cuda/rows_sm90/launch.cuh"
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

// The grid of launch_split_grid (rows_sm90/launch.cuh): a CTA per (sequence, kv head) and split.
template <typename T>
kvattn_status launch_wide_kernel(const AttnParams& params, cudaStream_t stream, bool early_launch) {
  if constexpr (!wide_built(dtype_of_storage<T>())) {
    return fail(KVATTN_ERROR_UNSUPPORTED, "the sm_90a head-dim-512 kernel is not compiled in this build");
  } else {
    return launch_split_grid<WideConfig<T>>(wide_kernel<WideConfig<T>>, "wide_kernel (sm_90a)",
                                            wide_smem_bytes(), params, stream, early_launch);
  }
}

}  // namespace kvattn::cuda::sm90
