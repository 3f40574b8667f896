// Host time per call of the C ABI on the CPU backend, on a decode whose kernel is ~nothing (b 1, 1/1 heads,
// d 64, 16 keys in one page of 16, bf16), so that the rows are the ABI's own cost: validation
// (kvattn_check), validation + plan (kvattn_fwd_workspace_size) and the whole call (kvattn_fwd,
// kvattn_fwd_sized). The CPU twin of bench/host_call.cu (which needs a GPU); the CUDA path adds its
// resolve, plan and launches to these. Median of 20 batches of 1000 calls, in
// this thread's CPU time. Build and run (any machine):
//   g++ -O2 -std=c++17 -Iinclude bench/host_call_cpu.cpp -o build/host_call_cpu -Lbuild -lkvattn \
//     -Wl,-rpath,$PWD/build && KVATTN_NUM_THREADS=1 build/host_call_cpu
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <vector>

#include "kvattn/kvattn.h"

namespace {

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

// This thread's CPU time in us: on a shared machine the wall clock also counts the time other processes
// held the core (the calls run on this thread alone with KVATTN_NUM_THREADS=1).
double thread_us() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec * 1e6 + t.tv_nsec * 1e-3;
}

template <class F>
double per_call_us(F call) {
  std::vector<double> batches;
  for (int b = 0; b < 20; ++b) {
    const double t0 = thread_us();
    for (int i = 0; i < 1000; ++i) call();
    batches.push_back((thread_us() - t0) / 1000);
  }
  std::sort(batches.begin(), batches.end());
  return batches[batches.size() / 2];
}

}  // namespace

int main() {
  const int64_t d = 64, page = 16;
  std::vector<uint16_t> q(d, 0x3f80), out(d), k_cache(page * d, 0x3f80), v_cache(page * d, 0x3f80);
  std::vector<float> lse(1);
  int32_t table = 0, lens = static_cast<int32_t>(page);
  kvattn_fwd_params p;
  kvattn_fwd_params_init(&p);
  p.device_type = KVATTN_DEVICE_CPU;
  p.q = tensor(q.data(), KVATTN_DTYPE_BF16, {1, 1, 1, d});
  p.k_cache = tensor(k_cache.data(), KVATTN_DTYPE_BF16, {1, page, 1, d});
  p.v_cache = tensor(v_cache.data(), KVATTN_DTYPE_BF16, {1, page, 1, d});
  p.page_table = tensor(&table, KVATTN_DTYPE_I32, {1, 1});
  p.cache_seqlens = tensor(&lens, KVATTN_DTYPE_I32, {1});
  p.out = tensor(out.data(), KVATTN_DTYPE_BF16, {1, 1, 1, d});
  if (kvattn_fwd(&p) != KVATTN_OK) {
    std::printf("fwd: %s\n", kvattn_last_error());
    return 1;
  }
  size_t bytes = 0, needed = 0;
  std::printf("CPU backend, %d thread(s), b1 1/1 heads d64 16 keys p16 bf16\n", kvattn_cpu_num_threads());
  auto row = [](const char* what, double us) { std::printf("%-40s %7.3f us\n", what, us); };
  row("kvattn_check (validate + resolve)", per_call_us([&] { kvattn_check(&p); }));
  row("kvattn_fwd_workspace_size", per_call_us([&] { kvattn_fwd_workspace_size(&p, &bytes); }));
  row("kvattn_fwd", per_call_us([&] { kvattn_fwd(&p); }));
  row("kvattn_fwd_sized", per_call_us([&] { kvattn_fwd_sized(&p, &needed); }));
  p.lse = tensor(lse.data(), KVATTN_DTYPE_F32, {1, 1, 1});
  row("kvattn_fwd with lse", per_call_us([&] { kvattn_fwd(&p); }));
  row("kvattn_abi_version (a call)", per_call_us([&] { kvattn_abi_version(); }));
  return 0;
}
