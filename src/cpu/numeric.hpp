// Storage dtypes of the CPU backend (fp32, fp16, bf16, fp8 e4m3) read into and written from double.
//
// fp16, bf16 and fp8 go through our own converters: decoding is exact, encoding rounds a double ONCE to the
// nearest representable value, ties to even (rounding through float first could round twice). fp8 e4m3
// (the "fn" variant: no inf, NaN = S.1111.111, max 448) SATURATES: anything beyond +-448, inf included,
// is stored as +-448 (as FA3 and vLLM do with __NV_SATFINITE); NaN stays NaN.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

#include "api/checks.hpp"
#include "api/problem.hpp"
#include "api/status.hpp"

namespace kvattn::cpu {

// A binary floating-point format narrower than double, IEEE-style (implicit bit, subnormals, inf, NaN).
struct FloatFormat {
  int exp_bits;
  int mant_bits;
};
constexpr FloatFormat kF16{5, 10};
constexpr FloatFormat kBF16{8, 7};

inline double bits_to_double(uint32_t bits, FloatFormat f) {
  const int bias = (1 << (f.exp_bits - 1)) - 1;
  const uint32_t mant = bits & ((1u << f.mant_bits) - 1);
  const uint32_t exp_field = (bits >> f.mant_bits) & ((1u << f.exp_bits) - 1);
  const bool negative = (bits >> (f.exp_bits + f.mant_bits)) & 1u;
  double magnitude;
  if (exp_field == (1u << f.exp_bits) - 1) {
    magnitude = mant ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  } else if (exp_field == 0) {  // subnormal: mant * 2^(1 - bias - mant_bits)
    magnitude = std::ldexp(double(mant), 1 - bias - f.mant_bits);
  } else {  // normal: re-bias the exponent and widen the mantissa, exactly
    const uint64_t u =
        (uint64_t(int(exp_field) - bias + 1023) << 52) | (uint64_t(mant) << (52 - f.mant_bits));
    std::memcpy(&magnitude, &u, sizeof u);
  }
  return negative ? -magnitude : magnitude;
}

// Round to nearest, ties to even; overflow gives inf, NaN stays a (quiet) NaN.
inline uint32_t double_to_bits(double x, FloatFormat f) {
  constexpr uint64_t kMant52 = (uint64_t(1) << 52) - 1;
  uint64_t u;
  std::memcpy(&u, &x, sizeof u);
  const uint32_t sign = uint32_t(u >> 63) << (f.exp_bits + f.mant_bits);
  const uint32_t inf = ((1u << f.exp_bits) - 1) << f.mant_bits;
  const uint64_t magnitude = u & ~(uint64_t(1) << 63);
  const int exp_field = int(magnitude >> 52);
  if (exp_field == 0x7ff) return sign | inf | ((magnitude & kMant52) ? 1u << (f.mant_bits - 1) : 0u);

  const int bias = (1 << (f.exp_bits - 1)) - 1;
  const int min_exp = 1 - bias;  // exponent of the smallest normal
  const int exp = exp_field - 1023;
  if (exp > bias) return sign | inf;
  // Below half the smallest subnormal (2^(min_exp - mant_bits - 1)), or a double subnormal: rounds to 0.
  if (exp_field == 0 || exp < min_exp - f.mant_bits - 1) return sign;

  // Keep mant_bits bits after the leading one (fewer for a subnormal result); shift is at most 53.
  const uint64_t mant = (magnitude & kMant52) | (uint64_t(1) << 52);
  const int shift = 52 - f.mant_bits + std::max(0, min_exp - exp);
  uint64_t kept = mant >> shift;
  const uint64_t rest = mant & ((uint64_t(1) << shift) - 1);
  const uint64_t half = uint64_t(1) << (shift - 1);
  if (rest > half || (rest == half && (kept & 1))) ++kept;
  // A carry out of the mantissa lands in the exponent field: the next binade, the smallest normal
  // (from a subnormal) or inf (from the largest binade), all correct.
  if (exp < min_exp) return sign | uint32_t(kept);
  return sign | ((uint32_t(exp + bias) << f.mant_bits) + uint32_t(kept - (uint64_t(1) << f.mant_bits)));
}

inline double f16_to_double(uint16_t bits) {
  return bits_to_double(bits, kF16);
}
inline double bf16_to_double(uint16_t bits) {
  return bits_to_double(bits, kBF16);
}
inline uint16_t double_to_f16(double x) {
  return uint16_t(double_to_bits(x, kF16));
}
inline uint16_t double_to_bf16(double x) {
  return uint16_t(double_to_bits(x, kBF16));
}

// fp8 e4m3fn: bias 7, 3 mantissa bits; exponent field 15 is a normal binade except mantissa 7 (NaN).
constexpr double kFp8Max = 448.0;

inline double fp8_e4m3_to_double(uint8_t bits) {
  const int exp_field = (bits >> 3) & 0xf;
  const int mant = bits & 0x7;
  double magnitude;
  if (exp_field == 0xf && mant == 0x7) {
    magnitude = std::numeric_limits<double>::quiet_NaN();
  } else if (exp_field == 0) {  // subnormal: mant * 2^(1 - 7 - 3)
    magnitude = std::ldexp(double(mant), -9);
  } else {
    magnitude = std::ldexp(double(8 + mant), exp_field - 7 - 3);
  }
  return (bits & 0x80) ? -magnitude : magnitude;
}

// Round to nearest, ties to even, saturating to +-448 (inf too); NaN -> NaN with x's sign.
inline uint8_t double_to_fp8_e4m3(double x) {
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  if (std::isnan(x)) return sign | 0x7f;
  const double a = std::fabs(x);
  if (a >= kFp8Max) return sign | 0x7e;
  if (a == 0.0) return sign;
  // The spacing of e4m3 values around a: 2^(e - 3) in binade [2^e, 2^(e+1)), 2^-9 below 2^-6.
  int e2;
  std::frexp(a, &e2);  // a in [2^(e2-1), 2^e2)
  const int e = std::max(e2 - 1, -6);
  const double q = std::ldexp(a, 3 - e);  // exact: a power-of-two scaling of a double far from the limits
  double k = std::floor(q);
  const double rest = q - k;  // exact
  if (rest > 0.5 || (rest == 0.5 && std::fmod(k, 2.0) != 0.0)) k += 1.0;
  // k * 2^(e - 3): k in [0, 16]; k == 16 (or 8 from a subnormal) carries into the next binade. The value
  // is < 448 + 16, and values in (448, 464) round to 448 before saturation is needed: k * 2^(e-3) <= 448.
  const double v = std::ldexp(k, e - 3);
  if (v == 0.0) return sign;
  std::frexp(v, &e2);
  const int ev = e2 - 1;
  if (ev < -6) return sign | uint8_t(std::ldexp(v, 9));  // subnormal: mantissa = v / 2^-9
  const int mant = int(std::ldexp(v, 3 - ev)) - 8;
  return sign | uint8_t(((ev + 7) << 3) | mant);
}

inline bool is_cpu_storage_dtype(DType t) {
  return t == DType::f32 || t == DType::f16 || t == DType::bf16 || t == DType::fp8_e4m3;
}

inline const char* dtype_name(DType t) {
  return kvattn::dtype_name(static_cast<kvattn_dtype>(t));  // checks.hpp: numpy's names
}

// Validation sends the CPU backend only fp32/fp16/bf16/fp8 storage; this keeps any other dtype from
// running silently wrong if that ever changes.
inline kvattn_status unsupported_dtype(const char* argument, DType t) {
  return fail(KVATTN_ERROR_UNSUPPORTED,
              std::string(argument) + ": dtype " + dtype_name(t) +
                  " is not supported by the CPU backend (float32, float16, bfloat16, float8_e4m3fn)");
}

// dst[c] = element (offset + c) of `base`, c in [0, n). Unknown dtypes read as NaN, never as garbage.
inline void load_row(DType t, const void* base, int64_t offset, int n, double* dst) {
  switch (t) {
    case DType::f32: {
      const float* x = static_cast<const float*>(base) + offset;
      for (int c = 0; c < n; ++c) dst[c] = x[c];
      return;
    }
    case DType::f16: {
      const uint16_t* x = static_cast<const uint16_t*>(base) + offset;
      for (int c = 0; c < n; ++c) dst[c] = f16_to_double(x[c]);
      return;
    }
    case DType::bf16: {  // the top half of an fp32: widened exactly by a shift
      const uint16_t* x = static_cast<const uint16_t*>(base) + offset;
      for (int c = 0; c < n; ++c) {
        const uint32_t bits = uint32_t(x[c]) << 16;
        float f;
        std::memcpy(&f, &bits, sizeof f);
        dst[c] = f;
      }
      return;
    }
    case DType::fp8_e4m3: {
      const uint8_t* x = static_cast<const uint8_t*>(base) + offset;
      for (int c = 0; c < n; ++c) dst[c] = fp8_e4m3_to_double(x[c]);
      return;
    }
    default:
      std::fill(dst, dst + n, std::numeric_limits<double>::quiet_NaN());
  }
}

inline double load(DType t, const void* base, int64_t offset) {
  double x;
  load_row(t, base, offset, 1, &x);
  return x;
}

// Element (offset + c) of `base` = src[c] rounded once to the dtype, c in [0, n).
inline void store_row(DType t, void* base, int64_t offset, int n, const double* src) {
  switch (t) {
    case DType::f32: {
      float* x = static_cast<float*>(base) + offset;
      for (int c = 0; c < n; ++c) x[c] = static_cast<float>(src[c]);
      return;
    }
    case DType::f16: {
      uint16_t* x = static_cast<uint16_t*>(base) + offset;
      for (int c = 0; c < n; ++c) x[c] = double_to_f16(src[c]);
      return;
    }
    case DType::bf16: {
      uint16_t* x = static_cast<uint16_t*>(base) + offset;
      for (int c = 0; c < n; ++c) x[c] = double_to_bf16(src[c]);
      return;
    }
    case DType::fp8_e4m3: {
      uint8_t* x = static_cast<uint8_t*>(base) + offset;
      for (int c = 0; c < n; ++c) x[c] = double_to_fp8_e4m3(src[c]);
      return;
    }
    default:
      return;  // unreachable: every entry point rejects other dtypes first
  }
}

}  // namespace kvattn::cpu
