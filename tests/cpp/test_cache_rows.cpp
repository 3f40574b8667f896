// The rule for the caches the sm_90a producers address as unsigned 32-bit offsets in 16-byte units
// (src/cuda/common/cache_rows.hpp): what it takes, and what it leaves to the portable kernels.
#include <gtest/gtest.h>

#include <cstdint>

#include "cuda/common/cache_rows.hpp"

namespace {

using kvattn::CacheTensor;
using kvattn::DType;
using kvattn::FwdProblem;
using kvattn::cuda::cache_strides_non_negative;
using kvattn::cuda::cp_async_cache_rows_ok;

alignas(16) unsigned char g_cache[64];

// A paged bf16 cache (pages, page size, kv heads, d): the strides of its contiguous layout.
struct Paged {
  FwdProblem p;
  CacheTensor c;
  Paged(int64_t pages, int64_t page_size, int heads, int d, DType dt = DType::bf16) {
    p.kv_dtype = dt;
    p.num_pages = pages;
    p.page_size = page_size;
    p.num_kv_heads = heads;
    c.ptr = g_cache;
    c.head_stride = d;
    c.slot_stride = int64_t{heads} * d;
    c.page_stride = page_size * c.slot_stride;
  }
};

TEST(CacheRows, TakesAlignedCachesBelow64GiB) {
  Paged a(1000, 16, 8, 128);
  EXPECT_TRUE(cp_async_cache_rows_ok(a.p, a.c, 128));
  Paged f(1000, 16, 8, 128, DType::fp8_e4m3);
  EXPECT_TRUE(cp_async_cache_rows_ok(f.p, f.c, 128));
  // 2^31 bf16 pages of 16 bytes (one slot, one head, d 8): 2^31 units.
  Paged big(int64_t{1} << 31, 1, 1, 8);
  EXPECT_TRUE(cp_async_cache_rows_ok(big.p, big.c, 8));
}

TEST(CacheRows, LeavesUnalignedCachesToThePortableKernels) {
  Paged a(1000, 16, 8, 128);
  a.c.ptr = g_cache + 8;
  EXPECT_FALSE(cp_async_cache_rows_ok(a.p, a.c, 128));
  Paged b(1000, 16, 8, 128);
  b.c.head_stride = 132;  // 264 bytes
  EXPECT_FALSE(cp_async_cache_rows_ok(b.p, b.c, 128));
  Paged f(1000, 16, 8, 128, DType::fp8_e4m3);
  f.c.slot_stride += 8;  // 8 fp8 bytes: not a multiple of 16
  EXPECT_FALSE(cp_async_cache_rows_ok(f.p, f.c, 128));
}

TEST(CacheRows, LeavesCachesOf64GiBOrMoreToThePortableKernels) {
  Paged big(int64_t{1} << 32, 1, 1, 8);  // 2^32 units
  EXPECT_FALSE(cp_async_cache_rows_ok(big.p, big.c, 8));
}

// A negative stride (a C-ABI caller's reversed view) wraps an unsigned 32-bit offset to an address far
// outside the cache: such caches go to the portable kernels, whose offsets are signed 64-bit.
TEST(CacheRows, LeavesNegativeStridesToThePortableKernels) {
  for (int which = 0; which < 3; ++which) {
    Paged a(1000, 16, 8, 128);
    int64_t& s = which == 0 ? a.c.page_stride : which == 1 ? a.c.slot_stride : a.c.head_stride;
    s = -s;
    EXPECT_FALSE(cp_async_cache_rows_ok(a.p, a.c, 128)) << "stride " << which;
    EXPECT_FALSE(cache_strides_non_negative(a.c)) << "stride " << which;  // the decode kernel's gate
  }
  Paged a(1000, 16, 8, 128);
  EXPECT_TRUE(cache_strides_non_negative(a.c));
  a.c.page_stride = 0;  // a broadcast page (every page the same memory): offsets stay >= 0
  EXPECT_TRUE(cache_strides_non_negative(a.c));
}

}  // namespace
