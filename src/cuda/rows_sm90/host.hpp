// The host side that the sm_90a decode kernels with static key splits share (the MLA kernels, mla_sm90; the
// head-dim-512 kernel, wide_sm90): the plan's splits. Their launch grid: launch.cuh.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "api/problem.hpp"
#include "cuda/heuristics.hpp"
#include "cuda/kernel_table.hpp"

namespace kvattn::cuda::sm90 {

// Static key splits (partials + the split combine) where the CTAs of block_m rows, one an SM, would leave SMs
// idle: the general kernel's rule (choose_splits: the fewest splits within 90% of the best wave efficiency,
// >= 4 tiles of block_n keys a split, an explicit num_splits as a cap; deterministic mode: whole-tile chunks
// of the capacity, so a sequence's bits do not depend on the batch).
inline void plan_split_grid(AttentionPlan& plan, const FwdProblem& p, const DeviceShape& device,
                            int64_t block_m, int block_n) {
  const int64_t rows = static_cast<int64_t>(p.max_seqlen_q) * (p.num_q_heads / std::max(1, p.num_kv_heads));
  SplitInputs in;
  in.ctas = (rows + block_m - 1) / block_m * p.batch * p.num_kv_heads;
  in.max_keys = max_sequence_keys(p);  // (api/problem.hpp: the capacity, at most kMaxSequenceKeys)
  in.block_n = block_n;
  in.sm_count = std::max(1, device.sm_count - std::max(0, p.sm_margin));
  in.ctas_per_sm = 1;
  in.num_splits = p.num_splits;
  in.deterministic = p.deterministic;
  plan.splits = choose_splits(in);
  if (plan.splits > 1) {
    if (p.deterministic) plan.chunk_keys = split_chunk_keys(in.max_keys, plan.splits, in.block_n);
    plan_partials(plan, p, static_cast<size_t>(p.total_q) * p.num_q_heads * plan.splits, false);
  }
}

}  // namespace kvattn::cuda::sm90
