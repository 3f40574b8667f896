// The grid of a per-token kernel (the append, the q rotation): CTA (i, b) takes block b of sequence i's
// tokens for fixed lengths; with offsets (cu_seqlens_*) CTA x takes position x of the token-block line
// (common/sequence.cuh), sized from the total so that no CTA only loads its sequence and exits.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "cuda/common/host.hpp"
#include "cuda/common/sequence.cuh"

namespace kvattn::cuda {

struct TokenGrid {
  dim3 grid;
  bool line = false;  // the varlen line
};

// `tokens`: what `total` counts, for the error ("q: N tokens exceed the q rotation kernel's grid limit").
inline kvattn_status token_grid(int batch, int64_t max_len, bool varlen, int64_t total, int per_block,
                                const std::string& arg, const std::string& tokens, const std::string& kernel,
                                TokenGrid& out) {
  const int64_t blocks = (max_len + per_block - 1) / per_block;
  out = {dim3(batch, static_cast<unsigned>(std::min<int64_t>(blocks, 65535))), false};
  if (!varlen) return KVATTN_OK;
  const int64_t line =
      std::min(static_cast<int64_t>(batch) * blocks, varlen_line_bound(total, batch, per_block));
  if (line > 0x7fffffff) {
    return fail(KVATTN_ERROR_UNSUPPORTED, arg + ": " + std::to_string(total) + " " + tokens + " exceed the " +
                                              kernel + "'s grid limit");
  }
  out = {dim3(static_cast<unsigned>(line), 1), true};
  return KVATTN_OK;
}

}  // namespace kvattn::cuda
