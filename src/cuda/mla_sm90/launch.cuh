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

// One of the two kernels (Cfg: MlaConfig, 64 rows a CTA, or MlaRowsConfig, 16): a CTA per (sequence, kv
// head, row block) and split (blockIdx.y: params.num_splits, the plan's), the row blocks of a (sequence, kv
// head) next to each other (they read the same K/V: the second finds it in L2), the last first.
template <class Cfg, class Kernel>
kvattn_status launch_mla_config(Kernel kernel, const char* name, size_t smem_bytes, const AttnParams& params,
                                cudaStream_t stream, bool early_launch) {
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
  const int smem = static_cast<int>(smem_bytes);
  static std::atomic<uint64_t> opted_in{0};  // (one a Cfg: a static of this instantiation)
  int device = 0;
  if (const cudaError_t err = cudaGetDevice(&device); err != cudaSuccess) return cuda_fail(err, name);
  if (const kvattn_status st =
          set_max_dynamic_smem_once(reinterpret_cast<const void*>(kernel), device, smem, &opted_in, name);
      st != KVATTN_OK) {
    return st;
  }
  const dim3 grid(static_cast<unsigned>(ctas), static_cast<unsigned>(params.num_splits));
  const LaunchShape shape{grid, dim3(Cfg::kThreads), static_cast<size_t>(smem), stream, early_launch};
  return launch_kernel(name, kernel, shape, a);
}

// The kernel the plan sized (mla_rows_selected: <= 16 rows, the rows kernel).
template <typename T>
kvattn_status launch_mla_kernel(const AttnParams& params, cudaStream_t stream, bool early_launch) {
  if constexpr (!mla_built(dtype_of_storage<T>())) {
    return fail(KVATTN_ERROR_UNSUPPORTED, "the sm_90a MLA kernel is not compiled in this build");
  } else {
    if (mla_rows_selected(static_cast<int64_t>(params.seq.max_seqlen_q) * params.group)) {
      return launch_mla_config<MlaRowsConfig<T>>(mla_rows_kernel<MlaRowsConfig<T>>,
                                                 "mla_rows_kernel (sm_90a)", mla_rows_smem_bytes(), params,
                                                 stream, early_launch);
    }
    return launch_mla_config<MlaConfig<T>>(mla_kernel<MlaConfig<T>>, "mla_kernel (sm_90a)", mla_smem_bytes(),
                                           params, stream, early_launch);
  }
}

}  // namespace kvattn::cuda::sm90
