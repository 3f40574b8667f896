// How many bytes a second one SM can pull from HBM into shared memory, by copy instruction: the question
// behind the short decodes (bench/NOTES.md, session 42: the cluster form's 4k fill runs at ~25 GB/s an SM
// on 64 SMs: is that the memory or the kernel?). Each CTA (one an SM) streams its own INGEST_CTA_KB of one kv
// head's K rows out of a paged bf16 cache [pages, 16 slots, 8 heads, 128] (a 256-byte row, 2 KB between a
// head's slots) into a ring of 16 KB stages (64 rows), 4 warps each with its own ring of `depth` stages, as
// the decode kernel's cluster form does, and reads one word of each row (so a stage is consumed, not
// skipped).
//   cpasync   16-byte cp.async.cg, one cp.async group a stage (the cluster form's copies)
//   tma16     one TMA tensor copy a page half (16 rows x 128 B, 128-byte swizzle): 8 a stage
//   tma64     one TMA tensor copy a stage half (64 rows x 128 B, the rows of 4 consecutive pages): 2 a stage
//   cphint    cpasync with the decode kernel's L2 evict_first policy
// Each launch reads a region of its own (1 GB round robin): cold in L2, as the decode bench's inputs.
// Measured (H100, session 42; bench/NOTES.md): every mode alike, so the copy instruction is not the limit.
// Build here, run on the GPU machine:
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a bench/ingest.cu -o build/ingest
//   ./build/ingest            (a table: mode, depth, CTAs, us, GB/s an SM, TB/s; and one launch's span)
//   (-DINGEST_CTA_KB=256 -o build/ingest256: a CTA's share of the b1 4k decode, start and end included)
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

namespace {

constexpr int kHeads = 8, kDim = 128, kSlots = 16, kRowBytes = kDim * 2;
constexpr int kStageRows = 64, kStageBytes = kStageRows * kRowBytes, kWarps = 4;
#ifndef INGEST_CTA_KB
#define INGEST_CTA_KB 4096
#endif
constexpr int64_t kCtaBytes = INGEST_CTA_KB << 10;  // a CTA's stream (-DINGEST_CTA_KB=256: the 4k decode's)
constexpr int kCtaPages = kCtaBytes / (kSlots * kRowBytes);  // 1,024 pages of one head
constexpr int kStages = kCtaPages * kSlots / kStageRows;     // 256 stages a CTA

#define CHECK(x)                                                              \
  do {                                                                        \
    cudaError_t e = (x);                                                      \
    if (e != cudaSuccess) {                                                   \
      std::printf("%s: %s (line %d)\n", #x, cudaGetErrorString(e), __LINE__); \
      std::exit(1);                                                           \
    }                                                                         \
  } while (0)

__device__ __forceinline__ uint32_t smem(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n .reg .pred p;\n W: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n @!p bra W;\n}" ::"r"(
          bar),
      "r"(parity)
      : "memory");
}
__device__ __forceinline__ void tma3d(uint32_t dst, const CUtensorMap* map, int c0, int c1, int c2,
                                      uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], "
      "[%5];" ::"r"(dst),
      "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
      : "memory");
}

// The slot index (page * 16 + slot) of a CTA's first row: CTAs 8 q .. 8 q + 7 read the 8 heads of range q
// (as a decode's CTAs read every head of the same pages at about the same time).
__device__ __forceinline__ int64_t first_slot(int64_t base) {
  return base + static_cast<int64_t>(blockIdx.x / kHeads) * kCtaPages * kSlots;
}

// kCpHint: cpasync with the decode kernel's L2 evict_first policy.
enum Mode { kCpAsync = 0, kTma16 = 1, kTma64 = 2, kCpHint = 3 };
__host__ __device__ constexpr bool is_cp(int m) {
  return m == kCpAsync || m == kCpHint;
}

template <int kMode, int kDepth>
__global__ void __launch_bounds__(kWarps * 32, 1)
    ingest(const __grid_constant__ CUtensorMap map, const unsigned char* cache, float* sink, uint64_t* span,
           int64_t base) {
  uint64_t t0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  extern __shared__ __align__(1024) unsigned char ring[];  // (no static shared memory: the ring 1 KB aligned)
  uint64_t* full = reinterpret_cast<uint64_t*>(ring + kWarps * kDepth * kStageBytes);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, head = blockIdx.x % kHeads;
  unsigned char* slots = ring + warp * kDepth * kStageBytes;
  const int n = kStages / kWarps;  // this warp's stages: s = warp + 4 k
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  if (!is_cp(kMode) && lane == 0) {
    for (int k = 0; k < kDepth; ++k) mbar_init(smem(&full[warp * kDepth + k]), 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncwarp();
  auto issue = [&](int k) {  // stage warp + 4 k into slot k % depth
    const int s = warp + kWarps * k;
    unsigned char* dst = slots + (k % kDepth) * kStageBytes;
    const int64_t slot0 = first_slot(base) + static_cast<int64_t>(s) * kStageRows;
    if constexpr (is_cp(kMode)) {
      // 2 rows a warp instruction (16 lanes a row), 32 instructions a stage
#pragma unroll 4
      for (int c = 0; c < kStageRows / 2; ++c) {
        const int row = 2 * c + lane / 16;
        const unsigned char* src = cache + ((slot0 + row) * kHeads + head) * kRowBytes + (lane % 16) * 16;
        const uint32_t to = smem(dst + row * kRowBytes + (lane % 16) * 16);
        if constexpr (kMode == kCpAsync) {
          asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(to), "l"(src) : "memory");
        } else {
          asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;" ::"r"(to), "l"(src),
                       "l"(policy)
                       : "memory");
        }
      }
      asm volatile("cp.async.commit_group;" ::: "memory");
    } else if (lane == 0) {
      const uint32_t bar = smem(&full[warp * kDepth + k % kDepth]);
      mbar_expect(bar, kStageBytes);
      constexpr int kBox = kMode == kTma16 ? kSlots : kStageRows;  // rows a copy
      for (int r = 0; r < kStageRows; r += kBox) {
        for (int half = 0; half < 2; ++half) {
          // (the 64-column half of rows r..r + kBox: kBox x 128 B, swizzled)
          tma3d(smem(dst + half * kStageRows * 128 + r * 128), &map, half * 64, head,
                static_cast<int>(slot0 + r), bar);
        }
      }
    }
  };
  for (int k = 0; k < kDepth && k < n; ++k) issue(k);
  float acc = 0.f;
  for (int k = 0; k < n; ++k) {
    if constexpr (is_cp(kMode)) {
      asm volatile("cp.async.wait_group %0;" ::"n"(kDepth - 1) : "memory");
      __syncwarp();
    } else {
      mbar_wait(smem(&full[warp * kDepth + k % kDepth]), (k / kDepth) & 1);
    }
    const unsigned char* src = slots + (k % kDepth) * kStageBytes;
    acc += reinterpret_cast<const float*>(src)[lane * 2] +
           reinterpret_cast<const float*>(src)[lane * 2 + 1 + 64 * 32];
    __syncwarp();
    if (k + kDepth < n) {
      issue(k + kDepth);
    } else if constexpr (is_cp(kMode)) {
      asm volatile("cp.async.commit_group;" ::: "memory");  // empty groups keep wait_group's count
    }
  }
  if (acc == 12345.f) sink[blockIdx.x] = acc;  // never true for a zero cache: keeps the reads
  uint64_t t1;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
  if (threadIdx.x == 0) {  // the grid's span: first start, last end
    atomicMin(reinterpret_cast<unsigned long long*>(span), t0);
    atomicMax(reinterpret_cast<unsigned long long*>(span + 1), t1);
  }
}

// Each launch reads its own region of the cache (`regions` of them, round robin, 1 GB in all), so L2 (50 MB)
// holds none of it: HBM, as the decode bench's rotating input sets.
template <int kMode, int kDepth>
void time_one(const char* name, const CUtensorMap& map, const unsigned char* cache, float* sink,
              uint64_t* span, int ctas, int regions) {
  int launch = 0;
  auto base = [&] { return static_cast<int64_t>(launch++ % regions) * 17 * kCtaPages * kSlots; };
  auto kernel = ingest<kMode, kDepth>;
  const int smem_bytes = kWarps * kDepth * kStageBytes + 8 * kWarps * kDepth;
  CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  auto launch_one = [&] { kernel<<<ctas, kWarps * 32, smem_bytes>>>(map, cache, sink, span, base()); };
  for (int i = 0; i < 3; ++i) launch_one();
  CHECK(cudaGetLastError());
  constexpr int kReps = 20;
  CHECK(cudaEventRecord(a));
  for (int i = 0; i < kReps; ++i) launch_one();
  CHECK(cudaEventRecord(b));
  CHECK(cudaEventSynchronize(b));
  // One more, alone, its span in global time (the first CTA's start to the last CTA's end): no launch gaps.
  const uint64_t init[2] = {~0ull, 0ull};
  uint64_t got[2];
  CHECK(cudaMemcpy(span, init, sizeof(init), cudaMemcpyHostToDevice));
  launch_one();
  CHECK(cudaMemcpy(got, span, sizeof(got), cudaMemcpyDeviceToHost));
  float ms = 0.f;
  CHECK(cudaEventElapsedTime(&ms, a, b));
  const double us = 1e3 * ms / kReps, bytes = static_cast<double>(kCtaBytes) * ctas;
  const double span_us = (got[1] - got[0]) / 1e3;
  std::printf(
      "%-8s depth %d  %3d CTAs  %8.1f us  %6.1f GB/s an SM  %5.2f TB/s  | one alone: span %6.1f us, "
      "%6.1f GB/s an SM\n",
      name, kDepth, ctas, us, kCtaBytes / us / 1e3, bytes / us / 1e6, span_us, kCtaBytes / span_us / 1e3);
}

}  // namespace

int main() {
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int64_t region = static_cast<int64_t>(17) * kCtaPages * kSlots;  // >= (132 + 7) / 8 ranges
  const int regions =
      static_cast<int>(std::max<int64_t>(1, (int64_t{1} << 30) / (region * kHeads * kRowBytes)));
  const int64_t slots = region * regions;
  const size_t bytes = static_cast<size_t>(slots) * kHeads * kRowBytes;
  unsigned char* cache = nullptr;
  float* sink = nullptr;
  CHECK(cudaMalloc(&cache, bytes));
  CHECK(cudaMemset(cache, 0, bytes));
  CHECK(cudaMalloc(&sink, 4096));
  uint64_t* span = nullptr;
  CHECK(cudaMalloc(&span, 16));
  // The cache as a 3D tensor of bf16: (128 channels, 8 heads at 256 B, slots at 2 KB); boxes of 64 x 1 x R.
  PFN_cuTensorMapEncodeTiled_v12000 encode = nullptr;
  cudaDriverEntryPointQueryResult found;
  CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", reinterpret_cast<void**>(&encode), 12000,
                                         cudaEnableDefault, &found));
  auto make = [&](int rows) {
    CUtensorMap map;
    const cuuint64_t dims[3] = {kDim, kHeads, static_cast<cuuint64_t>(slots)};
    const cuuint64_t strides[2] = {kRowBytes, kHeads * kRowBytes};
    const cuuint32_t box[3] = {64, 1, static_cast<cuuint32_t>(rows)}, step[3] = {1, 1, 1};
    const CUresult r = encode(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, cache, dims, strides, box, step,
                              CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                              CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) {
      std::printf("cuTensorMapEncodeTiled: %d\n", static_cast<int>(r));
      std::exit(1);
    }
    return map;
  };
  const CUtensorMap map16 = make(kSlots), map64 = make(kStageRows);
  std::printf("%d regions; ", regions);
  std::printf("%d SMs; a CTA streams %lld KB of one head's 256-byte K rows (2 KB apart)\n", sms,
              static_cast<long long>(kCtaBytes >> 10));
  for (int ctas : {64, 128}) {
    time_one<kCpAsync, 3>("cpasync", map16, cache, sink, span, ctas, regions);
    time_one<kCpAsync, 2>("cpasync", map16, cache, sink, span, ctas, regions);
    time_one<kTma16, 3>("tma16", map16, cache, sink, span, ctas, regions);
    time_one<kTma16, 2>("tma16", map16, cache, sink, span, ctas, regions);
    time_one<kTma64, 3>("tma64", map64, cache, sink, span, ctas, regions);
    time_one<kCpHint, 3>("cphint", map16, cache, sink, span, ctas, regions);
  }
  return 0;
}
