// Host time per call of the C ABI on a W1 decode shape (32/8 heads, d 128, bf16, paged 16, 32k keys, b 4),
// split into its parts: validation (kvattn_check), validation + plan (kvattn_fwd_workspace_size), the
// whole call (kvattn_fwd, kvattn_fwd_sized; also with the portable kernels), the CUDA runtime calls a
// call may make (cudaGetDevice, cudaGetLastError, cudaSetDevice, cudaFuncSetAttribute, getenv) and the floor:
// bare launches of an empty kernel with a parameter block as large as the attention kernel's, on an idle GPU
// and queued behind a long kernel. Calls are queued back to back in batches of 100; the synchronization
// between batches is not timed. Build (here) and run (on the GPU machine):
//   nvcc -O2 -std=c++17 -Iinclude bench/host_call.cu -o build/host_call -Lbuild -lkvattn -lcuda -Xlinker
//   -rpath=.
//   ./host_call            (libkvattn.so beside it)
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "kvattn/kvattn.h"

namespace {

struct Blob {
  unsigned char bytes[640];  // about sizeof(AttnParams)
};
struct Small {
  unsigned char bytes[16];
};
__global__ void empty_kernel(const __grid_constant__ Blob) {}
__global__ void empty_small_kernel(Small) {}
// Keeps the GPU busy for about `ns` nanoseconds (so that launches queue behind it).
__global__ void spin_kernel(long long ns) {
  const long long t0 = clock64();
  while (clock64() - t0 < ns * 2) {
  }
}

kvattn_tensor tensor(void* data, kvattn_dtype dtype, std::vector<int64_t> shape) {
  kvattn_tensor t{};
  t.data = data;
  t.dtype = dtype;
  t.ndim = static_cast<int32_t>(shape.size());
  int64_t stride = 1;
  for (int i = t.ndim - 1; i >= 0; --i) {
    t.shape[i] = shape[i];
    t.strides[i] = stride;
    stride *= shape[i];
  }
  return t;
}

double per_call_us(const std::function<void()>& call) {
  std::vector<double> batches;
  for (int b = 0; b < 20; ++b) {
    cudaDeviceSynchronize();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 100; ++i) call();
    const auto t1 = std::chrono::steady_clock::now();
    batches.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / 100);
  }
  cudaDeviceSynchronize();
  std::sort(batches.begin(), batches.end());
  return batches[batches.size() / 2];
}

}  // namespace

int main() {
  const int64_t b = 4, hq = 32, hk = 8, d = 128, keys = 32768, page = 16, pages_per_row = keys / page;
  const int64_t num_pages = b * pages_per_row;
  void *q, *k_cache, *v_cache, *out, *table, *lens, *ws;
  cudaMalloc(&q, b * hq * d * 2);
  cudaMalloc(&out, b * hq * d * 2);
  cudaMalloc(&k_cache, num_pages * page * hk * d * 2);
  cudaMalloc(&v_cache, num_pages * page * hk * d * 2);
  std::vector<int32_t> h_table(num_pages), h_lens(b, static_cast<int32_t>(keys));
  for (int64_t i = 0; i < num_pages; ++i) h_table[i] = static_cast<int32_t>(i);
  cudaMalloc(&table, num_pages * 4);
  cudaMalloc(&lens, b * 4);
  cudaMemcpy(table, h_table.data(), num_pages * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(lens, h_lens.data(), b * 4, cudaMemcpyHostToDevice);
  cudaMemset(k_cache, 0, num_pages * page * hk * d * 2);
  cudaMemset(v_cache, 0, num_pages * page * hk * d * 2);
  cudaMemset(q, 0, b * hq * d * 2);

  kvattn_fwd_params p;
  kvattn_fwd_params_init(&p);
  p.device_type = KVATTN_DEVICE_CUDA;
  p.q = tensor(q, KVATTN_DTYPE_BF16, {b, 1, hq, d});
  p.k_cache = tensor(k_cache, KVATTN_DTYPE_BF16, {num_pages, page, hk, d});
  p.v_cache = tensor(v_cache, KVATTN_DTYPE_BF16, {num_pages, page, hk, d});
  p.page_table = tensor(table, KVATTN_DTYPE_I32, {b, pages_per_row});
  p.cache_seqlens = tensor(lens, KVATTN_DTYPE_I32, {b});
  p.out = tensor(out, KVATTN_DTYPE_BF16, {b, 1, hq, d});
  size_t bytes = 0;
  if (kvattn_fwd_workspace_size(&p, &bytes) != KVATTN_OK) {
    std::printf("workspace_size: %s\n", kvattn_last_error());
    return 1;
  }
  cudaMalloc(&ws, std::max<size_t>(bytes, 256));
  p.workspace = ws;
  p.workspace_bytes = bytes;
  if (kvattn_fwd(&p) != KVATTN_OK) {
    std::printf("fwd: %s\n", kvattn_last_error());
    return 1;
  }
  size_t needed = 0;
  Blob blob{};
  std::printf("workspace %zu bytes\n", bytes);
  auto row = [](const char* what, double us) { std::printf("%-40s %7.2f us\n", what, us); };
  row("kvattn_check (validate + resolve)", per_call_us([&] { kvattn_check(&p); }));
  row("kvattn_fwd_workspace_size", per_call_us([&] { kvattn_fwd_workspace_size(&p, &bytes); }));
  row("kvattn_fwd", per_call_us([&] { kvattn_fwd(&p); }));
  row("kvattn_fwd_sized", per_call_us([&] { kvattn_fwd_sized(&p, &needed); }));
  setenv("KVATTN_DECODE_SM90", "0", 1);
  row("kvattn_fwd, portable decode kernel", per_call_us([&] { kvattn_fwd(&p); }));
  unsetenv("KVATTN_DECODE_SM90");
  p.num_splits = 1;  // one launch: no split, no combine
  row("kvattn_fwd, num_splits=1 (one launch)", per_call_us([&] { kvattn_fwd(&p); }));
  p.num_splits = 0;
  int device = 0;
  row("cudaGetDevice", per_call_us([&] { cudaGetDevice(&device); }));
  row("cudaGetLastError", per_call_us([&] { cudaGetLastError(); }));
  row("cudaSetDevice (the current one)", per_call_us([&] { cudaSetDevice(device); }));
  row("getenv", per_call_us([&] { (void)std::getenv("KVATTN_FORCE_PORTABLE"); }));
  row("cudaFuncSetAttribute (same value)", per_call_us([&] {
        cudaFuncSetAttribute(empty_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 100 * 1024);
      }));
  row("1 empty launch (16 B)", per_call_us([&] { empty_small_kernel<<<132, 128>>>(Small{}); }));
  row("1 empty launch (640 B)", per_call_us([&] { empty_kernel<<<132, 128>>>(blob); }));
  row("1 empty cudaLaunchKernelEx (640 B)", per_call_us([&] {
        cudaLaunchConfig_t config = {};
        config.gridDim = dim3(132);
        config.blockDim = dim3(128);
        cudaLaunchKernelEx(&config, empty_kernel, blob);
      }));
  row("1 empty cudaLaunchKernelEx (640 B, PDL)", per_call_us([&] {
        cudaLaunchConfig_t config = {};
        config.gridDim = dim3(132);
        config.blockDim = dim3(128);
        cudaLaunchAttribute attribute = {};
        attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attribute.val.programmaticStreamSerializationAllowed = 1;
        config.attrs = &attribute;
        config.numAttrs = 1;
        cudaLaunchKernelEx(&config, empty_kernel, blob);
      }));
  row("1 empty launch (640 B, 100 KB dynamic smem)",
      per_call_us([&] { empty_kernel<<<132, 128, 100 * 1024>>>(blob); }));
  CUfunction function = nullptr;
  cudaGetFuncBySymbol(&function, reinterpret_cast<const void*>(empty_kernel));
  row("1 empty cuLaunchKernel, driver API (640 B)", per_call_us([&] {
        void* args[] = {&blob};
        cuLaunchKernel(function, 132, 1, 1, 128, 1, 1, 0, nullptr, args, nullptr);
      }));
  row("2 empty launches (640 B)", per_call_us([&] {
        empty_kernel<<<132, 128>>>(blob);
        empty_kernel<<<128, 128>>>(blob);
      }));
  // The same launches queued behind a long kernel (as in a loop of real calls, where the GPU lags).
  auto busy = [&](const std::function<void()>& call) {
    return per_call_us([&] {
      static int i = 0;
      if (i++ % 100 == 0) spin_kernel<<<1, 32>>>(2000000);
      call();
    });
  };
  row("1 empty launch (640 B), GPU busy", busy([&] { empty_kernel<<<132, 128>>>(blob); }));
  row("2 empty launches (640 B), GPU busy", busy([&] {
        empty_kernel<<<132, 128>>>(blob);
        empty_kernel<<<128, 128>>>(blob);
      }));
  std::printf("%s\n", cudaGetErrorString(cudaGetLastError()));
  return 0;
}
