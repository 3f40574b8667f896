// The consumer warps of the Hopper decode kernel (kernel.cuh): per piece the checks, Q, then whole stages
// of the ring with the key-split online softmax, and the merge / epilogue of the piece.
#pragma once

#include <cfloat>
#include <cmath>

#include "cuda/attention/epilogue.cuh"
#include "cuda/attention/score_mod.cuh"
#include "cuda/common/mma.cuh"
#include "cuda/common/rotary.cuh"
#include "cuda/common/softmax.cuh"
#include "cuda/decode_sm90/pieces.cuh"
#include "cuda/decode_sm90/sync.cuh"
#include "cuda/decode_sm90/timeline.cuh"

namespace kvattn::cuda::sm90 {

// Block-wide checks of the portable kernel, over the consumer threads (tid 0..threads-1).
__device__ inline bool pages_ok(const SeqParams& p, const Sequence& seq, int64_t slot_begin, int64_t slot_end,
                                DeviceErrorRecord* err, int tid, int threads) {
  bool bad = false;
  if (p.page_table && !p.cu_seqlens_k && slot_end > slot_begin) {
    const int64_t first = slot_begin / p.page_size, last = (slot_end - 1) / p.page_size;
    const int32_t* row = p.page_table + seq.page_row0;
    // kLoads entries a thread in flight at once: page size 1 has one entry a key.
    constexpr int kLoads = 8;
    for (int64_t c0 = first + tid; c0 <= last; c0 += int64_t{kLoads} * threads) {
      int32_t page[kLoads];
#pragma unroll
      for (int u = 0; u < kLoads; ++u) page[u] = c0 + u * threads <= last ? row[c0 + u * threads] : 0;
#pragma unroll
      for (int u = 0; u < kLoads; ++u) {
        if (page[u] < 0 || page[u] >= p.num_pages) {
          bad = true;
          record_page_error(p, seq, err, c0 + u * threads, page[u]);
        }
      }
    }
  }
  return !bad;
}
__device__ inline bool row_unique(const SeqParams& p, int i, DeviceErrorRecord* err, int tid, int threads) {
  bool dup = false;
  if (p.has_new && p.cache_batch_idx) {
    const int32_t mine = p.cache_batch_idx[i];
    for (int j = tid; j < p.batch; j += threads) {
      if (j != i && p.cache_batch_idx[j] == mine) {
        dup = true;
        if (j > i) record_error(err, ErrorArg::cache_batch_idx, ErrorKind::duplicate, j, mine, 0, i);
      }
    }
  }
  return !dup;
}

// Q rows [0, 16 groups) of unit (i, kv_head) as this thread holds them for s_q (Cfg::kRows, kQStride): T,
// rotary applied; rows that do not attend are zero. Thread tid: row tid / (128 / kPerThread) of each row
// group, kPerThread channels from kPerThread (tid % (128 / kPerThread)) (16 with 4 consumer warps, 8 with
// 8). TQ: q's storage (T, or fp8 under an fp8 cache).
template <class Cfg>
struct QRows {
  static constexpr int kPerThread = Cfg::kGroupRows * Cfg::kHeadDim / (32 * Cfg::kConsumerWarps);  // 16, 8
  typename Cfg::T v[Cfg::kGroups][kPerThread];
};
template <class Cfg, typename TQ>
__device__ inline QRows<Cfg> load_q_values(const AttnParams& p, const Sequence& seq, int i, int kv_head,
                                           int tid) {
  using T = typename Cfg::T;
  constexpr int kPerThread = QRows<Cfg>::kPerThread;
  const int c0 = tid % (Cfg::kHeadDim / kPerThread) * kPerThread;
  const int64_t used_rows = static_cast<int64_t>(seq.q_used) * p.group;
  QRows<Cfg> q;
#pragma unroll
  for (int g = 0; g < Cfg::kGroups; ++g) {
    const int row = g * Cfg::kGroupRows + tid / (Cfg::kHeadDim / kPerThread);
    if (row < used_rows) {
      const int64_t t = row / p.group;
      const int h = kv_head * p.group + row % p.group;
      const TQ* src = token_row<const TQ>(p.q, seq, i, t, h);
      // Clamped into the table: an offending sequence's position is unchecked (its rows are written NaN),
      // and its Q is loaded all the same (a seq.ok test here kept a register live through the stages: the
      // default bf16 kernels spilled).
      const int64_t pos = min(max(seq.rotary_pos + (p.seq.rotary_q_per_token ? t : 0), int64_t{0}),
                              int64_t{p.seq.seqlen_ro} - 1);
#pragma unroll
      for (int e = 0; e < kPerThread; ++e) {
        const int c = c0 + e;
        q.v[g][e] = c < p.rotary.rotary_dim ? from_float<T>(rotated_channel(src, c, pos, p.rotary))
                                            : convert_to<T>(src[c]);
      }
    } else {
#pragma unroll
      for (int e = 0; e < kPerThread; ++e) q.v[g][e] = from_float<T>(0.f);
    }
  }
  return q;
}
// q's storage type picked at run time (fp8 q under an fp8 cache with bf16 compute).
template <class Cfg>
__device__ __forceinline__ QRows<Cfg> load_q(const AttnParams& p, const Sequence& seq, int i, int kv_head,
                                             int tid) {
  using T = typename Cfg::T;
  if constexpr (Cfg::kFp8 && std::is_same_v<T, __nv_bfloat16>) {
    return p.q_fp8 ? load_q_values<Cfg, __nv_fp8_e4m3>(p, seq, i, kv_head, tid)
                   : load_q_values<Cfg, T>(p, seq, i, kv_head, tid);
  } else {
    return load_q_values<Cfg, T>(p, seq, i, kv_head, tid);
  }
}
// This thread's Q rows into s_q; returns the largest magnitude it wrote.
template <class Cfg>
__device__ __forceinline__ float store_q_rows(const QRows<Cfg>& q, typename Cfg::T* s_q, int tid) {
  constexpr int kPerThread = QRows<Cfg>::kPerThread;
  const int c0 = tid % (Cfg::kHeadDim / kPerThread) * kPerThread;
  float amax = 0.f;
#pragma unroll
  for (int g = 0; g < Cfg::kGroups; ++g) {
    const int row = g * Cfg::kGroupRows + tid / (Cfg::kHeadDim / kPerThread);
#pragma unroll
    for (int e = 0; e < kPerThread; ++e) {
      s_q[row * Cfg::kQStride + c0 + e] = q.v[g][e];
      amax = fmaxf(amax, fabsf(to_float(q.v[g][e])));
    }
  }
  return amax;
}

// A bf16x2 register times `scale` as f16x2 (round to nearest).
__device__ __forceinline__ uint32_t bf16x2_to_f16x2_scaled(uint32_t x, float scale) {
  const float lo = __uint_as_float(x << 16) * scale, hi = __uint_as_float(x & 0xffff0000u) * scale;
  uint32_t out;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(out) : "f"(hi), "f"(lo));
  return out;
}

// The portable kernel's checks outside the piece's own keys: the cache row is not shared under an append,
// and the page ids of the slots before the visible keys (the unit's first piece) and after them (its last)
// are in range. The ids of the piece's own keys are checked stage by stage (consume: each warp its stages,
// no stall before the first). False: the piece writes NaN; its stages are still consumed.
template <class Cfg>
__device__ __forceinline__ bool piece_ok(const AttnParams& p, const Piece& w, const PieceKeys& pk, int tid) {
  constexpr int kCThreads = 32 * Cfg::kConsumerWarps;
  const Sequence& seq = pk.seq;
  bool ok = seq.ok && row_unique(p.seq, w.i, p.errors, tid, kCThreads);
  if (ok) {
    const int64_t pre_end = seq.leftpad + pk.kp_begin;
    const int64_t post_begin = max(pre_end, seq.leftpad + pk.kp_end);
    if (pk.tile_begin == 0) ok = pages_ok(p.seq, seq, seq.leftpad, pre_end, p.errors, tid, kCThreads);
    if (pk.tile_end == pk.keys.tiles && ok)
      ok = pages_ok(p.seq, seq, post_begin, seq.end, p.errors, tid, kCThreads);
  }
  return ok;
}

// Q rows of unit (i, kv_head) as mma A fragments of this warp's row group `rg` (of Cfg::kGroups), (16 rows,
// 16 channels) per k-step, through s_q (the consumers' barrier between the writes and the reads also tells
// them the previous piece's merge state was read). fp8: k-slot (2 quad + e, 2 quad + 8 + e) of step kk is
// channel 16 kk + 4 quad + e (+ 2), the order in which K's fragments arrive. bf16 q into f16 math
// (kScaleQ): q * 2^(15 - x) with max |q| in [2^(x-1), 2^x); returns what the scores are multiplied by,
// 2^(x - 15) (1 otherwise).
// q: this thread's rows of the unit (load_q).
template <class Cfg>
__device__ __forceinline__ float load_q_fragments(const QRows<Cfg>& q, typename Cfg::T* s_q, float* s_qmax,
                                                  int rg, uint32_t (&q_frag)[Cfg::kHeadDim / 16][4],
                                                  [[maybe_unused]] int tl_piece) {
  using T = typename Cfg::T;
  constexpr int kW = Cfg::kConsumerWarps;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int group = lane / 4, quad = lane % 4;
  float q_amax = store_q_rows<Cfg>(q, s_q, tid);
  // (The stamp tests q_amax: after this thread's Q rows have landed.)
  KVATTN_TL(if (tid == 0 && q_amax != -1.f) tl_stamp_piece(tl_piece, kTlpQRows));
  if constexpr (Cfg::kScaleQ) {
#pragma unroll
    for (int off = 1; off < 32; off *= 2) q_amax = fmaxf(q_amax, __shfl_xor_sync(0xffffffffu, q_amax, off));
    if (lane == 0) s_qmax[warp] = q_amax;
  }
  consumers_sync<32 * kW>();  // s_q written; the previous piece's merge state read
  const T* s_qg = s_q + rg * Cfg::kGroupRows * Cfg::kQStride;  // this warp's 16 rows
  float q_scale = 1.f, q_unscale = 1.f;
  if constexpr (Cfg::kScaleQ) {
    float m = 0.f;
#pragma unroll
    for (int v = 0; v < kW; ++v) m = fmaxf(m, s_qmax[v]);
    if (m > 0.f && isfinite(m)) {
      int x;
      frexpf(m, &x);
      q_scale = ldexpf(1.f, 15 - x);
      q_unscale = ldexpf(1.f, x - 15);
    }
  }
#pragma unroll
  for (int kk = 0; kk < Cfg::kHeadDim / 16; ++kk) {
    if constexpr (Cfg::kFp8) {
      const uint2 lo = *reinterpret_cast<const uint2*>(s_qg + group * Cfg::kQStride + 16 * kk + 4 * quad);
      const uint2 hi =
          *reinterpret_cast<const uint2*>(s_qg + (group + 8) * Cfg::kQStride + 16 * kk + 4 * quad);
      q_frag[kk][0] = lo.x, q_frag[kk][1] = hi.x, q_frag[kk][2] = lo.y, q_frag[kk][3] = hi.y;
      if constexpr (Cfg::kScaleQ) {
#pragma unroll
        for (int r = 0; r < 4; ++r) q_frag[kk][r] = bf16x2_to_f16x2_scaled(q_frag[kk][r], q_scale);
      }
    } else {
      ldmatrix_x4(q_frag[kk], smem_addr(s_qg + (lane % 16) * Cfg::kQStride + kk * 16 + (lane / 16) * 8));
    }
  }
  return q_unscale;
}

// S = Q K^T of one stage (16 rows, kStageKeys keys) into s_acc, not yet descaled or scaled (ScoreScale);
// fp8 caches: K converted in registers.
template <class Cfg>
__device__ __forceinline__ void stage_scores(float (&s_acc)[Cfg::kNTilesS][4],
                                             const uint32_t (&q_frag)[Cfg::kHeadDim / 16][4],
                                             const unsigned char* s_k) {
  using TM = typename Cfg::TM;
  constexpr int kNTilesS = Cfg::kNTilesS;
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int n = 0; n < kNTilesS; ++n) s_acc[n][0] = s_acc[n][1] = s_acc[n][2] = s_acc[n][3] = 0.f;
  if constexpr (Cfg::kFp8) {
    // ldmatrix of (8 keys, 16 fp8 channels) blocks as b16: lane (group, quad) gets channels 4 quad..+3
    // of key `group`; matrices: keys +0 / +8 of a 16-key pair, channel chunks 2 kk2 / 2 kk2 + 1.
#pragma unroll
    for (int kk2 = 0; kk2 < Cfg::kHeadDim / 32; ++kk2) {
#pragma unroll
      for (int nb = 0; nb < kNTilesS / 2; ++nb) {
        uint32_t r[4];
        const int m = lane / 8;
        ldmatrix_x4(r, smem_addr(s_k + (nb * 16 + (m & 1) * 8 + lane % 8) * Cfg::kRowStride +
                                 (2 * kk2 + (m >> 1)) * 16));
#pragma unroll
        for (int m2 = 0; m2 < 4; ++m2) {
          uint32_t lo, hi;
          e4m3x4_to_f16x2x2(r[m2], lo, hi);
          if constexpr (std::is_same_v<TM, __nv_bfloat16>) lo = f16x2_to_bf16x2(lo), hi = f16x2_to_bf16x2(hi);
          mma_m16n8k16<TM>(s_acc[2 * nb + (m2 & 1)], q_frag[2 * kk2 + (m2 >> 1)], lo, hi);
        }
      }
    }
  } else if constexpr (Cfg::kSwizzled) {
    // Cfg::kv_offset's layout, its lane-dependent part once: the lane's row (np * 16 + r) has row mod 8 =
    // lane mod 8, and chunk 2 kk + (lane / 8 mod 2) of it sits at panel kk / 4, (2 kk mod 8) xor x.
    const uint32_t row = smem_addr(s_k) + ((lane & 7) + ((lane >> 4) << 3)) * 128;
    const uint32_t x = (((lane >> 3) & 1) ^ (lane & 7)) << 4;
#pragma unroll
    for (int kk = 0; kk < Cfg::kHeadDim / 16; ++kk) {
      const uint32_t at = row + (kk / 4) * (Cfg::kStageKeys * 128) + ((((2 * kk) % 8) << 4) ^ x);
#pragma unroll
      for (int np = 0; np < kNTilesS / 2; ++np) {
        uint32_t b[4];
        ldmatrix_x4(b, at + np * 16 * 128);
        mma_m16n8k16<TM>(s_acc[2 * np], q_frag[kk], b[0], b[1]);
        mma_m16n8k16<TM>(s_acc[2 * np + 1], q_frag[kk], b[2], b[3]);
      }
    }
  } else {
#pragma unroll
    for (int kk = 0; kk < Cfg::kHeadDim / 16; ++kk) {
#pragma unroll
      for (int np = 0; np < kNTilesS / 2; ++np) {
        uint32_t b[4];
        ldmatrix_x4(b, smem_addr(s_k + Cfg::kv_offset(np * 16 + (lane & 7) + ((lane >> 4) << 3),
                                                      kk * 2 + ((lane >> 3) & 1))));
        mma_m16n8k16<TM>(s_acc[2 * np], q_frag[kk], b[0], b[1]);
        mma_m16n8k16<TM>(s_acc[2 * np + 1], q_frag[kk], b[2], b[3]);
      }
    }
  }
}

// How a piece's dot products become log2 units. Without softcap and ALiBi both the fp8 descale and the
// softmax scale fold into the softmax's exp2 argument (factor; one FFMA a score, as the prefill kernel):
// the max is taken on the dot products, which needs factor > 0 (softmax_scale is a positive normal float;
// a descale that is not positive and finite, or a product that is not a normal float, takes the
// multiply instead). With softcap or ALiBi the mods take descaled scores and scale them (factor 1).
struct ScoreScale {
  float pre;     // multiplied in before the score mods (1: nothing to do)
  float factor;  // the softmax's factor: scores times factor are log2 units
  __device__ __forceinline__ ScoreScale(const AttnParams& p, float qk_descale) {
    const bool mods_scale = score_mods_scale(p);
    const float folded = p.scale_log2 * qk_descale;
    const bool fold = !mods_scale && qk_descale > 0.f && folded >= FLT_MIN && folded < INFINITY;
    pre = fold ? 1.f : qk_descale;
    factor = mods_scale ? 1.f : fold ? folded : p.scale_log2;
  }
};

// The online softmax of a stage's scores (times factor: log2 units; row_max stays in the scores' units):
// s_acc becomes P, the rows' (max, sum) move on, and O is rescaled only when some row of the warp needs it.
// upper == false: rows group + 8 do not attend (<= 8 packed rows in the warp's row group, the common
// decode: g x q of 4-8): their softmax is skipped and their P is 0.
template <class Cfg>
__device__ __forceinline__ void stage_softmax(float (&s_acc)[Cfg::kNTilesS][4], float factor, bool upper,
                                              float (&row_max)[2], float (&row_sum)[2],
                                              float (&o_acc)[Cfg::kNTilesO][4]) {
  float correction[2] = {1.f, 1.f};
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    if (k == 1 && !upper) {  // P = 0 there: O stays 0 (finite) for rows written as not attending
#pragma unroll
      for (int n = 0; n < Cfg::kNTilesS; ++n) s_acc[n][2] = s_acc[n][3] = 0.f;
      break;
    }
    float mx = row_max[k];
#pragma unroll
    for (int n = 0; n < Cfg::kNTilesS; ++n) mx = fmaxf(mx, fmaxf(s_acc[n][2 * k], s_acc[n][2 * k + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float base = safe_max_base(mx) * factor;
    correction[k] = mx == row_max[k] ? 1.f : fast_exp2(row_max[k] * factor - base);
    row_max[k] = mx;
    row_sum[k] *= correction[k];
#pragma unroll
    for (int n = 0; n < Cfg::kNTilesS; ++n) {
      s_acc[n][2 * k] = fast_exp2(fmaf(s_acc[n][2 * k], factor, -base));
      s_acc[n][2 * k + 1] = fast_exp2(fmaf(s_acc[n][2 * k + 1], factor, -base));
      row_sum[k] += s_acc[n][2 * k] + s_acc[n][2 * k + 1];
    }
  }
  if (__any_sync(0xffffffffu, correction[0] != 1.f || correction[1] != 1.f)) {
#pragma unroll
    for (int n = 0; n < Cfg::kNTilesO; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) o_acc[n][e] *= correction[e / 2];
    }
  }
}

// O += P V of one stage, 16 keys a step. fp8 caches: V converted in registers, its channels out as even /
// odd 8-column tiles (o_channel).
template <class Cfg>
__device__ __forceinline__ void stage_pv(float (&o_acc)[Cfg::kNTilesO][4],
                                         const float (&s_acc)[Cfg::kNTilesS][4], const unsigned char* s_v) {
  using TM = typename Cfg::TM;
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int kk = 0; kk < Cfg::kStageKeys / 16; ++kk) {
    const uint32_t a[4] = {pack2<TM>(s_acc[2 * kk][0], s_acc[2 * kk][1]),
                           pack2<TM>(s_acc[2 * kk][2], s_acc[2 * kk][3]),
                           pack2<TM>(s_acc[2 * kk + 1][0], s_acc[2 * kk + 1][1]),
                           pack2<TM>(s_acc[2 * kk + 1][2], s_acc[2 * kk + 1][3])};
    if constexpr (Cfg::kFp8) {
      // ldmatrix.trans of (8 keys, 8 byte pairs): lane (group, quad) gets keys 2 quad, 2 quad + 1 of the
      // channels 2 group, 2 group + 1 of a 16-channel chunk; bytes (0, 2) are the even channel's key
      // pair, (1, 3) the odd one's. Matrices: keys +0 / +8, chunks 2 cp / 2 cp + 1.
#pragma unroll
      for (int cp = 0; cp < Cfg::kHeadDim / 32; ++cp) {
        uint32_t r[4];
        const int m = lane / 8;
        ldmatrix_x4_trans(r, smem_addr(s_v + (kk * 16 + (m & 1) * 8 + lane % 8) * Cfg::kRowStride +
                                       (2 * cp + (m >> 1)) * 16));
#pragma unroll
        for (int half_chunk = 0; half_chunk < 2; ++half_chunk) {
          const uint32_t lo_keys = r[2 * half_chunk], hi_keys = r[2 * half_chunk + 1];
#pragma unroll
          for (int parity = 0; parity < 2; ++parity) {
            // bytes (0, 2) or (1, 3) of lo_keys into the low half, of hi_keys into the high half: one
            // permute for both of the mma's B registers.
            uint32_t b0, b1;
            e4m3x4_to_f16x2x2(byte_perm(lo_keys, hi_keys, parity ? 0x7531u : 0x6420u), b0, b1);
            if constexpr (std::is_same_v<TM, __nv_bfloat16>)
              b0 = f16x2_to_bf16x2(b0), b1 = f16x2_to_bf16x2(b1);
            mma_m16n8k16<TM>(o_acc[2 * (2 * cp + half_chunk) + parity], a, b0, b1);
          }
        }
      }
    } else if constexpr (Cfg::kSwizzled) {
      // (as stage_scores: key row kk * 16 + r, r mod 8 = lane mod 8; chunk 2 np + lane / 16)
      const uint32_t row = smem_addr(s_v) + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * 128;
      const uint32_t x = ((lane >> 4) ^ (lane & 7)) << 4;
#pragma unroll
      for (int np = 0; np < Cfg::kNTilesO / 2; ++np) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, row + (np / 4) * (Cfg::kStageKeys * 128) + ((((2 * np) % 8) << 4) ^ x));
        mma_m16n8k16<TM>(o_acc[2 * np], a, b[0], b[1]);
        mma_m16n8k16<TM>(o_acc[2 * np + 1], a, b[2], b[3]);
      }
    } else {
#pragma unroll
      for (int np = 0; np < Cfg::kNTilesO / 2; ++np) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, smem_addr(s_v + Cfg::kv_offset(kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8,
                                                            np * 2 + (lane >> 4))));
        mma_m16n8k16<TM>(o_acc[2 * np], a, b[0], b[1]);
        mma_m16n8k16<TM>(o_acc[2 * np + 1], a, b[2], b[3]);
      }
    }
  }
}

// A warp's (m, l, O) of its two rows into its merge state in shared memory (O in channel order).
template <class Cfg>
__device__ __forceinline__ void store_warp_state(float* s_state, const float (&o_acc)[Cfg::kNTilesO][4],
                                                 const float (&row_max)[2], float (&row_sum)[2]) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int group = lane / 4, quad = lane % 4;
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    row_sum[k] += __shfl_xor_sync(0xffffffffu, row_sum[k], 1);
    row_sum[k] += __shfl_xor_sync(0xffffffffu, row_sum[k], 2);
  }
  float* mine = s_state + warp * Cfg::kStateFloats;
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    const int r = group + 8 * k;
#pragma unroll
    for (int n = 0; n < Cfg::kNTilesO; ++n) {
      if constexpr (Cfg::kFp8) {
        mine[r * Cfg::kOStride + o_channel<true>(n, 2 * quad)] = o_acc[n][2 * k];
        mine[r * Cfg::kOStride + o_channel<true>(n, 2 * quad + 1)] = o_acc[n][2 * k + 1];
      } else {
        *reinterpret_cast<float2*>(mine + r * Cfg::kOStride + 8 * n + 2 * quad) =
            make_float2(o_acc[n][2 * k], o_acc[n][2 * k + 1]);
      }
    }
    if (quad == 0) {
      mine[Cfg::kGroupRows * Cfg::kOStride + r] = row_max[k];
      mine[Cfg::kGroupRows * Cfg::kOStride + Cfg::kGroupRows + r] = row_sum[k];
    }
  }
}

// The piece's end, after the merge states are stored: the states of each row group's warps (its
// kPhases = kConsumerWarps / kGroups stage phases) merge per row, in warp order,
//   m = max_w m_w;  l = sum_w l_w 2^(m_w - m);  O = sum_w O_w 2^(m_w - m),
// and the kRowThreads = 8 (4 consumer warps) or 16 (8) threads of a row write it, thread tid row
// tid / kRowThreads of each row group, its kCols channels from kCols (tid % kRowThreads): a whole unit
// out = O / l and lse, the sink counted here; a piece the normalized partial (O / l, m + log l) without
// the sink; NaN when bad.
template <class Cfg>
__device__ __forceinline__ void write_piece(const AttnParams& p, const Piece& w, const Sequence& seq,
                                            const float* s_state, float o_descale, bool bad) {
  using T = typename Cfg::T;
  constexpr int kW = Cfg::kConsumerWarps, kS = Cfg::kStateFloats;
  constexpr int kRowThreads = 32 * kW / Cfg::kGroupRows, kCols = Cfg::kHeadDim / kRowThreads;
  static_assert(kCols % 4 == 0, "whole float4 stores of a partial row");
  constexpr int kMl = Cfg::kGroupRows * Cfg::kOStride;  // where a state's m and l start
  const int tid = threadIdx.x, rr = tid / kRowThreads, c0 = tid % kRowThreads * kCols;
  constexpr int kGroups = Cfg::kGroups, kPhases = kW / kGroups;
  const int64_t q_rows = static_cast<int64_t>(seq.q_len) * p.group;
#pragma unroll
  for (int g = 0; g < kGroups; ++g) {
    const int r = g * Cfg::kGroupRows + rr;
    if (r >= q_rows) break;
    const int i = w.i;
    const int64_t t = r / p.group;
    const int h = w.kv_head * p.group + r % p.group;
    const int64_t prow = piece_partial_row(p, w, seq, r);
    float* lse_out = p.lse ? lse_at(p, seq, i, t, h) : nullptr;
    T* out = out_row<T>(p, seq, i, t, h);
    if (bad) {
      if (prow >= 0) {
        for (int c = 0; c < kCols; ++c) p.o_partial[prow * p.head_dim_v + c0 + c] = NAN;
        if (c0 == 0) p.lse_partial[prow] = NAN;
      } else {
        for (int c = 0; c < kCols; ++c) out[c0 + c] = from_float<T>(NAN);
        if (c0 == 0 && lse_out) *lse_out = NAN;
      }
      continue;
    }
    const float* mine = s_state + g * kPhases * kS;  // the row group's first warp's state
    float weight[kPhases], m_all = -INFINITY;
#pragma unroll
    for (int v = 0; v < kPhases; ++v) m_all = fmaxf(m_all, mine[v * kS + kMl + rr]);
    const float base = safe_max_base(m_all);
    float l = 0.f;
#pragma unroll
    for (int v = 0; v < kPhases; ++v) {
      weight[v] = exp2f(mine[v * kS + kMl + rr] - base);
      l += mine[v * kS + kMl + Cfg::kGroupRows + rr] * weight[v];
    }
    const bool attends = r < static_cast<int64_t>(seq.q_used) * p.group;
    const RowEnd end = end_row(RowState{m_all, l}, attends, prow < 0, p.sinks, h, o_descale);
    const float lse = end.lse, inv_l = end.o_scale;
    float o[kCols];
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      float acc = 0.f;
#pragma unroll
      for (int v = 0; v < kPhases; ++v) acc += mine[v * kS + rr * Cfg::kOStride + c0 + c] * weight[v];
      o[c] = acc * inv_l;
    }
    if (prow >= 0) {
      float4* dst = reinterpret_cast<float4*>(p.o_partial + prow * p.head_dim_v + c0);
#pragma unroll
      for (int c = 0; c < kCols / 4; ++c)
        dst[c] = make_float4(o[4 * c], o[4 * c + 1], o[4 * c + 2], o[4 * c + 3]);
      if (c0 == 0) p.lse_partial[prow] = lse;
    } else {
#pragma unroll
      for (int c = 0; c < kCols; ++c) out[c0 + c] = from_float<T>(o[c]);
      if (c0 == 0 && lse_out) *lse_out = lse;
    }
  }
}

template <class Cfg>
__device__ __forceinline__ void consume(const AttnParams& p, const BalancedStart& st, unsigned char* ring,
                                        uint64_t* full, uint64_t* empty, float* s_state, typename Cfg::T* s_q,
                                        float* s_qmax) {
  constexpr int kNTilesS = Cfg::kNTilesS, kNTilesO = Cfg::kNTilesO, kW = Cfg::kConsumerWarps;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int group = lane / 4, quad = lane % 4;
  // Row group rg of the unit's rows, stage phase sp: this warp computes rows [16 rg, +16) of the stages
  // whose CTA-wide index is sp mod kPhases (with one group, warp w takes stages w mod kConsumerWarps of all
  // 16 rows).
  constexpr int kGroups = Cfg::kGroups, kPhases = kW / kGroups;
  const int rg = kGroups == 1 ? 0 : warp / kPhases, sp = kGroups == 1 ? warp : warp % kPhases;
  uint32_t stage_count = 0;
  [[maybe_unused]] int piece_index = -1;
  // The next piece's Q rows, loaded under this piece's stages when it is the same sequence's next kv head
  // (W2: a dependent load behind the K/V stream at each piece switch, 1.5 us of the consumers' 6.6-us gap;
  // bench/NOTES.md, session 16): valid for (q_next_i, q_next_head). Only in the one-group 16-bit kernels:
  // the fp8 and two-group kernels spill with the rows held (H200: fp8 b4 32k +15%, W4 b8 4k q8 +11%).
  constexpr bool kQAhead = !Cfg::kFp8 && Cfg::kGroups == 1;
  QRows<Cfg> q_next;
  int q_next_i = -1, q_next_head = -1;
  // The first piece's Q rows right after the scan, before the producers' first copies fill the memory
  // pipeline (bench/NOTES.md, session 16: at b1 1k they landed 3.8 us after their issue, behind the copies).
  if (const SeqKeys* first = kQAhead ? known_keys(st, st.seq) : nullptr) {
    if (first->seq.rows_known && first->seq.q_len > 0) {
      q_next_i = st.seq;
      q_next_head = first_kv_head(p, st, cta_begin(blockIdx.x, st.ctas, st.total));
      q_next = load_q<Cfg>(p, first->seq, q_next_i, q_next_head, tid);
    }
  }
  for_each_piece<Cfg>(p, st, [&](const Piece& w, bool first_of_unit, int64_t unit_pieces) {
    KVATTN_TL(++piece_index; if (tid == 0) {
      tl_set(kTlPieces, piece_index + 1);
      tl_stamp_piece(piece_index, kTlpBegin);
    });
    if (first_of_unit && tid == 0) record_unit_pieces(p, w, unit_pieces);  // for the combine
    const PieceKeys pk = piece_keys<Cfg>(p, st, w, tid == 0);
    KVATTN_TL(if (tid == 0 && pk.stages != -1) tl_stamp_piece(piece_index, kTlpKeys));
    const Sequence& seq = pk.seq;
    const uint32_t first_stage = stage_count;
    stage_count += pk.stages;
    if (!seq.rows_known || seq.q_len == 0) return;  // no row is ours (pk.stages == 0 then)
    const int i = w.i, kv_head = w.kv_head;
    bool ok = piece_ok<Cfg>(p, w, pk, tid);
    KVATTN_TL(if (tid == 0 && ok != (pk.stages == -1)) tl_stamp_piece(piece_index, kTlpChecked));
    uint32_t q_frag[Cfg::kHeadDim / 16][4];
    const bool q_ready = kQAhead && q_next_i == i && q_next_head == kv_head;
    const float q_unscale = load_q_fragments<Cfg>(q_ready ? q_next : load_q<Cfg>(p, seq, i, kv_head, tid),
                                                  s_q, s_qmax, rg, q_frag, piece_index);
    q_next_i = kQAhead && w.next_kv_head >= 0 ? i : -1;
    q_next_head = w.next_kv_head;
    if (kQAhead && w.next_kv_head >= 0) q_next = load_q<Cfg>(p, seq, i, w.next_kv_head, tid);
    KVATTN_TL(if (tid == 0) tl_stamp_piece(piece_index, kTlpQ));
    float qk_descale = 1.f, o_descale = 1.f;
    if constexpr (Cfg::kFp8) {
      qk_descale = descale_at(p.q_descale, p.q_descale_strides, i, kv_head) *
                   descale_at(p.k_descale, p.k_descale_strides, i, kv_head) * q_unscale;
      o_descale = descale_at(p.v_descale, p.v_descale_strides, i, kv_head);
    }
    const ScoreScale scale(p, qk_descale);
    // Rows group + 8 of the warp's row group attend (else their softmax is skipped: stage_softmax).
    const bool upper = static_cast<int64_t>(seq.q_used) * p.group > rg * Cfg::kGroupRows + 8;
    // This thread's two rows of the mma C layout, as the score modifications see them.
    const int row0 = rg * Cfg::kGroupRows + group;
    const QueryRow rows_of_thread[2] = {query_row(p, seq, i, kv_head, row0),
                                        query_row(p, seq, i, kv_head, row0 + 8)};
    float o_acc[kNTilesO][4];
#pragma unroll
    for (int n = 0; n < kNTilesO; ++n) o_acc[n][0] = o_acc[n][1] = o_acc[n][2] = o_acc[n][3] = 0.f;
    float row_max[2] = {-INFINITY, -INFINITY};
    float row_sum[2] = {0.f, 0.f};

    // This warp's stages of the piece: those whose CTA-wide index is sp mod kPhases (the phases rotate
    // over short pieces). Deterministic mode (chunk_keys > 0): the piece's stages sp, sp + kPhases, ...,
    // so that which warp sums which keys, and so the merge's rounding, depends on the piece alone.
    const bool paged = p.seq.page_table != nullptr && p.seq.cu_seqlens_k == nullptr;
    const int s_first =
        p.chunk_keys > 0 ? sp : static_cast<int>((sp - first_stage % kPhases + kPhases) % kPhases);
    for (int s = s_first; s < pk.stages; s += kPhases) {
      const uint32_t g = first_stage + s;
      const int slot = static_cast<int>(g % Cfg::kStages);
      const int32_t kp0 = pk.kp_begin + s * Cfg::kStageKeys;
      // The page ids of this stage's keys: loaded before the wait, checked after the stage's math, so that
      // their latency hides behind both.
      int32_t stage_page[Cfg::kKeysPerLane];
#pragma unroll
      for (int j = 0; j < Cfg::kKeysPerLane; ++j) {
        const int32_t kp = kp0 + j * 32 + lane;
        stage_page[j] = paged && kp < pk.kp_end ? page_entry(p.seq, seq, seq.leftpad + kp) : 0;
      }
      mbar_wait(&full[slot], (g / Cfg::kStages) & 1);
      KVATTN_TL(if (lane == 0) {
        if (g == 0) tl_stamp(kTlFirstFull);
        if (s == 0) tl_stamp_piece(piece_index, kTlpFirstFull);
      });
      const unsigned char* s_k = ring + slot * Cfg::kStageBytes;
#if KVATTN_DECODE_NO_MATH
      // Developer build only (bench/NOTES.md, session 13): the stream without the consumers' math, to
      // read what the producers and the memory system sustain alone. The results are garbage.
      mbar_arrive(&empty[slot]);
      continue;
#endif
      float s_acc[kNTilesS][4];
      stage_scores<Cfg>(s_acc, q_frag, s_k);
      if (scale.pre != 1.f) {
#pragma unroll
        for (int n = 0; n < kNTilesS; ++n) {
#pragma unroll
          for (int e = 0; e < 4; ++e) s_acc[n][e] *= scale.pre;
        }
      }
      // Score modifications (attention/score_mod.cuh), in log2 units. Keys past the piece's (rows copied to
      // fill the stage) are masked as keys past the sequence: the bound is kp_end (<= kv_len).
      const bool inside = kp0 >= pk.keys.all_first && kp0 + Cfg::kStageKeys - 1 <= pk.keys.all_last;
      MmaScoreTile<kNTilesS> score_tile{s_acc, rows_of_thread, kp0 + 2 * quad};
      apply_score_mods<true>(p, pk.kp_end, inside, score_tile);
      stage_softmax<Cfg>(s_acc, scale.factor, upper, row_max, row_sum, o_acc);
      stage_pv<Cfg>(o_acc, s_acc, s_k + Cfg::kKBytes);
      mbar_arrive(&empty[slot]);  // every lane: its reads of the stage are done
      KVATTN_TL(if (lane == 0 && s == pk.stages - 1) tl_stamp_piece(piece_index, kTlpLastConsumed));
#pragma unroll
      for (int j = 0; j < Cfg::kKeysPerLane; ++j) {
        if (stage_page[j] < 0 || stage_page[j] >= p.seq.num_pages) {
          const int64_t slot_bad = seq.leftpad + kp0 + j * 32 + lane;
          ok = false;
          record_page_error(p.seq, seq, p.errors, slot_bad / p.seq.page_size, stage_page[j]);
        }
      }
    }
    const float state_max[2] = {row_max[0] * scale.factor, row_max[1] * scale.factor};  // log2 units
    store_warp_state<Cfg>(s_state, o_acc, state_max, row_sum);
    write_piece<Cfg>(p, w, seq, s_state, o_descale, consumers_or<32 * kW>(!ok));
    KVATTN_TL(if (tid == 0) tl_stamp_piece(piece_index, kTlpEnd));
  });
}

}  // namespace kvattn::cuda::sm90
