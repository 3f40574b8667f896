// Which caches the sm_90a producers may address: the prefill and MLA producers as unsigned 32-bit offsets in
// 16-byte units (prefill_sm90/producer.cuh kv_row_units), the decode producer as signed 64-bit element
// offsets whose negative values mean "no row" (decode_sm90/producer.cuh). Host code, no CUDA
// (tests/cpp/test_cache_rows.cpp).
#pragma once

#include <cstdint>

#include "api/problem.hpp"

namespace kvattn::cuda {

// Page, slot and head strides >= 0: every row's offset from the base is then >= 0. A C-ABI caller's reversed
// view has a negative one; the portable kernels (signed 64-bit offsets, a page id < 0 meaning "no row") take
// such caches.
inline bool cache_strides_non_negative(const CacheTensor& c) {
  return c.page_stride >= 0 && c.slot_stride >= 0 && c.head_stride >= 0;
}

// A cache whose rows the sm_90a producers copy by 16-byte cp.async and address as unsigned 32-bit offsets
// in 16-byte units: a 16-byte aligned base, strides that are non-negative multiples of 16 bytes (a negative
// one would wrap the unsigned offset to an address far outside the cache: the portable kernels, whose
// offsets are signed 64-bit, take such caches), and the cache (rows of `width` elements) spanning fewer
// than 2^32 - 1 units (64 GiB).
inline bool cp_async_cache_rows_ok(const FwdProblem& p, const CacheTensor& c, int width) {
  const int64_t per16 = p.kv_dtype == DType::fp8_e4m3 ? 16 : 8;  // elements in 16 bytes
  if (!cache_strides_non_negative(c)) return false;
  const bool aligned = reinterpret_cast<uintptr_t>(c.ptr) % 16 == 0 && c.page_stride % per16 == 0 &&
                       c.slot_stride % per16 == 0 && c.head_stride % per16 == 0;
  const int64_t rows = p.cu_seqlens_k ? p.num_pages * c.slot_stride : p.num_pages * c.page_stride;
  const int64_t span16 =
      (rows + p.page_size * c.slot_stride + p.num_kv_heads * c.head_stride + width) / per16;
  return aligned && span16 < (int64_t{1} << 32) - 1;
}

}  // namespace kvattn::cuda
