// The host side of the sm_90a prefill path: whether it takes a problem, and its launch. Everything it does
// not take runs on the portable kernel (src/cuda/attention), which handles every valid input.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "api/problem.hpp"
#include "api/status.hpp"
#include "cuda/attention/params.cuh"
#include "cuda/common/host.hpp"

namespace kvattn::cuda::sm90 {

// True when the sm_90a prefill kernel runs p (README "CUDA kernels" lists the conditions): an sm_90 device
// and a library built for 90a, KVATTN_FORCE_PORTABLE unset (or not "1"), fp16/bf16 q = cache = out,
// d = dv among the compiled head dims, no qv, 16-byte aligned cache rows, caches under 64 GiB each, no
// explicit num_splits > 1, and a prefill shape: at least 128 packed query rows (max_seqlen_q x hq / hk) per
// kv head and at least half a wave of 128-row CTAs (KVATTN_FORCE_SM90_PREFILL=1 drops this shape rule, for
// tests).
bool prefill_takes(const FwdProblem& p, const AttnParams& params, const DeviceLimits& limits);

kvattn_status launch_prefill(const FwdProblem& p, const AttnParams& params, cudaStream_t stream);

// One (dtype, head dim): the instantiation files define them.
template <typename T, int kHeadDim>
kvattn_status launch_prefill_kernel(const AttnParams& params, cudaStream_t stream);
template <typename T, int kHeadDim>
bool prefill_kernel_loaded();  // the sm_90a binary of the kernel is the one the device runs

}  // namespace kvattn::cuda::sm90
