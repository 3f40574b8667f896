// Writing new tokens into the KV cache: the append step of kvattn_fwd (k rotated at p_i + j, written at
// slot cache_seqlens[i] + j) and the vLLM-style kvattn_append_kv (slot_mapping).
#pragma once

#include <cuda_runtime.h>

#include "api/problem.hpp"
#include "cuda/common/device_error.cuh"

namespace kvattn::cuda {

kvattn_status launch_append(const FwdProblem& p, DeviceErrorRecord* errors, cudaStream_t stream);

}  // namespace kvattn::cuda
