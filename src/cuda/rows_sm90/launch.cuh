// The launch grid of the sm_90a decode kernels with static key splits (the MLA kernels, the head-dim-512
// kernel): included by their launchers' instantiation files.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "cuda/common/host.hpp"
#include "cuda/prefill_sm90/cta.cuh"
#include "cuda/prefill_sm90/launch.hpp"

namespace kvattn::cuda::sm90 {

// A CTA per (sequence, kv head, row block of Cfg::kBlockM) and split (blockIdx.y: params.num_splits, the
// plan's), the row blocks of a (sequence, kv head) next to each other (they read the same K/V: the second
// finds it in L2), the last first; the kernel's shared memory opted into once a device.
template <class Cfg, class Kernel>
kvattn_status launch_split_grid(Kernel kernel, const char* name, size_t smem_bytes, const AttnParams& params,
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

}  // namespace kvattn::cuda::sm90
