// fp8 e4m3 to 16-bit conversions of the Hopper kernels (the decode kernel's consumers, the prefill kernel's
// producer), as inline PTX: e4m3 pairs convert in one instruction (sm_89 and newer: the callers are compiled
// for sm_90 only). e4m3 values are normal f16 and bf16 values: every conversion here is exact.
#pragma once

#include <cuda_fp8.h>

#include <cstdint>

namespace kvattn::cuda {

// Four e4m3 values as two f16x2 registers: bytes (0, 1) into `lo`, (2, 3) into `hi`. The halves go to the
// conversion as 16-bit registers, which ptxas reads in place (F2FP ... R.H1): no shift or mask a pair.
__device__ __forceinline__ void e4m3x4_to_f16x2x2(uint32_t four, uint32_t& lo, uint32_t& hi) {
  asm("{\n .reg .b16 l, h;\n mov.b32 {l, h}, %2;\n cvt.rn.f16x2.e4m3x2 %0, l;\n cvt.rn.f16x2.e4m3x2 %1, "
      "h;\n}\n"
      : "=r"(lo), "=r"(hi)
      : "r"(four));
}
__device__ __forceinline__ uint32_t f16x2_to_bf16x2(uint32_t h2) {
  uint32_t out;
  asm("{\n .reg .b16 l, h;\n .reg .f32 fl, fh;\n mov.b32 {l, h}, %1;\n cvt.f32.f16 fl, l;\n cvt.f32.f16 fh, "
      "h;\n"
      " cvt.rn.bf16x2.f32 %0, fh, fl;\n}\n"
      : "=r"(out)
      : "r"(h2));
  return out;
}
// Sixteen e4m3 values (a 16-byte chunk, channel order) as sixteen f16 (two 16-byte chunks).
__device__ __forceinline__ void e4m3x16_to_f16x16(const uint4& in, uint4& lo, uint4& hi) {
  e4m3x4_to_f16x2x2(in.x, lo.x, lo.y);
  e4m3x4_to_f16x2x2(in.y, lo.z, lo.w);
  e4m3x4_to_f16x2x2(in.z, hi.x, hi.y);
  e4m3x4_to_f16x2x2(in.w, hi.z, hi.w);
}

// Two floats as e4m3 (round to nearest, saturating at +-448), a in the low byte.
__device__ __forceinline__ uint32_t e4m3x2(float a, float b) {
  return __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3);
}

// Bytes of (y, x) by selector nibbles (0-3: x's bytes, 4-7: y's), low nibble to the low byte.
__device__ __forceinline__ uint32_t byte_perm(uint32_t x, uint32_t y, uint32_t selector) {
  uint32_t out;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(out) : "r"(x), "r"(y), "r"(selector));
  return out;
}

}  // namespace kvattn::cuda
