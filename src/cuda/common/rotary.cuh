// Rotary embedding (CONTRACT.md step 2) of one channel of a row, in fp32.
#pragma once

#include <cstdint>

#include "cuda/common/dtype.cuh"

namespace kvattn::cuda {

struct RotaryParams {
  const void* cos;  // (seqlen_ro, rotary_dim / 2), fp32 or the dtype of q
  const void* sin;
  int64_t cos_stride;
  int64_t sin_stride;
  int32_t rotary_dim;  // 0 = no rotary
  bool table_f32;
  bool interleaved;  // pairs (2m, 2m + 1) (GPT-J); else (m, m + rotary_dim / 2) (GPT-NeoX)
};

// Channel c (< rotary_dim) of row x rotated at position pos (already checked < seqlen_ro):
//   x0' = x0 cos - x1 sin,  x1' = x0 sin + x1 cos  for the pair (x0, x1) holding c.
template <typename T>
__device__ __forceinline__ float rotated_channel(const T* x, int c, int64_t pos, const RotaryParams& r) {
  const int half = r.rotary_dim / 2;
  int m, c0, c1;
  if (r.interleaved) {
    m = c / 2;
    c0 = 2 * m;
    c1 = c0 + 1;
  } else {
    m = c < half ? c : c - half;
    c0 = m;
    c1 = m + half;
  }
  const float cs = load_as_float<T>(r.cos, r.table_f32, pos * r.cos_stride + m);
  const float sn = load_as_float<T>(r.sin, r.table_f32, pos * r.sin_stride + m);
  const float x0 = to_float(x[c0]), x1 = to_float(x[c1]);
  return c == c0 ? x0 * cs - x1 * sn : x0 * sn + x1 * cs;
}

// ---- eight channels at a time (kernels that load whole 16-byte chunks of a row)
//
// Chunk [c8, c8 + 8) of a row, c8 % 8 == 0, inside the rotated channels of a rotary_dim that is a multiple
// of 16 (so no chunk straddles rotary_dim or the GPT-NeoX half): its loads (the chunk, its partner
// channels, its cos / sin entries, raw) apart from its arithmetic, so that a caller keeps the loads of
// several chunks in flight and pays one memory latency for all of them. Same values as rotated_channel.
template <typename T>
struct RotaryChunk {
  alignas(16) T x[8];          // the chunk
  alignas(16) T y[8];          // GPT-NeoX: the partner channels (the other half); GPT-J: unused
  alignas(16) uint32_t cs[8];  // cos, sin of the chunk's pair indices, raw (fp32 or T, as the table is)
  alignas(16) uint32_t sn[8];
};

// kN (4 or 8) consecutive table entries from index idx, raw.
template <typename T, int kN>
__device__ __forceinline__ void load_entries(const void* table, bool f32, int64_t idx, uint32_t (&raw)[8]) {
  if (f32) {
    const float* src = static_cast<const float*>(table) + idx;
    if (reinterpret_cast<uintptr_t>(src) % 16 == 0) {
#pragma unroll
      for (int v = 0; v < kN / 4; ++v)
        reinterpret_cast<uint4*>(raw)[v] = reinterpret_cast<const uint4*>(src)[v];
    } else {
#pragma unroll
      for (int j = 0; j < kN; ++j) raw[j] = __float_as_uint(src[j]);
    }
  } else {
    const T* src = static_cast<const T*>(table) + idx;
    T* dst = reinterpret_cast<T*>(raw);
    if (reinterpret_cast<uintptr_t>(src) % (2 * kN) == 0) {
      if constexpr (kN == 8) {
        *reinterpret_cast<uint4*>(raw) = *reinterpret_cast<const uint4*>(src);
      } else {
        *reinterpret_cast<uint2*>(raw) = *reinterpret_cast<const uint2*>(src);
      }
    } else {
#pragma unroll
      for (int j = 0; j < kN; ++j) dst[j] = src[j];
    }
  }
}

template <typename T>
__device__ __forceinline__ float table_entry(const uint32_t (&raw)[8], bool f32, int j) {
  return f32 ? __uint_as_float(raw[j]) : to_float(reinterpret_cast<const T*>(raw)[j]);
}

template <typename T>
__device__ __forceinline__ void load_rotary_chunk(const T* row, int c8, int64_t pos, const RotaryParams& r,
                                                  RotaryChunk<T>& k) {
  load8(row + c8, k.x);
  if (r.interleaved) {
    load_entries<T, 4>(r.cos, r.table_f32, pos * r.cos_stride + c8 / 2, k.cs);
    load_entries<T, 4>(r.sin, r.table_f32, pos * r.sin_stride + c8 / 2, k.sn);
  } else {
    const int half = r.rotary_dim / 2;
    const int m0 = c8 < half ? c8 : c8 - half;
    load8(row + (c8 < half ? c8 + half : c8 - half), k.y);
    load_entries<T, 8>(r.cos, r.table_f32, pos * r.cos_stride + m0, k.cs);
    load_entries<T, 8>(r.sin, r.table_f32, pos * r.sin_stride + m0, k.sn);
  }
}

// The chunk rotated, in fp32 (rotated_channel's arithmetic).
template <typename T>
__device__ __forceinline__ void rotate_chunk(const RotaryChunk<T>& k, int c8, const RotaryParams& r,
                                             float (&out)[8]) {
  const bool f32 = r.table_f32;
  if (r.interleaved) {
#pragma unroll
    for (int m = 0; m < 4; ++m) {
      const float cs = table_entry<T>(k.cs, f32, m), sn = table_entry<T>(k.sn, f32, m);
      const float x0 = to_float(k.x[2 * m]), x1 = to_float(k.x[2 * m + 1]);
      out[2 * m] = x0 * cs - x1 * sn;
      out[2 * m + 1] = x0 * sn + x1 * cs;
    }
  } else {
    const bool first_half = c8 < r.rotary_dim / 2;
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const float cs = table_entry<T>(k.cs, f32, e), sn = table_entry<T>(k.sn, f32, e);
      // (x0, x1) = (x[m], x[m + half]); the chunk holds x0 in the first half, x1 in the second.
      const float x0 = to_float(first_half ? k.x[e] : k.y[e]), x1 = to_float(first_half ? k.y[e] : k.x[e]);
      out[e] = first_half ? x0 * cs - x1 * sn : x0 * sn + x1 * cs;
    }
  }
}

}  // namespace kvattn::cuda
