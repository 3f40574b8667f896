// Storage dtypes of the CUDA backend (fp16, bf16, fp8 e4m3) and their conversions to and from fp32.
// fp8 is a storage dtype only (caches, and q under an fp8 cache): the kernels compute in fp16/bf16, into
// which every e4m3 value converts exactly. fp32 -> e4m3 rounds to nearest even and SATURATES to +-448
// (inf too; NaN stays NaN), as FA3 and vLLM quantize (__NV_SATFINITE).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "api/problem.hpp"

namespace kvattn::cuda {

template <typename T>
__device__ __forceinline__ float to_float(T x);
template <>
__device__ __forceinline__ float to_float<half>(half x) {
  return __half2float(x);
}
template <>
__device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 x) {
  return __bfloat162float(x);
}

template <>
__device__ __forceinline__ float to_float<__nv_fp8_e4m3>(__nv_fp8_e4m3 x) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(x.__x, __NV_E4M3)));
}

template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ half from_float<half>(float x) {
  return __float2half_rn(x);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ __forceinline__ __nv_fp8_e4m3 from_float<__nv_fp8_e4m3>(float x) {
  __nv_fp8_e4m3 r;
  r.__x = __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3);
  return r;
}

// A storage value as compute type T: exact for fp8 -> fp16/bf16 (e4m3 fits both), the identity for T.
template <typename T, typename S>
__device__ __forceinline__ T convert_to(S x) {
  if constexpr (std::is_same_v<T, S>) {
    return x;
  } else {
    return from_float<T>(to_float(x));
  }
}

// Two fp32 values rounded to T and packed into one 32-bit register (low half = a), the operand layout of
// mma.sync.
template <typename T>
__device__ __forceinline__ uint32_t pack2(float a, float b) {
  const T lo = from_float<T>(a), hi = from_float<T>(b);
  uint16_t lo_bits, hi_bits;
  memcpy(&lo_bits, &lo, 2);
  memcpy(&hi_bits, &hi, 2);
  return static_cast<uint32_t>(lo_bits) | (static_cast<uint32_t>(hi_bits) << 16);
}

// An fp32-or-T table entry (rotary cos/sin accept both).
template <typename T>
__device__ __forceinline__ float load_as_float(const void* ptr, bool is_f32, int64_t idx) {
  return is_f32 ? static_cast<const float*>(ptr)[idx] : to_float(static_cast<const T*>(ptr)[idx]);
}

// Output stores in the three dtypes of out (combine writes f32 too).
__device__ __forceinline__ void store_as(void* ptr, DType dt, int64_t idx, float x) {
  if (dt == DType::f32) {
    static_cast<float*>(ptr)[idx] = x;
  } else if (dt == DType::f16) {
    static_cast<half*>(ptr)[idx] = __float2half_rn(x);
  } else {
    static_cast<__nv_bfloat16*>(ptr)[idx] = __float2bfloat16_rn(x);
  }
}

template <DType kDType>
struct StorageOf;
template <>
struct StorageOf<DType::f16> {
  using type = half;
};
template <>
struct StorageOf<DType::bf16> {
  using type = __nv_bfloat16;
};
template <>
struct StorageOf<DType::fp8_e4m3> {
  using type = __nv_fp8_e4m3;
};

// Eight 16-bit values from src: one 16-byte load when aligned (else eight loads).
template <typename T>
__device__ __forceinline__ void load8(const T* src, T (&dst)[8]) {
  static_assert(sizeof(T) == 2, "8 values are one 16-byte vector");
  if (reinterpret_cast<uintptr_t>(src) % 16 == 0) {
    *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
  } else {
#pragma unroll
    for (int e = 0; e < 8; ++e) dst[e] = src[e];
  }
}

// Eight 16-bit values to dst: one 16-byte store when aligned.
template <typename T>
__device__ __forceinline__ void store8(T* dst, const T (&src)[8]) {
  static_assert(sizeof(T) == 2, "8 values are one 16-byte vector");
  if (reinterpret_cast<uintptr_t>(dst) % 16 == 0) {
    *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
  } else {
#pragma unroll
    for (int e = 0; e < 8; ++e) dst[e] = src[e];
  }
}

}  // namespace kvattn::cuda
