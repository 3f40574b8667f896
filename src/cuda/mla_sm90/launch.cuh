// The body of launch_mla_kernel, included by the instantiation files only (it pulls in the kernels).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <type_traits>

#include "cuda/common/host.hpp"
#include "cuda/mla_sm90/kernel.cuh"
#include "cuda/mla_sm90/mla_sm90.hpp"
#include "cuda/mla_sm90/rows_kernel.cuh"
#include "cuda/rows_sm90/launch.cuh"

namespace kvattn::cuda::sm90 {

template <typename T>
bool mla_kernel_loaded() {
  if constexpr (!mla_built(dtype_of_storage<T>())) {
    return false;
  } else {
    return sm90a_binary_loaded(reinterpret_cast<const void*>(mla_kernel<MlaConfig<T>>)) &&
           sm90a_binary_loaded(reinterpret_cast<const void*>(mla_rows_kernel<MlaRowsConfig<T>>));
  }
}

// The kernel the plan sized (mla_rows_selected: <= 16 rows, the rows kernel).
template <typename T>
kvattn_status launch_mla_kernel(const AttnParams& params, cudaStream_t stream, bool early_launch) {
  if constexpr (!mla_built(dtype_of_storage<T>())) {
    return fail(KVATTN_ERROR_UNSUPPORTED, "the sm_90a MLA kernel is not compiled in this build");
  } else {
    if (mla_rows_selected(static_cast<int64_t>(params.seq.max_seqlen_q) * params.group)) {
      return launch_split_grid<MlaRowsConfig<T>>(mla_rows_kernel<MlaRowsConfig<T>>,
                                                 "mla_rows_kernel (sm_90a)", mla_rows_smem_bytes(), params,
                                                 stream, early_launch);
    }
    return launch_split_grid<MlaConfig<T>>(mla_kernel<MlaConfig<T>>, "mla_kernel (sm_90a)", mla_smem_bytes(),
                                           params, stream, early_launch);
  }
}

}  // namespace kvattn::cuda::sm90
