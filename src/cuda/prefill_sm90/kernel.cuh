// The Hopper (sm_90a) prefill kernel: wgmma on a warp-specialized CTA.
//
// One CTA computes kBlockM = 128 packed query rows (GQA rows packed as in the portable kernel: packed row r
// is token r / g of query head kv_head * g + r % g) of one (sequence, kv head) against every key they can
// see, without splits (prefill shapes fill the machine with m-blocks). Three warpgroups:
//   producer (warpgroup 0, few registers): gathers each K/V tile of kBlockN keys through the page table
//     with 16-byte cp.async, one row pointer per key (any page size, paged / contiguous / packed caches,
//     cache_batch_idx, leftpad: the addressing rule of common/sequence.cuh), into a ring of kStages shared
//     stages in the wgmma 128B-swizzled layout; slots outside [leftpad, end) are zero-filled. Each stage
//     has a "full" mbarrier (every producer thread's copies arrive on it as they land:
//     cp.async.mbarrier.arrive) and an "empty" one (every consumer thread arrives after its last wgmma
//     read of the stage).
//   consumers (warpgroups 1, 2, 64 rows each, many registers): S = Q K^T by wgmma from shared memory (Q
//     loaded once, rotary applied), the score modifications and the mask (attention/score_mod.cuh, through
//     the accumulator layout's WgmmaScoreTile), online softmax in registers, O += P V by wgmma with P from
//     registers; the softmax of tile t runs while the tensor cores do P V of tile t - 1.
// Scores are in log2 units (exp2 is one instruction), as in the portable kernel.
#pragma once

#include <cuda.h>  // CUtensorMap

#include <cmath>
#include <cstdint>

#include "cuda/attention/epilogue.cuh"
#include "cuda/attention/params.cuh"
#include "cuda/attention/schedule.cuh"
#include "cuda/attention/score_mod.cuh"
#include "cuda/common/dtype.cuh"
#include "cuda/common/mma.cuh"
#include "cuda/common/rotary.cuh"
#include "cuda/common/sequence.cuh"
#include "cuda/common/softmax.cuh"
#include "cuda/prefill_sm90/config.hpp"
#include "cuda/prefill_sm90/ptx.cuh"
#include "cuda/prefill_sm90/wgmma.cuh"

namespace kvattn::cuda::sm90 {

// The kernel's argument: the attention parameters, the grid's m-blocks of kBlockM rows, and flags.
enum PrefillFlags : uint32_t {
  kUnitMajor = 1,      // grid order: the m-blocks of a (sequence, kv head) together (else m-block major)
  kNoReaderFence = 2,  // A/B only: consumers skip fence.proxy.async after a stage's full barrier
  // Diagnostics (timing only, the output is wrong): the producer copies only the first kStages tiles
  // (then signals stale stages), or the consumers skip the score mods and the softmax.
  kDiagNoLoad = 4,
  kDiagNoSoftmax = 8,
  // K/V by TMA (k_map / v_map valid): paged caches whose page size is a multiple of 8 and divides the key
  // tile or is a multiple of it, contiguous and packed caches of at least a tile (tma_geometry).
  kTma = 16,
};
struct PrefillArgs {
  AttnParams p;
  int32_t m_blocks;
  uint32_t flags;
  // With kTma: the K and V caches as 4-D tensors (channel, slot in page, kv head, page) over the pages of
  // tma_geometry, box (64 channels, its box slots, 1, 1), 128B swizzle: one box is one 64-channel panel of
  // a page's rows (a contiguous cache's page is a cache row, a packed cache is one page).
  CUtensorMap k_map;  // (a 128-byte aligned type)
  CUtensorMap v_map;
};

template <typename T_, int kHeadDim_, bool kPingPong_, bool kVarlen_ = false>
struct PrefillConfig {
  using T = T_;
  static constexpr int kHeadDim = kHeadDim_;     // d = dv
  static constexpr bool kPingPong = kPingPong_;  // the consumers take turns on the tensor cores
  // q packed by cu_seqlens_q (its own kernel: the line's scan and the idle consumer in the kernel that
  // does not need them cost 2.6-5.4% of W3's single-chunk times on the H200, bench/NOTES.md): CTA x takes
  // position x of the varlen m-block line (attention/schedule.cuh); a CTA of <= 64 rows computes with
  // consumer 0 alone.
  static constexpr bool kVarlen = kVarlen_;
  static constexpr PrefillTile kTile = prefill_tile(kHeadDim);
  static constexpr int kConsumers = kTile.consumers;  // warpgroups of 64 rows
  static constexpr int kBlockM = 64 * kConsumers;
  static constexpr int kBlockN = kTile.block_n;
  static constexpr int kStages = kTile.stages;
  static constexpr int kThreads = 128 * (kConsumers + 1);
  static constexpr int kPanels = kHeadDim / 64;           // 64-channel panels of a row
  static constexpr int kQPanelBytes = 64 * 128;           // one consumer's 64 rows of one panel
  static constexpr int kQBytes = kBlockM * kHeadDim * 2;  // (consumer, panel, 64 rows, 128 B)
  static constexpr int kKvPanelBytes = kBlockN * 128;     // kBlockN keys of one panel
  static constexpr int kKvStageBytes = kBlockN * kHeadDim * 2;
  static constexpr int kChunks = kHeadDim / 8;  // 16-byte chunks of a row
  static constexpr int kRegsProducer = kTile.regs_producer;
  static constexpr int kRegsConsumer = kTile.regs_consumer;
  static_assert(kHeadDim % 64 == 0, "whole 128-byte panels");
  static_assert(kBlockN % 16 == 0 && kBlockN <= 128, "a key row per producer thread");
  static_assert((kBlockN / 4) * kChunks % 32 == 0, "whole warp copy steps");
  static_assert(prefill_smem_bytes(kHeadDim) == 1024 + kQBytes + 2 * kStages * kKvStageBytes + 16 * kStages,
                "the launcher's shared memory is the kernel's");
};

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

// Byte offset of 16-byte chunk c of row r in a tile of 64-channel panels (panel_bytes apart), 128B
// swizzle: the chunk's position within its 128-byte row is XORed with r % 8.
__device__ __forceinline__ uint32_t swizzled(int r, int c, int panel_bytes) {
  return (c / 8) * panel_bytes + r * 128 + (((c % 8) ^ (r % 8)) << 4);
}

// The CTA's rows: sequence i (batch: none), kv head, first packed row.
struct CtaRows {
  int i, kv_head;
  int64_t m0;
};

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

// An offending sequence: NaN in out (and lse) for the CTA's rows. All threads.
template <class Cfg>
__device__ void write_nan_rows(const AttnParams& p, const CtaRows& c, const Sequence& seq) {
  using T = typename Cfg::T;
  const int64_t rows = static_cast<int64_t>(seq.q_len) * p.group;
  for (int idx = threadIdx.x; idx < Cfg::kBlockM * p.head_dim_v; idx += Cfg::kThreads) {
    const int64_t r = c.m0 + idx / p.head_dim_v;
    const int ch = idx % p.head_dim_v;
    if (r >= rows) continue;
    const int64_t t = r / p.group;
    const int h = c.kv_head * p.group + static_cast<int>(r % p.group);
    out_row<T>(p, seq, c.i, t, h)[ch] = from_float<T>(NAN);
    if (ch == 0 && p.lse) *lse_at(p, seq, c.i, t, h) = NAN;
  }
}

// ---- producer: K/V tiles into the stage ring

template <class Cfg>
__device__ __forceinline__ void produce(const AttnParams& p, const Sequence& seq, int kv_head, int64_t slot0,
                                        int64_t n_tiles, uint32_t s_k, uint32_t s_v, uint32_t full_bar,
                                        uint32_t empty_bar, bool diag_no_load) {
  constexpr int kRowsPerWarp = Cfg::kBlockN / 4;
  const int ptid = threadIdx.x;  // 0..127
  const int warp = ptid / 32, lane = ptid % 32;
  const bool owns_row =
      lane < kRowsPerWarp;  // thread (warp, lane) addresses key row warp * kRowsPerWarp + lane
  const int key_row = warp * kRowsPerWarp + lane;
  const unsigned char* k_base = static_cast<const unsigned char*>(p.k_cache.ptr);
  const unsigned char* v_base = static_cast<const unsigned char*>(p.v_cache.ptr);
  const bool paged = p.seq.page_table != nullptr && p.seq.cu_seqlens_k == nullptr;
  // The page-table entry of this thread's key row, loaded one tile ahead of its use.
  auto entry_of = [&](int64_t tile) -> int32_t {
    const int64_t s = slot0 + tile * Cfg::kBlockN + key_row;
    return paged && owns_row && tile < n_tiles && s < seq.end ? page_entry(p.seq, seq, s) : 0;
  };
  int32_t entry = entry_of(0);
  for (int64_t tile = 0; tile < n_tiles; ++tile) {
    const int stage = static_cast<int>(tile % Cfg::kStages);
    // This thread's key row: where it starts in each cache, in 16-byte units (32 bits: the launcher checks
    // that the caches span less than 64 GiB), or kNoRow (zero-filled).
    constexpr uint32_t kNoRow = 0xffffffffu;
    const int64_t s = slot0 + tile * Cfg::kBlockN + key_row;
    uint32_t k_off = kNoRow, v_off = kNoRow;
    if (owns_row && s < seq.end) {
      const SlotAddress a = slot_address_at(p.seq, seq, s, entry);
      if (a.page >= 0) {
        k_off = static_cast<uint32_t>((a.page * p.k_cache.page_stride + a.in_page * p.k_cache.slot_stride +
                                       kv_head * p.k_cache.head_stride) /
                                      8);
        v_off = static_cast<uint32_t>((a.page * p.v_cache.page_stride + a.in_page * p.v_cache.slot_stride +
                                       kv_head * p.v_cache.head_stride) /
                                      8);
      }
    }
    entry = entry_of(tile + 1);
    mbar_wait(empty_bar + 8 * stage, static_cast<uint32_t>((tile / Cfg::kStages) & 1) ^ 1u);
    const uint32_t k_dst = s_k + stage * Cfg::kKvStageBytes, v_dst = s_v + stage * Cfg::kKvStageBytes;
    // Warp-wide steps of 32 chunks: lane l copies chunk (j * 32 + l) % kChunks of row (j * 32 + l) /
    // kChunks of the warp's rows, so consecutive lanes read consecutive 16 bytes of a row.
#pragma unroll
    for (int j = 0; j < kRowsPerWarp * Cfg::kChunks / 32; ++j) {
      if (diag_no_load && tile >= Cfg::kStages) break;
      const int idx = j * 32 + lane;
      const int row_in_warp = idx / Cfg::kChunks, c = idx % Cfg::kChunks;
      const uint32_t k_row = __shfl_sync(0xffffffffu, k_off, row_in_warp);
      const uint32_t v_row = __shfl_sync(0xffffffffu, v_off, row_in_warp);
      const bool ok = k_row != kNoRow;
      const int r = warp * kRowsPerWarp + row_in_warp;
      const uint32_t at = swizzled(r, c, Cfg::kKvPanelBytes);
      const uint32_t k_unit = ok ? k_row + c : 0, v_unit = ok ? v_row + c : 0;  // in range when ok
      cp_async_16(k_dst + at, k_base + static_cast<uint64_t>(k_unit) * 16, ok);
      cp_async_16(v_dst + at, v_base + static_cast<uint64_t>(v_unit) * 16, ok);
    }
    // The stage is full once every producer thread's copies of it have landed (no wait here).
    cp_async_arrive(full_bar + 8 * stage);
  }
  cp_async_wait_all();  // nothing in flight when the producer leaves
}

// The TMA producer (one warp; kTma): tile t covers slots [slot0 + t kBlockN, + kBlockN), slot0 a multiple of
// tma_geometry's align, so each box of `box` slots lies in one page: one page's rows (paged, page size <=
// kBlockN), a part of one page, or of a contiguous cache's row / the packed token rows, where it may reach
// past the row's end (the TMA unit writes zeros there). A tile inside [leftpad, end) is kBlockN / box boxes
// a panel of K and of V at slot_address_at's (page, slot in page), lane j issuing box j's (its page-table
// entry loaded before the stage is free); the full barrier (32 arrivals) completes when the bytes land.
// So is a last tile reaching past `end` where `end` is the map's end (a contiguous row filled to its
// capacity, the last packed sequence): its slots past `end` are the TMA unit's zeros. Any other tile
// reaching outside [leftpad, end) (at most the first and the last of a CTA) goes by 16-byte cp.async, its
// slots outside zero-filled, as the other producer does (they may hold NaN, and P V needs 0 there).
template <class Cfg>
__device__ __forceinline__ void produce_tma(const PrefillArgs& a, const Sequence& seq, int kv_head,
                                            int64_t slot0, int64_t n_tiles, uint32_t s_k, uint32_t s_v,
                                            uint32_t full_bar, uint32_t empty_bar, bool diag_no_load) {
  const AttnParams& p = a.p;
  const int lane = threadIdx.x % 32;
  const bool packed = p.seq.cu_seqlens_k != nullptr, paged = p.seq.page_table != nullptr && !packed;
  const TmaGeometry g = tma_geometry(packed, paged, p.seq.num_pages, p.seq.page_size, Cfg::kBlockN);
  const int boxes = Cfg::kBlockN / g.box;
  // The slots from `end` on lie past the map's slot dim (zeros): contiguous and packed caches only.
  const bool zero_tail = !paged && slot_address_at(p.seq, seq, seq.end, 0).in_page == g.slots;
  const uint64_t k_map = reinterpret_cast<uint64_t>(&a.k_map), v_map = reinterpret_cast<uint64_t>(&a.v_map);
  if (lane == 0) {
    tma_prefetch_map(k_map);
    tma_prefetch_map(v_map);
  }
  const unsigned char* k_base = static_cast<const unsigned char*>(p.k_cache.ptr);
  const unsigned char* v_base = static_cast<const unsigned char*>(p.v_cache.ptr);
  for (int64_t tile = 0; tile < n_tiles; ++tile) {
    const int stage = static_cast<int>(tile % Cfg::kStages);
    const uint32_t bar = full_bar + 8 * stage;
    const uint32_t k_dst = s_k + stage * Cfg::kKvStageBytes, v_dst = s_v + stage * Cfg::kKvStageBytes;
    const int64_t t0 = slot0 + tile * Cfg::kBlockN;
    const bool whole = t0 >= seq.leftpad && (t0 + Cfg::kBlockN <= seq.end || zero_tail);
    const int64_t box_slot = t0 + lane * g.box;
    const int32_t entry = paged && whole && lane < boxes ? page_entry(p.seq, seq, box_slot) : 0;
    mbar_wait(empty_bar + 8 * stage, static_cast<uint32_t>((tile / Cfg::kStages) & 1) ^ 1u);
    if (diag_no_load && tile >= Cfg::kStages) {
      mbar_arrive(bar);  // stale stage (timing only)
    } else if (whole) {
      // This stage's last writes may have been an edge tile's cp.async (generic proxy); the copies below
      // write it through the async proxy.
      fence_proxy_async();
      if (lane == 0) {
        mbar_arrive_expect_tx(bar, 2 * Cfg::kKvStageBytes);
      } else {
        mbar_arrive(bar);
      }
      __syncwarp();  // the bytes are expected before any copy can land
      if (lane < boxes) {
        const SlotAddress box_at = slot_address_at(p.seq, seq, box_slot, entry);  // entries were checked
        const uint32_t rows_at = static_cast<uint32_t>(lane * g.box * 128);
#pragma unroll
        for (int panel = 0; panel < Cfg::kPanels; ++panel) {
          const uint32_t at = panel * Cfg::kKvPanelBytes + rows_at;
          tma_load_4d(k_dst + at, k_map, bar, 64 * panel, box_at.in_page, kv_head, box_at.page);
          tma_load_4d(v_dst + at, v_map, bar, 64 * panel, box_at.in_page, kv_head, box_at.page);
        }
      }
    } else {
      constexpr uint32_t kNoRow = 0xffffffffu;
      for (int r = lane; r < Cfg::kBlockN; r += 32) {
        const int64_t s = t0 + r;
        uint32_t k_off = kNoRow, v_off = kNoRow;
        if (s >= seq.leftpad && s < seq.end) {  // entries of these slots were checked (check_pages)
          const SlotAddress sa = slot_address(p.seq, seq, s);
          if (sa.page >= 0) {
            k_off =
                static_cast<uint32_t>((sa.page * p.k_cache.page_stride + sa.in_page * p.k_cache.slot_stride +
                                       kv_head * p.k_cache.head_stride) /
                                      8);
            v_off =
                static_cast<uint32_t>((sa.page * p.v_cache.page_stride + sa.in_page * p.v_cache.slot_stride +
                                       kv_head * p.v_cache.head_stride) /
                                      8);
          }
        }
        const bool ok = k_off != kNoRow;
#pragma unroll 4
        for (int c = 0; c < Cfg::kChunks; ++c) {
          const uint32_t at = swizzled(r, c, Cfg::kKvPanelBytes);
          cp_async_16(k_dst + at, k_base + static_cast<uint64_t>(ok ? k_off + c : 0) * 16, ok);
          cp_async_16(v_dst + at, v_base + static_cast<uint64_t>(ok ? v_off + c : 0) * 16, ok);
        }
      }
      cp_async_arrive(bar);
    }
  }
  cp_async_wait_all();
}

// ---- consumer: 64 rows

// The consumer's 64 Q rows into s_q (panels of 64 rows): rotary (positions already checked) in fp32,
// rounded to T once; rows that do not attend are zero.
template <class Cfg>
__device__ __forceinline__ void load_q(const AttnParams& p, const Sequence& seq, int i, int kv_head,
                                       int64_t m0, unsigned char* s_q) {
  using T = typename Cfg::T;
  const int ctid = threadIdx.x % 128;
  const int64_t used_rows = static_cast<int64_t>(seq.q_used) * p.group;
  for (int idx = ctid; idx < 64 * Cfg::kChunks; idx += 128) {
    const int row = idx / Cfg::kChunks, c = idx % Cfg::kChunks;
    const int64_t r = m0 + row;
    alignas(16) T vals[8];
    if (r < used_rows) {
      const int64_t t = r / p.group;
      const int h = kv_head * p.group + static_cast<int>(r % p.group);
      const T* src = token_row<const T>(p.q, seq, i, t, h);
      const int64_t pos = seq.rotary_pos + (p.seq.rotary_q_per_token ? t : 0);
      if (c * 8 >= p.rotary.rotary_dim && reinterpret_cast<uintptr_t>(src + c * 8) % 16 == 0) {
        *reinterpret_cast<uint4*>(vals) = *reinterpret_cast<const uint4*>(src + c * 8);
      } else {
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          const int ch = c * 8 + e;
          vals[e] =
              ch < p.rotary.rotary_dim ? from_float<T>(rotated_channel(src, ch, pos, p.rotary)) : src[ch];
        }
      }
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) vals[e] = from_float<T>(0.f);
    }
    *reinterpret_cast<uint4*>(s_q + swizzled(row, c, Cfg::kQPanelBytes)) =
        *reinterpret_cast<const uint4*>(vals);
  }
}

// S = Q K^T of a tile into s (issued, not waited for): kD / 16 k-steps, 32 bytes apart within a 128-byte
// panel row.
template <class Cfg>
__device__ __forceinline__ void issue_qk_tile(float (&s)[Cfg::kBlockN / 2], uint32_t q_addr,
                                              uint32_t k_tile) {
#pragma unroll
  for (int kk = 0; kk < Cfg::kHeadDim / 16; ++kk) {
    const uint32_t q_step = (kk / 4) * Cfg::kQPanelBytes + (kk % 4) * 32;
    const uint32_t k_step = (kk / 4) * Cfg::kKvPanelBytes + (kk % 4) * 32;
    wgmma_ss<typename Cfg::T, Cfg::kBlockN>(s, desc_k_major(q_addr + q_step), desc_k_major(k_tile + k_step),
                                            kk > 0);
  }
  wgmma_commit();
}

// O += P V of a tile (issued, not waited for): V's 16-key k-steps are 16 rows = 2048 bytes apart.
template <class Cfg>
__device__ __forceinline__ void issue_pv_tile(float (&o)[Cfg::kHeadDim / 2],
                                              const uint32_t (&pa)[Cfg::kBlockN / 16][4], uint32_t v_tile) {
#pragma unroll
  for (int kk = 0; kk < Cfg::kBlockN / 16; ++kk) {
    wgmma_rs<typename Cfg::T, Cfg::kHeadDim>(o, pa[kk], desc_mn_major(v_tile + kk * 2048, Cfg::kKvPanelBytes),
                                             1);
  }
  wgmma_commit();
}

// P's fragments, wgmma register operands: pinned in place across the asynchronous P V (fence_registers).
template <int kKSteps>
__device__ __forceinline__ void fence_fragments(uint32_t (&pa)[kKSteps][4]) {
#pragma unroll
  for (int kk = 0; kk < kKSteps; ++kk) {
#pragma unroll
    for (int e = 0; e < 4; ++e) fence_registers(pa[kk][e]);
  }
}

// P leaves the S accumulators as the A fragments of P V (two 8-key blocks = one 16-key k-step).
template <class Cfg>
__device__ __forceinline__ void pack_p(const float (&s)[Cfg::kBlockN / 2],
                                       uint32_t (&pa)[Cfg::kBlockN / 16][4]) {
#pragma unroll
  for (int kk = 0; kk < Cfg::kBlockN / 16; ++kk) {
#pragma unroll
    for (int e = 0; e < 4; ++e) pa[kk][e] = pack2<typename Cfg::T>(s[8 * kk + 2 * e], s[8 * kk + 2 * e + 1]);
  }
}

// The online softmax of a tile's modified scores (rows spread over the 4 threads of a quad; scores times
// factor are log2 units, score_factor): s becomes P, the rows' (max, sum) move on, correction = how much
// each row's running max moved (what O must be scaled by).
template <int kBlockN>
__device__ __forceinline__ void online_softmax(float (&s)[kBlockN / 2], float factor, float (&row_max)[2],
                                               float (&row_sum)[2], float (&correction)[2]) {
  // Row max and row sum over 4 partial chains each (dependent FMNMX / FADD chains of kBlockN / 32
  // instead of kBlockN / 4: the consumers are latency-bound, bench/NOTES.md).
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    float part[4] = {row_max[k], -INFINITY, -INFINITY, -INFINITY};
#pragma unroll
    for (int j = 0; j < kBlockN / 8; ++j) {
      part[j % 4] = fmaxf(part[j % 4], fmaxf(s[4 * j + 2 * k], s[4 * j + 2 * k + 1]));
    }
    float mx = fmaxf(fmaxf(part[0], part[1]), fmaxf(part[2], part[3]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float base = safe_max_base(mx) * factor;  // log2 units
    correction[k] = mx == row_max[k] ? 1.f : fast_exp2(row_max[k] * factor - base);
    row_max[k] = mx;
    float sum[4] = {row_sum[k] * correction[k], 0.f, 0.f, 0.f};
#pragma unroll
    for (int j = 0; j < kBlockN / 8; ++j) {
      s[4 * j + 2 * k] = fast_exp2(fmaf(s[4 * j + 2 * k], factor, -base));
      s[4 * j + 2 * k + 1] = fast_exp2(fmaf(s[4 * j + 2 * k + 1], factor, -base));
      sum[j % 4] += s[4 * j + 2 * k] + s[4 * j + 2 * k + 1];
    }
    row_sum[k] = (sum[0] + sum[1]) + (sum[2] + sum[3]);
  }
}

// Out = O / l and lse of this thread's two rows, the sink counted here (one pass: no partials).
template <class Cfg>
__device__ __forceinline__ void write_rows(const AttnParams& p, const Sequence& seq, const CtaRows& cta,
                                           int64_t m0, const QueryRow (&row)[2],
                                           const float (&o)[Cfg::kHeadDim / 2], const float (&row_max)[2],
                                           float (&row_sum)[2], float factor) {
  using T = typename Cfg::T;
  constexpr int kD = Cfg::kHeadDim;
  const int ctid = threadIdx.x % 128, warp = ctid / 32, lane = ctid % 32, quad = lane % 4;
  const int64_t rows = static_cast<int64_t>(seq.q_len) * p.group;
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    row_sum[k] += __shfl_xor_sync(0xffffffffu, row_sum[k], 1);
    row_sum[k] += __shfl_xor_sync(0xffffffffu, row_sum[k], 2);
  }
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    const int64_t r = m0 + 16 * warp + lane / 4 + 8 * k;
    if (r >= rows) continue;
    const int64_t t = r / p.group;
    const int h = row[k].head;
    const RowState st{row_max[k] * factor, row_sum[k]};  // log2 units
    const RowEnd end = end_row(st, row[k].attends, true, p.sinks, h, 1.f);
    const float lse = end.lse, inv_l = end.o_scale;
    T* out = out_row<T>(p, seq, cta.i, t, h);
#pragma unroll
    for (int j = 0; j < kD / 8; ++j) {
      const int c = 8 * j + 2 * quad;
      out[c] = from_float<T>(o[4 * j + 2 * k] * inv_l);
      out[c + 1] = from_float<T>(o[4 * j + 2 * k + 1] * inv_l);
    }
    if (p.lse && quad == 0) *lse_at(p, seq, cta.i, t, h) = lse;
  }
}

// Ping-pong (Cfg::kPingPong): the two consumers take turns issuing their wgmma groups, so that one's
// softmax runs while the other's matrix products occupy the tensor cores. Consumer c waits on barrier
// 3 + c before issuing and then lets the other go (bar.arrive on 3 + (1 - c)); both have n_tiles + 1
// issue points, consumer 1 starts by letting consumer 0 go and skips its last hand-over, so every
// barrier phase completes before the CTA ends.
template <class Cfg>
struct PingPong {
  int consumer;        // 0 or 1
  int64_t turns_left;  // issue points left

  __device__ __forceinline__ PingPong(int consumer_, int64_t n_tiles)
      : consumer(consumer_), turns_left(n_tiles + 1) {
    if (Cfg::kPingPong && consumer == 1 && n_tiles > 0) named_barrier_arrive(3, 256);
  }
  __device__ __forceinline__ void my_turn() const {
    if constexpr (Cfg::kPingPong) named_barrier_sync(3 + consumer, 256);
  }
  __device__ __forceinline__ void your_turn() {
    if constexpr (Cfg::kPingPong) {
      --turns_left;
      if (consumer == 0 || turns_left > 0) named_barrier_arrive(3 + (1 - consumer), 256);
    }
  }
};

// The consumer's tiles, S and P V in flight: the softmax of tile t overlaps the P V of tile t - 1 on the
// tensor cores. Per iteration, issue S_t = Q K_t and O += P_{t-1} V_{t-1}, wait for S_t, softmax it, wait
// for P V, release stage t - 1, rescale O by tile t's correction. wait_full(tile): the tile's stage, once
// loaded; softmax(s, tile, correction): S -> P (the score mods, the online softmax).
template <class Cfg, class WaitFull, class Softmax>
__device__ __forceinline__ void run_tiles(int64_t n_tiles, uint32_t q_addr, uint32_t s_k, uint32_t s_v,
                                          uint32_t empty_bar, PingPong<Cfg>& turns, const WaitFull& wait_full,
                                          const Softmax& softmax, float (&o)[Cfg::kHeadDim / 2]) {
  constexpr int kBlockN = Cfg::kBlockN, kD = Cfg::kHeadDim;
  uint32_t pa[kBlockN / 16][4];
  int prev_stage = 0;
  if (n_tiles > 0) {
    float s[kBlockN / 2];
    prev_stage = wait_full(0);
    turns.my_turn();
    wgmma_fence();
    issue_qk_tile<Cfg>(s, q_addr, s_k + prev_stage * Cfg::kKvStageBytes);
    turns.your_turn();
    wgmma_wait<0>();
    fence_registers(s);
    float correction[2];
    softmax(s, 0, correction);  // O is still zero: nothing to rescale
    pack_p<Cfg>(s, pa);
  }
  for (int64_t tile = 1; tile < n_tiles; ++tile) {
    float s[kBlockN / 2];
    const int stage = wait_full(tile);
    fence_fragments(pa);
    fence_registers(o);
    turns.my_turn();
    wgmma_fence();
    issue_qk_tile<Cfg>(s, q_addr, s_k + stage * Cfg::kKvStageBytes);
    issue_pv_tile<Cfg>(o, pa, s_v + prev_stage * Cfg::kKvStageBytes);
    turns.your_turn();
    wgmma_wait<1>();  // S_t is done (P V may still run)
    fence_registers(s);
    float correction[2];
    softmax(s, tile, correction);
    wgmma_wait<0>();  // P_{t-1} V_{t-1} is done: its registers and its stage are free
    fence_registers(o);
    fence_fragments(pa);
    mbar_arrive(empty_bar + 8 * prev_stage);
    if (__any_sync(0xffffffffu, correction[0] != 1.f || correction[1] != 1.f)) {  // once maxima settle: rare
#pragma unroll
      for (int e = 0; e < kD / 2; ++e) o[e] *= correction[(e % 4) / 2];
    }
    pack_p<Cfg>(s, pa);
    prev_stage = stage;
  }
  if (n_tiles > 0) {
    fence_fragments(pa);
    fence_registers(o);
    turns.my_turn();
    wgmma_fence();
    issue_pv_tile<Cfg>(o, pa, s_v + prev_stage * Cfg::kKvStageBytes);
    turns.your_turn();
    wgmma_wait<0>();
    fence_registers(o);
    mbar_arrive(empty_bar + 8 * prev_stage);
  }
}

// Consumer 1 of a CTA of at most 64 of its sequence's rows (a decode or a short chunk in a varlen batch):
// no row to compute or write. It keeps run_tiles' protocol (its n_tiles + 1 turns, each stage released
// once full) without a wgmma, so consumer 0 runs unchanged with the tensor cores to itself.
template <class Cfg>
__device__ __forceinline__ void idle_consumer(int64_t n_tiles, uint32_t full_bar, uint32_t empty_bar) {
  if (n_tiles == 0) return;  // run_tiles takes no turn either
  PingPong<Cfg> turns(1, n_tiles);
  for (int64_t tile = 0; tile <= n_tiles; ++tile) {
    if (tile < n_tiles) {
      mbar_wait(full_bar + 8 * (tile % Cfg::kStages), static_cast<uint32_t>((tile / Cfg::kStages) & 1));
    }
    turns.my_turn();
    turns.your_turn();
    if (tile > 0) mbar_arrive(empty_bar + 8 * ((tile - 1) % Cfg::kStages));
  }
}

template <class Cfg>
__device__ __forceinline__ void consume(const AttnParams& p, const Sequence& seq, const CtaRows& cta,
                                        const KeyRange& cta_keys, int64_t n_tiles, unsigned char* s_q_all,
                                        uint32_t s_k, uint32_t s_v, uint32_t full_bar, uint32_t empty_bar,
                                        bool reader_fence, bool diag_no_softmax) {
  using T = typename Cfg::T;
  constexpr int kBlockN = Cfg::kBlockN, kD = Cfg::kHeadDim;
  const int consumer = threadIdx.x / 128 - 1;
  const int ctid = threadIdx.x % 128, warp = ctid / 32, lane = ctid % 32, quad = lane % 4;
  const int64_t m0 = cta.m0 + 64 * consumer;  // this warpgroup's first packed row
  unsigned char* s_q = s_q_all + consumer * (Cfg::kQBytes / Cfg::kConsumers);
  if constexpr (Cfg::kVarlen) {
    if (consumer == 1 && cta.m0 + 64 >= static_cast<int64_t>(seq.q_len) * p.group) {
      idle_consumer<Cfg>(n_tiles, full_bar, empty_bar);
      return;
    }
  }

  load_q<Cfg>(p, seq, cta.i, cta.kv_head, m0, s_q);
  fence_proxy_async();  // Q is read by wgmma (async proxy)
  named_barrier_sync(1 + consumer, 128);

  const int64_t kv_len = seq.end - seq.leftpad;
  // Tiles inside the keys every row of this warpgroup sees skip the mask.
  const KeyRange mine = key_range(p, seq, m0, 64, kBlockN);
  // This thread's two rows of the accumulator layout, as the score modifications see them.
  const QueryRow row[2] = {query_row(p, seq, cta.i, cta.kv_head, m0 + 16 * warp + lane / 4),
                           query_row(p, seq, cta.i, cta.kv_head, m0 + 16 * warp + lane / 4 + 8)};

  float o[kD / 2];
#pragma unroll
  for (int e = 0; e < kD / 2; ++e) o[e] = 0.f;
  const float factor = score_factor(p);
  float row_max[2] = {-INFINITY, -INFINITY};  // in the units of score_mods' output (x factor: log2)
  float row_sum[2] = {0.f, 0.f};              // this thread's share; quad-reduced at the end
  const uint32_t q_addr = smem_addr(s_q);

  // Score mods and online softmax of a tile's S (rows spread over the 4 threads of a quad): s becomes P,
  // correction = how much the row's running max moved (what O must be scaled by).
  auto softmax = [&](float(&s)[kBlockN / 2], int64_t tile, float(&correction)[2]) {
    if (diag_no_softmax) {
      correction[0] = correction[1] = 1.f;
      return;
    }
    const int64_t tile_kp0 = cta_keys.first + tile * kBlockN;
    const bool inside = tile_kp0 >= mine.all_first && tile_kp0 + kBlockN - 1 <= mine.all_last;
    WgmmaScoreTile<kBlockN> score_tile{s, row, static_cast<int32_t>(tile_kp0) + 2 * quad};
    apply_score_mods<true>(p, static_cast<int32_t>(kv_len), inside, score_tile);
    online_softmax<kBlockN>(s, factor, row_max, row_sum, correction);
  };
  auto wait_full = [&](int64_t tile) {
    const int stage = static_cast<int>(tile % Cfg::kStages);
    mbar_wait(full_bar + 8 * stage, static_cast<uint32_t>((tile / Cfg::kStages) & 1));
    if (reader_fence) fence_proxy_async();  // the stage's cp.async writes, seen here, before wgmma reads
    return stage;
  };

  PingPong<Cfg> turns(consumer, n_tiles);
  run_tiles<Cfg>(n_tiles, q_addr, s_k, s_v, empty_bar, turns, wait_full, softmax, o);
  write_rows<Cfg>(p, seq, cta, m0, row, o, row_max, row_sum, factor);
}

template <class Cfg>
__device__ __forceinline__ void prefill_cta(const PrefillArgs& a) {
  const AttnParams& p = a.p;
  extern __shared__ unsigned char smem_raw[];
  // 1024-byte aligned base: the swizzle pattern is a function of the address bits.
  const uint32_t raw = smem_addr(smem_raw);
  unsigned char* smem = smem_raw + ((1024 - raw % 1024) % 1024);
  unsigned char* s_q = smem;
  const uint32_t s_k = smem_addr(smem + Cfg::kQBytes);
  const uint32_t s_v = s_k + Cfg::kStages * Cfg::kKvStageBytes;
  const uint32_t full_bar = s_v + Cfg::kStages * Cfg::kKvStageBytes;
  const uint32_t empty_bar = full_bar + 8 * Cfg::kStages;

  const CtaRows cta = cta_rows<Cfg>(a);  // all threads (the varlen line's scan)
  if constexpr (Cfg::kVarlen) {
    if (cta.i >= p.seq.batch) return;  // past the varlen line's end
  }
  const Sequence seq = load_sequence(p.seq, cta.i, p.errors, threadIdx.x == 0);
  if (!seq.rows_known) return;  // cu_seqlens_q is broken: no row of out is known to be ours
  if (cta.m0 >= static_cast<int64_t>(seq.q_len) * p.group) return;
  // Page ids of the whole sequence [leftpad, end): an offending sequence is NaN in every row.
  bool ok = check_unique_row(p.seq, cta.i, p.errors) && seq.ok;
  if (ok && p.seq.page_table) ok = check_pages(p.seq, seq, seq.leftpad, seq.end, p.errors);
  if (!ok) {
    write_nan_rows<Cfg>(p, cta, seq);
    return;
  }
  KeyRange keys = key_range(p, seq, cta.m0, Cfg::kBlockM, Cfg::kBlockN);
  const bool tma = (a.flags & kTma) != 0;
  if (tma && keys.last >= keys.first) {  // the first tile starts at a multiple of align (produce_tma)
    const bool packed = p.seq.cu_seqlens_k != nullptr;
    const int align = tma_geometry(packed, p.seq.page_table != nullptr && !packed, p.seq.num_pages,
                                   p.seq.page_size, Cfg::kBlockN)
                          .align;
    keys.first -= (seq.leftpad + keys.first) % align;
  }
  const int64_t n_tiles =
      keys.last >= keys.first ? (keys.last - keys.first + Cfg::kBlockN) / Cfg::kBlockN : 0;

  if (threadIdx.x == 0) {
    for (int s = 0; s < Cfg::kStages; ++s) {
      mbar_init(full_bar + 8 * s, tma ? 32 : 128);          // the producer threads
      mbar_init(empty_bar + 8 * s, 128 * Cfg::kConsumers);  // the consumer threads
    }
  }
  __syncthreads();

  if (threadIdx.x < 128) {
    regs_dealloc<Cfg::kRegsProducer>();
    if (tma) {
      if (threadIdx.x < 32) {
        produce_tma<Cfg>(a, seq, cta.kv_head, seq.leftpad + keys.first, n_tiles, s_k, s_v, full_bar,
                         empty_bar, (a.flags & kDiagNoLoad) != 0);
      }
    } else {
      produce<Cfg>(p, seq, cta.kv_head, seq.leftpad + keys.first, n_tiles, s_k, s_v, full_bar, empty_bar,
                   (a.flags & kDiagNoLoad) != 0);
    }
  } else {
    regs_alloc<Cfg::kRegsConsumer>();
    consume<Cfg>(p, seq, cta, keys, n_tiles, s_q, s_k, s_v, full_bar, empty_bar,
                 (a.flags & kNoReaderFence) == 0, (a.flags & kDiagNoSoftmax) != 0);
  }
}

#endif  // sm_90a

// The kernel; empty in passes other than sm_90a (the launcher checks that the sm_90a binary is the one
// loaded before it launches).
template <class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, 1) prefill_kernel(const __grid_constant__ PrefillArgs a) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  prefill_cta<Cfg>(a);
#endif
}

}  // namespace kvattn::cuda::sm90
