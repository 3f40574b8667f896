// How many exponentials a clock one SM computes, by instruction form: the question behind d 64's prefill
// (bench/NOTES.md, sessions 49-53: a 192 x 128 tile needs ~1,584 MUFU clocks a sub-partition, as many as its
// tensor-core clocks and its issue slots, so the softmax's exponentials are one of three co-limits). If a
// packed form (two 16-bit results an instruction) ran at the f32 form's instruction rate, P's exponentials
// could take half the MUFU time (P is 16-bit for P V anyway); this measures whether it does.
//   f32      ex2.approx.ftz.f32       (the kernels' form: MUFU.EX2)
//   f16x2    ex2.approx.f16x2         (two f16 results an instruction)
//   bf16x2   ex2.approx.ftz.bf16x2    (two bf16 results, sm_90)
//   ffma     fma.rn.f32               (the FMA pipe, for scale)
// One CTA of 1,024 threads an SM (8 warps a sub-partition), 8 independent chains a thread; clock64 around
// the loop on each CTA, so the rate is per SM clock whatever the SM clock is.
// Build here, run on the GPU machine:
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a bench/mufu_rate.cu -o .probe/mufu_rate
//   .probe/mufu_rate        (a table: form, results a clock an SM, instructions a clock a sub-partition)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cuda_check.cuh"

namespace {

constexpr int kThreads = 1024, kChains = 8, kIters = 4096;

enum Form { kF32, kF16x2, kBf16x2, kFfma };

__device__ __forceinline__ uint32_t step(uint32_t x, Form form) {
  uint32_t y;
  switch (form) {
    case kF32:
      asm volatile("ex2.approx.ftz.f32 %0, %1;" : "=r"(y) : "r"(x));
      return y ^ 0x80000000u;  // keep the argument negative: a chain of exponentials in (0, 1]
    case kF16x2:
      asm volatile("ex2.approx.f16x2 %0, %1;" : "=r"(y) : "r"(x));
      return y ^ 0x80008000u;
    case kBf16x2:
      asm volatile("ex2.approx.ftz.bf16x2 %0, %1;" : "=r"(y) : "r"(x));
      return y ^ 0x80008000u;
    default:
      asm volatile("fma.rn.f32 %0, %1, %1, %1;" : "=r"(y) : "r"(x));
      return y;
  }
}

template <Form kForm>
__global__ void __launch_bounds__(kThreads) rate(uint32_t seed, uint32_t* out, long long* clocks) {
  uint32_t v[kChains];
#pragma unroll
  for (int c = 0; c < kChains; ++c) v[c] = (seed + threadIdx.x * kChains + c) | 0x80008000u;
  __syncthreads();
  const long long t0 = clock64();
  for (int i = 0; i < kIters; ++i) {
#pragma unroll
    for (int c = 0; c < kChains; ++c) v[c] = step(v[c], kForm);
  }
  __syncthreads();
  const long long t1 = clock64();
  uint32_t acc = 0;
#pragma unroll
  for (int c = 0; c < kChains; ++c) acc ^= v[c];
  out[blockIdx.x * kThreads + threadIdx.x] = acc;
  if (threadIdx.x == 0) clocks[blockIdx.x] = t1 - t0;
}

template <Form kForm>
void run(const char* name, int results_per_op, int sms, uint32_t* out, long long* d_clocks) {
  std::vector<long long> clocks(sms);
  for (int rep = 0; rep < 2; ++rep) {  // the first launch warms up
    rate<kForm><<<sms, kThreads>>>(0x3c003c00u + rep, out, d_clocks);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
  }
  CHECK(cudaMemcpy(clocks.data(), d_clocks, sms * sizeof(long long), cudaMemcpyDeviceToHost));
  long long lo = clocks[0], hi = clocks[0], sum = 0;
  for (long long c : clocks) {
    lo = std::min(lo, c);
    hi = std::max(hi, c);
    sum += c;
  }
  const double ops = static_cast<double>(kThreads) * kChains * kIters;  // thread instructions a CTA
  const double mean = static_cast<double>(sum) / sms;
  std::printf("%-8s %8.2f %8.2f %10.3f   %lld-%lld\n", name, ops * results_per_op / mean, ops / mean,
              ops / 32 / 4 / mean, lo, hi);
}

}  // namespace

int main() {
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  uint32_t* out = nullptr;
  long long* clocks = nullptr;
  CHECK(cudaMalloc(&out, static_cast<size_t>(sms) * kThreads * sizeof(uint32_t)));
  CHECK(cudaMalloc(&clocks, sms * sizeof(long long)));
  std::printf("form     results  thread-ops  warp-instr   clocks a CTA (min-max)\n");
  std::printf("         a clock an SM         a clock a sub-partition\n");
  run<kF32>("f32", 1, sms, out, clocks);
  run<kF16x2>("f16x2", 2, sms, out, clocks);
  run<kBf16x2>("bf16x2", 2, sms, out, clocks);
  run<kFfma>("ffma", 1, sms, out, clocks);
  CHECK(cudaFree(out));
  CHECK(cudaFree(clocks));
  return 0;
}
