// The sm_80 mainloop (portable: cp.async, ldmatrix, mma.sync m16n8k16, fp32 accumulation), FlashAttention-2
// style. Per key tile of a piece:
//   S = Q K^T [+ Qv V^T]   (16, keys of the warp) per warp, mma C layout, fp8: descaled
//   score mods              (score_mod.cuh: logits in log2 units, -inf where invisible)
//   m = max(m, rowmax S);  P = 2^(S - m);  l = l 2^(m_old - m) + rowsum P;  O = O 2^(m_old - m) + P V
// K/V tiles are gathered row by row through the page table with cp.async (invalid slots read a row of
// zeros, so NaN garbage outside the valid slots never reaches S or P V), kStages - 1 tiles in flight.
// fp8 caches: the stages hold fp8 rows (half the bytes to load); each tile is converted (exactly) into one
// fp16/bf16 tile for the tensor cores.
// kKeySplit (decode: at most 16 packed rows): the 4 warps hold the same 16 rows and a quarter of each key
// tile each, and merge their (m, l, O) at the end (4x less tensor-core and softmax work than 16 rows a
// warp when the rows would be mostly padding).
#pragma once

#include <cmath>

#include "cuda/attention/config.cuh"
#include "cuda/attention/params.cuh"
#include "cuda/attention/prologue.cuh"
#include "cuda/attention/score_mod.cuh"
#include "cuda/attention/sm80/tile_io.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/common/softmax.cuh"

namespace kvattn::cuda {

template <class Cfg, bool kKeySplit>
struct Sm80Mainloop {
  using T = typename Cfg::T;
  using TKV = typename Cfg::TKV;
  static constexpr int kBlockN = Cfg::kBlockN;
  static constexpr int kRows = kKeySplit ? kKeySplitRows : Cfg::kBlockM;  // packed rows of the CTA
  static constexpr int kKeysPerWarp = kKeySplit ? kBlockN / Cfg::kNWarps : kBlockN;
  static_assert(!kKeySplit || (Cfg::kWarpsDv == 1 && kKeysPerWarp % 16 == 0), "key split: 16-key mma steps");
  static constexpr int kNTilesS = kKeysPerWarp / 8;     // 8-key column tiles of this warp's S
  static constexpr int kNTilesO = Cfg::kDvPerWarp / 8;  // 8-column tiles of a warp's O
  static constexpr int kStages = attention_stages(kKeySplit);
  static constexpr int kConvElems = Cfg::kKvFp8 ? Cfg::kKStage + Cfg::kVStage : 0;  // converted tile, in T
  static_assert(attention_smem_bytes(Cfg::kHeadDim, Cfg::kHeadDimV, true, kKeySplit, Cfg::kKvFp8) ==
                    2 * (kRows * (Cfg::kStrideQK + Cfg::kStrideV) + kConvElems) +
                        sizeof(TKV) * kStages * (Cfg::kKStageKv + Cfg::kVStageKv),
                "the kernel's shared memory is the plan's");

  // The state of a thread: (m, l) of its two rows (mma C layout: lane / 4 and lane / 4 + 8 of the warp's
  // 16) and its (16, kDvPerWarp) of O.
  struct State {
    RowState row[2];
    float o[kNTilesO][4];
  };

  // The scores of a warp as a ScoreTile (score_mod.cuh): the mma C layout.
  using ScoreTile = MmaScoreTile<kNTilesS>;

  const AttnParams& p;
  const Sequence& seq;
  const int kv_head;
  const PieceKeys& k;
  T* s_q;                        // (kRows, kHeadDim)
  TKV* s_k;                      // (kStages, kBlockN, kHeadDim) as stored
  TKV* s_v;                      // (kStages, kBlockN, kHeadDimV) as stored
  T* s_k_conv;                   // fp8: (kBlockN, kHeadDim) in T
  T* s_v_conv;                   // fp8: (kBlockN, kHeadDimV) in T
  T* s_qv;                       // (kRows, kHeadDimV), with qv only
  KvRowPtrs (*s_rows)[kBlockN];  // (kStages, kBlockN)
  int32_t next_entry = 0;        // the page-table entry of this thread's key in the next tile to address

  __device__ __forceinline__ Sm80Mainloop(const AttnParams& p_, const Sequence& seq_, int kv_head_,
                                          const PieceKeys& k_, unsigned char* smem_raw,
                                          KvRowPtrs (*s_rows_)[kBlockN])
      : p(p_), seq(seq_), kv_head(kv_head_), k(k_), s_rows(s_rows_) {
    s_q = reinterpret_cast<T*>(smem_raw);
    s_k = reinterpret_cast<TKV*>(s_q + kRows * Cfg::kStrideQK);
    s_v = s_k + kStages * Cfg::kKStageKv;
    s_k_conv = reinterpret_cast<T*>(s_v + kStages * Cfg::kVStageKv);
    s_v_conv = s_k_conv + (Cfg::kKvFp8 ? Cfg::kKStage : 0);
    s_qv = s_k_conv + kConvElems;
  }

  // The page-table entries of a tile are loaded one tile before its row pointers are computed.
  __device__ __forceinline__ void address(int64_t tile, int stage) {
    if (tile < k.tile_end) {
      address_tile<Cfg>(p, seq, kv_head, k.slot0 + tile * kBlockN, next_entry, s_rows[stage]);
      next_entry = tile + 1 < k.tile_end ? prefetch_page<Cfg>(p, seq, k.slot0 + (tile + 1) * kBlockN) : 0;
    }
  }
  // Every step commits one cp.async group (empty past the last tile), so that wait_group<kStages - 1>
  // always means "the tile about to be computed".
  __device__ __forceinline__ void issue(int64_t tile, int stage) {
    if (tile < k.tile_end) {
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
  }

  // The first tiles, requested before the prologue's checks and the Q load so that their latency overlaps
  // them (the row pointers never leave the cache, whatever a page-table entry holds).
  __device__ __forceinline__ void start() {
    next_entry = k.tile_begin < k.tile_end ? prefetch_page<Cfg>(p, seq, k.slot0 + k.tile_begin * kBlockN) : 0;
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) address(k.tile_begin + s, s);
    __syncthreads();        // the first row pointers visible
    wait_for_prior_grid();  // launched early after the append (PDL): the appended K/V are in place past here
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) issue(k.tile_begin + s, s);
  }
  // Nothing may land in shared memory after the CTA is gone.
  __device__ __forceinline__ void drain() {
    cp_async_wait<0>();
  }

  // acc += A B^T over kChannels, A = (16 rows of the warp, kChannels) at s_a, B = this warp's keys of the
  // tile at s_b (both row stride kStride).
  template <int kChannels, int kStride>
  __device__ __forceinline__ void mma_abt(float (&acc)[kNTilesS][4], const T* s_a, const T* s_b, int warp_m,
                                          int key0, int lane) const {
#pragma unroll
    for (int kk = 0; kk < kChannels / 16; ++kk) {
      uint32_t a[4];
      ldmatrix_x4(a, smem_addr(s_a + (warp_m * 16 + lane % 16) * kStride + kk * 16 + (lane / 16) * 8));
#pragma unroll
      for (int np = 0; np < kKeysPerWarp / 16; ++np) {
        uint32_t b[4];
        ldmatrix_x4(b, smem_addr(s_b + (key0 + np * 16 + (lane & 7) + ((lane >> 4) << 3)) * kStride +
                                 kk * 16 + ((lane >> 3) & 1) * 8));
        mma_m16n8k16<T>(acc[2 * np], a, b[0], b[1]);
        mma_m16n8k16<T>(acc[2 * np + 1], a, b[2], b[3]);
      }
    }
  }

  // S = qd kd (Q K^T) + qd vd (Qv V^T): (16, kKeysPerWarp) of this warp (descales 1 but for fp8).
  __device__ __forceinline__ void scores(float (&s_acc)[kNTilesS][4], const T* s_k_tile, const T* s_v_tile,
                                         const Descales& ds, int warp_m, int key0, int lane) const {
#pragma unroll
    for (int n = 0; n < kNTilesS; ++n) s_acc[n][0] = s_acc[n][1] = s_acc[n][2] = s_acc[n][3] = 0.f;
    mma_abt<Cfg::kHeadDim, Cfg::kStrideQK>(s_acc, s_q, s_k_tile, warp_m, key0, lane);
    if constexpr (Cfg::kKvFp8) {
#pragma unroll
      for (int n = 0; n < kNTilesS; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) s_acc[n][e] *= ds.qk;
      }
      if (p.qv.ptr != nullptr) {  // the qv term in its own accumulator: its descale differs
        float qv_acc[kNTilesS][4];
#pragma unroll
        for (int n = 0; n < kNTilesS; ++n) qv_acc[n][0] = qv_acc[n][1] = qv_acc[n][2] = qv_acc[n][3] = 0.f;
        mma_abt<Cfg::kHeadDimV, Cfg::kStrideV>(qv_acc, s_qv, s_v_tile, warp_m, key0, lane);
#pragma unroll
        for (int n = 0; n < kNTilesS; ++n) {
#pragma unroll
          for (int e = 0; e < 4; ++e) s_acc[n][e] += ds.qv * qv_acc[n][e];
        }
      }
    } else {
      if (p.qv.ptr != nullptr)
        mma_abt<Cfg::kHeadDimV, Cfg::kStrideV>(s_acc, s_qv, s_v_tile, warp_m, key0, lane);
    }
  }

  // Online softmax: the logits become P = 2^(S - m) in place; what was accumulated is rescaled when a row
  // max grows (O only when some row of the warp needs it: once the maxima settle, most tiles skip the
  // kDvPerWarp / 2 multiplies a thread). One ex2.approx per score.
  __device__ __forceinline__ void softmax(float (&s_acc)[kNTilesS][4], State& st) const {
    float correction[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = st.row[r].m;
#pragma unroll
      for (int n = 0; n < kNTilesS; ++n) mx = fmaxf(mx, fmaxf(s_acc[n][2 * r], s_acc[n][2 * r + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float base = safe_max_base(mx);
      correction[r] = mx == st.row[r].m ? 1.f : fast_exp2(st.row[r].m - base);
      st.row[r].m = mx;
      st.row[r].l *= correction[r];
#pragma unroll
      for (int n = 0; n < kNTilesS; ++n) {
        s_acc[n][2 * r] = fast_exp2(s_acc[n][2 * r] - base);
        s_acc[n][2 * r + 1] = fast_exp2(s_acc[n][2 * r + 1] - base);
        st.row[r].l += s_acc[n][2 * r] + s_acc[n][2 * r + 1];
      }
    }
    if (__any_sync(0xffffffffu, correction[0] != 1.f || correction[1] != 1.f)) {
#pragma unroll
      for (int n = 0; n < kNTilesO; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) st.o[n][e] *= correction[e / 2];
      }
    }
  }

  // O += P V: P leaves the S accumulators as the A operand (two 8-key tiles = one 16-key k-step).
  __device__ __forceinline__ void accumulate_pv(const float (&s_acc)[kNTilesS][4], State& st,
                                                const T* s_v_tile, int warp_dv, int key0, int lane) const {
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
        mma_m16n8k16<T>(st.o[2 * np], a, b[0], b[1]);
        mma_m16n8k16<T>(st.o[2 * np + 1], a, b[2], b[3]);
      }
    }
  }

  // The tile loop over [tile_begin, tile_end); rows: this thread's two query rows.
  __device__ __forceinline__ void run(State& st, const QueryRow (&rows)[2], const Descales& ds, int warp_m,
                                      int warp_dv, int key0, int lane) {
#pragma unroll
    for (int n = 0; n < kNTilesO; ++n) st.o[n][0] = st.o[n][1] = st.o[n][2] = st.o[n][3] = 0.f;
    const int32_t kv_len32 = static_cast<int32_t>(k.kv_len);
    int stage = 0;
    for (int64_t tile = k.tile_begin; tile < k.tile_end; ++tile) {
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

      float s_acc[kNTilesS][4];  // (16, kKeysPerWarp) of this warp
      scores(s_acc, s_k_tile, s_v_tile, ds, warp_m, key0, lane);
      // Rows that do not attend are left alone here and zeroed in the epilogue.
      const int32_t tile_kp0 = static_cast<int32_t>(k.keys.first + tile * kBlockN);  // kp of key column 0
      const bool inside = tile_kp0 >= k.keys.all_first && tile_kp0 + kBlockN - 1 <= k.keys.all_last;
      ScoreTile scores_tile{s_acc, rows, tile_kp0 + key0 + 2 * (lane % 4)};
      apply_score_mods(p, kv_len32, inside, scores_tile);
      softmax(s_acc, st);
      accumulate_pv(s_acc, st, s_v_tile, warp_dv, key0, lane);
      stage = stage + 1 == kStages ? 0 : stage + 1;
    }
  }

  // kKeySplit: warps 1.. hand their (m, l, O) to warp 0 through shared memory (the K/V stages are free
  // now), which merges them (RowState::merge). Returns false for the warps whose state went to warp 0.
  __device__ __forceinline__ bool merge_warps(State& st, int warp, int lane) {
    if constexpr (!kKeySplit) {
      return true;
    } else {
      constexpr int kState = 4 + 4 * kNTilesO;  // floats a thread hands over
      static_assert((Cfg::kNWarps - 1) * kState * 32 * 4 <=
                        kStages * (Cfg::kKStageKv + Cfg::kVStageKv) * sizeof(TKV) + kConvElems * sizeof(T),
                    "the merge fits in the K/V stages (and the converted tile that follows them)");
      float* s_state = reinterpret_cast<float*>(s_k);  // (kNWarps - 1, kState, 32)
      __syncthreads();                                 // every warp is done with the last tile
      if (warp > 0) {
        float* mine = s_state + (warp - 1) * kState * 32 + lane;
        mine[0] = st.row[0].m, mine[32] = st.row[1].m, mine[64] = st.row[0].l, mine[96] = st.row[1].l;
#pragma unroll
        for (int n = 0; n < kNTilesO; ++n) {
#pragma unroll
          for (int e = 0; e < 4; ++e) mine[(4 + 4 * n + e) * 32] = st.o[n][e];
        }
      }
      __syncthreads();
      if (warp > 0)
        return false;  // the caller's barrier keeps the next piece off s_state until warp 0 is done
      for (int w2 = 0; w2 < Cfg::kNWarps - 1; ++w2) {
        const float* theirs = s_state + w2 * kState * 32 + lane;
        MergeScales scale[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) scale[r] = st.row[r].merge(theirs[32 * r], theirs[64 + 32 * r]);
#pragma unroll
        for (int n = 0; n < kNTilesO; ++n) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            st.o[n][e] = st.o[n][e] * scale[e / 2].a + theirs[(4 + 4 * n + e) * 32] * scale[e / 2].b;
          }
        }
      }
      return true;
    }
  }
};

}  // namespace kvattn::cuda
