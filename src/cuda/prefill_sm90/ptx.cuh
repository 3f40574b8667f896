// The Hopper (sm_90a) instructions of the prefill kernel as thin inline-PTX wrappers: mbarriers, the
// wgmma fence / commit / wait, shared-memory matrix descriptors, register reallocation, the async-proxy
// fence and named barriers. Compiled only in the sm_90a pass (the callers are guarded the same way).
#pragma once

#include <cstdint>

namespace kvattn::cuda::sm90 {

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)

// ---- mbarrier (shared::cta, 64-bit), addressed by its shared-window address

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.shared::cta.b64 state, [%0];\n}\n" ::"r"(bar)
               : "memory");
}
// Waits until the phase with this parity has completed. A fresh barrier counts its (nonexistent) phase
// before phase 0 as complete, so waiting on parity 1 first returns at once: a producer waits on
// (use / stages + 1) & 1 for "slot free", a consumer on (use / stages) & 1 for "slot full".
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

// Holds the barrier's current phase open until every cp.async this thread issued before has landed (the
// pending count is raised now and lowered when they land: no arrival of its own, and no wait by the
// copying thread).
__device__ __forceinline__ void cp_async_hold(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
// The calling warp's one arrival (lane 0) on a barrier that counts warps: every lane is past what the
// arrival stands for (a warp-wide wait, or warp_arrive_after_copies' __syncwarp).
__device__ __forceinline__ void warp_arrive(uint32_t bar) {
  if (threadIdx.x % 32 == 0) mbar_arrive(bar);
}
// warp_arrive for a whole warp (every lane calls it): one lane chosen by elect.sync, with no lane number
// (threadIdx.x) to read again each tile (the consumers' tile loop: S2R, LOP3, VOTEU and a uniform address
// a tile, session 57).
__device__ __forceinline__ void warp_arrive_elected(uint32_t bar) {
  asm volatile(
      "{\n.reg .pred leader;\n"
      "elect.sync _|leader, 0xffffffff;\n"
      "@leader mbarrier.arrive.shared::cta.b64 _, [%0];\n}\n" ::"r"(bar)
      : "memory");
}
// The warp's share of a "full" barrier that counts warps: complete once every lane's cp.async copies so far
// have landed.
__device__ __forceinline__ void warp_arrive_after_copies(uint32_t bar) {
  cp_async_hold(bar);
  __syncwarp();
  warp_arrive(bar);
}

// Plain arrival plus the bytes the phase must also wait for (the TMA copies issued after it).
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}

// TMA: the box of a 4-D tensor map at coordinates (c0 innermost .. c3) into shared memory at dst; the
// barrier's transaction count drops by the box's bytes when they have landed. `map` is the generic address
// of a __grid_constant__ CUtensorMap.
__device__ __forceinline__ void tma_load_4d(uint32_t dst, uint64_t map, uint32_t bar, int c0, int c1, int c2,
                                            int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, "
      "%6}], [%2];\n" ::"r"(dst),
      "l"(map), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}
__device__ __forceinline__ void tma_prefetch_map(uint64_t map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(map) : "memory");
}

// An L2 prefetch of the 128-byte line holding a global address: a per-thread instruction, no shared memory,
// nothing to wait for. (cp.async.bulk.prefetch.L2 takes a warp-uniform address: with a row a lane ptxas
// loops over the warp's distinct rows.)
__device__ __forceinline__ void prefetch_l2_line(const void* src) {
  asm volatile("prefetch.global.L2 [%0];\n" ::"l"(src) : "memory");
}

__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.wait_all;\n" ::: "memory");
}

// ---- wgmma ordering

// Before the first wgmma of a group: orders this warpgroup's register writes (accumulators, A fragments)
// before the asynchronous reads.
__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// Keeps the compiler from moving accesses of an accumulator register across the wgmma issue / wait.
template <int N>
__device__ __forceinline__ void fence_registers(float (&r)[N]) {
#pragma unroll
  for (int k = 0; k < N; ++k) asm volatile("" : "+f"(r[k])::"memory");
}

__device__ __forceinline__ void fence_registers(uint32_t& r) {
  asm volatile("" : "+r"(r)::"memory");
}

// ---- shared-memory matrix descriptors, 128-byte swizzle
//
// Every tile lives in "panels" of 64 16-bit channels: row r of a panel is 128 bytes at panel + 128 r, its
// 16-byte chunk c stored at chunk position c ^ (r % 8) (the hardware's 128B swizzle; panels 1024-byte
// aligned). Bits: start address >> 4 [0, 14), leading byte offset >> 4 [16, 30), stride byte offset >> 4
// [32, 46), swizzle mode [62, 64) = 1 (128B).
__device__ __forceinline__ uint64_t smem_desc(uint32_t addr, uint32_t leading, uint32_t stride) {
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) | (static_cast<uint64_t>(leading >> 4) << 16) |
         (static_cast<uint64_t>(stride >> 4) << 32) | (uint64_t{1} << 62);
}
// K-major operand (Q as A, K as B): 8-row groups 1024 bytes apart; the leading offset is unused (a 16-
// channel k-step stays inside one 128-byte row: step the start address by 32 bytes).
__device__ __forceinline__ uint64_t desc_k_major(uint32_t addr) {
  return smem_desc(addr, 16, 1024);
}
// MN-major operand (V as B of P V, keys along K): 8-key groups 1024 bytes apart (stride), 64-channel
// panels `panel_bytes` apart (leading); a 16-key k-step is 2048 bytes.
__device__ __forceinline__ uint64_t desc_mn_major(uint32_t addr, uint32_t panel_bytes) {
  return smem_desc(addr, panel_bytes, 1024);
}

// A block of ones as B of the rows' sums (m64n8k16, K-major, no swizzle: 8 x 8 core matrices, the two of a
// k-step 128 bytes apart (leading), 8-row groups 256 apart (stride; one group at N = 8)): what it reads
// lies in its first 512 bytes, all ones, whichever offset the hardware takes for which.
__device__ __forceinline__ uint64_t desc_ones(uint32_t addr) {
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) | (uint64_t{128 >> 4} << 16) |
         (uint64_t{256 >> 4} << 32);
}

// A descriptor made once, moved by byte offsets: the start address field is the low word's bits [0, 14)
// and every operand lies below 256 KB of shared memory, so a 16-byte multiple added to the low word never
// carries out of it. One add a wgmma instead of smem_desc's mask, shift and or (the consumers issue their
// wgmma groups in turns: the issue's instructions are on the tensor cores' critical path, NOTES.md).
struct SmemDesc {
  uint32_t lo, hi;
  __device__ __forceinline__ explicit SmemDesc(uint64_t d)
      : lo(static_cast<uint32_t>(d)), hi(static_cast<uint32_t>(d >> 32)) {}
  // The descriptor of the operand `bytes` (a multiple of 16) past this one's start.
  __device__ __forceinline__ uint64_t at(uint32_t bytes) const {
    return (static_cast<uint64_t>(hi) << 32) | (lo + (bytes >> 4));
  }
};

// ---- misc

// A 32-bit store to shared memory at a shared-window address.
__device__ __forceinline__ void st_shared_b32(uint32_t addr, uint32_t v) {
  asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}
// Four 8x8 b16 matrices from registers in the mma fragment layout (lane l holds row l / 4, columns 2 (l % 4)
// and 2 (l % 4) + 1 of each, as ldmatrix without .trans gives them); lane l supplies the row address of row
// (l % 8) of matrix (l / 8). sm_90.
__device__ __forceinline__ void stmatrix_x4(uint32_t addr, const uint32_t (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r[0]),
               "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
}
// x, as a value the compiler cannot see through: what is computed from it inside a loop stays inside.
__device__ __forceinline__ int opaque(int x) {
  int y;
  asm volatile("mov.b32 %0, %1;\n" : "=r"(y) : "r"(x));
  return y;
}
__device__ __forceinline__ void st_shared_v4(uint32_t addr, const uint4& v) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(v.x), "r"(v.y), "r"(v.z),
               "r"(v.w)
               : "memory");
}
__device__ __forceinline__ uint4 ld_shared_v4(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(addr)
               : "memory");
  return v;
}
// Orders this thread's generic-proxy shared-memory writes (st.shared, cp.async results it has waited for)
// before later async-proxy reads (wgmma operands).
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
template <int kRegs>
__device__ __forceinline__ void regs_dealloc() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void regs_alloc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

#endif  // sm_90a

}  // namespace kvattn::cuda::sm90
