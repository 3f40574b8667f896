// The body of launch_prefill_kernel, included by the instantiation files only (it pulls in the kernel).
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled

#include <algorithm>
#include <atomic>
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

// The driver's tensor-map encoder through the runtime (the library does not link libcuda); nullptr when
// the driver lacks it.
inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      cudaGetLastError();
      return static_cast<PFN_cuTensorMapEncodeTiled_v12000>(nullptr);
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  return encode;
}

// K/V by TMA (kernel.cuh, produce_tma) where the cache allows it: paged (not packed), page size a multiple
// of 8 that divides the key tile or is a multiple of it, 16-byte aligned base and strides (prefill_sm90_
// supports checked those), and the driver encodes both maps. Else the cp.async producer (any page size).
// KVATTN_SM90_TMA=0 forces the cp.async producer (A/B).
template <class Cfg>
bool make_kv_maps(const AttnParams& params, PrefillArgs& a) {
  using T = typename Cfg::T;
  const SeqParams& sp = params.seq;
  if (const char* v = std::getenv("KVATTN_SM90_TMA"); v != nullptr && std::strcmp(v, "0") == 0) return false;
  if (sp.page_table == nullptr || sp.cu_seqlens_k != nullptr || sp.page_size <= 0 || sp.page_size % 8 != 0 ||
      (Cfg::kBlockN % sp.page_size != 0 && sp.page_size % Cfg::kBlockN != 0) ||
      params.head_dim != Cfg::kHeadDim) {
    return false;
  }
  const PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
  if (encode == nullptr) return false;
  const auto make = [&](const CacheTensor& c, CUtensorMap* map) {
    const cuuint64_t dims[4] = {static_cast<cuuint64_t>(Cfg::kHeadDim), static_cast<cuuint64_t>(sp.page_size),
                                static_cast<cuuint64_t>(params.num_kv_heads),
                                static_cast<cuuint64_t>(sp.num_pages)};
    const cuuint64_t strides[3] = {static_cast<cuuint64_t>(c.slot_stride) * sizeof(T),
                                   static_cast<cuuint64_t>(c.head_stride) * sizeof(T),
                                   static_cast<cuuint64_t>(c.page_stride) * sizeof(T)};
    const cuuint32_t box[4] = {64, static_cast<cuuint32_t>(std::min<int64_t>(sp.page_size, Cfg::kBlockN)), 1,
                               1};
    const cuuint32_t unit[4] = {1, 1, 1, 1};
    return encode(
               map,
               std::is_same_v<T, half> ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
               4, c.ptr, dims, strides, box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
               CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
  };
  return make(params.k_cache, &a.k_map) && make(params.v_cache, &a.v_map);
}

template <class Cfg>
kvattn_status launch_config(const AttnParams& params, cudaStream_t stream) {
  const int64_t rows = static_cast<int64_t>(params.seq.max_seqlen_q) * params.group;
  PrefillArgs a{};
  a.p = params;
  a.m_blocks = static_cast<int32_t>((rows + Cfg::kBlockM - 1) / Cfg::kBlockM);
  a.flags = kUnitMajor;
  // A/B knobs (bench/prefill_sm90_check.py): KVATTN_SM90_ORDER=0 m-block-major grid; KVATTN_SM90_NOFENCE=1.
  if (const char* v = std::getenv("KVATTN_SM90_ORDER"); v != nullptr && std::strcmp(v, "0") == 0) a.flags = 0;
  if (const char* v = std::getenv("KVATTN_SM90_NOFENCE"); v != nullptr && std::strcmp(v, "1") == 0) {
    a.flags |= kNoReaderFence;
  }
  if (const char* v = std::getenv("KVATTN_SM90_DIAG"); v != nullptr)
    a.flags |= std::atoi(v) & (kDiagNoLoad | kDiagNoSoftmax);
  if (make_kv_maps<Cfg>(params, a)) a.flags |= kTma;
  const int64_t ctas = static_cast<int64_t>(a.m_blocks) * params.seq.batch * params.num_kv_heads;
  if (ctas > 0x7fffffff) {
    return fail(KVATTN_ERROR_UNSUPPORTED, "q: batch * kv heads * row blocks = " + std::to_string(ctas) +
                                              " CTAs exceeds the grid limit");
  }
  const int smem = static_cast<int>(prefill_smem_bytes(Cfg::kHeadDim));
  static std::atomic<uint64_t> opted_in{0};  // the devices this kernel has opted into its shared memory on
  int device = 0;
  if (const cudaError_t err = cudaGetDevice(&device); err != cudaSuccess) {
    return cuda_fail(err, "prefill_kernel device");
  }
  if (const kvattn_status st = set_max_dynamic_smem_once(reinterpret_cast<const void*>(prefill_kernel<Cfg>),
                                                         device, smem, &opted_in, "prefill_kernel");
      st != KVATTN_OK) {
    return st;
  }
  prefill_kernel<Cfg><<<static_cast<unsigned>(ctas), Cfg::kThreads, smem, stream>>>(a);
  return check_launch("prefill_kernel (sm_90a)");
}

template <typename T, int kHeadDim>
kvattn_status launch_prefill_kernel(const AttnParams& params, cudaStream_t stream) {
  if constexpr (!prefill_built(dtype_of_storage<T>(), kHeadDim)) {
    return fail(KVATTN_ERROR_UNSUPPORTED, "the sm_90a prefill kernel for head_dim=" +
                                              std::to_string(kHeadDim) + " is not compiled in this build");
  } else {
    // KVATTN_SM90_PINGPONG=0: the consumers issue their wgmma groups independently (for A/B timing; d = 128
    // only, so that the other head dims compile one kernel each).
    if constexpr (kHeadDim == 128) {
      const char* pingpong = std::getenv("KVATTN_SM90_PINGPONG");
      if (pingpong != nullptr && std::strcmp(pingpong, "0") == 0) {
        return launch_config<PrefillConfig<T, kHeadDim, false>>(params, stream);
      }
    }
    return launch_config<PrefillConfig<T, kHeadDim, true>>(params, stream);
  }
}

}  // namespace kvattn::cuda::sm90
