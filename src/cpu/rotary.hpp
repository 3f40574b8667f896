// Rotary position embedding (CONTRACT.md step 2), in double.
#pragma once

#include <cstdint>

#include "api/problem.hpp"

namespace kvattn::cpu {

// Rotates channels [0, rotary_dim) of x (d channels) at position pos; channels >= rotary_dim are untouched.
// Interleaved (GPT-J) pairs are (2m, 2m + 1); otherwise (GPT-NeoX) (m, m + rotary_dim / 2).
void rotate(const FwdProblem& p, int64_t pos, double* x);

}  // namespace kvattn::cpu
