// Validation: every rule of CONTRACT.md that the host can decide, in one place. Each validate_*() either
// fills the normalized problem of problem.hpp and returns KVATTN_OK, or calls fail() with a message that
// names the argument and leaves the problem untouched. Nothing is read from device memory: on the CUDA
// backend the per-sequence checks use only the values the host knows (shapes and scalars).
#pragma once

#include "api/backend.hpp"
#include "api/problem.hpp"

namespace kvattn {

// On the CUDA backend also resolves the call (kernel, plan) into *cuda, once.
kvattn_status validate_fwd(const kvattn_fwd_params& args, FwdProblem* problem, CudaFwdCall* cuda);
// The caller's workspace against the `needed` bytes of the resolved call (kvattn_check and kvattn_fwd,
// not kvattn_fwd_workspace_size): given, large enough, aligned, and disjoint from every tensor argument
// (the call writes those bytes).
kvattn_status validate_fwd_workspace(const kvattn_fwd_params& args, size_t needed);
kvattn_status validate_append(const kvattn_append_params& args, AppendProblem* problem);
kvattn_status validate_combine(const kvattn_combine_params& args, CombineProblem* problem);

// validate_fwd_options.cpp: rotary, scores and mask, alibi/sinks/descales and speed options; runs once the
// shapes have fixed p's sizes. Throws Rejection (checks.hpp).
void check_fwd_options(const kvattn_fwd_params& args, FwdProblem& p);

// validate_fwd_seqs.cpp: per-sequence index values (cu_seqlens_*, seqused_q, cache_batch_idx, cache_seqlens,
// cache_leftpad, page_table entries, rotary positions) against the sizes of `p`. `host_data`: the index
// tensors are host memory and are read; otherwise only what the shapes and scalars fix is checked.
// Throws Rejection (checks.hpp).
void check_fwd_sequences(const FwdProblem& p, bool host_data);

}  // namespace kvattn
