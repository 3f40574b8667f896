// The attention kernels: a general kernel (64-row CTAs) and a decode kernel (16 rows, the warps splitting
// each key tile), one body (attention_cta) put together from the parts, as FlashAttention-3's hopper/:
//   tile scheduler   schedule.cuh      which piece (m-block of a (sequence, kv head), run of key tiles)
//   prologue         prologue.cuh      the piece's keys and tiles, the device-side index checks
//   mainloop         sm80/mainloop.cuh the tile loop of one architecture (cp.async + mma.sync here)
//   score mods       score_mod.cuh     softcap, ALiBi, masks: one function of (qp, kp, head)
//   state            common/row_state.hpp  (m, l) and the one merge (warps, sink, split combine)
//   epilogue         epilogue.cuh      the only writer of out, lse and the partials
#pragma once

#include "cuda/attention/config.cuh"
#include "cuda/attention/epilogue.cuh"
#include "cuda/attention/params.cuh"
#include "cuda/attention/prologue.cuh"
#include "cuda/attention/schedule.cuh"
#include "cuda/attention/score_mod.cuh"
#include "cuda/attention/sm80/mainloop.cuh"
#include "cuda/common/pdl.cuh"

namespace kvattn::cuda {

// One piece on one CTA.
template <class Cfg, bool kKeySplit>
__device__ __forceinline__ void attention_cta(const AttnParams& p, const Piece& w, unsigned char* smem_raw,
                                              KvRowPtrs (*s_rows)[Cfg::kBlockN]) {  // (stages, kBlockN)
  using Mainloop = Sm80Mainloop<Cfg, kKeySplit>;
  const Sequence seq = load_sequence(p.seq, w.i, p.errors, threadIdx.x == 0);
  if (!seq.rows_known) return;  // cu_seqlens_q is broken: no row of out is known to be ours
  const int64_t rows = static_cast<int64_t>(seq.q_len) * p.group;
  if (w.m0 >= rows) return;

  const PieceKeys keys = piece_keys<Cfg::kBlockN>(p, w, seq, Mainloop::kRows);
  Mainloop mainloop(p, seq, w.kv_head, keys, smem_raw, s_rows);
  mainloop.start();
  if (!check_piece<Cfg::kBlockN>(p, w, seq, keys)) {
    mainloop.drain();
    write_nan_rows<typename Cfg::T, Mainloop::kRows, Cfg::kNThreads>(p, w, seq);
    return;
  }
  load_q<Cfg, Mainloop::kRows>(p, seq, w.i, w.kv_head, w.m0, mainloop.s_q, mainloop.s_qv);
  const Descales ds = load_descales<Cfg::kKvFp8>(p, w.i, w.kv_head);

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int warp_m = kKeySplit ? 0 : warp / Cfg::kWarpsDv, warp_dv = kKeySplit ? 0 : warp % Cfg::kWarpsDv;
  const int key0 = kKeySplit ? warp * Mainloop::kKeysPerWarp : 0;  // this warp's first key column of a tile
  QueryRow qrows[2];  // this thread's two rows (mma C layout: lane / 4 and lane / 4 + 8 of the warp's 16)
#pragma unroll
  for (int r = 0; r < 2; ++r)
    qrows[r] = query_row(p, seq, w.i, w.kv_head, w.m0 + warp_m * 16 + lane / 4 + 8 * r);

  typename Mainloop::State st;
  mainloop.run(st, qrows, ds, warp_m, warp_dv, key0, lane);
  if (!mainloop.merge_warps(st, warp, lane)) return;

    // Epilogue: l is summed over the quad that shares a row; each thread writes its columns of O.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    st.row[r].l += __shfl_xor_sync(0xffffffffu, st.row[r].l, 1);
    st.row[r].l += __shfl_xor_sync(0xffffffffu, st.row[r].l, 2);
  }
  const int quad = lane % 4;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t row = w.m0 + warp_m * 16 + lane / 4 + 8 * r;
    if (row >= rows) continue;
    write_row<typename Cfg::T>(p, w, seq, row, qrows[r], st.row[r], ds.o, warp_dv == 0 && quad == 0,
                               [&](auto store) {
#pragma unroll
                                 for (int n = 0; n < Mainloop::kNTilesO; ++n) {
                                   const int c = warp_dv * Cfg::kDvPerWarp + n * 8 + 2 * quad;
                                   store(c, st.o[n][2 * r]);
                                   store(c + 1, st.o[n][2 * r + 1]);
                                 }
                               });
  }
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
    for_each_balanced_piece<kKeySplitRows, Cfg::kBlockN, Cfg::kNThreads>(
        p, [&](const Piece& w) { attention_cta<Cfg, true>(p, w, smem_raw, s_rows); });
  }
}

}  // namespace kvattn::cuda
