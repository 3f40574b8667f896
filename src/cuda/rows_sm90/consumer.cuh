// The Hopper (sm_90a) decode consumer for <= 16 packed rows a kv head with the rows along wgmma's N and the
// keys / channels along its M (the MLA rows kernel, mla_sm90/rows_kernel.cuh, and the d 512 kernel,
// wide_sm90/kernel.cuh): a 64-row tile would spend 48 or more of its rows on padding.
//   S^T (64 keys x 16 rows) = K Q^T: wgmma m64n16k16 over the S operand's panels (A = its key rows as
//     stored, K-major; B = Q's 16 rows, K-major);
//   the score mods and the online softmax per column (a row's keys lie across the warpgroup: lanes by
//     shuffles, the four warps through shared memory once a tile);
//   P^T into shared memory as [row][key] (K-major B), O^T (dv channels x 16 rows) += v^T P^T: dv / 64 x 4
//     wgmma m64n16k16, A = v's panels read transposed (MN-major), 4 dv / 64 x 2 fp32 accumulators a thread.
// The operands come from a ring (Ring): wait_s(t) / wait_v(t) wait for tile t's S / v operand and return its
// offset past ring.base, done_s(t) / done_v(t) release them once their wgmma are done (MLA: one stage holds
// both; d 512: K and V in slots of their own). Accumulator layout of m64n16 (wgmma.cuh): element e of a
// thread holds M row 16 warp + lane / 4 + 8 ((e / 2) % 2), N column 8 (e / 4) + 2 (lane % 4) + e % 2.
// Cfg: T, kRows (16), kBlockN (64), kPanelBytes (a 64-key panel), kSPanels, kDimV, kQPanelBytes (16 rows of a
// panel), kPBytes, kQChunks / kChunks (load_q_rows: q's 16-byte chunks, all of a row's), kBarrier.
#pragma once

#include <cmath>
#include <cstdint>

#include "cuda/attention/epilogue.cuh"
#include "cuda/attention/prologue.cuh"
#include "cuda/attention/schedule.cuh"
#include "cuda/attention/score_mod.cuh"
#include "cuda/common/dtype.cuh"
#include "cuda/common/row_state.hpp"
#include "cuda/common/sequence.cuh"
#include "cuda/prefill_sm90/consumer.cuh"
#include "cuda/prefill_sm90/cta.cuh"
#include "cuda/prefill_sm90/ptx.cuh"
#include "cuda/prefill_sm90/wgmma.cuh"

namespace kvattn::cuda::sm90 {

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)

// The ScoreTile (attention/score_mod.cuh) of S^T: element e is row rows[2 (e / 4) + e % 2] against the key
// kp0 + 8 ((e / 2) % 2).
struct RowsScoreTile {
  float (&s)[8];
  const QueryRow (&rows)[4];
  int32_t kp0;  // kp of this thread's first key (the tile's first + 16 warp + lane / 4)
  template <class F>
  __device__ __forceinline__ void for_each(F f) {
#pragma unroll
    for (int e = 0; e < 8; ++e) f(s[e], rows[2 * (e / 4) + e % 2], kp0 + 8 * ((e / 2) % 2));
  }
};

// The consumer's shared memory: Q (16 rows of each panel), two P buffers, the rows' per-warp maxima of two
// tiles and per-warp sums.
struct RowsSmem {
  unsigned char* q;
  uint32_t q_addr;
  uint32_t p;   // P buffer b at p + b * kPBytes
  float* red;   // the rows' maxima of a tile: [tile % 2][warp][row]
  float* sums;  // the rows' final sums: [warp][row]
};

// A rows kernel's CTA before its roles (both kernels' set-up): its piece (split blockIdx.y of the static
// splits), sequence and keys. False when the CTA has nothing to do: its rows are unknown or past the
// sequence's, or the split's page ids failed their check (NaN rows written: NaN partials for the combine).
struct RowsCta {
  Piece w;
  Sequence seq;
  PieceKeys k;
};
template <class Cfg>
__device__ __forceinline__ bool rows_cta_setup(const PrefillArgs& a, RowsCta& c) {
  const AttnParams& p = a.p;
  const CtaRows cta = cta_rows<Cfg>(a);
  c.w = Piece{cta.i, cta.kv_head, cta.m0, static_cast<int>(blockIdx.y), 0, 0, -1, -1};
  c.seq = load_sequence(p.seq, c.w.i, p.errors, threadIdx.x == 0);
  if (!c.seq.rows_known) return false;  // cu_seqlens_q is broken: no row of out is known to be ours
  if (c.w.m0 >= static_cast<int64_t>(c.seq.q_len) * p.group) return false;
  c.k = piece_keys<Cfg::kBlockN>(p, c.w, c.seq, Cfg::kRows);
  if (!check_piece<Cfg::kBlockN>(p, c.w, c.seq, c.k)) {
    cuda::write_nan_rows<typename Cfg::T, Cfg::kRows, Cfg::kThreads>(p, c.w, c.seq);
    return false;
  }
  return true;
}

// The consumer warpgroup: for each tile, S^T over the ring's S operand, its softmax and P^T (into P buffer
// t % 2), then O^T += v^T P^T issued ahead of the next tile's S^T (the ring's operands released when their
// wgmma are done); at the end out (or the split's partial) and the lse.
template <class Cfg, class Ring>
__device__ __forceinline__ void rows_consume(const AttnParams& p, const Sequence& seq, const Piece& w,
                                             const PieceKeys& k, const RowsSmem& sm, const Ring& ring) {
  using T = typename Cfg::T;
  constexpr int kN = Cfg::kBlockN, kP = Cfg::kPanelBytes, kR = Cfg::kRows;
  const int ctid = threadIdx.x % 128, warp = ctid / 32, lane = ctid % 32, quad = lane % 4;
  const int64_t n_tiles = k.tile_end - k.tile_begin;
  if (n_tiles > 0) {  // (a split past a short sequence's tiles has no key: no Q to load)
    load_q_rows<T, Cfg::kQChunks, Cfg::kChunks, kR>(p, seq, w.i, w.kv_head, w.m0, sm.q, Cfg::kQPanelBytes);
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

  float o[Cfg::kDimV / 64][8];  // O^T: 64-channel block mb, element e
#pragma unroll
  for (int mb = 0; mb < Cfg::kDimV / 64; ++mb) {
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
  const SmemDesc kv_desc(desc_k_major(ring.base)),
      q_desc(desc_k_major(__shfl_sync(0xffffffffu, sm.q_addr, 0)));
  const SmemDesc v_desc(desc_mn_major(ring.base, kP)), p_desc(desc_k_major(sm.p));

  // S^T = K Q^T over the S operand's kSPanels panels (at `at` past the ring's base), 4 k-steps of 16
  // channels (32 bytes of a 128-byte row) a panel.
  auto issue_s = [&](float(&s)[8], uint32_t at) {
#pragma unroll
    for (int kk = 0; kk < Cfg::kSPanels * 4; ++kk) {
      const uint32_t in_panel = (kk % 4) * 32;
      wgmma_ss<T, kR>(s, kv_desc.at(at + (kk / 4) * kP + in_panel),
                      q_desc.at((kk / 4) * Cfg::kQPanelBytes + in_panel), kk > 0);
    }
    wgmma_commit();
  };
  // O^T[64 mb .. + 64) += v^T (channels along M: v's panel mb, at `at` past the ring's base, read MN-major,
  // 16 keys a k-step = 2048 bytes) P^T (P buffer b: K-major, 16 keys = 32 bytes a k-step).
  auto issue_pv = [&](uint32_t at, int b) {
#pragma unroll
    for (int mb = 0; mb < Cfg::kDimV / 64; ++mb) {
#pragma unroll
      for (int kk = 0; kk < kN / 16; ++kk) {
        wgmma_ss_amn<T, kR>(o[mb], v_desc.at(at + mb * kP + kk * 2048), p_desc.at(b * Cfg::kPBytes + kk * 32),
                            1);
      }
    }
    wgmma_commit();
  };
  auto fence_o = [&] {
#pragma unroll
    for (int mb = 0; mb < Cfg::kDimV / 64; ++mb) fence_registers(o[mb]);
  };
  // The score mods, the rows' maxima over the CTA (lanes with this quad: xor 4, 8, 16; the warps through
  // red[tile % 2]: a warp rewrites a buffer only after the next tile's barrier, past every read of it), P =
  // 2^(s - max), the thread's share of the sums, and how much each row's max moved.
  auto softmax = [&](float(&s)[8], int64_t tile, float(&correction)[4]) {
    const int t = static_cast<int>(tile);
    RowsScoreTile score_tile{s, row, kp_thread + t * kN};
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
    const uint32_t s_at = ring.wait_s(0);
    wgmma_fence();
    issue_s(s, s_at);
    wgmma_wait<0>();
    fence_registers(s);
    ring.done_s(0);
    float correction[4];
    softmax(s, 0, correction);  // O is still zero: nothing to rescale
    write_p(s, 0);
  }
  for (int64_t tile = 0; tile + 1 < n_tiles; ++tile) {
    const uint32_t v_at = ring.wait_v(tile);
    fence_o();
    wgmma_fence();
    issue_pv(v_at, static_cast<int>(tile % 2));
    float s[8];
    const uint32_t s_at = ring.wait_s(tile + 1);
    wgmma_fence();  // (after the wait's loop: without it ptxas serializes every wgmma, C7520)
    issue_s(s, s_at);
    wgmma_wait<1>();  // P_t v_t is done: its operand and P buffer t % 2 are free
    fence_o();
    ring.done_v(tile);
    wgmma_wait<0>();
    fence_registers(s);
    ring.done_s(tile + 1);
    float correction[4];
    softmax(s, tile + 1, correction);
    if (__any_sync(0xffffffffu, correction[0] != 1.f || correction[1] != 1.f || correction[2] != 1.f ||
                                    correction[3] != 1.f)) {
#pragma unroll
      for (int mb = 0; mb < Cfg::kDimV / 64; ++mb) {
#pragma unroll
        for (int e = 0; e < 8; ++e) o[mb][e] *= correction[2 * (e / 4) + e % 2];
      }
    }
    write_p(s, static_cast<int>((tile + 1) % 2));
  }
  if (n_tiles > 0) {  // the last tile's P v
    const uint32_t v_at = ring.wait_v(n_tiles - 1);
    fence_o();
    wgmma_fence();
    issue_pv(v_at, static_cast<int>((n_tiles - 1) % 2));
    wgmma_wait<0>();
    fence_o();
    ring.done_v(n_tiles - 1);
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
    for (int mb = 0; mb < Cfg::kDimV / 64; ++mb) {
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

#endif  // sm_90a

}  // namespace kvattn::cuda::sm90
