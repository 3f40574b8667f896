// The Hopper prefill kernel's argument, its configuration, the CTA's rows and the NaN rows of an
// offending sequence (kernel.cuh: the overview).
#pragma once

#include <cuda.h>  // CUtensorMap

#include <cmath>
#include <cstdint>

#include "cuda/attention/epilogue.cuh"
#include "cuda/attention/params.cuh"
#include "cuda/attention/schedule.cuh"
#include "cuda/common/dtype.cuh"
#include "cuda/common/sequence.cuh"
#include "cuda/prefill_sm90/config.hpp"
#include "cuda/prefill_sm90/fp8_lanes.hpp"

namespace kvattn::cuda::sm90 {

// The kernel's argument: the attention parameters, the grid's m-blocks of kBlockM rows, and flags.
enum PrefillFlags : uint32_t {
  kUnitMajor = 1,      // grid order: the m-blocks of a (sequence, kv head) together (else m-block major)
  kNoReaderFence = 2,  // A/B only: consumers skip fence.proxy.async after a stage's full barrier
  // Diagnostics (timing only, the output is wrong): the producer copies only the first kStages tiles
  // (then signals stale stages), or the consumers skip the score mods and the softmax.
  kDiagNoLoad = 4,
  kDiagNoSoftmax = 8,
  // K/V by TMA (k_map / v_map valid): paged caches of tma_pages_ok's page sizes, contiguous and packed
  // caches of at least a tile (tma_geometry).
  kTma = 16,
};
// Which stages the consumers fence (fence.proxy.async) after the full barrier, before wgmma reads them:
// those written by cp.async (generic proxy). The TMA producer writes through the async proxy except its
// edge tiles, at most a unit's first and last (produce_tma), so with kTma only those two.
enum ReaderFence : int { kFenceNone = 0, kFenceEdgeTiles = 1, kFenceEveryTile = 2 };
__host__ __device__ constexpr ReaderFence reader_fence(uint32_t flags) {
  return (flags & kNoReaderFence) ? kFenceNone : (flags & kTma) ? kFenceEdgeTiles : kFenceEveryTile;
}
// The rule for a CTA's (a unit's) n_tiles as one threshold, which the consumers test each tile (fences_tile):
// tile t is fenced when t - 1 >= fence_from as 32-bit unsigned numbers, so tile 0 always (t - 1 wraps), every
// tile from 0, the edge tiles from n_tiles - 2; kFenceNone (the A/B diagnostic) keeps tile 0's fence. Made
// where the tiles are counted: the mode's three tests, made from the kernel's flags, ptxas rebuilt every tile
// (~12 instructions of a d 64 tile's head).
__host__ __device__ constexpr uint32_t fence_from(ReaderFence fence, int64_t n_tiles) {
  return fence == kFenceEveryTile   ? 0u
         : fence == kFenceEdgeTiles ? static_cast<uint32_t>(n_tiles - 2)  // (n_tiles 1: tile 0 alone)
                                    : 0xffffffffu;
}
__host__ __device__ constexpr bool fences_tile(uint32_t fence_from, int64_t tile) {
  return static_cast<uint32_t>(tile) - 1u >= fence_from;
}
static_assert(fences_tile(fence_from(kFenceEdgeTiles, 5), 0) &&
                  fences_tile(fence_from(kFenceEdgeTiles, 5), 4) &&
                  !fences_tile(fence_from(kFenceEdgeTiles, 5), 1) &&
                  !fences_tile(fence_from(kFenceEdgeTiles, 5), 3),
              "edge tiles: the first and the last");
static_assert(fences_tile(fence_from(kFenceEdgeTiles, 1), 0) &&
                  fences_tile(fence_from(kFenceEveryTile, 9), 7) &&
                  !fences_tile(fence_from(kFenceNone, 9), 8),
              "one tile; every tile; none but tile 0");

// Tile `tile` of a unit whose first tile is the CTA's tile tile0 of the stage ring (the persistent kernel's
// units so far; 0 elsewhere): its stage and the parity of the stage's phase. In 32 bits: a unit's tiles
// number < 2^31 / kBlockN (int32 lengths) and tile0 < 2 kStages; a 64-bit division by kStages (3 at d 128)
// cost ~12 instructions a tile.
struct RingSlot {
  int stage;
  uint32_t parity;
};
template <class Cfg>
__host__ __device__ constexpr RingSlot ring_slot(int64_t tile, int64_t tile0) {
  const uint32_t t = static_cast<uint32_t>(tile) + static_cast<uint32_t>(Cfg::kPersistent ? tile0 : 0);
  return RingSlot{static_cast<int>(t % Cfg::kStages), (t / Cfg::kStages) & 1u};
}

struct PrefillArgs {
  AttnParams p;
  int32_t m_blocks;
  uint32_t flags;
  // The persistent kernel: its units' order, in this many sections of (sequence, kv head) pairs (unit_rows;
  // in the padding before k_map, so the other kernels' parameters keep their offsets).
  int32_t sections;
  // With kTma: the K and V caches as 4-D tensors (channel, slot in page, kv head, page) over the pages of
  // tma_geometry, box (64 channels, its box slots, 1, 1), 128B swizzle: one box is one 64-channel panel of
  // a page's rows (a contiguous cache's page is a cache row, a packed cache is one page).
  CUtensorMap k_map;  // (a 128-byte aligned type)
  CUtensorMap v_map;
};

template <typename T_, int kHeadDim_, bool kPingPong_, bool kVarlen_ = false, bool kPersistent_ = false,
          bool kSplit_ = false>
struct PrefillConfig {
  using T = T_;    // q and out
  using TKV = T_;  // the caches' elements (KvFp8: fp8 e4m3)
  using TM = T_;   // the tensor cores' operands (KvFp8: f16; KvFp8Mma: e4m3)
  static constexpr bool kKvFp8 = false;
  static constexpr bool kFp8Mma = false;
  static constexpr bool kFp8Tma = false;                           // (WithFp8Tma)
  static constexpr int kHeadDim = kHeadDim_;                       // d: q, k
  static constexpr int kHeadDimV = prefill_head_dim_v(kHeadDim_);  // dv: v, out (= d but at (192, 128))
  static constexpr bool kPingPong = kPingPong_;  // the consumers take turns on the tensor cores
  // q packed by cu_seqlens_q (its own kernel: the line's scan and the idle consumer in the kernel that
  // does not need them cost 2.6-5.4% of W3's single-chunk times on the H200, bench/NOTES.md): CTA x takes
  // position x of the varlen m-block line (attention/schedule.cuh); a CTA of <= 64 rows computes with
  // consumer 0 alone.
  static constexpr bool kVarlen = kVarlen_;
  // At most a CTA an SM, each taking the work units (the other kernel's CTAs) blockIdx.x, + gridDim.x, ...:
  // the next unit's set-up and loads overlap this one's compute (persistent.cuh). Not with kVarlen.
  static constexpr bool kPersistent = kPersistent_;
  static_assert(!(kVarlen && kPersistent), "the persistent kernel walks the max-length grid's units");
  // Static key splits (decode-like shapes: a CTA's rows against a share of the keys, blockIdx.y of
  // p.num_splits, partials for the split combine), and consumer 1 idle past the rows (64-row units: a
  // speculative decode's 64 packed rows). Fixed q only.
  static constexpr bool kSplit = kSplit_;
  static_assert(!(kSplit && (kVarlen || kPersistent)), "splits on the fixed-q grid");
  static constexpr PrefillTile kTile = prefill_tile(kHeadDim);
  static constexpr int kConsumers = kTile.consumers;  // warpgroups of 64 rows
  static constexpr int kBlockM = 64 * kConsumers;
  static constexpr int kBlockN = kTile.block_n;
  static constexpr int kStages = kTile.stages;
  // K and V of a stage on barriers of their own (config.hpp split_kv; (192, 128)): the consumers free K
  // after Q K^T and V after P V, the producer fills each as it is freed (v_bars_of).
  static constexpr bool kSplitKv = kTile.split_kv;
  static constexpr int kThreads = 128 * (kConsumers + 1);
  static constexpr int kPanels = kHeadDim / 64;           // 64-channel panels of a row of q / k
  static constexpr int kPanelsV = kHeadDimV / 64;         // of v
  static constexpr int kQPanelBytes = 64 * 128;           // one consumer's 64 rows of one panel
  static constexpr int kQBytes = kBlockM * kHeadDim * 2;  // (consumer, panel, 64 rows, 128 B)
  static constexpr int kKvPanelBytes = kBlockN * 128;     // kBlockN keys of one panel
  static constexpr int kKStageBytes = kBlockN * kHeadDim * 2;
  static constexpr int kVStageBytes = kBlockN * kHeadDimV * 2;
  static constexpr int kChunks = kHeadDim / 8;    // 16-byte chunks of a row of q / k
  static constexpr int kChunksV = kHeadDimV / 8;  // of v
  // A stage's barriers count warps, not threads (one arrival a warp by its lane 0: 4 + 8 a tile instead of
  // 128 + 256 arrivals on the same shared word): full, the producer warpgroup's 4 warps; empty, the
  // consumer warps.
  static constexpr int kFullArrivals = 4;
  static constexpr int kEmptyArrivals = 4 * kConsumers;
  // Named barriers (0 is __syncthreads): a consumer's own Q (kQBarrier + c, 128 threads), the ping-pong
  // turns (kTurnBarrier + c, 256: consumer c and the one before it), the producer warpgroup's (persistent).
  static constexpr int kQBarrier = 1;
  static constexpr int kTurnBarrier = kQBarrier + kConsumers;
  static constexpr int kProducerBarrier = kTurnBarrier + kConsumers;
  static_assert(kProducerBarrier < 16, "16 named barriers a CTA");
  static constexpr int kRegsProducer = kTile.regs_producer;
  static constexpr int kRegsConsumer = kTile.regs_consumer;
  static_assert(kHeadDim % 64 == 0 && kHeadDimV % 64 == 0, "whole 128-byte panels");
  static_assert(kBlockN % 16 == 0 && kBlockN <= 128, "a key row per producer thread");
  static_assert((kBlockN / 4) * kChunks % 32 == 0 && (kBlockN / 4) * kChunksV % 32 == 0,
                "whole warp copy steps");
  static_assert(prefill_smem_bytes(kHeadDim, kPersistent) ==
                    1024 + kQBytes + kStages * (kKStageBytes + kVStageBytes) + 16 * kStages +
                        (kPersistent ? kPrefillPersistentBytes : 0) + (kSplitKv ? 16 * kStages : 0) +
                        (kTile.mma_sums ? 16 + kOnesBlockBytes * kConsumers : 0),
                "the launcher's shared memory is the kernel's");
};

// fp8 e4m3 caches under 16-bit q: the kernel of Base (a PrefillConfig) with K and V converted to f16 in the
// stages by the cp.async producer (produce_fp8: the shared memory of the 16-bit kernel, each fp8 row landing
// where its f16 row goes), f16 wgmma, and bf16 Q rescaled to f16 by a power of two a warp in shared memory
// (consumer.cuh, q_to_f16; an f16 q is used as it is). The descales: k's (times q's) in the scores'
// factor, v's in the epilogue's 1 / l.
template <class Base>
struct KvFp8 : Base {
  using TKV = __nv_fp8_e4m3;
  using TM = half;
  static constexpr bool kKvFp8 = true;
  // Their own tile where it differs (config.hpp: d 192's 64 keys against the 16-bit kernel's 80), and what
  // the tile sizes; the rest of the layout is Base's.
  static constexpr PrefillTile kTile = prefill_tile(Base::kHeadDim, true);
  static constexpr int kBlockN = kTile.block_n;
  static constexpr int kStages = kTile.stages;
  static constexpr bool kSplitKv = kTile.split_kv;
  static_assert(!kSplitKv, "the fp8 producers fill joint stages");
  static constexpr int kKvPanelBytes = kBlockN * 128;
  static constexpr int kKStageBytes = kBlockN * Base::kHeadDim * 2;
  static constexpr int kVStageBytes = kBlockN * Base::kHeadDimV * 2;
  static_assert(kTile.consumers == Base::kConsumers && kTile.regs_producer == Base::kRegsProducer &&
                    kTile.regs_consumer == Base::kRegsConsumer,
                "an fp8 tile differs in its keys and stages only");
  static_assert(kBlockN % 16 == 0 && kBlockN <= 128, "a key row per producer thread");
  static_assert(prefill_smem_bytes(Base::kHeadDim, Base::kPersistent, true) ==
                    1024 + Base::kQBytes + kStages * (kKStageBytes + kVStageBytes) + 24 * kStages +
                        (Base::kPersistent ? kPrefillPersistentBytes : 0) +
                        (kTile.mma_sums ? 16 + kOnesBlockBytes * Base::kConsumers : 0),
                "the launcher's shared memory is the kernel's (with the fp8 stages' third mbarrier)");
};
// fp8 q over fp8 caches on e4m3 wgmma (k32): Q (fp8 q as it is: no rotary) and K as e4m3 in shared
// memory; the producer transposes each V tile into V^T beside it (the K-major B of O = P V, e4m3 has no
// transposed operand), its keys permuted within each 16 (pi: position 4t + m holds key 2t + {0, 1, 8, 9}[m],
// the order ldmatrix.trans yields) so that P leaves the S accumulators for the A registers in place; P is
// scaled by 2^8 into e4m3 (its small values stay normal; l sums the fp32 P) and O by 2^-8 at the end.
// d = dv = 128, 128-key tiles; not with rotary (launch.cuh).
template <class Base>
struct KvFp8Mma : KvFp8<Base> {
  using TM = __nv_fp8_e4m3;
  static constexpr bool kFp8Mma = true;
  static constexpr int kVtOffset = Base::kBlockN * Base::kHeadDimV;  // V^T after the landed V in its stage
  static constexpr int kPLog2 = 8;  // P x 2^8 into e4m3 (softmax_max's kLog2Scale)
  static_assert(Base::kHeadDim == 128 && Base::kHeadDimV == 128 && Base::kBlockN == 128,
                "the fp8 wgmma kernel: d = dv = 128, 128-key tiles, P in registers");
};

// fp8 caches with K / V by TMA (produce_fp8_tma; the fp8 kernels at head dims multiples of 128): a wrapper of
// its own, so that the cp.async-only fp8 kernels of the other head dims keep their code. C is a KvFp8 or
// KvFp8Mma config.
template <class C>
struct WithFp8Tma : C {
  static constexpr bool kFp8Tma = true;
  static_assert(C::kKvFp8 && C::kHeadDim % 128 == 0 && C::kHeadDimV % 128 == 0, "e4m3 boxes of 128 channels");
};

// Shared memory past the stages' empty barriers and the persistent kernel's ring (config.hpp
// prefill_smem_bytes): fp8's landed barriers (producer.cuh landed_bar_of), then split stages' V barriers.
template <class Cfg>
__host__ __device__ constexpr uint32_t past_ring_of(uint32_t empty_bar) {
  return empty_bar + 8 * Cfg::kStages +
         (Cfg::kPersistent ? static_cast<uint32_t>(kPrefillPersistentBytes) : 0u);
}
// A stage's V barriers (full, empty): with kSplitKv V's own, after everything else; else the joint stage's
// (K's) own, so that code written for split stages runs on joint ones unchanged.
struct VBars {
  uint32_t full, empty;
};
template <class Cfg>
__host__ __device__ constexpr VBars v_bars_of(uint32_t full_bar, uint32_t empty_bar) {
  if constexpr (Cfg::kSplitKv) {
    const uint32_t full = past_ring_of<Cfg>(empty_bar) + (Cfg::kFp8Tma ? 8 * Cfg::kStages : 0u);
    return {full, full + 8 * Cfg::kStages};
  }
  return {full_bar, empty_bar};
}
// Consumer c's ones block (PrefillTile::mma_sums), past fp8's landed and split stages' V barriers, from the
// next 16-byte boundary (config.hpp prefill_smem_bytes).
template <class Cfg>
__host__ __device__ constexpr uint32_t ones_block_of(uint32_t empty_bar, int consumer) {
  const uint32_t end = past_ring_of<Cfg>(empty_bar) + (Cfg::kKvFp8 ? 8 * Cfg::kStages : 0u) +
                       (Cfg::kSplitKv ? 16 * Cfg::kStages : 0u);
  return (end + 15u) / 16u * 16u + static_cast<uint32_t>(kOnesBlockBytes) * consumer;
}

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)

// The ScoreTile (attention/score_mod.cuh) of one consumer's (64, kN) wgmma accumulator tile: element e of
// s is the thread's row (e % 4) / 2 (warp rows lane / 4 and lane / 4 + 8), key column 8 (e / 4) +
// 2 (lane % 4) + e % 2.
template <int kN>
struct WgmmaScoreTile {
  float (&s)[kN / 2];
  const QueryRow (&rows)[2];
  int32_t kp0;  // kp of this thread's first column (the tile's first key + 2 (lane % 4))
  template <class F>
  __device__ __forceinline__ void for_each(F f) {
#pragma unroll
    for (int e = 0; e < kN / 2; ++e) f(s[e], rows[(e % 4) / 2], kp0 + 8 * (e / 4) + (e & 1));
  }
};

// Byte offset of 16-byte chunk c of row r in a tile of 64-channel panels, 128B swizzle (fp8_lanes.hpp).
__device__ __forceinline__ uint32_t swizzled(int r, int c, int panel_bytes) {
  return swizzle_offset(r, c, panel_bytes);
}

// The CTA's rows: sequence i (batch: none), kv head, first packed row.
struct CtaRows {
  int i, kv_head;
  int64_t m0;
};

// A unit's kBlockN-key tiles over keys [first, last]. With TMA (tma), keys.first first moves down to a
// multiple of tma_geometry's align (from slot 0), so that each of produce_tma's boxes lies in one page.
template <class Cfg>
__device__ __forceinline__ int64_t unit_tiles(const SeqParams& sp, const Sequence& seq, bool tma,
                                              KeyRange& keys) {
  if (tma && keys.last >= keys.first) {
    const bool packed = sp.cu_seqlens_k != nullptr;
    const int align =
        tma_geometry(packed, sp.page_table != nullptr && !packed, sp.num_pages, sp.page_size, Cfg::kBlockN)
            .align;
    keys.first -= (seq.leftpad + keys.first) % align;
  }
  return keys.last >= keys.first ? (keys.last - keys.first + Cfg::kBlockN) / Cfg::kBlockN : 0;
}

// A split kernel's CTA (PrefillConfig::kSplit) as the epilogue's piece: static split blockIdx.y of
// p.num_splits (1: the whole unit, written to out).
__device__ __forceinline__ Piece split_piece(const CtaRows& c) {
  return {c.i, c.kv_head, c.m0, static_cast<int>(blockIdx.y), 0, 0, -1, -1};
}

template <class Cfg>
__device__ __forceinline__ CtaRows cta_rows(const PrefillArgs& a) {
  const AttnParams& p = a.p;
  if constexpr (Cfg::kVarlen) {
    const LineBlock b = varlen_line_block<Cfg::kThreads>(p, Cfg::kBlockM);
    return {b.i, b.kv_head, b.m0};
  }
  const int units = p.seq.batch * p.num_kv_heads;
  int m_block, u;
  if (a.flags & kUnitMajor) {
    // The m-blocks of one (sequence, kv head) back to back, last (causal: the most keys) first: the CTAs
    // in flight share their K/V in L2, and the short causal blocks fill the end.
    u = static_cast<int>(blockIdx.x / a.m_blocks);
    m_block = a.m_blocks - 1 - static_cast<int>(blockIdx.x % a.m_blocks);
  } else {
    // Longest first across the grid: every (sequence, kv head) of an m-block together.
    m_block = a.m_blocks - 1 - static_cast<int>(blockIdx.x / units);
    u = static_cast<int>(blockIdx.x % units);
  }
  return {u / p.num_kv_heads, u % p.num_kv_heads, static_cast<int64_t>(m_block) * Cfg::kBlockM};
}

// The rows of the persistent kernel's work unit x (x < m_blocks x batch x kv heads), longest first within
// each of a.sections sections of consecutive (sequence, kv head) pairs u (sizes differing by at most one):
// a section's units m-block-major, last (causal: the most keys) first, so that the units claimed last
// (persistent.cuh: a tile counter) are the shortest and the CTAs end together; sections small enough that
// their K/V stay in L2 while their m-blocks run (the launcher). One section: longest first over the grid;
// as many as pairs: cta_rows' unit-major order.
template <class Cfg>
__device__ __forceinline__ CtaRows unit_rows(const PrefillArgs& a, unsigned x) {
  const AttnParams& p = a.p;
  const unsigned units = static_cast<unsigned>(p.seq.batch * p.num_kv_heads), mb = a.m_blocks;
  const unsigned sections = static_cast<unsigned>(a.sections);
  const unsigned q = units / sections, big = units % sections;  // big sections of q + 1 pairs, then q
  const unsigned big_x = big * (q + 1) * mb;
  unsigned size, u0, r;
  if (x < big_x) {
    size = q + 1;
    u0 = x / (size * mb) * size;
    r = x % (size * mb);
  } else {
    size = q;
    u0 = big * (q + 1) + (x - big_x) / (size * mb) * size;
    r = (x - big_x) % (size * mb);
  }
  const int m_block = static_cast<int>(mb - 1 - r / size), u = static_cast<int>(u0 + r % size);
  return {u / p.num_kv_heads, u % p.num_kv_heads, static_cast<int64_t>(m_block) * Cfg::kBlockM};
}

// An offending sequence: NaN in out (and lse) for the CTA's rows, all threads; kConsumer: the 64 rows from
// c.m0 by one consumer warpgroup (the persistent kernel).
template <class Cfg, bool kConsumer = false>
__device__ void write_nan_rows(const AttnParams& p, const CtaRows& c, const Sequence& seq) {
  using T = typename Cfg::T;
  constexpr int kRows = kConsumer ? 64 : Cfg::kBlockM, kThreads = kConsumer ? 128 : Cfg::kThreads;
  const int64_t rows = static_cast<int64_t>(seq.q_len) * p.group;
  int first = threadIdx.x;
  if constexpr (kConsumer) first %= 128;
  for (int idx = first; idx < kRows * p.head_dim_v; idx += kThreads) {
    const int64_t r = c.m0 + idx / p.head_dim_v;
    const int ch = idx % p.head_dim_v;
    if (r >= rows) continue;
    const int64_t t = r / p.group;
    const int h = c.kv_head * p.group + static_cast<int>(r % p.group);
    out_row<T>(p, seq, c.i, t, h)[ch] = from_float<T>(NAN);
    if (ch == 0 && p.lse) *lse_at(p, seq, c.i, t, h) = NAN;
  }
}

#endif  // sm_90a

}  // namespace kvattn::cuda::sm90
