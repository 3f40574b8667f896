// Step 1 of CONTRACT.md: the in-place append of a FwdProblem's new tokens.
#pragma once

#include "api/problem.hpp"

namespace kvattn::cpu {

// Writes new token j of every sequence i at slot cache_seqlens[i] + j of its cache, k rotated at
// p_i + j first (step 2), both rounded once to the cache dtype. Must run before any attention: every
// sequence attends to its appended tokens through the cache.
void append_new_tokens(const FwdProblem& p);

}  // namespace kvattn::cpu
