// The sm_90 synchronization and copy instructions of the Hopper decode kernel, as inline PTX: mbarriers
// (arrive, expect-tx, parity wait), the 16-byte cp.async copies and their arrival on one, the named
// barrier of the consumer warps, the TMA tensor copy, and the cluster form's (mapa, st.async onto a remote
// mbarrier, the split cluster barrier, a cluster-scope wait). Compiled for sm_90 and newer only (the callers
// guard them).
#pragma once

#include <cstdint>

#include "cuda/common/fp8.cuh"
#include "cuda/common/mma.cuh"
#include "cuda/common/sequence.cuh"

namespace kvattn::cuda::sm90 {

__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}

// The inits visible to the other threads and to the copy engine (async proxy) before the first use.
__device__ __forceinline__ void mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}

// One arrival that also announces `bytes` of bulk copies completing on this phase.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
}

// Waits until the phase of parity `parity` has completed (a fresh barrier counts the phase before its
// first as complete, so waiting on parity 1 of a new barrier returns at once).
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  const uint32_t addr = smem_addr(bar);
  uint32_t done;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, "
        "p;\n}\n"
        : "=r"(done)
        : "r"(addr), "r"(parity)
        : "memory");
  } while (!done);
}

// The cluster form's push merge (cluster.cuh). The address of this CTA's shared `addr` in the copy of CTA
// `rank` of the cluster (a shared::cluster address).
__device__ __forceinline__ uint32_t cluster_smem_addr(uint32_t addr, uint32_t rank) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(addr), "r"(rank));
  return remote;
}
// 16 / 8 / 4 bytes into another CTA's shared memory (shared::cluster addresses), completing as bytes on
// that CTA's mbarrier `bar`: the sender never waits for a round trip.
__device__ __forceinline__ void st_async_v4(uint32_t addr, float4 v, uint32_t bar) {
  asm volatile(
      "st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, [%5];" ::"r"(
          addr),
      "r"(__float_as_uint(v.x)), "r"(__float_as_uint(v.y)), "r"(__float_as_uint(v.z)),
      "r"(__float_as_uint(v.w)), "r"(bar)
      : "memory");
}
__device__ __forceinline__ void st_async_v2(uint32_t addr, float a, float b, uint32_t bar) {
  asm volatile(
      "st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.b32 [%0], {%1, %2}, [%3];" ::"r"(addr),
      "r"(__float_as_uint(a)), "r"(__float_as_uint(b)), "r"(bar)
      : "memory");
}
__device__ __forceinline__ void st_async_b32(uint32_t addr, uint32_t v, uint32_t bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(addr),
               "r"(v), "r"(bar)
               : "memory");
}
// The cluster barrier in two halves: arrive (this thread's earlier accesses released to the cluster), and
// later wait (every thread of every CTA of the cluster arrived; acquire).
__device__ __forceinline__ void cluster_arrive() {
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() {
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}
// mbar_wait at cluster scope: the bytes other CTAs stored on `bar` are visible once it returns.
__device__ __forceinline__ void mbar_wait_cluster(uint64_t* bar, uint32_t parity) {
  const uint32_t addr = smem_addr(bar);
  uint32_t done;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n "
        "selp.u32 "
        "%0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(addr), "r"(parity)
        : "memory");
  } while (!done);
}

// 16 bytes global -> shared by cp.async through L1 (.ca). The L2-only form below (.cg) makes the SMs ask
// the L2 for half as many sectors again as they receive (H200, ncu: 402.8 M sector requests for 268.5 M
// read from HBM), so the L2's throughput, not HBM, capped the stream at ~4.15 TB/s; .ca asks once
// (bench/NOTES.md, session 13: 4.50 TB/s without the consumers' math).
__device__ __forceinline__ void cp_async_16_l1(uint32_t dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
}

// 16 bytes global -> shared (cp.async, L2 only), with an L2 eviction policy.
__device__ __forceinline__ void cp_async_16_hint(uint32_t dst, const void* src, uint64_t policy) {
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;" ::"r"(dst), "l"(src),
               "l"(policy)
               : "memory");
}

// One arrival on `bar` once every cp.async this thread issued so far has landed (the barrier's count
// includes it: .noinc).
__device__ __forceinline__ void cp_async_mbar_arrive(uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(smem_addr(bar)) : "memory");
}

// TMA: the box of a 4-D tensor map at coordinates (c0 innermost .. c3) into shared memory at dst, with an
// L2 eviction policy; the mbarrier's transaction count drops by the box's bytes when they have landed.
// `map`: the generic address of a __grid_constant__ CUtensorMap.
__device__ __forceinline__ void tma_load_4d_hint(uint32_t dst, const void* map, uint64_t* bar, int c0, int c1,
                                                 int c2, int c3, uint64_t policy) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1, "
      "{%3, %4, %5, %6}], [%2], %7;" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "r"(c2), "r"(c3),
      "l"(policy)
      : "memory");
}
__device__ __forceinline__ void tma_prefetch_map(const void* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

__device__ __forceinline__ uint64_t evict_first_policy() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}

// Barrier 1 of the consumer warps (the producer never joins): a plain sync, and a sync that ORs a flag.
template <int kThreads>
__device__ __forceinline__ void consumers_sync() {
  asm volatile("bar.sync 1, %0;" ::"n"(kThreads) : "memory");
}
template <int kThreads>
__device__ __forceinline__ bool consumers_or(bool flag) {
  return LeadingThreads<1, kThreads>::any(
      flag);  // the consumer warps are the CTA's first (common/sequence.cuh)
}

}  // namespace kvattn::cuda::sm90
