// The CPU backend's inner loops, in fp32 on the compiler's vector types (vector_math.cpp). On x86-64 each
// is compiled three times (AVX-512, AVX2+FMA, baseline SSE2) and the loader picks the best one the CPU
// has (GCC/Clang target_clones); elsewhere once, for the build's target.
#pragma once

#include <cstdint>

namespace kvattn::cpu {

// dst (n, width) fp32 = rows[j][0..width) widened: bf16 and fp16 exactly, fp8 e4m3fn exactly.
void widen_bf16_rows(const uint16_t* const* rows, int n, int width, float* dst);
void widen_f16_rows(const uint16_t* const* rows, int n, int width, float* dst);
void widen_fp8_rows(const uint8_t* const* rows, int n, int width, float* dst);

// s (num_q, n) = Q K^T: s[r * n + j] = sum_c q[r * d + c] * k_rows[j][c]. q: (num_q, d). The _bf16
// forms read bf16 rows and widen them in registers, and take q and give o in pair order (below).
void dot_rows(const float* q, int num_q, int d, const float* const* k_rows, int n, float* s);
void dot_rows_bf16(const float* q, int num_q, int d, const uint16_t* const* k_rows, int n, float* s);

// o (num_q, dv) += P V: o[r * dv + c] += sum_j p[r * n + j] * v_rows[j][c]. p: (num_q, n).
void accumulate_pv(const float* p, int num_q, int n, const float* const* v_rows, int dv, float* o);
void accumulate_pv_bf16(const float* p, int num_q, int n, const uint16_t* const* v_rows, int dv, float* o);

// Pair order: each whole block of 32 elements as its 16 even elements, then its 16 odd ones (the order
// in which one 64-byte load of 32 bf16 values yields them as two vectors of fp32). The tail past the
// last whole block stays in place.
void to_pair_order(float* x, int n);
void from_pair_order(double* x, int n);

// o[c] += t[c] and o[c] *= a for c in [0, n): the double running rows.
void add_rows(double* o, const float* t, int n);
void scale_rows(double* o, double a, int n);
// The largest of x[0, n) (-inf for n = 0); NaN elements may be passed over (they reach P anyway).
float max_of(const float* x, int n);

// x[j] = exp(x[j] - m) for j in [0, n), m finite; returns the sum of the results (in double). -inf gives
// exactly 0. Relative error about 2 ulp.
double exp_shifted(float* x, int n, float m);

}  // namespace kvattn::cpu
