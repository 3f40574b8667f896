// The Hopper (sm_90a) MLA decode kernel for <= 16 packed rows a kv head (MLA's 16 query heads on one kv
// head, 8 heads x 2 speculative tokens, ...): the 64-row kernel (kernel.cuh) would compute 48 padding rows
// of its 64, so here the rows lie along wgmma's N and the keys / channels along its M:
//   S^T (64 keys x 16 rows) = [k v]_t [q qv]^T: 36 wgmma m64n16k16, A = the stage's key rows as stored
//     (K-major), B = Q's 16 rows (K-major);
//   the score mods and the online softmax per column (a row's keys lie across the warpgroup: lanes by
//     shuffles, the four warps through shared memory once a tile);
//   P^T into shared memory as [row][key] (K-major B), O^T (512 channels x 16 rows) += v_t^T P^T: 8 x 4
//     wgmma m64n16k16, A = v's panels read transposed (MN-major), 64 fp32 accumulators a thread.
// A quarter of the 64-row kernel's tensor work (2.2 MFLOP a 64-key tile against 8.9). One consumer
// warpgroup; the producer warpgroup, the stages (two of 72 KiB), the splits and the epilogue's rule are the
// 64-row kernel's. Accumulator layout of m64n16 (wgmma.cuh): element e of a thread holds M row
// 16 warp + lane / 4 + 8 ((e / 2) % 2), N column 8 (e / 4) + 2 (lane % 4) + e % 2.
#pragma once

#include <cmath>
#include <cstdint>

#include "cuda/attention/epilogue.cuh"
#include "cuda/attention/prologue.cuh"
#include "cuda/attention/schedule.cuh"
#include "cuda/attention/score_mod.cuh"
#include "cuda/common/dtype.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/common/row_state.hpp"
#include "cuda/common/sequence.cuh"
#include "cuda/mla_sm90/config.hpp"
#include "cuda/mla_sm90/kernel.cuh"
#include "cuda/prefill_sm90/consumer.cuh"
#include "cuda/prefill_sm90/cta.cuh"
#include "cuda/prefill_sm90/ptx.cuh"
#include "cuda/prefill_sm90/wgmma.cuh"

namespace kvattn::cuda::sm90 {

template <typename T_>
struct MlaRowsConfig : MlaRowsTile {
  using T = T_;
  static constexpr bool kVarlen = false;  // (cta_rows: the fixed-q grid)
  static constexpr int kThreads = 256;    // producer + one consumer warpgroup
  static constexpr int kChunksK = kDimK / 8, kChunks = (kDimK + kDimV) / 8;
  // A stage's full barrier counts the producer's 4 warps, its empty the consumer's 4. Named barrier 1: the
  // consumer warpgroup (Q, a tile's maxima, P written).
  static constexpr int kFullArrivals = 4, kEmptyArrivals = 4;
  static constexpr int kBarrier = 1;
};

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)

// The ScoreTile (attention/score_mod.cuh) of S^T: element e is row rows[2 (e / 4) + e % 2] against the key
// kp0 + 8 ((e / 2) % 2).
struct MlaRowsScoreTile {
  float (&s)[8];
  const QueryRow (&rows)[4];
  int32_t kp0;  // kp of this thread's first key (the tile's first + 16 warp + lane / 4)
  template <class F>
  __device__ __forceinline__ void for_each(F f) {
#pragma unroll
    for (int e = 0; e < 8; ++e) f(s[e], rows[2 * (e / 4) + e % 2], kp0 + 8 * ((e / 2) % 2));
  }
};

// The CTA's shared memory (config.hpp's order), 1024-byte aligned.
struct MlaRowsSmem {
  unsigned char* q;
  uint32_t q_addr;
  uint32_t kv;  // stage s at kv + s * kStageBytes
  uint32_t p;   // P buffer b at p + b * kPBytes
  float* red;   // the rows' maxima of a tile: [tile % 2][warp][row]
  float* sums;  // the rows' final sums: [warp][row]
  uint32_t full, empty;
};

template <class Cfg>
__device__ __forceinline__ MlaRowsSmem mla_rows_smem(unsigned char* base) {
  MlaRowsSmem s;
  s.q = base;
  s.q_addr = smem_addr(base);
  s.kv = s.q_addr + Cfg::kQBytes;
  s.p = s.kv + Cfg::kStages * Cfg::kStageBytes;
  s.red = reinterpret_cast<float*>(base + Cfg::kQBytes + Cfg::kStages * Cfg::kStageBytes + 2 * Cfg::kPBytes);
  s.sums = s.red + 2 * 4 * Cfg::kRows;
  s.full = smem_addr(s.sums + 4 * Cfg::kRows);
  s.empty = s.full + 8 * Cfg::kStages;
  return s;
}

// The consumer warpgroup: for each tile, S^T, its softmax and P^T (into P buffer t % 2), then O^T += v^T
// P^T issued ahead of the next tile's S^T (its stage released when it is done, as the 64-row kernel's S
// warpgroup does); at the end out (or the split's partial) and the lse.
template <class Cfg>
__device__ __forceinline__ void mla_rows_consume(const AttnParams& p, const Sequence& seq, const Piece& w,
                                                 const PieceKeys& k, const MlaRowsSmem& sm) {
  using T = typename Cfg::T;
  constexpr int kN = Cfg::kBlockN, kP = Cfg::kPanelBytes, kR = Cfg::kRows;
  const int ctid = threadIdx.x % 128, warp = ctid / 32, lane = ctid % 32, quad = lane % 4;
  const int64_t n_tiles = k.tile_end - k.tile_begin;
  if (n_tiles > 0) {  // (a split past a short sequence's tiles has no key: no Q to load)
    load_q_rows<T, Cfg::kChunksK, Cfg::kChunks, kR>(p, seq, w.i, w.kv_head, w.m0, sm.q, Cfg::kQPanelBytes);
    fence_proxy_async();  // Q is read by wgmma (async proxy)
    named_barrier_sync(Cfg::kBarrier, 128);
  }
  // This thread's rows (N columns): g = 2 j + c is row 8 j + 2 quad + c; its keys (M rows) of a tile:
  // 16 warp + lane / 4 and + 8.
  QueryRow row[4];
#pragma unroll
  for (int g = 0; g < 4; ++g)
    row[g] = query_row(p, seq, w.i, w.kv_head, w.m0 + 8 * (g / 2) + 2 * quad + g % 2);
  const int64_t kp_piece = k.keys.first + k.tile_begin * kN;
  const int64_t to_first = k.keys.all_first - kp_piece, to_last = k.keys.all_last - kp_piece - kN + 1;
  const int in_first = static_cast<int>(to_first <= 0 ? 0 : (to_first + kN - 1) / kN);
  const int in_last = static_cast<int>(to_last < 0 ? -1 : to_last / kN);
  const int32_t kp_thread = static_cast<int32_t>(kp_piece) + 16 * warp + lane / 4;

  float o[8][8];  // O^T: 64-channel block mb, element e
#pragma unroll
  for (int mb = 0; mb < 8; ++mb) {
#pragma unroll
    for (int e = 0; e < 8; ++e) o[mb][e] = 0.f;
  }
  const float factor = score_factor(p);
  float row_max[4], row_sum[4];  // row_sum: this thread's share (its keys), summed over the CTA at the end
#pragma unroll
  for (int g = 0; g < 4; ++g) {
    row_max[g] = -INFINITY;
    row_sum[g] = 0.f;
  }
  const SmemDesc kv_desc(desc_k_major(sm.kv)), q_desc(desc_k_major(__shfl_sync(0xffffffffu, sm.q_addr, 0)));
  const SmemDesc v_desc(desc_mn_major(sm.kv, kP)), p_desc(desc_k_major(sm.p));

  auto wait_full = [&](int64_t tile) {
    const uint32_t t32 = static_cast<uint32_t>(tile);
    const int stage = static_cast<int>(t32 % Cfg::kStages);
    mbar_wait(sm.full + 8 * stage, (t32 / Cfg::kStages) & 1);
    fence_proxy_async();  // the stage was written by cp.async (generic proxy)
    return stage;
  };
  // S^T = [k v] [q qv]^T over the 9 panels' 36 k-steps of 16 channels (32 bytes of a 128-byte row).
  auto issue_s = [&](float(&s)[8], int stage) {
#pragma unroll
    for (int kk = 0; kk < Cfg::kPanels * 4; ++kk) {
      const uint32_t in_panel = (kk % 4) * 32;
      wgmma_ss<T, kR>(s, kv_desc.at(stage * Cfg::kStageBytes + (kk / 4) * kP + in_panel),
                      q_desc.at((kk / 4) * Cfg::kQPanelBytes + in_panel), kk > 0);
    }
    wgmma_commit();
  };
  // O^T[64 mb .. + 64) += v^T (channels along M: v's panel 1 + mb read MN-major, 16 keys a k-step = 2048
  // bytes) P^T (P buffer b: K-major, 16 keys = 32 bytes a k-step).
  auto issue_pv = [&](int stage, int b) {
#pragma unroll
    for (int mb = 0; mb < 8; ++mb) {
#pragma unroll
      for (int kk = 0; kk < kN / 16; ++kk) {
        wgmma_ss_amn<T, kR>(o[mb], v_desc.at(stage * Cfg::kStageBytes + (1 + mb) * kP + kk * 2048),
                            p_desc.at(b * Cfg::kPBytes + kk * 32), 1);
      }
    }
    wgmma_commit();
  };
  auto fence_o = [&] {
#pragma unroll
    for (int mb = 0; mb < 8; ++mb) fence_registers(o[mb]);
  };
  // The score mods, the rows' maxima over the CTA (lanes with this quad: xor 4, 8, 16; the warps through
  // red[tile % 2]: a warp rewrites a buffer only after the next tile's barrier, past every read of it), P =
  // 2^(s - max), the thread's share of the sums, and how much each row's max moved.
  auto softmax = [&](float(&s)[8], int64_t tile, float(&correction)[4]) {
    const int t = static_cast<int>(tile);
    MlaRowsScoreTile score_tile{s, row, kp_thread + t * kN};
    apply_score_mods<true>(p, static_cast<int32_t>(k.kv_len), t >= in_first && t <= in_last, score_tile);
    float mx[4];
#pragma unroll
    for (int g = 0; g < 4; ++g) mx[g] = fmaxf(s[4 * (g / 2) + g % 2], s[4 * (g / 2) + 2 + g % 2]);
#pragma unroll
    for (int lanes = 4; lanes <= 16; lanes *= 2) {
#pragma unroll
      for (int g = 0; g < 4; ++g) mx[g] = fmaxf(mx[g], __shfl_xor_sync(0xffffffffu, mx[g], lanes));
    }
    float* red = sm.red + (t % 2) * 4 * kR;
    if (lane < 4) {  // (lane == quad: rows 8 j + 2 lane + c)
#pragma unroll
      for (int g = 0; g < 4; ++g) red[warp * kR + 8 * (g / 2) + 2 * lane + g % 2] = mx[g];
    }
    named_barrier_sync(Cfg::kBarrier, 128);
#pragma unroll
    for (int g = 0; g < 4; ++g) {
      const int r = 8 * (g / 2) + 2 * quad + g % 2;
      const float m_all = fmaxf(fmaxf(red[r], red[kR + r]), fmaxf(red[2 * kR + r], red[3 * kR + r]));
      const float m_new = fmaxf(row_max[g], m_all);
      const float base = safe_max_base(m_new) * factor;  // log2 units
      correction[g] = m_new == row_max[g] ? 1.f : fast_exp2(row_max[g] * factor - base);
      row_max[g] = m_new;
      const int e0 = 4 * (g / 2) + g % 2;
      s[e0] = fast_exp2(fmaf(s[e0], factor, -base));
      s[e0 + 2] = fast_exp2(fmaf(s[e0 + 2], factor, -base));
      row_sum[g] = row_sum[g] * correction[g] + (s[e0] + s[e0 + 2]);
    }
  };
  // P^T into P buffer b as [row][key] (16 rows of 128 bytes, 128B-swizzled): this thread's 8 values, 2
  // bytes each; then visible to wgmma (the async proxy) and to the whole warpgroup.
  auto write_p = [&](const float(&s)[8], int b) {
    const int key0 = 16 * warp + lane / 4;
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const int r = 8 * (e / 4) + 2 * quad + e % 2, key = key0 + 8 * ((e / 2) % 2);
      const uint32_t at = sm.p + b * Cfg::kPBytes + swizzled(r, key / 8, Cfg::kPBytes) + 2 * (key % 8);
      const T v = from_float<T>(s[e]);
      asm volatile("st.shared.b16 [%0], %1;\n" ::"r"(at), "h"(*reinterpret_cast<const unsigned short*>(&v))
                   : "memory");
    }
    fence_proxy_async();
    named_barrier_sync(Cfg::kBarrier, 128);
  };

  if (n_tiles > 0) {
    float s[8];
    const int stage0 = wait_full(0);
    wgmma_fence();
    issue_s(s, stage0);
    wgmma_wait<0>();
    fence_registers(s);
    float correction[4];
    softmax(s, 0, correction);  // O is still zero: nothing to rescale
    write_p(s, 0);
  }
  for (int64_t tile = 0; tile + 1 < n_tiles; ++tile) {
    const int stage = static_cast<int>(static_cast<uint32_t>(tile) % Cfg::kStages);
    fence_o();
    wgmma_fence();
    issue_pv(stage, static_cast<int>(tile % 2));
    float s[8];
    const int next = wait_full(tile + 1);
    wgmma_fence();  // (after the wait's loop: without it ptxas serializes every wgmma, C7520)
    issue_s(s, next);
    wgmma_wait<1>();  // P_t v_t is done: the stage and P buffer t % 2 are free
    fence_o();
    warp_arrive(sm.empty + 8 * stage);
    wgmma_wait<0>();
    fence_registers(s);
    float correction[4];
    softmax(s, tile + 1, correction);
    if (__any_sync(0xffffffffu, correction[0] != 1.f || correction[1] != 1.f || correction[2] != 1.f ||
                                    correction[3] != 1.f)) {
#pragma unroll
      for (int mb = 0; mb < 8; ++mb) {
#pragma unroll
        for (int e = 0; e < 8; ++e) o[mb][e] *= correction[2 * (e / 4) + e % 2];
      }
    }
    write_p(s, static_cast<int>((tile + 1) % 2));
  }
  if (n_tiles > 0) {  // the last tile's P v
    const int stage = static_cast<int>(static_cast<uint32_t>(n_tiles - 1) % Cfg::kStages);
    fence_o();
    wgmma_fence();
    issue_pv(stage, static_cast<int>((n_tiles - 1) % 2));
    wgmma_wait<0>();
    fence_o();
    warp_arrive(sm.empty + 8 * stage);
  }

  // The rows' sums over the CTA (lanes xor 4, 8, 16; the warps through shared memory), then out = O / l
  // with the sink (end_row) or the split's normalized partial; lse by warp 0's lanes 0-3.
#pragma unroll
  for (int lanes = 4; lanes <= 16; lanes *= 2) {
#pragma unroll
    for (int g = 0; g < 4; ++g) row_sum[g] += __shfl_xor_sync(0xffffffffu, row_sum[g], lanes);
  }
  if (lane < 4) {
#pragma unroll
    for (int g = 0; g < 4; ++g) sm.sums[warp * kR + 8 * (g / 2) + 2 * lane + g % 2] = row_sum[g];
  }
  named_barrier_sync(Cfg::kBarrier, 128);
  const int64_t rows = static_cast<int64_t>(seq.q_len) * p.group;
#pragma unroll
  for (int g = 0; g < 4; ++g) {
    const int r_in = 8 * (g / 2) + 2 * quad + g % 2;
    const int64_t r = w.m0 + r_in;
    if (r >= rows) continue;
    const float l = (sm.sums[r_in] + sm.sums[kR + r_in]) + (sm.sums[2 * kR + r_in] + sm.sums[3 * kR + r_in]);
    const int64_t t = split_row(r, p.group).t;
    const int h = row[g].head;
    const int64_t prow = piece_partial_row(p, w, seq, r);
    const RowEnd end = end_row(RowState{row_max[g] * factor, l}, row[g].attends, prow < 0, p.sinks, h, 1.f);
    const bool lse_writer = warp == 0 && lane < 4;
#pragma unroll
    for (int mb = 0; mb < 8; ++mb) {
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int c = 64 * mb + 16 * warp + lane / 4 + 8 * hh;
        const float x = o[mb][4 * (g / 2) + 2 * hh + g % 2] * end.o_scale;
        if (prow >= 0) {
          p.o_partial[prow * p.head_dim_v + c] = x;
        } else {
          out_row<T>(p, seq, w.i, t, h)[c] = from_float<T>(x);
        }
      }
    }
    if (lse_writer) {
      if (prow >= 0) {
        p.lse_partial[prow] = end.lse;
      } else if (p.lse) {
        *lse_at(p, seq, w.i, t, h) = end.lse;
      }
    }
  }
}

template <class Cfg>
__device__ __forceinline__ void mla_rows_cta(const PrefillArgs& a) {
  const AttnParams& p = a.p;
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw = smem_addr(smem_raw);  // 1024-byte aligned: the swizzle is a function of the address
  const MlaRowsSmem sm = mla_rows_smem<Cfg>(smem_raw + ((1024 - raw % 1024) % 1024));

  const CtaRows cta = cta_rows<Cfg>(a);
  const Piece w{cta.i, cta.kv_head, cta.m0, static_cast<int>(blockIdx.y), 0, 0, -1, -1};
  const Sequence seq = load_sequence(p.seq, w.i, p.errors, threadIdx.x == 0);
  if (!seq.rows_known) return;  // cu_seqlens_q is broken: no row of out is known to be ours
  if (w.m0 >= static_cast<int64_t>(seq.q_len) * p.group) return;
  const PieceKeys k = piece_keys<Cfg::kBlockN>(p, w, seq, Cfg::kRows);
  if (!check_piece<Cfg::kBlockN>(p, w, seq, k)) {  // NaN rows (NaN partials: the combine's NaN)
    cuda::write_nan_rows<typename Cfg::T, Cfg::kRows, Cfg::kThreads>(p, w, seq);
    return;
  }
  const int64_t n_tiles = k.tile_end - k.tile_begin;
  if (threadIdx.x == 0) {
    for (int s = 0; s < Cfg::kStages; ++s) {
      mbar_init(sm.full + 8 * s, Cfg::kFullArrivals);
      mbar_init(sm.empty + 8 * s, Cfg::kEmptyArrivals);
    }
  }
  __syncthreads();
  // (Warp-uniform to the compiler through the shuffle: wgmma in a branch it cannot prove warpgroup-uniform
  // is serialized, ptxas C7520.)
  const int wg = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x / 128), 0);
  if (wg == 0) {
    wait_for_prior_grid();  // launched early after the append (PDL): the appended K/V are in place past here
    MlaSmem stages{};       // the 64-row kernel's producer: its stages and their barriers
    stages.kv = sm.kv;
    stages.full = sm.full;
    stages.empty = sm.empty;
    mla_produce<Cfg>(p, seq, w.kv_head, k.slot0 + k.tile_begin * Cfg::kBlockN, n_tiles, stages);
    return;
  }
  mla_rows_consume<Cfg>(p, seq, w, k, sm);
}

#endif  // sm_90a

// The kernel; empty in passes other than sm_90a (the launcher checks that the sm_90a binary is loaded).
template <class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, 1) mla_rows_kernel(const __grid_constant__ PrefillArgs a) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  allow_dependent_launch();  // the split combine may be scheduled now; it waits for this grid's end
  mla_rows_cta<Cfg>(a);
#endif
}

}  // namespace kvattn::cuda::sm90
