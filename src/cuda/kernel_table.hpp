// The attention kernels as rows of one table, and the one function that picks a row for a problem. Host
// code only (no CUDA headers), so that tests/cpp/test_heuristics.cpp checks the choice without a GPU.
//
// A row is {arch, q dtype, kv dtype, d, dv, supports, plan, launch}. The dispatcher (dispatch.cu) takes,
// among the rows whose dtypes match, whose dims cover the problem's, that are compiled in and that run on
// the device: the highest arch, then the smallest dims. A new architecture plugs in by adding rows with
// its arch and, when it covers only part of the contract, a `supports(problem)` predicate; the portable
// rows (arch 80) cover everything, so a problem the new rows decline still runs.
#pragma once

#include <cstddef>

#include "api/problem.hpp"
#include "cuda/heuristics.hpp"

struct CUstream_st;  // cudaStream_t, without the CUDA headers

namespace kvattn::cuda {

struct AttnParams;

// 10 * major + minor of the compute capability a row's code needs.
constexpr int kArchPortable = 80;  // sm_80 code (cp.async, mma.sync): runs on every device >= 8.0
constexpr int kArchSm90 = 90;      // sm_90a code (wgmma, TMA): arch-specific, runs on 9.0 only

constexpr bool arch_runs_on(int kernel_arch, int device_arch) {
  return kernel_arch == kArchPortable ? device_arch >= kArchPortable : kernel_arch == device_arch;
}

// What the plan of a row reads of the device (cached per device, see host.hpp).
struct DeviceShape {
  int arch = 0;
  int sm_count = 0;
  int smem_per_sm = 0;
  int max_smem_per_block = 0;
  int64_t dram_bytes_per_us = 0;  // peak DRAM bandwidth: memory clock x bus width x 2 (0: unknown)
};

struct AttentionKernel {
  int arch;
  DType q_dtype;
  DType kv_dtype;
  DType compute_dtype;  // of the tensor cores and out (bf16 for fp8 q)
  int head_dim;         // the kernel's dims; a smaller problem runs zero-padded
  int head_dim_v;
  bool built;  // compiled in this build (a developer build compiles one head dim / dtype)
  // Optional: false for problems the row declines (e.g. features an sm90 mainloop lacks); nullptr = all.
  bool (*supports)(const FwdProblem& p);
  AttentionPlan (*plan)(const FwdProblem& p, const AttentionKernel& kernel, const DeviceShape& device);
  kvattn_status (*launch)(const AttnParams& params, const AttentionPlan& plan, CUstream_st* stream);
};

enum class PickFailure { none, dtypes, unbuilt, dims };

struct Pick {
  const AttentionKernel* kernel = nullptr;
  PickFailure failure = PickFailure::none;
};

// The row that runs p on a device of `device_arch`; portable_only keeps the arch-80 rows (the documented
// switch: KVATTN_FORCE_PORTABLE=1 or kvattn_fwd_params.force_portable). `failure` says why none did.
inline Pick pick_kernel(const AttentionKernel* table, size_t rows, const FwdProblem& p, int device_arch,
                        bool portable_only) {
  Pick pick;
  bool dtypes = false, unbuilt = false;
  for (size_t r = 0; r < rows; ++r) {
    const AttentionKernel& k = table[r];
    if (k.q_dtype != p.q_dtype || k.kv_dtype != p.kv_dtype) continue;
    dtypes = true;
    if (k.head_dim < p.head_dim || k.head_dim_v < p.head_dim_v) continue;
    if (!k.built) {
      unbuilt = unbuilt || k.arch == kArchPortable;
      continue;
    }
    if (!arch_runs_on(k.arch, device_arch) || (portable_only && k.arch != kArchPortable)) continue;
    if (k.supports != nullptr && !k.supports(p)) continue;
    const AttentionKernel* best = pick.kernel;
    if (best == nullptr || k.arch > best->arch ||
        (k.arch == best->arch && k.head_dim + k.head_dim_v < best->head_dim + best->head_dim_v)) {
      pick.kernel = &k;
    }
  }
  if (pick.kernel == nullptr) {
    pick.failure = !dtypes ? PickFailure::dtypes : unbuilt ? PickFailure::unbuilt : PickFailure::dims;
  }
  return pick;
}

// The plan of the portable rows (heuristics.hpp).
inline AttentionPlan plan_portable(const FwdProblem& p, const AttentionKernel& kernel,
                                   const DeviceShape& device) {
  return plan_attention(p, kernel.head_dim, kernel.head_dim_v, device.sm_count, device.smem_per_sm);
}

}  // namespace kvattn::cuda
