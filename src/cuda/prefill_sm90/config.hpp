// Tile shape of the sm_90a prefill kernel per head dim, shared by the host launcher and the kernel.
#pragma once

#include <cstddef>
#include <cstdint>

#include "api/problem.hpp"

namespace kvattn::cuda::sm90 {

struct PrefillTile {
  int consumers;  // warpgroups of 64 query rows (the CTA has one more: the producer)
  int block_n;    // keys a stage
  int stages;
  int regs_producer;  // setmaxnreg budgets: within what the launch gave the CTA (prefill_regs_fit)
  int regs_consumer;
  // K and V of a stage on barriers of their own (full and empty each), so that a consumer frees K as soon
  // as its Q K^T is done instead of with V after P V (cta.cuh kSplitKv).
  bool split_kv = false;
  // Paged caches whose page size neither divides block_n nor is a multiple of it take TMA boxes of gcd(page,
  // block_n) slots where that is 16 or more (tma_pages_ok). d 256's 80-key tile only: there pages 32-256
  // had no TMA, and boxes of 16 run 3-8% faster than its cp.async producer (H100, session 54); at 128-key
  // tiles pages 48 / 96 by boxes of 16 / 32 measured level to 5% slower than d 128's cp.async producer.
  bool gcd_boxes = false;
  // The rows' sums of P on the tensor cores (consumer.cuh kMmaSums): P V's k-steps also multiply P by a
  // block of ones (m64n8k16), so the softmax adds no sum (64 FADD a thread a 128-key tile) and l is the
  // sum of the P that V is weighted by; a 512-byte ones block a consumer past everything else. d 64 only,
  // where a tile's issue slots tie with its MUFU and tensor time: W6 32x64 full -9%, causal -6% (H100,
  // session 55); on d 128's tile, nearer the tensor cores' bound, +2.5 to +3% full (branch mmasum128).
  bool mma_sums = false;
};

// Per head dim (d = dv):
// - d = 64: three 64-row consumer warpgroups (a 192-row CTA) on 128-key tiles, four 32 KiB stages, P V's P
//   in registers (153 KiB with Q; FA4's Hopper tile at d 64: 192 x 128, P in registers). A tile is half the
//   FLOPs of d = 128 for the same softmax, and one consumer's iteration is latency-bound (H200 timeline, two
//   consumers: 3,020 clocks a tile, softmax 1,460 of them, the tensor cores busy ~45%): a third consumer
//   adds 50% more rows a tile with room left on the tensor cores. P from shared memory instead (a 16 KiB
//   buffer a consumer, 201 KiB: sessions 20-38) costs shared-memory bandwidth that d 64 does not have: P V is
//   m64n64k16 there, and with both operands in shared memory a k-step reads 4 KiB in its 32 tensor clocks,
//   all of the 128 bytes a clock an SM reads; a 192 x 128 tile moves ~248 KiB through shared memory (Q K^T
//   72, P V 96, P's stores 48, the landed K / V 32: ~1,940 clocks against the tensor cores' 1,536), with P in
//   registers ~152 KiB (~1,190). 512 threads: consumers at 160 registers (S 64 + O 32 + P 32: the tile loop's
//   rarely used values leave the registers, consumer.cuh kLeanTileLoop), the producer at 32 (32 + 3 x 160
//   = 4 x 128).
// Two 64-row consumer warpgroups (a 128-row CTA) at d 128 and 256:
// - d = 128: a 128 x 128 S and O per CTA, 64 fp32 accumulators each a consumer thread (plus S of the next
//   tile and P of the previous one while they overlap), three 64 KiB K/V stages (225 KiB of shared memory
//   with Q: the most that fits in 227 KiB).
// - d = 256: O alone is 128 accumulators a thread, and Q takes 64 KiB: 80-key tiles (S 40, P 20 registers;
//   FA3's Hopper tile there) in two stages of K and two of V on barriers of their own (split_kv: (192, 128)
//   has the reasoning), 225 KiB with Q and the persistent kernel's ring. Until session 53: 48-key tiles in
//   three joint 48 KiB stages (209 KiB with Q; a consumer holds K of tile t and V of t - 1, so joint stages
//   need three for a tile of slack, and 48 keys is what three fit); the price was Q K^T's rereads of Q (2
//   KiB a 16-channel k-step whatever the key count: 48 keys read 17% more shared memory per FLOP than 64,
//   80 keys 40% less than 48) and each tile's fixed softmax and barrier work over fewer keys. fp8 caches
//   keep the 48-key tile. Consumers at 232 registers, the producer at 40 (40 + 2 x 232 = 3 x 168: what the
//   384-thread launch holds); at 80 keys ptxas spills ~30 local loads and stores into the tile loop.
// - (d, dv) = (192, 128) (DeepSeek's prefill, the one pair with dv != d): 128-key tiles in two stages of K
//   (48 KiB) and two of V (32 KiB), each on barriers of its own (split_kv), 208 KiB with the 48-KiB Q of 128
//   rows. A consumer holds K of tile t only during its Q K^T and V of t - 1 during its P V, so the producer
//   loads K of t + 2 once Q K^T of t is done and V of t + 1 once P V of t - 1 is: one and a half tiles of
//   slack, what three joint stages gave (a joint stage waits for its P V: two joint stages of 128 keys
//   would leave half a tile). FA4's Hopper tile there: 128 keys, K and V in pipelines of two stages each.
//   Until session 50: 80-key tiles in three joint stages (session 38: 80 spread each tile's fixed softmax and
//   barrier work over 25% more keys than 64, which ran 545 TFLOP/s on the H200), 1.31x FA4's time at equal
//   clocks on W6 full (session 48), 664 instructions a 128 keys against FA4's 453 (SASS, session 49). S 64
//   and O 64 accumulators a thread: d 128's register budgets. fp8 caches (kv_fp8) keep 64 keys in four joint
//   stages: produce_fp8 copies whole warp steps of an fp8 row's 12 chunks.
constexpr PrefillTile prefill_tile(int head_dim, bool kv_fp8 = false) {
  return head_dim <= 64    ? PrefillTile{3, 128, 4, 32, 160, false, false, true}
         : head_dim <= 128 ? PrefillTile{2, 128, 3, 56, 224}
         : head_dim == 192
             ? (kv_fp8 ? PrefillTile{2, 64, 4, 56, 224} : PrefillTile{2, 128, 2, 56, 224, true})
             : (kv_fp8 ? PrefillTile{2, 48, 3, 40, 232} : PrefillTile{2, 80, 2, 40, 232, true, true});
}
// The value head dim of the kernel of head dim d: d, except 128 at d = 192 (the kernels take d = dv, and
// (192, 128)).
constexpr int prefill_head_dim_v(int head_dim) {
  return head_dim == 192 ? 128 : head_dim;
}

// setmaxnreg moves registers between the warpgroups within the CTA's launch allocation: 65536 / threads
// a thread, rounded down to a multiple of 8 (168 for 384 threads, 128 for 512). A budget above it makes the
// consumers' setmaxnreg.inc wait forever (a hang, not an error: 32 / 240 on branch kv176, session 20).
constexpr bool prefill_regs_fit(const PrefillTile& t) {
  const int threads = 128 * (t.consumers + 1);
  const int per_thread = 65536 / threads / 8 * 8;
  return t.regs_producer % 8 == 0 && t.regs_consumer % 8 == 0 && t.regs_producer >= 24 &&
         t.regs_consumer <= 256 &&
         t.regs_producer + t.consumers * t.regs_consumer <= per_thread * (t.consumers + 1);
}
static_assert(prefill_regs_fit(prefill_tile(64)) && prefill_regs_fit(prefill_tile(128)) &&
                  prefill_regs_fit(prefill_tile(192)) && prefill_regs_fit(prefill_tile(192, true)) &&
                  prefill_regs_fit(prefill_tile(256)),
              "register budgets within the launch's allocation");
static_assert(!prefill_regs_fit(PrefillTile{2, 176, 2, 32, 240}), "the budget that hung");

// The persistent kernel's unit descriptor (persistent.cuh, PrefillUnit): one slot of its ring of two.
constexpr size_t kPrefillUnitBytes = 192;
// What the persistent kernel adds: the unit ring's four mbarriers, its two slots, the producer's claimed
// unit (16 bytes).
constexpr size_t kPrefillPersistentBytes = 32 + 2 * kPrefillUnitBytes + 16;

// A consumer's ones block (mma_sums): B of the sums' m64n8k16, K-major without swizzle (two 8 x 8 core
// matrices 128 bytes apart; 512 bytes cover either reading of the offsets).
constexpr size_t kOnesBlockBytes = 512;

// Dynamic shared memory: 1024 bytes of alignment slack, Q, the K and V stages, two mbarriers a stage (four
// with split_kv: V's two, after everything else), the persistent kernel's ring, and with mma_sums the
// consumers' ones blocks from the next 16-byte boundary (ones_block_of). (No second Q buffer: at
// d 128 and 256 it does not fit in 227 KiB beside the stages; the persistent kernel rewrites Q under the last
// tile's P V instead.)
// (fp8 caches: their tile (prefill_tile), and a third mbarrier a stage, the producer's "landed", for K / V
// by TMA: produce_fp8_tma; the cp.async fp8 kernels leave it unused.)
constexpr size_t prefill_smem_bytes(int head_dim, bool persistent = false, bool kv_fp8 = false) {
  const PrefillTile t = prefill_tile(head_dim, kv_fp8);
  return 1024 + size_t(64) * t.consumers * head_dim * 2 +
         size_t(t.stages) * t.block_n * (head_dim + prefill_head_dim_v(head_dim)) * 2 +
         16 * size_t(t.stages) + (persistent ? kPrefillPersistentBytes : 0) +
         (kv_fp8 ? 8 * size_t(t.stages) : 0) + (t.split_kv ? 16 * size_t(t.stages) : 0) +
         (t.mma_sums ? 16 + kOnesBlockBytes * t.consumers : 0);
}
static_assert(prefill_smem_bytes(64, true, true) <= 227 * 1024 &&
                  prefill_smem_bytes(128, true, true) <= 227 * 1024 &&
                  prefill_smem_bytes(192, true) <= 227 * 1024 &&
                  prefill_smem_bytes(192, true, true) <= 227 * 1024 &&
                  prefill_smem_bytes(256, true, true) <= 227 * 1024 &&
                  prefill_smem_bytes(256, true) <= 227 * 1024,
              "the opt-in shared memory of a CTA on sm_90");

// The TMA producer's view of a KV cache (kernel.cuh produce_tma, launch.cuh make_kv_maps): every layout as
// pages of `slots` slots in a 4-D tensor map (channel, slot in page, kv head, page), the pages and slots of
// slot_address_at (common/sequence.cuh): a paged cache's pages; a contiguous cache's rows (one page a row,
// page size = the row's capacity); a packed cache's total_k token rows as one page. A tile of block_n keys
// is block_n / box boxes of `box` slots each, tiles starting at a multiple of `align` slots. Paged: box =
// align = gcd(page size, block_n), which divides both, so a tile is whole boxes and no box crosses a page
// (the launcher's page sizes: tma_pages_ok). Contiguous and packed: one box of block_n slots at any slot
// (align 1); a box reaching past the page's end is filled with zeros by the TMA unit.
struct TmaGeometry {
  int64_t slots;  // slots a page (the map's dim 1)
  int64_t pages;  // the map's dim 3
  int box;        // slots a box copy
  int align;      // tiles start at a multiple of this many slots
};
constexpr TmaGeometry tma_geometry(bool packed, bool paged, int64_t num_pages, int64_t page_size,
                                   int block_n) {
  if (packed) return {num_pages, 1, block_n, 1};
  if (!paged) return {page_size, num_pages, block_n, 1};
  // (Euclid's gcd: std::gcd is not constexpr under C++17)
  int64_t a = page_size, b = block_n;
  while (b != 0) {
    const int64_t r = a % b;
    a = b;
    b = r;
  }
  return {page_size, num_pages, static_cast<int>(a), static_cast<int>(a)};
}
// Paged caches the TMA producer takes: page sizes that are multiples of 8 (16-byte rows of the box's slot dim
// start aligned) that divide the key tile (a box a page, as few as 8 slots) or are multiples of it, and, for
// a tile with gcd_boxes, any that shares 16 slots or more with it (a TMA instruction issues in ~85 clocks
// whatever its size: smaller shared boxes stay on cp.async).
constexpr bool tma_pages_ok(int64_t page_size, int block_n, bool gcd_boxes) {
  if (page_size <= 0 || page_size % 8 != 0) return false;
  if (block_n % page_size == 0 || page_size % block_n == 0) return true;
  return gcd_boxes && tma_geometry(false, true, 1, page_size, block_n).box >= 16;
}
// Pages of 16 under 128-key tiles: 8 boxes a tile, tiles on page boundaries; pages of 256: a box a tile.
static_assert(tma_geometry(false, true, 100, 16, 128).box == 16 &&
              tma_geometry(false, true, 100, 16, 128).align == 16);
static_assert(tma_geometry(false, true, 100, 256, 128).box == 128 &&
              tma_geometry(false, true, 100, 256, 128).align == 128);
// Pages of 48 under 80-key tiles: boxes of 16, tiles at multiples of 16; pages of 256 there: the same.
static_assert(tma_geometry(false, true, 100, 48, 80).box == 16 &&
              tma_geometry(false, true, 100, 256, 80).box == 16);
static_assert(tma_pages_ok(8, 128, false) && tma_pages_ok(256, 128, false) && !tma_pages_ok(48, 128, false) &&
              tma_pages_ok(48, 128, true) && tma_pages_ok(32, 80, true) && tma_pages_ok(256, 80, true) &&
              tma_pages_ok(40, 80, false) && !tma_pages_ok(32, 80, false) && !tma_pages_ok(24, 80, true) &&
              !tma_pages_ok(12, 48, true) && !tma_pages_ok(1, 128, true));
// A contiguous cache of 4 rows x 1000 slots: 4 pages of 1000; packed 4097 tokens: one page of 4097.
static_assert(tma_geometry(false, false, 4, 1000, 128).slots == 1000 &&
              tma_geometry(false, false, 4, 1000, 128).pages == 4 &&
              tma_geometry(false, false, 4, 1000, 128).box == 128 &&
              tma_geometry(false, false, 4, 1000, 128).align == 1);
static_assert(tma_geometry(true, false, 4097, 0, 48).slots == 4097 &&
              tma_geometry(true, false, 4097, 0, 48).pages == 1 &&
              tma_geometry(true, false, 4097, 0, 48).box == 48 &&
              tma_geometry(true, false, 4097, 0, 48).align == 1);

// The compiled kernels: (dtype, head dim) pairs, minus what a developer build leaves out
// (KVATTN_DEV_DTYPE, KVATTN_DEV_HEAD_DIM), and none without a 90a target in KVATTN_CUDA_ARCHS.
constexpr bool prefill_built(DType dt, int head_dim) {
#if !defined(KVATTN_HAVE_SM90A)
  return false && dt == dt && head_dim == head_dim;
#else
#if defined(KVATTN_DEV_DTYPE_f16)
  if (dt != DType::f16) return false;
#elif defined(KVATTN_DEV_DTYPE_bf16)
  if (dt != DType::bf16) return false;
#endif
#if defined(KVATTN_DEV_HEAD_DIM)
  if (head_dim != KVATTN_DEV_HEAD_DIM) return false;
#endif
  return (dt == DType::f16 || dt == DType::bf16) &&
         (head_dim == 64 || head_dim == 128 || head_dim == 192 || head_dim == 256);
#endif
}

}  // namespace kvattn::cuda::sm90
