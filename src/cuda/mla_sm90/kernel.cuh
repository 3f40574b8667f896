// The Hopper (sm_90a) MLA decode kernel: scores q . k + qv . v over a cache of k (64 channels) and v (512,
// the latent), out = P v, for the many query heads of one kv head (DeepSeek's MLA: 128 heads, 1 kv head).
//
// At 128 heads the work is the tensor cores' (242 FLOP a byte of K/V), so the kernel is the prefill
// kernel's warp-specialized wgmma CTA reshaped for dv = 512 (config.hpp): 64 packed rows a CTA, 64-key stages
// of k and v in 128B-swizzled panels (panel 0: k, 1-8: v), three warpgroups:
//   producer (warpgroup 0): cp.async of each key's k and v rows through the page table (any layout and page
//     size, cache_batch_idx, leftpad: common/sequence.cuh), slots outside [leftpad, end) zero-filled, into
//     a ring of two stages with full / empty mbarriers (the prefill kernel's producer, two row widths);
//   S warpgroup (1): S = [q qv] [k v]^T by wgmma over 36 k-steps (Q in shared memory, 9 panels), the score
//     mods (attention/score_mod.cuh) and the online softmax (prefill_sm90/consumer.cuh), P and the rows'
//     corrections into shared memory for warpgroup 2, O[:, 0:256] += P v by wgmma with P from registers;
//     tile t's P v issued ahead of S_{t+1}, so that its stage is free early (two stages: mla_consume_s);
//   V warpgroup (2): O[:, 256:512] rescaled by the rows' corrections, += P v by wgmma with P from shared
//     memory.
// Static key splits (blockIdx.y: the split's share of the unit's whole tiles, attention/prologue.cuh) when
// batch x row blocks would leave SMs idle (plan_mla_sm90); both consumers write their half of out (or of
// the split's normalized partial), the S warpgroup the lse, the sink folded in (end_row) or, for a split,
// left to the split combine.
#pragma once

#include <cmath>
#include <cstdint>

#include "cuda/attention/epilogue.cuh"
#include "cuda/attention/prologue.cuh"
#include "cuda/attention/schedule.cuh"
#include "cuda/attention/score_mod.cuh"
#include "cuda/common/dtype.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/common/sequence.cuh"
#include "cuda/mla_sm90/config.hpp"
#include "cuda/prefill_sm90/consumer.cuh"
#include "cuda/prefill_sm90/cta.cuh"
#include "cuda/prefill_sm90/producer.cuh"
#include "cuda/prefill_sm90/ptx.cuh"
#include "cuda/prefill_sm90/wgmma.cuh"

namespace kvattn::cuda::sm90 {

template <typename T_>
struct MlaConfig : MlaTile {
  using T = T_;
  using TM = T_;  // the tensor cores' operands (the prefill consumer's functions read it, and kFp8Mma)
  static constexpr bool kFp8Mma = false;
  static constexpr bool kVarlen = false;  // (cta_rows: the fixed-q grid)
  static constexpr int kThreads = 384;
  static constexpr int kChunksK = kDimK / 8, kChunks = (kDimK + kDimV) / 8;  // 16-byte chunks of a row
  static constexpr int kHalf = kDimV / 2;                                    // O channels a consumer
  // Barriers: a stage's full counts the producer's 4 warps, its empty the consumers' 8; P full, P free
  // and the final (m, l) count threads (each thread's own shared-memory accesses are then ordered by its
  // own arrival: no warp or named barrier between them). Named barrier 1 (0 is __syncthreads): the S
  // warpgroup's Q.
  static constexpr int kFullArrivals = 4, kEmptyArrivals = 8, kWarpgroupArrivals = 128;
  static constexpr int kSBarrier = 1;
};

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)

// The CTA's shared memory, 1024-byte aligned (config.hpp's order).
struct MlaSmem {
  unsigned char* q;
  uint32_t kv;  // stage 0 (shared-window address); stage s at kv + s * kStageBytes
  uint32_t p;
  float* corr;  // a row's correction of the tile in P
  float* m;     // a row's final max (log2 units) and sum, for the V warpgroup's epilogue
  float* l;
  uint32_t full, empty, p_full, p_free, stats;  // full / empty: stage s's at + 8 s
};

template <class Cfg>
__device__ __forceinline__ MlaSmem mla_smem(unsigned char* base) {
  MlaSmem s;
  s.q = base;
  s.kv = smem_addr(base + Cfg::kQBytes);
  s.p = s.kv + Cfg::kStages * Cfg::kStageBytes;
  unsigned char* vec = base + Cfg::kQBytes + Cfg::kStages * Cfg::kStageBytes + Cfg::kPBytes;
  s.corr = reinterpret_cast<float*>(vec);
  s.m = s.corr + 64;
  s.l = s.m + 64;
  s.full = smem_addr(s.l + 64);
  s.empty = s.full + 8 * Cfg::kStages;
  s.p_full = s.empty + 8 * Cfg::kStages;
  s.p_free = s.p_full + 8;
  s.stats = s.p_free + 8;
  return s;
}

// ---- producer: k and v rows of a tile's 64 keys into a stage (as prefill_sm90's produce, two widths)

template <class Cfg>
__device__ __forceinline__ void mla_produce(const AttnParams& p, const Sequence& seq, int kv_head,
                                            int64_t slot0, int64_t n_tiles, const MlaSmem& sm) {
  constexpr int kRowsPerWarp = Cfg::kBlockN / 4;  // 16: lane < 16 addresses key row 16 warp + lane
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const unsigned char* k_base = static_cast<const unsigned char*>(p.k_cache.ptr);
  const unsigned char* v_base = static_cast<const unsigned char*>(p.v_cache.ptr);
  const TileKeyRow<Cfg::kBlockN> key(p, seq, kv_head, slot0, n_tiles);
  int32_t entry = key.entry(0);
  uint32_t k_off, v_off;
  key.offsets(0, entry, k_off, v_off);
  entry = key.entry(1);
  for (int64_t tile = 0; tile < n_tiles; ++tile) {
    const int stage = static_cast<int>(tile % Cfg::kStages);
    // The next tile's rows into L2 now, a tile before their copies: with two stages a copy starts only when
    // the tile two back is done, too late for its latency (~1-2 us under load) to hide behind one tile.
    uint32_t k_next, v_next;
    key.offsets(tile + 1, entry, k_next, v_next);
    if (k_next != kNoRow) {  // (a row's lines from its start: a row not 128-byte aligned misses its tail)
      prefetch_l2_line(k_base + static_cast<uint64_t>(k_next) * 16);
#pragma unroll
      for (int l = 0; l < Cfg::kDimV * 2 / 128; ++l) {
        prefetch_l2_line(v_base + static_cast<uint64_t>(v_next) * 16 + 128 * l);
      }
    }
    entry = key.entry(tile + 2);
    mbar_wait(sm.empty + 8 * stage, static_cast<uint32_t>((tile / Cfg::kStages) & 1) ^ 1u);
    const uint32_t dst = sm.kv + stage * Cfg::kStageBytes;
    // Warp-wide steps: lane l copies chunk (32 j + l) % width of row (32 j + l) / width of the warp's rows
    // (consecutive lanes, consecutive 16 bytes of a row); k into panel 0, v into panels 1-8.
#pragma unroll
    for (int j = 0; j < kRowsPerWarp * Cfg::kChunksK / 32; ++j) {
      const int idx = j * 32 + lane, row_in_warp = idx / Cfg::kChunksK, c = idx % Cfg::kChunksK;
      const uint32_t row = __shfl_sync(0xffffffffu, k_off, row_in_warp);
      const bool ok = row != kNoRow;
      cp_async_16(dst + swizzled(warp * kRowsPerWarp + row_in_warp, c, Cfg::kPanelBytes),
                  k_base + static_cast<uint64_t>(ok ? row + c : 0) * 16, ok);
    }
    constexpr int kChunksV = Cfg::kDimV / 8;
#pragma unroll 8
    for (int j = 0; j < kRowsPerWarp * kChunksV / 32; ++j) {
      const int idx = j * 32 + lane, row_in_warp = idx / kChunksV, c = idx % kChunksV;
      const uint32_t row = __shfl_sync(0xffffffffu, v_off, row_in_warp);
      const bool ok = row != kNoRow;
      cp_async_16(dst + Cfg::kPanelBytes + swizzled(warp * kRowsPerWarp + row_in_warp, c, Cfg::kPanelBytes),
                  v_base + static_cast<uint64_t>(ok ? row + c : 0) * 16, ok);
    }
    warp_arrive_after_copies(sm.full + 8 * stage);  // full once every producer thread's copies have landed
    k_off = k_next;
    v_off = v_next;
  }
  cp_async_wait_all();  // nothing in flight when the producer leaves
}

// ---- consumers

// The 64 rows' [q qv] into Q's 9 panels (load_q_rows: q's 8 chunks rotated, qv's 64 copied).
template <class Cfg>
__device__ __forceinline__ void mla_load_q(const AttnParams& p, const Sequence& seq, int i, int kv_head,
                                           int64_t m0, unsigned char* s_q) {
  load_q_rows<typename Cfg::T, Cfg::kChunksK, Cfg::kChunks>(p, seq, i, kv_head, m0, s_q, Cfg::kPanelBytes);
}

// A consumer's half of out (channels [col0, col0 + 256)) for this thread's two rows, and (write_lse) the
// lse: O / l with the sink folded in (end_row); a piece of a split unit writes its normalized partial
// instead (fp32, lse without the sink: the combine counts it once). m: the rows' final max (log2 units),
// l: their whole sums over the piece's keys.
template <class Cfg>
__device__ __forceinline__ void mla_write_half(const AttnParams& p, const Sequence& seq, const Piece& w,
                                               const QueryRow (&row)[2], const float (&o)[Cfg::kHalf / 2],
                                               const float (&m)[2], const float (&l)[2], int col0,
                                               bool write_lse) {
  using T = typename Cfg::T;
  const int ctid = threadIdx.x % 128, warp = ctid / 32, lane = ctid % 32, quad = lane % 4;
  const int64_t rows = static_cast<int64_t>(seq.q_len) * p.group;
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    const int64_t r = w.m0 + 16 * warp + lane / 4 + 8 * k;
    if (r >= rows) continue;
    const int64_t t = split_row(r, p.group).t;
    const int h = row[k].head;
    const int64_t prow = piece_partial_row(p, w, seq, r);
    const RowEnd end = end_row(RowState{m[k], l[k]}, row[k].attends, prow < 0, p.sinks, h, 1.f);
    if (prow >= 0) {
      float* part = p.o_partial + prow * p.head_dim_v + col0;  // (8-byte aligned: c is even)
#pragma unroll
      for (int j = 0; j < Cfg::kHalf / 8; ++j) {
        const int c = 8 * j + 2 * quad;
        *reinterpret_cast<float2*>(part + c) =
            make_float2(o[4 * j + 2 * k] * end.o_scale, o[4 * j + 2 * k + 1] * end.o_scale);
      }
      if (write_lse && quad == 0) p.lse_partial[prow] = end.lse;
      continue;
    }
    T* out = out_row<T>(p, seq, w.i, t, h) + col0;
    const bool pairs = reinterpret_cast<uintptr_t>(out) % 4 == 0;  // (out's strides are any element counts)
#pragma unroll
    for (int j = 0; j < Cfg::kHalf / 8; ++j) {
      const int c = 8 * j + 2 * quad;
      const float x0 = o[4 * j + 2 * k] * end.o_scale, x1 = o[4 * j + 2 * k + 1] * end.o_scale;
      if (pairs) {
        *reinterpret_cast<uint32_t*>(out + c) = pack2<T>(x0, x1);
      } else {
        out[c] = from_float<T>(x0);
        out[c + 1] = from_float<T>(x1);
      }
    }
    if (write_lse && p.lse && quad == 0) *lse_at(p, seq, w.i, t, h) = end.lse;
  }
}

// The S warpgroup: S_t = [q qv] [k v]_t^T, its softmax, P_t and the corrections to shared memory for the V
// warpgroup once it has read P_{t-1} (P free), then O[:, 0:256] += P_t v_t (P from registers) issued ahead
// of S_{t+1}, and O's rescale by tile t + 1's corrections once that P v is done.
template <class Cfg>
__device__ __forceinline__ void mla_consume_s(const AttnParams& p, const Sequence& seq, const Piece& w,
                                              const PieceKeys& k, const MlaSmem& sm,
                                              const QueryRow (&row)[2]) {
  using T = typename Cfg::T;
  constexpr int kN = Cfg::kBlockN, kP = Cfg::kPanelBytes;
  const int ctid = threadIdx.x % 128, warp = ctid / 32, lane = ctid % 32, quad = lane % 4;
  const int64_t n_tiles = k.tile_end - k.tile_begin;
  if (n_tiles > 0) {  // (a split past a short sequence's tiles has no key: no Q to load)
    mla_load_q<Cfg>(p, seq, w.i, w.kv_head, w.m0, sm.q);
    fence_proxy_async();  // Q is read by wgmma (async proxy)
    named_barrier_sync(Cfg::kSBarrier, 128);
  }
  // The piece's tile t holds key positions [kp_first + t kN, ... + kN). Tiles [in_first, in_last] lie
  // inside the keys every row sees: they skip the mask (consume's rule).
  const int64_t kp_piece = k.keys.first + k.tile_begin * kN;
  const int64_t to_first = k.keys.all_first - kp_piece, to_last = k.keys.all_last - kp_piece - kN + 1;
  const int in_first = static_cast<int>(to_first <= 0 ? 0 : (to_first + kN - 1) / kN);
  const int in_last = static_cast<int>(to_last < 0 ? -1 : to_last / kN);
  const int32_t kp_first = static_cast<int32_t>(kp_piece);

  float o[Cfg::kHalf / 2];
#pragma unroll
  for (int e = 0; e < Cfg::kHalf / 2; ++e) o[e] = 0.f;
  const float factor = score_factor(p);
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f};
  const SmemDesc q_desc(desc_k_major(__shfl_sync(0xffffffffu, smem_addr(sm.q), 0))),
      k_desc(desc_k_major(sm.kv));
  const SmemDesc v_desc(desc_mn_major(sm.kv + kP, kP));  // v's channels 0-255: panels 1-4
  uint32_t pa[kN / 16][4];
  // The tile's stage, once full (written by cp.async: the generic proxy, hence the fence).
  auto wait_full = [&](int64_t tile) {
    const uint32_t t32 = static_cast<uint32_t>(tile);
    const int stage = static_cast<int>(t32 % Cfg::kStages);
    mbar_wait(sm.full + 8 * stage, (t32 / Cfg::kStages) & 1);
    fence_proxy_async();
    return stage;
  };
  auto issue_s = [&](float(&s)[kN / 2], int stage) {
#pragma unroll
    for (int kk = 0; kk < Cfg::kPanels * 4; ++kk) {
      const uint32_t step = (kk / 4) * kP + (kk % 4) * 32;
      wgmma_ss<T, kN>(s, q_desc.at(step), k_desc.at(stage * Cfg::kStageBytes + step), kk > 0);
    }
    wgmma_commit();
  };
  auto issue_pv = [&](int stage) {
#pragma unroll
    for (int kk = 0; kk < kN / 16; ++kk) {
      wgmma_rs<T, Cfg::kHalf>(o, pa[kk], v_desc.at(stage * Cfg::kStageBytes + kk * 2048), 1);
    }
    wgmma_commit();
  };
  auto softmax = [&](float(&s)[kN / 2], int64_t tile, float(&correction)[2]) {
    const int t = static_cast<int>(tile);
    WgmmaScoreTile<kN> score_tile{s, row, kp_first + t * kN + 2 * quad};
    apply_score_mods<true>(p, static_cast<int32_t>(k.kv_len), t >= in_first && t <= in_last, score_tile);
    online_softmax<kN>(s, factor, row_max, row_sum, correction);
  };
  // P_t and the corrections for the V warpgroup once it is done with P_{t-1} (P free), then P_t into
  // registers for this warpgroup's P v.
  auto hand_over = [&](const float(&s)[kN / 2], int64_t tile, const float(&correction)[2]) {
    mbar_wait(sm.p_free, (static_cast<uint32_t>(tile) & 1) ^ 1u);
    if (quad == 0) {
      sm.corr[16 * warp + lane / 4] = correction[0];
      sm.corr[16 * warp + lane / 4 + 8] = correction[1];
    }
#pragma unroll
    for (int j = 0; j < kN / 8; ++j) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        st_shared_b32(sm.p + swizzled(16 * warp + lane / 4 + 8 * h, j, kP) + 4 * quad,
                      pack2<T>(s[4 * j + 2 * h], s[4 * j + 2 * h + 1]));
      }
    }
    fence_proxy_async();  // P is read by wgmma
    mbar_arrive(sm.p_full);
    pack_p<Cfg>(s, pa);
  };
  // Tile t's P v is issued as soon as P_t is known, ahead of S_{t+1}, and the stage is released when it is
  // done: with two 72-KiB stages the copy of tile t + 2 can only start then, and it must land before
  // S_{t+2} (S_{t+1}, its softmax and the hand-over later). Issuing P_t v with S_{t+1} instead held the
  // stage until after S_{t+1}'s softmax, exposing most of the copy's latency every tile (session 28).
  if (n_tiles > 0) {
    float s[kN / 2];
    const int stage0 = wait_full(0);
    wgmma_fence();
    issue_s(s, stage0);
    wgmma_wait<0>();
    fence_registers(s);
    float correction[2];
    softmax(s, 0, correction);  // O is still zero: nothing to rescale
    hand_over(s, 0, correction);
  }
  for (int64_t tile = 0; tile + 1 < n_tiles; ++tile) {
    const int stage = static_cast<int>(static_cast<uint32_t>(tile) % Cfg::kStages);
    fence_fragments(pa);
    fence_registers(o);
    wgmma_fence();
    issue_pv(stage);
    float s[kN / 2];
    const int next = wait_full(tile + 1);
    wgmma_fence();  // (after the wait's loop: without it ptxas serializes every wgmma, C7520)
    issue_s(s, next);
    wgmma_wait<1>();  // P_t v_t is done: this warpgroup's reads of the stage and of P's registers
    fence_registers(o);
    fence_fragments(pa);
    warp_arrive(sm.empty + 8 * stage);
    wgmma_wait<0>();
    fence_registers(s);
    float correction[2];
    softmax(s, tile + 1, correction);
    if (__any_sync(0xffffffffu, correction[0] != 1.f || correction[1] != 1.f)) {
#pragma unroll
      for (int e = 0; e < Cfg::kHalf / 2; ++e) o[e] *= correction[(e % 4) / 2];
    }
    hand_over(s, tile + 1, correction);
  }
  if (n_tiles > 0) {  // the last tile's P v
    const int stage = static_cast<int>(static_cast<uint32_t>(n_tiles - 1) % Cfg::kStages);
    fence_fragments(pa);
    fence_registers(o);
    wgmma_fence();
    issue_pv(stage);
    wgmma_wait<0>();
    fence_registers(o);
    warp_arrive(sm.empty + 8 * stage);
  }
  // The rows' final (m, l) for the V warpgroup (l quad-reduced: each thread held a quarter of its rows').
  float m[2], l[2];
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    l[k] = row_sum[k] + __shfl_xor_sync(0xffffffffu, row_sum[k], 1);
    l[k] += __shfl_xor_sync(0xffffffffu, l[k], 2);
    m[k] = row_max[k] * factor;  // log2 units
    if (quad == 0) {
      sm.m[16 * warp + lane / 4 + 8 * k] = m[k];
      sm.l[16 * warp + lane / 4 + 8 * k] = l[k];
    }
  }
  mbar_arrive(sm.stats);
  mla_write_half<Cfg>(p, seq, w, row, o, m, l, 0, true);
}

// The V warpgroup: for each tile, once P_t is in shared memory, O[:, 256:512] *= the rows' corrections and
// += P_t v_t[:, 256:512].
template <class Cfg>
__device__ __forceinline__ void mla_consume_v(const AttnParams& p, const Sequence& seq, const Piece& w,
                                              int64_t n_tiles, const MlaSmem& sm, const QueryRow (&row)[2]) {
  using T = typename Cfg::T;
  constexpr int kN = Cfg::kBlockN, kP = Cfg::kPanelBytes;
  const int ctid = threadIdx.x % 128, warp = ctid / 32, lane = ctid % 32;
  const int r0 = 16 * warp + lane / 4;
  float o[Cfg::kHalf / 2];
#pragma unroll
  for (int e = 0; e < Cfg::kHalf / 2; ++e) o[e] = 0.f;
  const SmemDesc p_desc(desc_k_major(__shfl_sync(0xffffffffu, sm.p, 0)));
  const SmemDesc v_desc(desc_mn_major(sm.kv + 5 * kP, kP));  // v's channels 256-511: panels 5-8
  for (int64_t tile = 0; tile < n_tiles; ++tile) {
    const uint32_t t32 = static_cast<uint32_t>(tile);
    const int stage = static_cast<int>(t32 % Cfg::kStages);
    mbar_wait(sm.full + 8 * stage, (t32 / Cfg::kStages) & 1);
    fence_proxy_async();  // the stage was written by cp.async (generic proxy)
    mbar_wait(sm.p_full, t32 & 1);
    const float c0 = sm.corr[r0], c1 = sm.corr[r0 + 8];
    if (__any_sync(0xffffffffu, c0 != 1.f || c1 != 1.f)) {
#pragma unroll
      for (int e = 0; e < Cfg::kHalf / 2; ++e) o[e] *= (e % 4) < 2 ? c0 : c1;
    }
    fence_registers(o);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kN / 16; ++kk) {
      wgmma_ss_mn<T, Cfg::kHalf>(o, p_desc.at(kk * 32), v_desc.at(stage * Cfg::kStageBytes + kk * 2048), 1);
    }
    wgmma_commit();
    wgmma_wait<0>();
    fence_registers(o);
    mbar_arrive(sm.p_free);  // (every thread: its reads of the corrections are done)
    warp_arrive(sm.empty + 8 * stage);
  }
  mbar_wait(sm.stats, 0);
  const float m[2] = {sm.m[r0], sm.m[r0 + 8]}, l[2] = {sm.l[r0], sm.l[r0 + 8]};
  mla_write_half<Cfg>(p, seq, w, row, o, m, l, Cfg::kHalf, false);
}

template <class Cfg>
__device__ __forceinline__ void mla_cta(const PrefillArgs& a) {
  const AttnParams& p = a.p;
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw = smem_addr(smem_raw);  // 1024-byte aligned: the swizzle is a function of the address
  const MlaSmem sm = mla_smem<Cfg>(smem_raw + ((1024 - raw % 1024) % 1024));

  const CtaRows cta = cta_rows<Cfg>(a);
  // This CTA's piece of its unit: split blockIdx.y of the static splits (p.num_splits of them; 1: the
  // whole unit, written to out directly).
  const Piece w{cta.i, cta.kv_head, cta.m0, static_cast<int>(blockIdx.y), 0, 0, -1, -1};
  // (The prefill kernel's set-up, prefill_cta: to become one helper once a device can time the prefill
  // kernel with it; as a function its sm_90a code changed.)
  const Sequence seq = load_sequence(p.seq, w.i, p.errors, threadIdx.x == 0);
  if (!seq.rows_known) return;  // cu_seqlens_q is broken: no row of out is known to be ours
  if (w.m0 >= static_cast<int64_t>(seq.q_len) * p.group) return;
  const PieceKeys k = piece_keys<Cfg::kBlockN>(p, w, seq, Cfg::kBlockM);
  // The page ids of the split's share of [leftpad, end) (all of it without splits): an offending sequence
  // is NaN in every row, through the combine for a split unit.
  if (!check_piece<Cfg::kBlockN>(p, w, seq, k)) {
    cuda::write_nan_rows<typename Cfg::T, Cfg::kBlockM, Cfg::kThreads>(p, w, seq);
    return;
  }
  const int64_t n_tiles = k.tile_end - k.tile_begin;

  if (threadIdx.x == 0) {
    for (int s = 0; s < Cfg::kStages; ++s) {
      mbar_init(sm.full + 8 * s, Cfg::kFullArrivals);
      mbar_init(sm.empty + 8 * s, Cfg::kEmptyArrivals);
    }
    mbar_init(sm.p_full, Cfg::kWarpgroupArrivals);
    mbar_init(sm.p_free, Cfg::kWarpgroupArrivals);
    mbar_init(sm.stats, Cfg::kWarpgroupArrivals);
  }
  __syncthreads();

  // (Warp-uniform to the compiler through the shuffle: wgmma in a branch it cannot prove warpgroup-uniform
  // is serialized, ptxas C7520.)
  const int wg = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x / 128), 0);
  if (wg == 0) {
    regs_dealloc<Cfg::kRegsProducer>();
    wait_for_prior_grid();  // launched early after the append (PDL): the appended K/V are in place past here
    mla_produce<Cfg>(p, seq, w.kv_head, k.slot0 + k.tile_begin * Cfg::kBlockN, n_tiles, sm);
    return;
  }
  regs_alloc<Cfg::kRegsConsumer>();
  const int lane = threadIdx.x % 32, warp = (threadIdx.x % 128) / 32;
  const QueryRow row[2] = {query_row(p, seq, w.i, w.kv_head, w.m0 + 16 * warp + lane / 4),
                           query_row(p, seq, w.i, w.kv_head, w.m0 + 16 * warp + lane / 4 + 8)};
  if (wg == 1) {
    mla_consume_s<Cfg>(p, seq, w, k, sm, row);
  } else {
    mla_consume_v<Cfg>(p, seq, w, n_tiles, sm, row);
  }
}

#endif  // sm_90a

// The kernel; empty in passes other than sm_90a (the launcher checks that the sm_90a binary is loaded).
template <class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, 1) mla_kernel(const __grid_constant__ PrefillArgs a) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  allow_dependent_launch();  // the split combine may be scheduled now; it waits for this grid's end
  mla_cta<Cfg>(a);
#endif
}

}  // namespace kvattn::cuda::sm90
