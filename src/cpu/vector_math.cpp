// vector_math.hpp's loops. Written on GCC/Clang vector types of 16 floats: the compiler maps them to one
// AVX-512 register, two AVX2 registers or four SSE registers, whichever the clone targets.
#include "cpu/vector_math.hpp"

// The helpers below pass 64-byte vectors by value; they are always inlined, so no call ABI is involved.
#pragma GCC diagnostic ignored "-Wpsabi"

#include <algorithm>
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
// bf16 rows in "pair order": 32 bf16 values (64 bytes) are one load of 16 fp32 lanes; lane m holds
// elements 2m (low half) and 2m + 1 (high half). Shifting and masking give both as fp32 (bf16 is the top
// half of an fp32), so a 32-element block of q or o is kept as [its 16 even elements, its 16 odd ones].
typedef uint32_t VU __attribute__((vector_size(kLanes * sizeof(uint32_t))));
struct Bf16 {
  uint16_t bits;
};
KVATTN_INLINE void load_pair(const Bf16* x, V* even, V* odd) {
  VU u;
  std::memcpy(&u, x, sizeof u);
  const VU lo = u << 16;
  const VU hi = u & 0xffff0000u;
  std::memcpy(even, &lo, sizeof lo);
  std::memcpy(odd, &hi, sizeof hi);
}
KVATTN_INLINE float scalar(float x) {
  return x;
}
KVATTN_INLINE float scalar(Bf16 x) {
  const uint32_t u = uint32_t(x.bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
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
template <int kRows, class T>
KVATTN_INLINE void dot_block(const float* q, int d, const T* const* k_rows, int j0, int n, float* s) {
  const int d_vec = d - d % kLanes;
  for (int j = j0; j < n; ++j) {
    const T* k = k_rows[j];
    V acc[kRows] = {};
    for (int c = 0; c < d_vec; c += kLanes) {
      const V kc = load(k + c);
      for (int r = 0; r < kRows; ++r) acc[r] += load(q + r * d + c) * kc;
    }
    for (int r = 0; r < kRows; ++r) {
      float tail = 0.f;
      for (int c = d_vec; c < d; ++c) tail += q[r * d + c] * scalar(k[c]);
      s[r * n + j] = lane_sum(acc[r]) + tail;
    }
  }
}

#if defined(__GNUC__) && !defined(__clang__)
typedef int VI __attribute__((vector_size(kLanes * sizeof(int))));

// Two vectors of lane groups of 2w lanes (each group one partial sum) -> one vector of groups of w lanes:
// u's group g at lanes [2gw, 2gw + w), v's group g at [2gw + w, 2gw + 2w).
template <int w>
KVATTN_INLINE V fold(V u, V v) {
  constexpr VI lo = w == 8   ? VI{0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23}
                    : w == 4 ? VI{0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27}
                    : w == 2 ? VI{0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29}
                             : VI{0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30};
  constexpr VI hi = lo + w;
  return __builtin_shuffle(u, v, lo) + __builtin_shuffle(u, v, hi);
}

// Lane L of the folded sums holds accumulator bitreverse4(L) = r * 4 + jj: s[r * n + j0 + jj], plus the
// channels [d_done, d) that the vector loop left.
template <class T>
KVATTN_INLINE void scatter_sums(V sums, const float* q, int d, int d_done, const T* const* k, int n, int j0,
                                float* s) {
  static constexpr int8_t kAccumulator[16] = {0, 8, 4, 12, 2, 10, 6, 14, 1, 9, 5, 13, 3, 11, 7, 15};
  float lanes[16];
  std::memcpy(lanes, &sums, sizeof lanes);
  for (int lane = 0; lane < 16; ++lane) {
    const int a = kAccumulator[lane];
    s[(a >> 2) * n + j0 + (a & 3)] = lanes[lane];
  }
  if (d_done == d) return;
  for (int r = 0; r < 4; ++r) {
    for (int jj = 0; jj < 4; ++jj) {
      float tail = 0.f;
      for (int c = d_done; c < d; ++c) tail += q[r * d + c] * scalar(k[jj][c]);
      s[r * n + j0 + jj] += tail;
    }
  }
}

// 4 query rows x 4 keys per step: 16 accumulators, each key and query vector loaded once per step, then
// the 16 lane sums in 15 folds (lane L of the result holds accumulator bitreverse4(L)).
template <class T>
KVATTN_INLINE int dot_block_4x4(const float* q, int d, const T* const* k_rows, int n, float* s) {
  const int d_vec = d - d % kLanes;
  int j0 = 0;
  for (; j0 + 4 <= n; j0 += 4) {
    const T* k[4] = {k_rows[j0], k_rows[j0 + 1], k_rows[j0 + 2], k_rows[j0 + 3]};
    V acc[16] = {};  // acc[r * 4 + jj]
    for (int c = 0; c < d_vec; c += kLanes) {
      V kc[4];
      for (int jj = 0; jj < 4; ++jj) kc[jj] = load(k[jj] + c);
      for (int r = 0; r < 4; ++r) {
        const V qc = load(q + r * d + c);
        for (int jj = 0; jj < 4; ++jj) acc[r * 4 + jj] += qc * kc[jj];
      }
    }
    V b[8], e[4], f[2];
    for (int t = 0; t < 8; ++t) b[t] = fold<8>(acc[2 * t], acc[2 * t + 1]);
    for (int t = 0; t < 4; ++t) e[t] = fold<4>(b[2 * t], b[2 * t + 1]);
    for (int t = 0; t < 2; ++t) f[t] = fold<2>(e[2 * t], e[2 * t + 1]);
    const V sums = fold<1>(f[0], f[1]);
    scatter_sums(sums, q, d, d_vec, k, n, j0, s);
  }
  return j0;
}
#else
template <class T>
KVATTN_INLINE int dot_block_4x4(const float*, int, const T* const*, int, float*) {
  return 0;
}
#endif

// ---- bf16 rows, pair order (see load_pair). kPair = 32 elements.
constexpr int kPair = 2 * kLanes;

// kRows rows of q (pair order in each whole block of 32) against key rows [j0, n).
template <int kRows>
KVATTN_INLINE void dot_block_bf16(const float* q, int d, const Bf16* const* k_rows, int j0, int n, float* s) {
  const int d_pair = d - d % kPair;
  for (int j = j0; j < n; ++j) {
    const Bf16* k = k_rows[j];
    V acc[kRows] = {};
    for (int c = 0; c < d_pair; c += kPair) {
      V even, odd;
      load_pair(k + c, &even, &odd);
      for (int r = 0; r < kRows; ++r)
        acc[r] += load(q + r * d + c) * even + load(q + r * d + c + kLanes) * odd;
    }
    for (int r = 0; r < kRows; ++r) {
      float tail = 0.f;
      for (int c = d_pair; c < d; ++c) tail += q[r * d + c] * scalar(k[c]);
      s[r * n + j] = lane_sum(acc[r]) + tail;
    }
  }
}

#if defined(__GNUC__) && !defined(__clang__)
KVATTN_INLINE int dot_block_4x4_bf16(const float* q, int d, const Bf16* const* k_rows, int n, float* s) {
  const int d_pair = d - d % kPair;
  int j0 = 0;
  for (; j0 + 4 <= n; j0 += 4) {
    const Bf16* k[4] = {k_rows[j0], k_rows[j0 + 1], k_rows[j0 + 2], k_rows[j0 + 3]};
    V acc[16] = {};  // acc[r * 4 + jj]
    for (int c = 0; c < d_pair; c += kPair) {
      V even[4], odd[4];
      for (int jj = 0; jj < 4; ++jj) load_pair(k[jj] + c, &even[jj], &odd[jj]);
      for (int r = 0; r < 4; ++r) {
        const V q_even = load(q + r * d + c);
        const V q_odd = load(q + r * d + c + kLanes);
        for (int jj = 0; jj < 4; ++jj) {
          acc[r * 4 + jj] += q_even * even[jj];
          acc[r * 4 + jj] += q_odd * odd[jj];
        }
      }
    }
    V b[8], e[4], f[2];
    for (int t = 0; t < 8; ++t) b[t] = fold<8>(acc[2 * t], acc[2 * t + 1]);
    for (int t = 0; t < 4; ++t) e[t] = fold<4>(b[2 * t], b[2 * t + 1]);
    for (int t = 0; t < 2; ++t) f[t] = fold<2>(e[2 * t], e[2 * t + 1]);
    const V sums = fold<1>(f[0], f[1]);
    scatter_sums(sums, q, d, d_pair, k, n, j0, s);
  }
  return j0;
}
#else
KVATTN_INLINE int dot_block_4x4_bf16(const float*, int, const Bf16* const*, int, float*) {
  return 0;
}
#endif

// o[r, c0 : c0 + kPairs * 32] (pair order) += sum_j p[r, j] v_j[...].
template <int kRows, int kPairs>
KVATTN_INLINE void pv_block_bf16(const float* p, int n, const Bf16* const* v_rows, int dv, int c0, float* o) {
  V acc[kRows][2 * kPairs];
  for (int r = 0; r < kRows; ++r)
    for (int u = 0; u < 2 * kPairs; ++u) acc[r][u] = load(o + r * dv + c0 + u * kLanes);
  for (int j = 0; j < n; ++j) {
    V v[2 * kPairs];
    for (int u = 0; u < kPairs; ++u) load_pair(v_rows[j] + c0 + u * kPair, &v[2 * u], &v[2 * u + 1]);
    for (int r = 0; r < kRows; ++r) {
      const V pj = splat(p[r * n + j]);
      for (int u = 0; u < 2 * kPairs; ++u) acc[r][u] += pj * v[u];
    }
  }
  for (int r = 0; r < kRows; ++r)
    for (int u = 0; u < 2 * kPairs; ++u) store(o + r * dv + c0 + u * kLanes, acc[r][u]);
}

template <int kRows>
KVATTN_INLINE void pv_rows_bf16(const float* p, int n, const Bf16* const* v_rows, int dv, float* o) {
  int c0 = 0;
  for (; c0 + 2 * kPair <= dv; c0 += 2 * kPair) pv_block_bf16<kRows, 2>(p, n, v_rows, dv, c0, o);
  for (; c0 + kPair <= dv; c0 += kPair) pv_block_bf16<kRows, 1>(p, n, v_rows, dv, c0, o);
  for (int r = 0; r < kRows; ++r) {
    for (int c = c0; c < dv; ++c) {
      float acc = o[r * dv + c];
      for (int j = 0; j < n; ++j) acc += p[r * n + j] * scalar(v_rows[j][c]);
      o[r * dv + c] = acc;
    }
  }
}

// o[r, c0 : c0 + kVecs * 16] += sum_j p[r, j] v_j[...], accumulators held in registers across the keys.
template <int kRows, int kVecs, class T>
KVATTN_INLINE void pv_block(const float* p, int n, const T* const* v_rows, int dv, int c0, float* o) {
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

template <int kRows, class T>
KVATTN_INLINE void pv_rows(const float* p, int n, const T* const* v_rows, int dv, float* o) {
  int c0 = 0;
  for (; c0 + 4 * kLanes <= dv; c0 += 4 * kLanes) pv_block<kRows, 4>(p, n, v_rows, dv, c0, o);
  for (; c0 + kLanes <= dv; c0 += kLanes) pv_block<kRows, 1>(p, n, v_rows, dv, c0, o);
  for (int r = 0; r < kRows; ++r) {
    for (int c = c0; c < dv; ++c) {
      float acc = o[r * dv + c];
      for (int j = 0; j < n; ++j) acc += p[r * n + j] * scalar(v_rows[j][c]);
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

template <class T>
KVATTN_INLINE void dot_rows_of(const float* q, int num_q, int d, const T* const* k_rows, int n, float* s) {
  int r = 0;
  for (; r + 4 <= num_q; r += 4) {
    const int done = dot_block_4x4(q + int64_t(r) * d, d, k_rows, n, s + int64_t(r) * n);
    dot_block<4>(q + int64_t(r) * d, d, k_rows, done, n, s + int64_t(r) * n);
  }
  for (; r < num_q; ++r) dot_block<1>(q + int64_t(r) * d, d, k_rows, 0, n, s + int64_t(r) * n);
}

template <class T>
KVATTN_INLINE void accumulate_pv_of(const float* p, int num_q, int n, const T* const* v_rows, int dv,
                                    float* o) {
  int r = 0;
  for (; r + 4 <= num_q; r += 4) pv_rows<4>(p + int64_t(r) * n, n, v_rows, dv, o + int64_t(r) * dv);
  for (; r < num_q; ++r) pv_rows<1>(p + int64_t(r) * n, n, v_rows, dv, o + int64_t(r) * dv);
}

KVATTN_CLONES void dot_rows(const float* q, int num_q, int d, const float* const* k_rows, int n, float* s) {
  dot_rows_of(q, num_q, d, k_rows, n, s);
}

KVATTN_CLONES void dot_rows_bf16(const float* q, int num_q, int d, const uint16_t* const* k_rows, int n,
                                 float* s) {
  const Bf16* const* k = reinterpret_cast<const Bf16* const*>(k_rows);
  int r = 0;
  for (; r + 4 <= num_q; r += 4) {
    const int done = dot_block_4x4_bf16(q + int64_t(r) * d, d, k, n, s + int64_t(r) * n);
    dot_block_bf16<4>(q + int64_t(r) * d, d, k, done, n, s + int64_t(r) * n);
  }
  for (; r < num_q; ++r) dot_block_bf16<1>(q + int64_t(r) * d, d, k, 0, n, s + int64_t(r) * n);
}

KVATTN_CLONES void accumulate_pv(const float* p, int num_q, int n, const float* const* v_rows, int dv,
                                 float* o) {
  accumulate_pv_of(p, num_q, n, v_rows, dv, o);
}

KVATTN_CLONES void accumulate_pv_bf16(const float* p, int num_q, int n, const uint16_t* const* v_rows, int dv,
                                      float* o) {
  const Bf16* const* v = reinterpret_cast<const Bf16* const*>(v_rows);
  int r = 0;
  for (; r + 4 <= num_q; r += 4) pv_rows_bf16<4>(p + int64_t(r) * n, n, v, dv, o + int64_t(r) * dv);
  for (; r < num_q; ++r) pv_rows_bf16<1>(p + int64_t(r) * n, n, v, dv, o + int64_t(r) * dv);
}

KVATTN_CLONES void add_rows(double* o, const float* t, int n) {
  for (int c = 0; c < n; ++c) o[c] += t[c];
}

KVATTN_CLONES void scale_rows(double* o, double a, int n) {
  for (int c = 0; c < n; ++c) o[c] *= a;
}

KVATTN_CLONES float max_of(const float* x, int n) {
  const int n_vec = n - n % kLanes;
  float m = -__builtin_inff();
  if (n_vec > 0) {
    V lanes = splat(m);
    for (int j = 0; j < n_vec; j += kLanes) {
      const V v = load(x + j);
      lanes = v > lanes ? v : lanes;
    }
    for (int l = 0; l < kLanes; ++l) m = lanes[l] > m ? lanes[l] : m;
  }
  for (int j = n_vec; j < n; ++j) m = x[j] > m ? x[j] : m;
  return m;
}

void to_pair_order(float* x, int n) {
  float block[kPair];
  for (int c0 = 0; c0 + kPair <= n; c0 += kPair) {
    for (int m = 0; m < kLanes; ++m) {
      block[m] = x[c0 + 2 * m];
      block[kLanes + m] = x[c0 + 2 * m + 1];
    }
    std::copy(block, block + kPair, x + c0);
  }
}

void from_pair_order(double* x, int n) {
  double block[kPair];
  for (int c0 = 0; c0 + kPair <= n; c0 += kPair) {
    for (int m = 0; m < kLanes; ++m) {
      block[2 * m] = x[c0 + m];
      block[2 * m + 1] = x[c0 + kLanes + m];
    }
    std::copy(block, block + kPair, x + c0);
  }
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
