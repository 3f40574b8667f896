// Do the SMs of a larger GPC stream DRAM more slowly? The question behind the persistent decode kernel's end
// spread (bench/NOTES.md, session 58: at b1 x 128k on the H200 its CTAs' last stages land 121-135 us into the
// call, median 128, though each CTA reads the same bytes). Hopper's 132 SMs sit in GPCs of unequal size; if a
// GPC's path to memory, not the DRAM, caps its SMs, an SM of an 18-SM GPC streams ~14/18 of one of a 14-SM
// GPC, and equal shares end in unequal times: the balanced line would then weigh CTAs by their GPC.
//   1. The GPCs, from clusters: a cluster's CTAs share a GPC, and two clusters of >= 10 CTAs in one GPC of at
//      most 18 SMs share an SM; so the union of many clusters' SM sets (sizes 16 down to 10, non-portable
//      sizes allowed) is the GPCs' partition of the SMs that hosted one.
//   2. The stream: one CTA an SM (shared memory keeps a second off), each reading its equal slice of a
//      buffer once with 16-byte loads (1,024 threads x 8 loads in flight), %smid and %globaltimer at its
//      start and end; then the per-GPC rate an SM, and each GPC's end against the others'.
// Build here, run on the GPU machine:
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a bench/gpc_probe.cu -o .probe/gpc_probe
//   .probe/gpc_probe [MiB a CTA, default 32] [rounds, default 5]
// Prints the GPCs (SM count, SMs) and, a round, per GPC: mean / min / max end (us), GB/s an SM, TB/s.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <numeric>
#include <vector>

#include "cuda_check.cuh"

namespace {

__device__ __forceinline__ unsigned smid() {
  unsigned s;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
  return s;
}
__device__ __forceinline__ unsigned long long globaltimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Each CTA of a cluster launch writes its SM; a short spin keeps clusters resident long enough that the
// next ones land elsewhere.
// (Launched with more than half an SM's shared memory, as `stream`: one CTA an SM, so that a cluster of c
// CTAs covers c SMs and the pigeonhole of the header holds; 32-thread CTAs without it may share an SM.)
__global__ void where(unsigned* sm_of_cta, int spin_ns) {
  const unsigned cta = blockIdx.x;
  if (threadIdx.x == 0) {
    sm_of_cta[cta] = smid();
    const unsigned long long t0 = globaltimer();
    while (globaltimer() - t0 < static_cast<unsigned long long>(spin_ns)) {
    }
  }
}

struct StreamRecord {
  unsigned sm;
  unsigned long long start, end;
  unsigned long long sink;  // (keeps the loads)
};

// (__launch_bounds__: without it ptxas keeps 32 registers and consumes each load after 2-4 are issued,
// not 8.)
__global__ void __launch_bounds__(1024, 1) stream(const uint4* buf, size_t vecs_a_cta, StreamRecord* rec) {
  extern __shared__ uint4 hold[];  // (sized to leave one CTA an SM)
  const uint4* p = buf + blockIdx.x * vecs_a_cta;
  __syncthreads();
  const unsigned long long t0 = globaltimer();
  uint32_t acc = 0;
  constexpr int kUnroll = 8;  // 128 KiB in flight an SM: ~2 us of DRAM latency at ~60 GB/s
  for (size_t i = threadIdx.x; i < vecs_a_cta; i += blockDim.x * kUnroll) {
    uint4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const size_t j = i + static_cast<size_t>(u) * blockDim.x;
      v[u] = j < vecs_a_cta ? __ldcs(p + j) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  if (acc == 0x12345678u) hold[threadIdx.x] = make_uint4(acc, 0, 0, 0);  // never: a use of acc
  __syncthreads();
  if (threadIdx.x == 0) {
    rec[blockIdx.x] = {smid(), t0, globaltimer(), acc};
  }
}

int find(std::vector<int>& parent, int x) {
  while (parent[x] != x) x = parent[x] = parent[parent[x]];
  return x;
}

}  // namespace

int main(int argc, char** argv) {
  const size_t mib = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 32;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 5;
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  const int sms = prop.multiProcessorCount;
  std::printf("%s: %d SMs, memory bus %d bits\n", prop.name, sms, prop.memoryBusWidth);

  // 1. The GPCs.
  CHECK(cudaFuncSetAttribute(where, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  // One CTA an SM (here and in the stream): more than half the SM's shared memory, within a block's opt-in.
  const int smem = static_cast<int>(
      std::min<size_t>(prop.sharedMemPerMultiprocessor / 2 + 1024, prop.sharedMemPerBlockOptin));
  CHECK(cudaFuncSetAttribute(where, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  std::vector<int> parent(sms);
  std::iota(parent.begin(), parent.end(), 0);
  std::vector<char> hosted(sms, 0);
  constexpr int kClusters = 96;
  unsigned* d_sm = nullptr;
  CHECK(cudaMalloc(&d_sm, sizeof(unsigned) * 16 * kClusters));
  for (int rep = 0; rep < 4; ++rep) {
    for (int c = 16; c >= 10; --c) {
      cudaLaunchConfig_t config = {};
      config.gridDim = dim3(c * kClusters);
      config.blockDim = dim3(32);
      config.dynamicSmemBytes = smem;
      cudaLaunchAttribute attr = {};
      attr.id = cudaLaunchAttributeClusterDimension;
      attr.val.clusterDim.x = c;
      attr.val.clusterDim.y = attr.val.clusterDim.z = 1;
      config.attrs = &attr;
      config.numAttrs = 1;
      int fit = 0;
      if (cudaOccupancyMaxActiveClusters(&fit, where, &config) != cudaSuccess || fit == 0) {
        cudaGetLastError();  // (no GPC holds c SMs free)
        continue;
      }
      if (cudaLaunchKernelEx(&config, where, d_sm, 2000 + 700 * rep) != cudaSuccess) {
        cudaGetLastError();  // (a size this card does not take)
        continue;
      }
      CHECK(cudaDeviceSynchronize());
      std::vector<unsigned> sm(c * kClusters);
      CHECK(cudaMemcpy(sm.data(), d_sm, sizeof(unsigned) * sm.size(), cudaMemcpyDeviceToHost));
      for (int k = 0; k < kClusters; ++k) {
        if (sm[k * c] >= static_cast<unsigned>(sms)) continue;
        for (int r = 0; r < c; ++r) {
          const unsigned s = sm[k * c + r];
          if (s >= static_cast<unsigned>(sms)) continue;
          hosted[s] = 1;
          parent[find(parent, s)] = find(parent, sm[k * c]);
        }
      }
    }
  }
  std::map<int, std::vector<int>> gpcs;
  for (int s = 0; s < sms; ++s)
    if (hosted[s]) gpcs[find(parent, s)].push_back(s);
  std::vector<int> gpc_of(sms, -1);
  int g = 0;
  std::printf("GPCs (SMs that hosted no cluster: %d)\n",
              static_cast<int>(std::count(hosted.begin(), hosted.end(), 0)));
  std::vector<std::vector<int>> members;
  for (auto& [root, list] : gpcs) {
    std::printf("  GPC %d: %zu SMs:", g, list.size());
    for (int s : list) {
      std::printf(" %d", s);
      gpc_of[s] = g;
    }
    std::printf("\n");
    members.push_back(list);
    ++g;
  }

  // 2. The stream.
  const size_t vecs = mib * (1u << 20) / sizeof(uint4);
  uint4* buf = nullptr;
  StreamRecord* d_rec = nullptr;
  CHECK(cudaMalloc(&buf, vecs * sizeof(uint4) * sms));
  CHECK(cudaMemset(buf, 1, vecs * sizeof(uint4) * sms));
  CHECK(cudaMalloc(&d_rec, sizeof(StreamRecord) * sms));
  CHECK(cudaFuncSetAttribute(stream, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  for (int round = 0; round < rounds + 1; ++round) {
    stream<<<sms, 1024, smem>>>(buf, vecs, d_rec);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    if (round == 0) continue;  // (warm-up)
    std::vector<StreamRecord> rec(sms);
    CHECK(cudaMemcpy(rec.data(), d_rec, sizeof(StreamRecord) * sms, cudaMemcpyDeviceToHost));
    unsigned long long t0 = ~0ull, t1 = 0;
    for (const auto& r : rec) {
      t0 = std::min(t0, r.start);
      t1 = std::max(t1, r.end);
    }
    const double bytes_cta = static_cast<double>(vecs) * sizeof(uint4);
    std::printf("round %d: span %.1f us, %.2f TB/s overall\n", round, (t1 - t0) / 1e3,
                bytes_cta * sms / ((t1 - t0) / 1e3) / 1e6);
    for (int k = 0; k < g; ++k) {
      std::vector<double> ends, rates;
      for (const auto& r : rec) {
        if (r.sm < static_cast<unsigned>(sms) && gpc_of[r.sm] == k) {
          ends.push_back((r.end - t0) / 1e3);
          rates.push_back(bytes_cta / ((r.end - r.start) / 1e3) / 1e3);  // GB/s
        }
      }
      if (ends.empty()) continue;
      std::sort(ends.begin(), ends.end());
      const double mean_end = std::accumulate(ends.begin(), ends.end(), 0.0) / ends.size();
      const double mean_rate = std::accumulate(rates.begin(), rates.end(), 0.0) / rates.size();
      std::printf(
          "  GPC %d (%zu SMs): end mean %.1f min %.1f max %.1f us; %.1f GB/s an SM, %.3f TB/s the GPC\n", k,
          members[k].size(), mean_end, ends.front(), ends.back(), mean_rate, mean_rate * ends.size() / 1e3);
    }
    int unknown = 0;
    for (const auto& r : rec) unknown += r.sm >= static_cast<unsigned>(sms) || gpc_of[r.sm] < 0;
    if (unknown) std::printf("  (%d CTAs on SMs of no known GPC)\n", unknown);
  }
  CHECK(cudaFree(buf));
  CHECK(cudaFree(d_rec));
  CHECK(cudaFree(d_sm));
  return 0;
}
