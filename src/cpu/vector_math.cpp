// vector_math.hpp's loops. Written on GCC/Clang vector types of 16 floats: the compiler maps them to one
// AVX-512 register, two AVX2 registers or four SSE registers, whichever the clone targets.
#include "cpu/vector_math.hpp"

// The helpers below pass 64-byte vectors by value; they are always inlined, so no call ABI is involved.
#pragma GCC diagnostic ignored "-Wpsabi"

#include <cmath>
#include <cstring>

#include "cpu/numeric.hpp"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__)
#define KVATTN_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define KVATTN_CLONES
#endif
#define KVATTN_INLINE inline __attribute__((always_inline))

namespace kvattn::cpu {
namespace {

constexpr int kLanes = 16;
typedef float V __attribute__((vector_size(kLanes * sizeof(float))));
typedef float V8 __attribute__((vector_size(8 * sizeof(float))));
typedef float V4 __attribute__((vector_size(4 * sizeof(float))));

KVATTN_INLINE V load(const float* x) {
  V v;
  std::memcpy(&v, x, sizeof v);
  return v;
}
KVATTN_INLINE void store(float* x, V v) {
  std::memcpy(x, &v, sizeof v);
}
KVATTN_INLINE V splat(float x) {
  return V{} + x;
}

// Sum of the 16 lanes as a tree of halves (8 + 4 + 2 + 1 adds, not 15 in a chain).
KVATTN_INLINE float lane_sum(V v) {
  V8 lo, hi;
  std::memcpy(&lo, &v, sizeof lo);
  std::memcpy(&hi, reinterpret_cast<const char*>(&v) + sizeof lo, sizeof hi);
  const V8 s8 = lo + hi;
  V4 a, b;
  std::memcpy(&a, &s8, sizeof a);
  std::memcpy(&b, reinterpret_cast<const char*>(&s8) + sizeof a, sizeof b);
  const V4 s4 = a + b;
  return (s4[0] + s4[2]) + (s4[1] + s4[3]);
}

// kRows query rows against every key row: s[r * n + j].
template <int kRows>
KVATTN_INLINE void dot_block(const float* q, int d, const float* const* k_rows, int n, float* s) {
  const int d_vec = d - d % kLanes;
  for (int j = 0; j < n; ++j) {
    const float* k = k_rows[j];
    V acc[kRows] = {};
    for (int c = 0; c < d_vec; c += kLanes) {
      const V kc = load(k + c);
      for (int r = 0; r < kRows; ++r) acc[r] += load(q + r * d + c) * kc;
    }
    for (int r = 0; r < kRows; ++r) {
      float tail = 0.f;
      for (int c = d_vec; c < d; ++c) tail += q[r * d + c] * k[c];
      s[r * n + j] = lane_sum(acc[r]) + tail;
    }
  }
}

// o[r, c0 : c0 + kVecs * 16] += sum_j p[r, j] v_j[...], accumulators held in registers across the keys.
template <int kRows, int kVecs>
KVATTN_INLINE void pv_block(const float* p, int n, const float* const* v_rows, int dv, int c0, float* o) {
  V acc[kRows][kVecs];
  for (int r = 0; r < kRows; ++r)
    for (int u = 0; u < kVecs; ++u) acc[r][u] = load(o + r * dv + c0 + u * kLanes);
  for (int j = 0; j < n; ++j) {
    V v[kVecs];
    for (int u = 0; u < kVecs; ++u) v[u] = load(v_rows[j] + c0 + u * kLanes);
    for (int r = 0; r < kRows; ++r) {
      const V pj = splat(p[r * n + j]);
      for (int u = 0; u < kVecs; ++u) acc[r][u] += pj * v[u];
    }
  }
  for (int r = 0; r < kRows; ++r)
    for (int u = 0; u < kVecs; ++u) store(o + r * dv + c0 + u * kLanes, acc[r][u]);
}

template <int kRows>
KVATTN_INLINE void pv_rows(const float* p, int n, const float* const* v_rows, int dv, float* o) {
  int c0 = 0;
  for (; c0 + 4 * kLanes <= dv; c0 += 4 * kLanes) pv_block<kRows, 4>(p, n, v_rows, dv, c0, o);
  for (; c0 + kLanes <= dv; c0 += kLanes) pv_block<kRows, 1>(p, n, v_rows, dv, c0, o);
  for (int r = 0; r < kRows; ++r) {
    for (int c = c0; c < dv; ++c) {
      float acc = o[r * dv + c];
      for (int j = 0; j < n; ++j) acc += p[r * n + j] * v_rows[j][c];
      o[r * dv + c] = acc;
    }
  }
}

// fp8 e4m3fn -> fp32 for each of the 256 codes (exact).
struct Fp8Table {
  float value[256];
  Fp8Table() {
    for (int b = 0; b < 256; ++b) value[b] = float(fp8_e4m3_to_double(uint8_t(b)));
  }
};

}  // namespace

KVATTN_CLONES void widen_bf16_rows(const uint16_t* const* rows, int n, int width, float* dst) {
  for (int j = 0; j < n; ++j) {
    const uint16_t* x = rows[j];
    float* y = dst + int64_t(j) * width;
    for (int c = 0; c < width; ++c) {
      const uint32_t bits = uint32_t(x[c]) << 16;  // bf16 is the top half of an fp32
      std::memcpy(&y[c], &bits, sizeof bits);
    }
  }
}

KVATTN_CLONES void widen_f16_rows(const uint16_t* const* rows, int n, int width, float* dst) {
  for (int j = 0; j < n; ++j) {
    const uint16_t* x = rows[j];
    float* y = dst + int64_t(j) * width;
    for (int c = 0; c < width; ++c) {
      // Exponent and mantissa moved into an fp32's fields, then scaled by 2^(127 - 15): exact for normal
      // and subnormal fp16 alike. inf and NaN (exponent field 31) get the fp32 exponent field 255.
      const uint32_t h = x[c];
      const uint32_t magnitude = (h & 0x7fffu) << 13;
      float f;
      std::memcpy(&f, &magnitude, sizeof f);
      f *= 0x1p112f;
      uint32_t bits;
      std::memcpy(&bits, &f, sizeof bits);
      if ((h & 0x7c00u) == 0x7c00u) bits = 0x7f800000u | magnitude;
      bits |= (h & 0x8000u) << 16;
      std::memcpy(&y[c], &bits, sizeof bits);
    }
  }
}

void widen_fp8_rows(const uint8_t* const* rows, int n, int width, float* dst) {
  static const Fp8Table table;
  for (int j = 0; j < n; ++j) {
    for (int c = 0; c < width; ++c) dst[int64_t(j) * width + c] = table.value[rows[j][c]];
  }
}

KVATTN_CLONES void dot_rows(const float* q, int num_q, int d, const float* const* k_rows, int n, float* s) {
  int r = 0;
  for (; r + 4 <= num_q; r += 4) dot_block<4>(q + int64_t(r) * d, d, k_rows, n, s + int64_t(r) * n);
  for (; r < num_q; ++r) dot_block<1>(q + int64_t(r) * d, d, k_rows, n, s + int64_t(r) * n);
}

KVATTN_CLONES void accumulate_pv(const float* p, int num_q, int n, const float* const* v_rows, int dv,
                                 float* o) {
  int r = 0;
  for (; r + 4 <= num_q; r += 4) pv_rows<4>(p + int64_t(r) * n, n, v_rows, dv, o + int64_t(r) * dv);
  for (; r < num_q; ++r) pv_rows<1>(p + int64_t(r) * n, n, v_rows, dv, o + int64_t(r) * dv);
}

KVATTN_CLONES double exp_shifted(float* x, int n, float m) {
  // exp(y ln 2) = 2^k 2^f with k = round(y), f in [-1/2, 1/2]; 2^f by its Taylor series to degree 7
  // (truncation 5e-9 relative, under fp32's 6e-8). Below 2^-126 the result is 0 (a key that far below
  // the max weighs nothing in fp32 either).
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kRound = 12582912.f;  // 1.5 * 2^23: adding it rounds to an integer
  for (int j = 0; j < n; ++j) {
    float y = (x[j] - m) * kLog2e;
    const bool underflow = y < -126.f;  // also -inf (a masked key)
    const bool nan = y != y;            // NaN stays NaN (through p), without a NaN-to-int conversion
    y = underflow || nan ? -126.f : y;
    const float k = (y + kRound) - kRound;
    const float f = nan ? x[j] : y - k;
    float p = 1.5252734e-05f;
    p = p * f + 1.5403530e-04f;
    p = p * f + 1.3333558e-03f;
    p = p * f + 9.6181291e-03f;
    p = p * f + 5.5504109e-02f;
    p = p * f + 2.4022651e-01f;
    p = p * f + 6.9314718e-01f;
    p = p * f + 1.f;
    const uint32_t scale_bits = uint32_t(int32_t(k) + 127) << 23;
    float scale;
    std::memcpy(&scale, &scale_bits, sizeof scale);
    x[j] = underflow ? 0.f : p * scale;
  }
  // The sum apart, in 16 lanes (a chained fp32 sum would not vectorize).
  const int n_vec = n - n % kLanes;
  V lanes = {};
  for (int j = 0; j < n_vec; j += kLanes) lanes += load(x + j);
  double sum = lane_sum(lanes);
  for (int j = n_vec; j < n; ++j) sum += x[j];
  return sum;
}

}  // namespace kvattn::cpu
