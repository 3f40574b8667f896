// The attention kernels: FlashAttention-2 style on mma.sync; a general kernel (64-row CTAs) and a decode
// kernel (16 rows, the warps splitting each key tile), one body (attention_cta).
//
// A pass of attention_cta computes one piece (schedule.cuh): the m-block of packed rows of a (sequence,
// kv head) against a run of its key tiles. The g query heads of a kv head and the query tokens of the
// m-block share every K/V tile read. Per key tile:
//   S = scale * (Q K^T [+ Qv V^T]);  softcap; ALiBi; mask          (registers, fp32, log2 units)
//   m = max(m, rowmax S);  P = exp2(S - m);  l = l * exp2(m_old - m) + rowsum P
//   O = O * exp2(m_old - m) + P V
// K/V tiles are gathered row by row through the page table with cp.async (invalid slots read a row of
// zeros, so NaN garbage outside the valid slots never reaches S or P V), double-buffered.
// fp8 caches: the stages hold fp8 rows (half the bytes to load); each tile is converted (exactly) into one
// fp16/bf16 tile for the tensor cores. The descales are constant over a CTA (sequence, kv head):
//   S = qd kd (Q K^T) + qd vd (Qv V^T) (the qv term in its own accumulator), O = vd P V at the end.
#pragma once

#include <cmath>

#include "cuda/attention/config.cuh"
#include "cuda/attention/params.cuh"
#include "cuda/attention/schedule.cuh"
#include "cuda/attention/tile_io.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/common/softmax.cuh"

namespace kvattn::cuda {

// Rows [m0, m0 + kRows) of an offending sequence (up to q_len * g): NaN in out / lse or in the partials.
template <class Cfg, int kRows>
__device__ inline void write_nan_rows(const AttnParams& p, const Piece& w, const Sequence& seq) {
  const int64_t rows = static_cast<int64_t>(seq.q_len) * p.group;
  for (int idx = threadIdx.x; idx < kRows * p.head_dim_v; idx += Cfg::kNThreads) {
    const int64_t r = w.m0 + idx / p.head_dim_v;
    const int c = idx % p.head_dim_v;
    if (r >= rows) continue;
    const int64_t t = r / p.group;
    const int h = w.kv_head * p.group + static_cast<int>(r % p.group);
    const int64_t prow = piece_partial_row(p, w, seq, r);
    if (prow >= 0) {
      p.o_partial[prow * p.head_dim_v + c] = NAN;
      if (c == 0) p.lse_partial[prow] = NAN;
    } else {
      using T = typename Cfg::T;
      T* o = static_cast<T*>(p.out.ptr) + w.i * p.out.batch_stride + (seq.q_row0 + t) * p.out.token_stride +
             h * p.out.head_stride;
      o[c] = from_float<T>(NAN);
      if (c == 0 && p.lse) {
        p.lse[w.i * p.lse_batch_stride + h * p.lse_head_stride + (seq.q_row0 + t) * p.lse_token_stride] = NAN;
      }
    }
  }
}

// One CTA. kKeySplit (decode: at most 16 packed rows) gives the 4 warps the same 16 rows and a quarter of
// each key tile each, merging their (m, l, O) at the end, instead of 16 rows each: 4x less tensor-core and
// softmax work when the rows would be mostly padding.
template <class Cfg, bool kKeySplit>
__device__ __forceinline__ void attention_cta(const AttnParams& p, const Piece& w, unsigned char* smem_raw,
                                              KvRowPtrs (*s_rows)[Cfg::kBlockN]) {  // (stages, kBlockN)
  using T = typename Cfg::T;
  constexpr int kBlockN = Cfg::kBlockN;
  constexpr int kRows = kKeySplit ? 16 : Cfg::kBlockM;  // packed rows of the CTA
  constexpr int kKeysPerWarp = kKeySplit ? kBlockN / Cfg::kNWarps : kBlockN;
  static_assert(!kKeySplit || (Cfg::kWarpsDv == 1 && kKeysPerWarp % 16 == 0), "key split: 16-key mma steps");
  constexpr int kNTilesS = kKeysPerWarp / 8;     // 8-key column tiles of this warp's S
  constexpr int kNTilesO = Cfg::kDvPerWarp / 8;  // 8-column tiles of a warp's O
  constexpr int kStages = attention_stages(kKeySplit);
  using TKV = typename Cfg::TKV;
  constexpr int kConvElems = Cfg::kKvFp8 ? Cfg::kKStage + Cfg::kVStage : 0;  // the converted tile, in T
  static_assert(attention_smem_bytes(Cfg::kHeadDim, Cfg::kHeadDimV, true, kKeySplit, Cfg::kKvFp8) ==
                    2 * (kRows * (Cfg::kStrideQK + Cfg::kStrideV) + kConvElems) +
                        sizeof(TKV) * kStages * (Cfg::kKStageKv + Cfg::kVStageKv),
                "the kernel's shared memory is the plan's");
  T* s_q = reinterpret_cast<T*>(smem_raw);                          // (kRows, kHeadDim)
  TKV* s_k = reinterpret_cast<TKV*>(s_q + kRows * Cfg::kStrideQK);  // (kStages, kBlockN, kHeadDim) as stored
  TKV* s_v = s_k + kStages * Cfg::kKStageKv;                        // (kStages, kBlockN, kHeadDimV) as stored
  T* s_k_conv = reinterpret_cast<T*>(s_v + kStages * Cfg::kVStageKv);  // fp8: (kBlockN, kHeadDim) in T
  T* s_v_conv = s_k_conv + (Cfg::kKvFp8 ? Cfg::kKStage : 0);           // fp8: (kBlockN, kHeadDimV) in T
  T* s_qv = s_k_conv + kConvElems;                                     // (kRows, kHeadDimV), with qv only

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int i = w.i, kv_head = w.kv_head;
  const int64_t m0 = w.m0;

  const Sequence seq = load_sequence(p.seq, i, p.errors, threadIdx.x == 0);
  if (!seq.rows_known) return;  // cu_seqlens_q is broken: no row of out is known to be ours
  const int64_t rows = static_cast<int64_t>(seq.q_len) * p.group;
  if (m0 >= rows) return;

  // Keys visible to the attending rows of this m-block, and this piece's tiles of them.
  const KeyRange keys = key_range(p, seq, m0, kRows, kBlockN);
  const int64_t kv_len = seq.end - seq.leftpad;
  const int64_t used_rows = static_cast<int64_t>(seq.q_used) * p.group;
  const int64_t kp_first = keys.first, kp_all_first = keys.all_first, kp_all_last = keys.all_last;
  const int64_t n_tiles = keys.tiles;
  int64_t tile_begin = min(n_tiles, w.tile_begin), tile_end = min(n_tiles, w.tile_end);
  if (w.split >= 0) {  // static splits: the split's share of whole tiles
    const int64_t tiles_per_split =
        p.chunk_keys > 0 ? p.chunk_keys / kBlockN : (n_tiles + p.num_splits - 1) / p.num_splits;
    tile_begin = min(n_tiles, w.split * tiles_per_split);
    tile_end = min(n_tiles, tile_begin + tiles_per_split);
  }
  const int64_t slot0 = seq.leftpad + kp_first;

  // The first K/V tiles are requested before the checks and the Q load, so that their latency overlaps
  // them (the row pointers never leave the cache, whatever a page-table entry holds).
  // kStages - 1 tiles are in flight while one is computed. Every step commits one cp.async group (empty
  // past the last tile) so that wait_group<kStages - 1> always means "the tile about to be computed".
  // The page-table entries of a tile are loaded one tile before its row pointers are computed.
  int32_t next_entry = tile_begin < tile_end ? prefetch_page<Cfg>(p, seq, slot0 + tile_begin * kBlockN) : 0;
  auto address = [&](int64_t tile, int stage) {
    if (tile < tile_end) {
      address_tile<Cfg>(p, seq, kv_head, slot0 + tile * kBlockN, next_entry, s_rows[stage]);
      next_entry = tile + 1 < tile_end ? prefetch_page<Cfg>(p, seq, slot0 + (tile + 1) * kBlockN) : 0;
    }
  };
  auto issue = [&](int64_t tile, int stage) {
    if (tile < tile_end) {
      TKV* k_dst = s_k + stage * Cfg::kKStageKv;
      TKV* v_dst = s_v + stage * Cfg::kVStageKv;
      if (p.kv_vec16) {
        gather_rows<Cfg, Cfg::kHeadDim, Cfg::kStrideQKKv, false>(p.head_dim, s_rows[stage], k_dst);
        gather_rows<Cfg, Cfg::kHeadDimV, Cfg::kStrideVKv, true>(p.head_dim_v, s_rows[stage], v_dst);
      } else {
        gather_rows_unaligned<Cfg, Cfg::kHeadDim, Cfg::kStrideQKKv, false>(p.head_dim, s_rows[stage], k_dst);
        gather_rows_unaligned<Cfg, Cfg::kHeadDimV, Cfg::kStrideVKv, true>(p.head_dim_v, s_rows[stage], v_dst);
      }
    }
    cp_async_commit();
  };
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) address(tile_begin + s, s);
  __syncthreads();        // the first row pointers visible
  wait_for_prior_grid();  // launched early after the append (PDL): the appended K/V are in place past here
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) issue(tile_begin + s, s);

  // Page ids of the whole sequence [leftpad, end), shared among the pieces of this (m-block, kv head):
  // every group checks them all, and an offending piece's NaN reaches every row through the combine.
  bool ok = check_unique_row(p.seq, i, p.errors) && seq.ok;
  if (p.seq.page_table && ok) {
    int64_t begin, end;
    if (w.split >= 0) {
      const int64_t share = (kv_len + p.num_splits - 1) / p.num_splits;
      begin = seq.leftpad + w.split * share;
      end = min(seq.end, begin + share);
    } else {  // its own tiles, and the slots before (after) the visible keys for the first (last) piece
      begin = tile_begin == 0 ? seq.leftpad : slot0 + tile_begin * kBlockN;
      end = tile_end == n_tiles ? seq.end : min(seq.end, slot0 + tile_end * kBlockN);
    }
    ok = check_pages(p.seq, seq, begin, end, p.errors);
  }
  if (!ok) {
    cp_async_wait<0>();  // nothing may land in shared memory after the CTA is gone
    write_nan_rows<Cfg, kRows>(p, w, seq);
    return;
  }

  load_q<Cfg, kRows>(p, seq, i, kv_head, m0, s_q, s_qv);

  // fp8: the descales of this CTA's (sequence, kv head).
  float qk_descale = 1.f, qv_descale = 1.f, o_descale = 1.f;
  if constexpr (Cfg::kKvFp8) {
    const float qd = descale_at(p.q_descale, p.q_descale_strides, i, kv_head);
    const float vd = descale_at(p.v_descale, p.v_descale_strides, i, kv_head);
    qk_descale = qd * descale_at(p.k_descale, p.k_descale_strides, i, kv_head);
    qv_descale = qd * vd;
    o_descale = vd;
  }

  // This thread's two rows (mma C layout: lane / 4 and lane / 4 + 8 of the warp's 16).
  const int warp_m = kKeySplit ? 0 : warp / Cfg::kWarpsDv, warp_dv = kKeySplit ? 0 : warp % Cfg::kWarpsDv;
  const int key0 = kKeySplit ? warp * kKeysPerWarp : 0;  // this warp's first key column of a tile
  const int quad = lane % 4;
  int32_t row_qp[2];
  bool row_attends[2];
  float row_slope[2];  // ALiBi slope in log2 units
  int row_head[2];
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    const int64_t r = m0 + warp_m * 16 + lane / 4 + 8 * k;
    row_attends[k] = r < used_rows;
    row_qp[k] = static_cast<int32_t>(r / p.group + kv_len - seq.q_used);
    row_head[k] = kv_head * p.group + static_cast<int>(r % p.group);
    row_slope[k] = p.alibi_slopes && row_attends[k]
                       ? p.alibi_slopes[i * p.alibi_batch_stride + row_head[k]] * kLog2e
                       : 0.f;
  }

  float o_acc[kNTilesO][4];  // (16, kDvPerWarp) of this warp, mma C layout
#pragma unroll
  for (int n = 0; n < kNTilesO; ++n) o_acc[n][0] = o_acc[n][1] = o_acc[n][2] = o_acc[n][3] = 0.f;
  float row_max[2] = {-INFINITY, -INFINITY};  // log2 units
  float row_sum[2] = {0.f, 0.f};              // this thread's share; quad-reduced at the end

  int stage = 0;
  for (int64_t tile = tile_begin; tile < tile_end; ++tile) {
    const int fill = stage == 0 ? kStages - 1 : stage - 1;  // the stage of tile + kStages - 1
    address(tile + kStages - 1, fill);
    __syncthreads();  // row pointers written; the stage being refilled no longer read by the last compute
    issue(tile + kStages - 1, fill);
    cp_async_wait<kStages - 1>();
    __syncthreads();  // this tile's K/V visible to every warp

    const T* s_k_tile;
    const T* s_v_tile;
    if constexpr (Cfg::kKvFp8) {
      // The fp8 stage -> the T tile. The previous tile's readers of s_*_conv all passed this iteration's
      // first __syncthreads, so it is free; the barrier after makes the T tile visible to every warp.
      convert_rows<Cfg, Cfg::kHeadDim, Cfg::kStrideQKKv, Cfg::kStrideQK>(s_k + stage * Cfg::kKStageKv,
                                                                         s_k_conv);
      convert_rows<Cfg, Cfg::kHeadDimV, Cfg::kStrideVKv, Cfg::kStrideV>(s_v + stage * Cfg::kVStageKv,
                                                                        s_v_conv);
      __syncthreads();
      s_k_tile = s_k_conv;
      s_v_tile = s_v_conv;
    } else {
      s_k_tile = s_k + stage * Cfg::kKStage;
      s_v_tile = s_v + stage * Cfg::kVStage;
    }

    // S = Q K^T (+ Qv V^T): (16, kKeysPerWarp) per warp.
    float s_acc[kNTilesS][4];
#pragma unroll
    for (int n = 0; n < kNTilesS; ++n) s_acc[n][0] = s_acc[n][1] = s_acc[n][2] = s_acc[n][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < Cfg::kHeadDim / 16; ++kk) {
      uint32_t a[4];
      ldmatrix_x4(a, smem_addr(s_q + (warp_m * 16 + lane % 16) * Cfg::kStrideQK + kk * 16 + (lane / 16) * 8));
#pragma unroll
      for (int np = 0; np < kKeysPerWarp / 16; ++np) {
        uint32_t b[4];
        ldmatrix_x4(b,
                    smem_addr(s_k_tile + (key0 + np * 16 + (lane & 7) + ((lane >> 4) << 3)) * Cfg::kStrideQK +
                              kk * 16 + ((lane >> 3) & 1) * 8));
        mma_m16n8k16<T>(s_acc[2 * np], a, b[0], b[1]);
        mma_m16n8k16<T>(s_acc[2 * np + 1], a, b[2], b[3]);
      }
    }
    // acc += Qv V^T
    auto add_qv_scores = [&](float(&acc)[kNTilesS][4]) {
#pragma unroll
      for (int kk = 0; kk < Cfg::kHeadDimV / 16; ++kk) {
        uint32_t a[4];
        ldmatrix_x4(a,
                    smem_addr(s_qv + (warp_m * 16 + lane % 16) * Cfg::kStrideV + kk * 16 + (lane / 16) * 8));
#pragma unroll
        for (int np = 0; np < kKeysPerWarp / 16; ++np) {
          uint32_t b[4];
          ldmatrix_x4(
              b, smem_addr(s_v_tile + (key0 + np * 16 + (lane & 7) + ((lane >> 4) << 3)) * Cfg::kStrideV +
                           kk * 16 + ((lane >> 3) & 1) * 8));
          mma_m16n8k16<T>(acc[2 * np], a, b[0], b[1]);
          mma_m16n8k16<T>(acc[2 * np + 1], a, b[2], b[3]);
        }
      }
    };
    if constexpr (Cfg::kKvFp8) {
      // Dequantize the dot products: S = qd kd (Q K^T) + qd vd (Qv V^T).
#pragma unroll
      for (int n = 0; n < kNTilesS; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) s_acc[n][e] *= qk_descale;
      }
      if (p.qv.ptr != nullptr) {
        float qv_acc[kNTilesS][4];
#pragma unroll
        for (int n = 0; n < kNTilesS; ++n) qv_acc[n][0] = qv_acc[n][1] = qv_acc[n][2] = qv_acc[n][3] = 0.f;
        add_qv_scores(qv_acc);
#pragma unroll
        for (int n = 0; n < kNTilesS; ++n) {
#pragma unroll
          for (int e = 0; e < 4; ++e) s_acc[n][e] += qv_descale * qv_acc[n][e];
        }
      }
    } else {
      if (p.qv.ptr != nullptr) add_qv_scores(s_acc);
    }

    // Scores in log2 units; invisible keys (masked, or invalid slots) become -inf before any max or sum.
    // Rows that do not attend are left alone here and zeroed in the epilogue.
    const int32_t tile_kp0 = static_cast<int32_t>(kp_first + tile * kBlockN);  // kp of key column 0
    const bool tile_inside = tile_kp0 >= kp_all_first && tile_kp0 + kBlockN - 1 <= kp_all_last;
    const int32_t warp_kp0 = tile_kp0 + key0;  // kp of this warp's key column 0
    if (p.softcap > 0.f) {
      const float inner = p.scale / p.softcap, outer = p.softcap * kLog2e;
#pragma unroll
      for (int n = 0; n < kNTilesS; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) s_acc[n][e] = outer * tanhf(s_acc[n][e] * inner);
      }
    } else {
#pragma unroll
      for (int n = 0; n < kNTilesS; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) s_acc[n][e] *= p.scale_log2;
      }
    }
    if (p.alibi_slopes) {
#pragma unroll
      for (int n = 0; n < kNTilesS; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int32_t kp = warp_kp0 + n * 8 + 2 * quad + (e & 1);
          s_acc[n][e] -= row_slope[e / 2] * fabsf(static_cast<float>(row_qp[e / 2] - kp));
        }
      }
    }
    if (!tile_inside) {
      const int32_t kv_len32 = static_cast<int32_t>(kv_len);
#pragma unroll
      for (int n = 0; n < kNTilesS; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int32_t kp = warp_kp0 + n * 8 + 2 * quad + (e & 1);
          const bool visible = kp < kv_len32 && p.mask.visible(row_qp[e / 2], kp);
          if (!visible) s_acc[n][e] = -INFINITY;
        }
      }
    }

    // Online softmax: rescale what was accumulated when the row max grows (O only when some row of the
    // warp needs it: once the maxima settle, most tiles skip the kDvPerWarp / 2 multiplies a thread).
    float correction[2];
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      float mx = row_max[k];
#pragma unroll
      for (int n = 0; n < kNTilesS; ++n) mx = fmaxf(mx, fmaxf(s_acc[n][2 * k], s_acc[n][2 * k + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float base = safe_max_base(mx);
      correction[k] = mx == row_max[k] ? 1.f : fast_exp2(row_max[k] - base);
      row_max[k] = mx;
      row_sum[k] *= correction[k];
#pragma unroll
      for (int n = 0; n < kNTilesS; ++n) {
        s_acc[n][2 * k] = fast_exp2(s_acc[n][2 * k] - base);
        s_acc[n][2 * k + 1] = fast_exp2(s_acc[n][2 * k + 1] - base);
        row_sum[k] += s_acc[n][2 * k] + s_acc[n][2 * k + 1];
      }
    }
    if (__any_sync(0xffffffffu, correction[0] != 1.f || correction[1] != 1.f)) {
#pragma unroll
      for (int n = 0; n < kNTilesO; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) o_acc[n][e] *= correction[e / 2];
      }
    }

    // O += P V: P leaves the S accumulators as the A operand (two 8-key tiles = one 16-key k-step).
#pragma unroll
    for (int kk = 0; kk < kKeysPerWarp / 16; ++kk) {
      const uint32_t a[4] = {pack2<T>(s_acc[2 * kk][0], s_acc[2 * kk][1]),
                             pack2<T>(s_acc[2 * kk][2], s_acc[2 * kk][3]),
                             pack2<T>(s_acc[2 * kk + 1][0], s_acc[2 * kk + 1][1]),
                             pack2<T>(s_acc[2 * kk + 1][2], s_acc[2 * kk + 1][3])};
#pragma unroll
      for (int np = 0; np < Cfg::kDvPerWarp / 16; ++np) {
        uint32_t b[4];
        const int col = warp_dv * Cfg::kDvPerWarp + np * 16 + (lane >> 4) * 8;
        ldmatrix_x4_trans(
            b, smem_addr(s_v_tile + (key0 + kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * Cfg::kStrideV +
                         col));
        mma_m16n8k16<T>(o_acc[2 * np], a, b[0], b[1]);
        mma_m16n8k16<T>(o_acc[2 * np + 1], a, b[2], b[3]);
      }
    }
    stage = stage + 1 == kStages ? 0 : stage + 1;
  }

  if constexpr (kKeySplit) {
    // Warps 1.. hand their (m, l, O) to warp 0 through shared memory (the K/V stages are free now):
    // m = max_w m_w;  l = sum_w l_w 2^(m_w - m);  O = sum_w O_w 2^(m_w - m).
    constexpr int kState = 4 + 4 * kNTilesO;  // floats a thread hands over
    static_assert((Cfg::kNWarps - 1) * kState * 32 * 4 <=
                      kStages * (Cfg::kKStageKv + Cfg::kVStageKv) * sizeof(TKV) + kConvElems * sizeof(T),
                  "the merge fits in the K/V stages (and the converted tile that follows them)");
    float* s_state = reinterpret_cast<float*>(s_k);  // (kNWarps - 1, kState, 32)
    __syncthreads();                                 // every warp is done with the last tile
    if (warp > 0) {
      float* mine = s_state + (warp - 1) * kState * 32 + lane;
      mine[0] = row_max[0], mine[32] = row_max[1], mine[64] = row_sum[0], mine[96] = row_sum[1];
#pragma unroll
      for (int n = 0; n < kNTilesO; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) mine[(4 + 4 * n + e) * 32] = o_acc[n][e];
      }
    }
    __syncthreads();
    if (warp > 0) return;  // the caller's barrier keeps the next piece off s_state until warp 0 is done
    for (int w2 = 0; w2 < Cfg::kNWarps - 1; ++w2) {
      const float* theirs = s_state + w2 * kState * 32 + lane;
      float a_scale[2], b_scale[2];
#pragma unroll
      for (int k = 0; k < 2; ++k) {
        const float m_w = theirs[32 * k];
        const float m_new = fmaxf(row_max[k], m_w);
        const float base = safe_max_base(m_new);
        a_scale[k] = exp2f(row_max[k] - base);
        b_scale[k] = exp2f(m_w - base);
        row_max[k] = m_new;
        row_sum[k] = row_sum[k] * a_scale[k] + theirs[64 + 32 * k] * b_scale[k];
      }
#pragma unroll
      for (int n = 0; n < kNTilesO; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          o_acc[n][e] = o_acc[n][e] * a_scale[e / 2] + theirs[(4 + 4 * n + e) * 32] * b_scale[e / 2];
        }
      }
    }
  }

  // Epilogue. A whole unit: out = O / l and lse, the sink counted here; a piece: the normalized partial
  // (O / l, m + log l) without the sink, which the combine counts once.
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    row_sum[k] += __shfl_xor_sync(0xffffffffu, row_sum[k], 1);
    row_sum[k] += __shfl_xor_sync(0xffffffffu, row_sum[k], 2);
  }
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    const int64_t r = m0 + warp_m * 16 + lane / 4 + 8 * k;
    if (r >= rows) continue;
    const int64_t t = r / p.group;
    const int h = row_head[k];
    float m = row_max[k], l = row_attends[k] ? row_sum[k] : 0.f, rescale = 1.f;
    float lse = l > 0.f ? (m + log2f(l)) * kLn2 : -INFINITY;
    const int64_t prow = piece_partial_row(p, w, seq, r);
    if (prow < 0 && p.sinks && row_attends[k]) {
      const float sink_nat = p.sinks[h], sink = sink_nat * kLog2e;
      const float m_new = fmaxf(m, sink);
      rescale = exp2f(m - m_new);
      const bool empty = l == 0.f;
      l = l * rescale + exp2f(sink - m_new);
      m = m_new;
      lse = empty ? sink_nat : (m + log2f(l)) * kLn2;  // an empty row's lse is the sink, exactly
    }
    const float inv_l = l > 0.f ? rescale / l * o_descale : 0.f;  // fp8: out = vd P V
    if (prow >= 0) {
      float* o = p.o_partial + prow * p.head_dim_v;
#pragma unroll
      for (int n = 0; n < kNTilesO; ++n) {
        const int c = warp_dv * Cfg::kDvPerWarp + n * 8 + 2 * quad;
        if (c < p.head_dim_v) o[c] = o_acc[n][2 * k] * inv_l;
        if (c + 1 < p.head_dim_v) o[c + 1] = o_acc[n][2 * k + 1] * inv_l;
      }
      if (warp_dv == 0 && quad == 0) p.lse_partial[prow] = lse;
    } else {
      T* o = static_cast<T*>(p.out.ptr) + i * p.out.batch_stride + (seq.q_row0 + t) * p.out.token_stride +
             h * p.out.head_stride;
#pragma unroll
      for (int n = 0; n < kNTilesO; ++n) {
        const int c = warp_dv * Cfg::kDvPerWarp + n * 8 + 2 * quad;
        if (c < p.head_dim_v) o[c] = from_float<T>(o_acc[n][2 * k] * inv_l);
        if (c + 1 < p.head_dim_v) o[c + 1] = from_float<T>(o_acc[n][2 * k + 1] * inv_l);
      }
      if (p.lse && warp_dv == 0 && quad == 0) {
        p.lse[i * p.lse_batch_stride + h * p.lse_head_stride + (seq.q_row0 + t) * p.lse_token_stride] = lse;
      }
    }
  }
}

// The piece of a CTA of the static-split grid: (m-block, kv head, sequence) from blockIdx.x, the split
// from blockIdx.y.
template <int kRows>
__device__ __forceinline__ Piece static_piece(const AttnParams& p) {
  const int m_block = blockIdx.x % p.m_blocks, bh = blockIdx.x / p.m_blocks;
  return {bh / p.num_kv_heads,
          bh % p.num_kv_heads,
          static_cast<int64_t>(m_block) * kRows,
          static_cast<int>(blockIdx.y),
          0,
          0,
          -1};
}

// The general kernel (prefill, and decode shapes the decode variant does not cover): static splits.
template <class Cfg>
__global__ void __launch_bounds__(Cfg::kNThreads, kGeneralCtasPerSm)
    attention_kernel(const __grid_constant__ AttnParams p) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __shared__ KvRowPtrs s_rows[kGeneralStages][Cfg::kBlockN];
  allow_dependent_launch();  // the split combine may be scheduled now; it waits for this grid's end
  attention_cta<Cfg, false>(p, static_piece<Cfg::kBlockM>(p), smem_raw, s_rows);
}

// The decode variant (plan.key_split), its own kernel so that its register budget allows kDecodeCtasPerSm
// CTAs an SM. Static splits, or the balanced schedule (schedule.cuh): CTA k walks the units of its cost
// range, one piece each.
template <class Cfg>
__global__ void __launch_bounds__(Cfg::kNThreads, kDecodeCtasPerSm)
    attention_decode_kernel(const __grid_constant__ AttnParams p) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __shared__ KvRowPtrs s_rows[kDecodeStages][Cfg::kBlockN];
  allow_dependent_launch();  // the split combine may be scheduled now; it waits for this grid's end
  if constexpr (Cfg::kKeySplitOk) {
    if (!p.balanced) {
      attention_cta<Cfg, true>(p, static_piece<kKeySplitRows>(p), smem_raw, s_rows);
      return;
    }
    const BalancedStart st = balanced_start<kKeySplitRows, Cfg::kBlockN, Cfg::kNThreads>(p);
    const int64_t k = blockIdx.x, g = st.ctas;
    if (k >= g) return;
    const int64_t a = cta_begin(k, g, st.total), b = cta_begin(k + 1, g, st.total);
    int i = st.seq;
    int64_t tiles = st.seq_tiles;
    int h = static_cast<int>((a - st.seq_start) / (tiles + kUnitCost));
    int64_t u_start = st.seq_start + h * (tiles + kUnitCost);
    while (i < p.seq.batch && u_start < b) {
      // The unit's line: kUnitCost of fixed work, then its tiles.
      const int64_t u_end = u_start + tiles + kUnitCost;
      Piece w{i,
              h,
              0,
              -1,
              max(int64_t{0}, max(a, u_start) - u_start - kUnitCost),
              max(int64_t{0}, min(b, u_end) - u_start - kUnitCost),
              -1};
      if (u_start < a || u_end > b) {
        const int slot = u_start < a ? 0 : 1;  // continues into this CTA, or starts here and goes on
        w.partial = (static_cast<int64_t>(slot) * p.balanced_ctas + k) * p.rows_per_unit;
      }
      if (u_start >= a && threadIdx.x == 0) {  // the unit's first piece: tell the combine where they all are
        const int64_t u = static_cast<int64_t>(i) * p.num_kv_heads + h;
        p.unit_pieces[2 * u] = static_cast<int32_t>(k);
        p.unit_pieces[2 * u + 1] = static_cast<int32_t>(cta_of(u_end - 1, g, st.total) - k + 1);
      }
      attention_cta<Cfg, true>(p, w, smem_raw, s_rows);
      __syncthreads();  // the next piece reuses the shared memory
      u_start = u_end;
      if (++h == p.num_kv_heads) {
        h = 0;
        if (++i < p.seq.batch) tiles = unit_tiles<kKeySplitRows, Cfg::kBlockN>(p, i);
      }
    }
  }
}

}  // namespace kvattn::cuda
