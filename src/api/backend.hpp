// The backends behind the C ABI. Each receives a validated problem (src/api/problem.hpp) and returns a
// status; on failure it has called fail() with a message.
#pragma once

#include <cstddef>

#include "api/problem.hpp"

namespace kvattn {

// ---- CPU backend (src/cpu): always built. Index tensors are host memory there.
kvattn_status cpu_fwd(const FwdProblem& p);
kvattn_status cpu_append(const AppendProblem& p);
kvattn_status cpu_combine(const CombineProblem& p);

// ---- CUDA backend (src/cuda): built when KVATTN_WITH_CUDA is defined; otherwise src/api/no_cuda.cpp
// provides these, returning KVATTN_ERROR_UNSUPPORTED with a message saying the build has no CUDA.
bool cuda_available();
// One lookup answers "supported?" and "which kernel?" (src/cuda/dispatch.cu). On false, fail() was called
// with a message naming the unsupported argument (e.g. head_dim) and what is supported.
kvattn_status cuda_fwd_supported(const FwdProblem& p);
kvattn_status cuda_fwd_workspace_size(const FwdProblem& p, size_t* bytes);
kvattn_status cuda_fwd(const FwdProblem& p);
kvattn_status cuda_append(const AppendProblem& p);
kvattn_status cuda_combine(const CombineProblem& p);
kvattn_status cuda_device_errors(int device_id, void* stream);

}  // namespace kvattn
