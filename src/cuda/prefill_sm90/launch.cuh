// The body of launch_prefill_kernel, included by the instantiation files only (it pulls in the kernel).
#pragma once

#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>

#include "cuda/common/host.hpp"
#include "cuda/prefill_sm90/kernel.cuh"
#include "cuda/prefill_sm90/launch.hpp"

namespace kvattn::cuda::sm90 {

template <typename T>
constexpr DType dtype_of_storage() {
  return std::is_same_v<T, half> ? DType::f16 : DType::bf16;
}

template <typename T, int kHeadDim>
bool prefill_kernel_loaded() {
  if constexpr (!prefill_built(dtype_of_storage<T>(), kHeadDim)) {
    return false;
  } else {
    cudaFuncAttributes attr{};
    if (cudaFuncGetAttributes(&attr, prefill_kernel<PrefillConfig<T, kHeadDim, true>>) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    return attr.binaryVersion == 90;
  }
}

template <class Cfg>
kvattn_status launch_config(const AttnParams& params, cudaStream_t stream) {
  const int64_t rows = static_cast<int64_t>(params.seq.max_seqlen_q) * params.group;
  PrefillArgs a{params, static_cast<int32_t>((rows + Cfg::kBlockM - 1) / Cfg::kBlockM), kUnitMajor};
  // A/B knobs (bench/prefill_sm90_check.py): KVATTN_SM90_ORDER=0 m-block-major grid; KVATTN_SM90_NOFENCE=1.
  if (const char* v = std::getenv("KVATTN_SM90_ORDER"); v != nullptr && std::strcmp(v, "0") == 0) a.flags = 0;
  if (const char* v = std::getenv("KVATTN_SM90_NOFENCE"); v != nullptr && std::strcmp(v, "1") == 0) {
    a.flags |= kNoReaderFence;
  }
  if (const char* v = std::getenv("KVATTN_SM90_DIAG"); v != nullptr)
    a.flags |= std::atoi(v) & (kDiagNoLoad | kDiagNoSoftmax);
  const int64_t ctas = static_cast<int64_t>(a.m_blocks) * params.seq.batch * params.num_kv_heads;
  if (ctas > 0x7fffffff) {
    return fail(KVATTN_ERROR_UNSUPPORTED, "q: batch * kv heads * row blocks = " + std::to_string(ctas) +
                                              " CTAs exceeds the grid limit");
  }
  const int smem = static_cast<int>(prefill_smem_bytes(Cfg::kHeadDim));
  cudaError_t err =
      cudaFuncSetAttribute(prefill_kernel<Cfg>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (err != cudaSuccess) return cuda_fail(err, "prefill_kernel shared memory");
  prefill_kernel<Cfg><<<static_cast<unsigned>(ctas), Cfg::kThreads, smem, stream>>>(a);
  return check_launch("prefill_kernel (sm_90a)");
}

template <typename T, int kHeadDim>
kvattn_status launch_prefill_kernel(const AttnParams& params, cudaStream_t stream) {
  if constexpr (!prefill_built(dtype_of_storage<T>(), kHeadDim)) {
    return fail(KVATTN_ERROR_UNSUPPORTED, "the sm_90a prefill kernel for head_dim=" +
                                              std::to_string(kHeadDim) + " is not compiled in this build");
  } else {
    // KVATTN_SM90_PINGPONG=0: the consumers issue their wgmma groups independently (for A/B timing).
    const char* pingpong = std::getenv("KVATTN_SM90_PINGPONG");
    if (pingpong != nullptr && std::strcmp(pingpong, "0") == 0) {
      return launch_config<PrefillConfig<T, kHeadDim, false>>(params, stream);
    }
    return launch_config<PrefillConfig<T, kHeadDim, true>>(params, stream);
  }
}

}  // namespace kvattn::cuda::sm90
