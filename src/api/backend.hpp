// The backends behind the C ABI. Each receives a validated problem (src/api/problem.hpp) and returns a
// status; on failure it has called fail() with a message.
#pragma once

#include <cstddef>

#include "api/problem.hpp"
#include "cuda/heuristics.hpp"

namespace kvattn {

namespace cuda {
struct AttentionKernel;
struct DeviceInfo;
}  // namespace cuda

// What the CUDA backend resolves for one kvattn_fwd call, once (validation does it): the device (its
// attributes cached per device), the kernel (one table lookup) and its plan. Workspace size and launch
// both read this, so a call looks up and plans exactly once.
struct CudaFwdCall {
  const cuda::DeviceInfo* device = nullptr;
  const cuda::AttentionKernel* kernel = nullptr;
  cuda::AttentionPlan plan;
};

// ---- CPU backend (src/cpu): always built. Index tensors are host memory there.
kvattn_status cpu_fwd(const FwdProblem& p);
kvattn_status cpu_append(const AppendProblem& p);
kvattn_status cpu_combine(const CombineProblem& p);

// ---- CUDA backend (src/cuda): built when KVATTN_WITH_CUDA is defined; otherwise src/api/no_cuda.cpp
// provides these, returning KVATTN_ERROR_UNSUPPORTED with a message saying the build has no CUDA.
bool cuda_available();
// One lookup answers "supported?" and "which kernel?" (src/cuda/dispatch.cu) and plans the launch; on
// failure, fail() was called with a message naming the unsupported argument (e.g. head_dim) and what is
// supported. call->plan.workspace_bytes is the workspace the launch needs.
kvattn_status cuda_fwd_resolve(const FwdProblem& p, CudaFwdCall* call);
kvattn_status cuda_fwd(const FwdProblem& p, const CudaFwdCall& call);
kvattn_status cuda_append(const AppendProblem& p);
kvattn_status cuda_combine(const CombineProblem& p);
kvattn_status cuda_device_errors(int device_id, void* stream);

}  // namespace kvattn
