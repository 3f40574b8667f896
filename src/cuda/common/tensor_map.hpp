// Host side of the TMA copies: the driver's tensor-map encoder and a KV cache as a 4-D tensor map
// (channel, slot in page, kv head, page) over TmaGeometry's pages (prefill_sm90/config.hpp), shared by the
// sm_90a prefill and the decode kernel's cluster form.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled
#include <cuda_runtime.h>

#include <cstdint>

#include "api/problem.hpp"

namespace kvattn::cuda {

// The driver's tensor-map encoder through the runtime (the library does not link libcuda); nullptr when
// the driver lacks it.
inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      cudaGetLastError();
      return static_cast<PFN_cuTensorMapEncodeTiled_v12000>(nullptr);
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  return encode;
}

// Cache c (elements of elem_bytes, dtype) as the map (channels, slots, heads, pages), boxes of
// (box_channels, box_slots, 1, 1) in the 128-byte swizzle, zeros outside the tensor. A packed cache is
// one page (its page stride is never applied: the span of its token rows). False, declining, where a
// documented precondition of cuTensorMapEncodeTiled fails (a 16-byte aligned base, strides multiples of
// 16 bytes below 2^40) or the driver refuses; the caller checks the dims and the box.
inline bool encode_cache_map(CUtensorMap* map, const CacheTensor& c, CUtensorMapDataType dtype,
                             int elem_bytes, int channels, int64_t slots, int64_t pages, int heads,
                             bool packed, int box_channels, int box_slots) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
  if (encode == nullptr) return false;
  const int64_t strides_elems[3] = {c.slot_stride, c.head_stride,
                                    packed ? slots * c.slot_stride : c.page_stride};
  cuuint64_t strides[3];
  for (int i = 0; i < 3; ++i) {
    const int64_t s = strides_elems[i];
    if (s < 0 || s >= (int64_t{1} << 40) / elem_bytes) return false;
    strides[i] = static_cast<cuuint64_t>(s) * elem_bytes;
    if (strides[i] % 16 != 0) return false;
  }
  if (reinterpret_cast<uintptr_t>(c.ptr) % 16 != 0) return false;
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(channels), static_cast<cuuint64_t>(slots),
                              static_cast<cuuint64_t>(heads), static_cast<cuuint64_t>(pages)};
  const cuuint32_t box[4] = {static_cast<cuuint32_t>(box_channels), static_cast<cuuint32_t>(box_slots), 1, 1};
  const cuuint32_t unit[4] = {1, 1, 1, 1};
  // FLOAT_OOB_FILL_NONE: elements outside the tensor are zeros (not NaN), which P V needs past a row's end.
  return encode(map, dtype, 4, c.ptr, dims, strides, box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE,
                CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// The K and V caches' maps of one kernel: (channels, slots, heads, pages) with their elements' type, boxes
// of (box_channels, box_slots). encode_kv_maps declines (false) where the box is taller than a page, a
// coordinate would leave int32, or either encode declines.
struct KvMapShape {
  CUtensorMapDataType dtype;
  int elem_bytes;
  int64_t slots, pages;
  int heads;
  bool packed;
  int box_channels, box_slots;
};
inline bool encode_kv_maps(const CacheTensor& k, int k_channels, const CacheTensor& v, int v_channels,
                           const KvMapShape& s, CUtensorMap* k_map, CUtensorMap* v_map) {
  constexpr int64_t kMaxCoord = 0x7fffffff;  // coordinates are signed 32-bit
  if (s.slots < s.box_slots || s.slots > kMaxCoord || s.pages < 1 || s.pages > kMaxCoord || s.heads < 1)
    return false;
  const auto make = [&](const CacheTensor& c, int channels, CUtensorMap* map) {
    return encode_cache_map(map, c, s.dtype, s.elem_bytes, channels, s.slots, s.pages, s.heads, s.packed,
                            s.box_channels, s.box_slots);
  };
  return make(k, k_channels, k_map) && make(v, v_channels, v_map);
}

}  // namespace kvattn::cuda
