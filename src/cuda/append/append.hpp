// Writing new tokens into the KV cache: the append step of kvattn_fwd (k rotated at p_i + j, written at
// slot cache_seqlens[i] + j) and the vLLM-style kvattn_append_kv (slot_mapping); and q rotated ahead of
// the sm_90a prefill kernel.
#pragma once

#include <cuda_runtime.h>

#include "api/problem.hpp"
#include "cuda/common/device_error.cuh"

namespace kvattn::cuda {

// zero_word (nullptr: none): a 32-bit word of the workspace the kernel sets to 0 (its first thread) for the
// kernel after it, the persistent prefill kernel's unit counter (then no memset node between the two).
kvattn_status launch_append(const FwdProblem& p, DeviceErrorRecord* errors, cudaStream_t stream,
                            int32_t* zero_word = nullptr);

// q (16-bit) rotated once into q_rot (rotate_q.cu): token t of sequence i at p_i (+ t when per token), the
// channels past rotary_dim copied, rows past seqused_q and sequences with an index error left untouched
// (the attention reads neither). The sm_90a prefill kernel under KVATTN_SM90_QROT=1 reads q_rot.
kvattn_status launch_rotate_q(const FwdProblem& p, const TokenTensor& q_rot, DeviceErrorRecord* errors,
                              cudaStream_t stream);

}  // namespace kvattn::cuda
