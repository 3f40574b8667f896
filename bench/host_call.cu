// Host time per call of the C ABI on a W1 decode shape (32/8 heads, d 128, bf16, paged 16, 32k keys, b 4),
// split into its parts: validation (kvattn_check), validation + plan (kvattn_fwd_workspace_size), the
// whole call (kvattn_fwd, kvattn_fwd_sized), and the floor: bare launches of an empty kernel with a
// parameter block as large as the attention kernel's. Calls are queued back to back in batches of 100;
// the synchronization between batches is not timed. Build (here) and run (on the GPU machine):
//   nvcc -O2 -std=c++17 -Iinclude bench/host_call.cu -o build/host_call -Lbuild -lkvattn -Xlinker -rpath=.
//   ./host_call            (libkvattn.so beside it)
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <vector>

#include "kvattn/kvattn.h"

namespace {

struct Blob {
  unsigned char bytes[640];  // about sizeof(AttnParams)
};
__global__ void empty_kernel(const __grid_constant__ Blob) {}

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
  std::printf("kvattn_check               %6.2f us\n", per_call_us([&] { kvattn_check(&p); }));
  std::printf("kvattn_fwd_workspace_size  %6.2f us\n",
              per_call_us([&] { kvattn_fwd_workspace_size(&p, &bytes); }));
  std::printf("kvattn_fwd                 %6.2f us\n", per_call_us([&] { kvattn_fwd(&p); }));
  std::printf("kvattn_fwd_sized           %6.2f us\n", per_call_us([&] { kvattn_fwd_sized(&p, &needed); }));
  std::printf("2 empty launches (640 B)   %6.2f us\n", per_call_us([&] {
                empty_kernel<<<528, 128>>>(blob);
                empty_kernel<<<128, 128>>>(blob);
              }));
  std::printf("%s\n", cudaGetErrorString(cudaGetLastError()));
  return 0;
}
