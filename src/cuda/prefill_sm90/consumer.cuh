// The Hopper prefill kernel's consumers: Q, S = Q K^T, the score mods and the online softmax, P V, the
// turns of the two warpgroups, the epilogue (kernel.cuh: the overview).
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "cuda/attention/epilogue.cuh"
#include "cuda/attention/prologue.cuh"
#include "cuda/attention/schedule.cuh"
#include "cuda/attention/score_mod.cuh"
#include "cuda/common/dtype.cuh"
#include "cuda/common/fp8.cuh"
#include "cuda/common/mma.cuh"
#include "cuda/common/rotary.cuh"
#include "cuda/common/sequence.cuh"
#include "cuda/common/softmax.cuh"
#include "cuda/prefill_sm90/cta.cuh"
#include "cuda/prefill_sm90/ptx.cuh"
#include "cuda/prefill_sm90/timeline.cuh"
#include "cuda/prefill_sm90/wgmma.cuh"

namespace kvattn::cuda::sm90 {

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)

// ---- consumer: 64 rows

// Chunk c (8 channels) of a Q row as the attention reads it: rotated in fp32 and rounded to T once (by
// 16-byte chunks, RotaryChunk, when rotary_dim % 16 == 0 so that no chunk straddles it or the GPT-NeoX half;
// else channel by channel: the same values), or copied.
template <typename T>
__device__ __forceinline__ void q_chunk(const T* src, int c, int64_t pos, const RotaryParams& rot,
                                        T (&vals)[8]) {
  if (c * 8 >= rot.rotary_dim) {
    load8(src + c * 8, vals);
  } else if (rot.rotary_dim % 16 == 0) {
    RotaryChunk<T> chunk;
    load_rotary_chunk(src, c * 8, pos, rot, chunk);
    float rotated[8];
    rotate_chunk(chunk, c * 8, rot, rotated);
#pragma unroll
    for (int e = 0; e < 8; ++e) vals[e] = from_float<T>(rotated[e]);
  } else {
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const int ch = c * 8 + e;
      vals[e] = ch < rot.rotary_dim ? from_float<T>(rotated_channel(src, ch, pos, rot)) : src[ch];
    }
  }
}

// Chunk c of packed row r (of used_rows attending rows) as the attention reads it: q's chunks [0, kQChunks)
// by q_chunk (rotary, positions already checked), the chunks after them from qv (MLA: the sm_90a MLA
// kernel; kQChunks = every chunk elsewhere), zeros for a row that does not attend.
template <typename T, int kQChunks, int kChunks>
__device__ __forceinline__ void packed_q_chunk(const AttnParams& p, const Sequence& seq, int i, int kv_head,
                                               int64_t r, int c, int64_t used_rows, T (&vals)[8]) {
  if (r < used_rows) {
    const RowSplit split = split_row(r, p.group);
    const int64_t t = split.t;
    const int h = kv_head * p.group + split.g;
    if (kQChunks == kChunks || c < kQChunks) {
      const T* src = token_row<const T>(p.q, seq, i, t, h);
      q_chunk(src, c, seq.rotary_pos + (p.seq.rotary_q_per_token ? t : 0), p.rotary, vals);
    } else {
      load8(token_row<const T>(p.qv, seq, i, t, h) + (c - kQChunks) * 8, vals);
    }
  } else {
#pragma unroll
    for (int e = 0; e < 8; ++e) vals[e] = from_float<T>(0.f);
  }
}

// The consumer's kRows (64) Q rows into s_q (panels of kRows rows, panel_bytes apart): packed_q_chunk's
// chunks, q's kQChunks of them first.
template <typename T, int kQChunks, int kChunks, int kRows = 64>
__device__ __forceinline__ void load_q_rows(const AttnParams& p, const Sequence& seq, int i, int kv_head,
                                            int64_t m0, unsigned char* s_q, int panel_bytes) {
  const int ctid = threadIdx.x % 128;
  const int64_t used_rows = static_cast<int64_t>(seq.q_used) * p.group;
  for (int idx = ctid; idx < kRows * kChunks; idx += 128) {
    const int row = idx / kChunks, c = idx % kChunks;
    alignas(16) T vals[8];
    packed_q_chunk<T, kQChunks, kChunks>(p, seq, i, kv_head, m0 + row, c, used_rows, vals);
    *reinterpret_cast<uint4*>(s_q + swizzled(row, c, panel_bytes)) = *reinterpret_cast<const uint4*>(vals);
  }
}
// fp8 q (under fp8 caches, in the bf16 kernel: p.q_fp8): the consumer's 64 Q rows as the portable kernel
// reads them (attention/sm80/tile_io.cuh, load_q_as): channel by channel, rotated in fp32, times `scale`,
// rounded once to TQ, into s_q (16-byte chunks of 16 / sizeof(TQ) channels). TQ = bf16: q_to_f16 then takes
// them as any bf16 Q (once a unit). Cfg::kFp8Mma: TQ = e4m3 for the e4m3 wgmma (Q K-major, 128-byte rows at
// d 128), halved with rotary (exact but for e4m3's last subnormal bit), since a rotated pair reaches
// 448 sqrt 2, past e4m3's 448: the scores take the 2 back (consume: qk_descale x 2).
template <class Cfg, typename TQ>
__device__ __forceinline__ void load_q_fp8_as(const AttnParams& p, const Sequence& seq, int i, int kv_head,
                                              int64_t m0, unsigned char* s_q, float scale) {
  constexpr int kPer = 16 / static_cast<int>(sizeof(TQ)), kChunksQ = Cfg::kHeadDim / kPer;
  const int ctid = threadIdx.x % 128;
  const int64_t used_rows = static_cast<int64_t>(seq.q_used) * p.group;
#pragma unroll 1  // (inlined under the persistent kernel's last P V, O live: as load_q_async's loop)
  for (int idx = ctid; idx < 64 * kChunksQ; idx += 128) {
    const int row = idx / kChunksQ, c = idx % kChunksQ;
    const int64_t r = m0 + row;
    alignas(16) TQ vals[kPer];
    if (r < used_rows) {
      const RowSplit split = split_row(r, p.group);
      const __nv_fp8_e4m3* src =
          token_row<const __nv_fp8_e4m3>(p.q, seq, i, split.t, kv_head * p.group + split.g);
      const int64_t pos = seq.rotary_pos + (p.seq.rotary_q_per_token ? split.t : 0);
#pragma unroll
      for (int e = 0; e < kPer; ++e) {
        const int ch = c * kPer + e;
        const float x =
            ch < p.rotary.rotary_dim ? rotated_channel(src, ch, pos, p.rotary) : to_float(src[ch]);
        vals[e] = from_float<TQ>(scale * x);
      }
    } else {
#pragma unroll
      for (int e = 0; e < kPer; ++e) vals[e] = from_float<TQ>(0.f);
    }
    *reinterpret_cast<uint4*>(s_q + swizzled(row, c, Cfg::kQPanelBytes)) =
        *reinterpret_cast<const uint4*>(vals);
  }
}
template <class Cfg>
__device__ __forceinline__ void load_q_fp8(const AttnParams& p, const Sequence& seq, int i, int kv_head,
                                           int64_t m0, unsigned char* s_q) {
  if constexpr (Cfg::kFp8Mma) {
    load_q_fp8_as<Cfg, __nv_fp8_e4m3>(p, seq, i, kv_head, m0, s_q, p.rotary.rotary_dim > 0 ? 0.5f : 1.f);
  } else {
    load_q_fp8_as<Cfg, typename Cfg::T>(p, seq, i, kv_head, m0, s_q, 1.f);
  }
}
// Whether this kernel reads fp8 q: the bf16 kernel over fp8 caches (and there p.q_fp8).
template <class Cfg>
constexpr bool kMayReadFp8Q = Cfg::kKvFp8&& std::is_same_v<typename Cfg::T, __nv_bfloat16>;

template <class Cfg>
__device__ __forceinline__ void load_q(const AttnParams& p, const Sequence& seq, int i, int kv_head,
                                       int64_t m0, unsigned char* s_q) {
  if constexpr (Cfg::kFp8Mma) {  // (launched for fp8 q only: launch.cuh)
    load_q_fp8<Cfg>(p, seq, i, kv_head, m0, s_q);
    return;
  }
  if constexpr (kMayReadFp8Q<Cfg>) {
    if (p.q_fp8) {
      load_q_fp8<Cfg>(p, seq, i, kv_head, m0, s_q);
      return;
    }
  }
  load_q_rows<typename Cfg::T, Cfg::kChunks, Cfg::kChunks>(p, seq, i, kv_head, m0, s_q, Cfg::kQPanelBytes);
}

// The persistent kernel's Q of its next unit, issued under the last tile's P V (O and P in flight): the
// chunks that are plain copies (past rotary_dim, 16-byte aligned) and the zeros of rows that do not attend
// by cp.async, which holds no register and lands while the P V and the epilogue run (consume waits for it
// before the unit's first tile: cp_async_wait_all); the others through registers one at a time (q_chunk;
// two rotated chunks at a time spill at d 128).
template <class Cfg>
__device__ __forceinline__ void load_q_async(const AttnParams& p, const Sequence& seq, int i, int kv_head,
                                             int64_t m0, unsigned char* s_q) {
  using T = typename Cfg::T;
  if constexpr (kMayReadFp8Q<Cfg>) {
    if (p.q_fp8) {  // (converted: no plain copies; consume's cp_async_wait_all then waits for none)
      load_q_fp8<Cfg>(p, seq, i, kv_head, m0, s_q);
      return;
    }
  }
  const int ctid = threadIdx.x % 128;
  const int64_t used_rows = static_cast<int64_t>(seq.q_used) * p.group;
  const uint32_t q_addr = smem_addr(s_q);
#pragma unroll 1
  for (int idx = ctid; idx < 64 * Cfg::kChunks; idx += 128) {
    const int row = idx / Cfg::kChunks, c = idx % Cfg::kChunks;
    const int64_t r = m0 + row;
    const uint32_t at = swizzled(row, c, Cfg::kQPanelBytes);
    if (r >= used_rows) {
      // Zeros. The source must still be 16-byte aligned (PTX: no exception for a zero-byte copy), which
      // q.ptr need not be; the gate (cp_async_cache_rows_ok) makes the K cache's base so.
      cp_async_16(q_addr + at, p.k_cache.ptr, false);
      continue;
    }
    const RowSplit split = split_row(r, p.group);
    const int64_t t = split.t;
    const int h = kv_head * p.group + split.g;
    const T* src = token_row<const T>(p.q, seq, i, t, h);
    if (c * 8 >= p.rotary.rotary_dim && reinterpret_cast<uintptr_t>(src + c * 8) % 16 == 0) {
      cp_async_16(q_addr + at, src + c * 8, true);
      continue;
    }
    alignas(16) T vals[8];
    q_chunk(src, c, seq.rotary_pos + (p.seq.rotary_q_per_token ? t : 0), p.rotary, vals);
    *reinterpret_cast<uint4*>(s_q + at) = *reinterpret_cast<const uint4*>(vals);
  }
}

// fp8 caches under bf16 q (Cfg::kKvFp8, f16 math): warp w's 16 rows of the consumer's Q in s_q (its rows of
// S in the wgmma layout) rescaled in place to f16 by 2^k, k such that their largest magnitude lands in
// [2^14, 2^15) (clamped to [-126, 126]); returns 2^-k, which the scores take back. Exact from max 2^-28 up (a
// bf16 value's 8 significant bits fit f16's 11 above 2^-14); smaller values round to f16's subnormals, an
// error far under the scores' own rounding. NaN and inf stay what they are, out of the max (an inf in it
// would scale the warp's other rows to 0: rows of other tokens and heads, finite and wrong).
template <class Cfg>
__device__ __forceinline__ float q_to_f16(unsigned char* s_q) {
  const int ctid = threadIdx.x % 128, warp = ctid / 32, lane = ctid % 32;
  constexpr int kSteps = 16 * Cfg::kChunks / 32;  // a lane's 16-byte chunks of the warp's rows
  const auto at = [&](int j) {
    const int idx = j * 32 + lane;
    return s_q + swizzled(16 * warp + idx / Cfg::kChunks, idx % Cfg::kChunks, Cfg::kQPanelBytes);
  };
  uint32_t m = 0;  // the largest finite magnitude, as float bits
#pragma unroll
  for (int j = 0; j < kSteps; ++j) {
    const uint4 v = *reinterpret_cast<const uint4*>(at(j));
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};  // bf16 pairs: a bf16 is the top half of its float
#pragma unroll
    for (int e = 0; e < 4; ++e) {  // |x| as bits, 0 for NaN and inf (exponent all ones)
      const uint32_t lo = (w[e] << 16) & 0x7fffffffu, hi = w[e] & 0x7fff0000u;
      m = max(m, lo < 0x7f800000u ? lo : 0u);
      m = max(m, hi < 0x7f800000u ? hi : 0u);
    }
  }
  m = __reduce_max_sync(0xffffffffu, m);  // (the bits of non-negative floats order as their values)
  const int exp2_m = static_cast<int>(m >> 23) - 127;           // its exponent (-127 for 0 and subnormals)
  const int k = m == 0 ? 0 : min(126, max(-126, 14 - exp2_m));  // the 2^k of the comment
  const float scale = __uint_as_float(static_cast<uint32_t>(127 + k) << 23);
#pragma unroll
  for (int j = 0; j < kSteps; ++j) {
    const uint4 v = *reinterpret_cast<const uint4*>(at(j));
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
    uint32_t h[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      h[e] = pack2<half>(__uint_as_float(w[e] << 16) * scale, __uint_as_float(w[e] & 0xffff0000u) * scale);
    }
    *reinterpret_cast<uint4*>(at(j)) = make_uint4(h[0], h[1], h[2], h[3]);
  }
  return __uint_as_float(static_cast<uint32_t>(127 - k) << 23);
}

// The persistent kernel's unit, for consume: its first tile in the CTA's stage ring, whether its Q is in
// s_q already (issued under the previous unit's last P V: load_q_async), and last() (what runs under this
// unit's last P V: the next unit's Q).
template <class Last>
struct UnitTiles {
  int64_t tile0;
  bool q_loaded;
  const Last& last;
};
// consume's wait_full with the hook run_tiles calls under the last P V (Cfg::kPersistent).
template <class W, class = void>
struct HasLast : std::false_type {};
template <class W>
struct HasLast<W, std::void_t<decltype(std::declval<const W&>().last())>> : std::true_type {};
template <class WaitFull, class Last>
struct WaitFullThenLast {
  const WaitFull& wait_full;
  const Last& last_;
  template <class... V>
  __device__ __forceinline__ int operator()(int64_t tile, V... v) const {
    return wait_full(tile, v...);
  }
  __device__ __forceinline__ void last() const { last_(); }
};
// wait_full(tile, VOperand{}): the tile's V, on its own barrier (Cfg::kSplitKv); wait_full(tile): its K
// (joint stages: K and V).
struct VOperand {};

// Channels (S = Q K^T) and keys (O += P V) a wgmma k-step: 16 for 16-bit operands, 32 for e4m3 (32 bytes
// either way).
template <class Cfg>
constexpr int kKStep = Cfg::kFp8Mma ? 32 : 16;
// KvFp8Mma's P scale (log2) and V^T offset (0 elsewhere).
template <class Cfg>
constexpr int kPLog2Of = [] {
  if constexpr (Cfg::kFp8Mma) return Cfg::kPLog2;
  return 0;
}();
template <class Cfg>
constexpr int kVtOffsetOf = [] {
  if constexpr (Cfg::kFp8Mma) return Cfg::kVtOffset;
  return 0;
}();
// The rows' sums on the tensor cores (config.hpp PrefillTile::mma_sums; 16-bit P): each P V k-step also
// multiplies P by a block of ones (m64n8k16) into 4 accumulators past O's, which O's rescale scales with it,
// so l is the sum of the P that V is weighted by (the 16-bit P: within the tolerances of the fp32 sum, and
// O / l's weights then sum to 1 up to fp32 rounding) and whole in every thread of the quad (no reduction at
// the end).
template <class Cfg>
constexpr bool kMmaSums = Cfg::kTile.mma_sums && !Cfg::kFp8Mma;
// O's accumulators a thread: dv / 2, and the rows' sums' 4 (element kHeadDimV / 2 + e: row 8 (e / 2), as
// O's).
template <class Cfg>
constexpr int kOAcc = Cfg::kHeadDimV / 2 + (kMmaSums<Cfg> ? 4 : 0);

// S = Q K^T of a tile into s (issued, not waited for): kD / kKStep k-steps, 32 bytes apart within a 128-byte
// panel row. q, k: the descriptors of Q and of stage 0's K; k_stage: the tile's stage offset (bytes).
template <class Cfg>
__device__ __forceinline__ void issue_qk_tile(float (&s)[Cfg::kBlockN / 2], const SmemDesc& q,
                                              const SmemDesc& k, uint32_t k_stage) {
  // The stage's descriptor once, then constant k-step offsets (at(k_stage + k_step) a k-step cost ptxas
  // ~2 more uniform instructions: 14 a tile at d 128).
  const SmemDesc ks(k.at(k_stage));
#pragma unroll
  for (int kk = 0; kk < Cfg::kHeadDim / kKStep<Cfg>; ++kk) {
    const uint32_t q_step = (kk / 4) * Cfg::kQPanelBytes + (kk % 4) * 32;
    const uint32_t k_step = (kk / 4) * Cfg::kKvPanelBytes + (kk % 4) * 32;
    wgmma_ss<typename Cfg::TM, Cfg::kBlockN>(s, q.at(q_step), ks.at(k_step), kk > 0);
  }
  wgmma_commit();
}

// O += P V of a tile (issued, not waited for): V's 16-key k-steps are 16 rows = 2048 bytes apart. v: the
// descriptor of stage 0's V; v_stage: the tile's stage offset (bytes); ones: the rows' sums' block
// (kMmaSums: P times ones beside each k-step, into O's last 4 accumulators).
template <class Cfg>
__device__ __forceinline__ void issue_pv_tile(float (&o)[kOAcc<Cfg>],
                                              const uint32_t (&pa)[Cfg::kBlockN / 16][4], const SmemDesc& v,
                                              uint32_t v_stage, uint64_t ones) {
  constexpr int kD = Cfg::kHeadDimV;
  const SmemDesc vs(v.at(v_stage));  // (as issue_qk_tile's)
#pragma unroll
  for (int kk = 0; kk < Cfg::kBlockN / kKStep<Cfg>; ++kk) {
    // (16-bit: V MN-major, a k-step 16 rows = 2048 bytes on; e4m3: V^T K-major, 32 key bytes on)
    wgmma_rs<typename Cfg::TM, kD>(reinterpret_cast<float(&)[kD / 2]>(o), pa[kk],
                                   vs.at(kk * (Cfg::kFp8Mma ? 32 : 2048)), 1);
    if constexpr (kMmaSums<Cfg>) {
      wgmma_rs_k<typename Cfg::TM, 8>(reinterpret_cast<float(&)[4]>(o[kD / 2]), pa[kk], ones, 1);
    }
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
// Cfg::kFp8Mma: e4m3 (P already x 2^kPLog2: softmax_max's kLog2Scale), k32 steps; register (h, half) of step
// kk (row 8 h, keys 16 half ..) holds positions 4t .. 4t + 3, which V^T's pi order gives keys 2t, 2t + 1
// (8-key block 4 kk + 2 half) and 2t + 8, 2t + 9 (the next block): the thread's own accumulators, no shuffle.
template <class Cfg>
__device__ __forceinline__ void pack_p(const float (&s)[Cfg::kBlockN / 2],
                                       uint32_t (&pa)[Cfg::kBlockN / 16][4]) {
  if constexpr (Cfg::kFp8Mma) {
#pragma unroll
    for (int kk = 0; kk < Cfg::kBlockN / 32; ++kk) {
#pragma unroll
      for (int reg = 0; reg < 4; ++reg) {
        const int h = reg % 2, j0 = 4 * kk + 2 * (reg / 2);
        const uint32_t lo = e4m3x2(s[4 * j0 + 2 * h], s[4 * j0 + 2 * h + 1]);
        const uint32_t hi = e4m3x2(s[4 * (j0 + 1) + 2 * h], s[4 * (j0 + 1) + 2 * h + 1]);
        pa[kk][reg] = lo | (hi << 16);
      }
    }
  } else {
#pragma unroll
    for (int kk = 0; kk < Cfg::kBlockN / 16; ++kk) {
#pragma unroll
      for (int e = 0; e < 4; ++e)
        pa[kk][e] = pack2<typename Cfg::TM>(s[8 * kk + 2 * e], s[8 * kk + 2 * e + 1]);
    }
  }
}

// The maximum of m[0, kN), a balanced tree of pairwise maxima (m is overwritten).
template <int kN, int kLen>
__device__ __forceinline__ float tree_max(float (&m)[kLen]) {
  if constexpr (kN == 1) {
    return m[0];
  } else {
    constexpr int kHalf = (kN + 1) / 2;
#pragma unroll
    for (int j = 0; j < kN / 2; ++j) m[j] = fmaxf(m[j], m[j + kHalf]);
    return tree_max<kHalf>(m);
  }
}

// The online softmax of a tile's modified scores (rows spread over the 4 threads of a quad; scores times
// factor are log2 units, score_factor): s becomes P, the rows' (max, sum) move on, correction = how much
// each row's running max moved (what O must be scaled by). Its pieces: the rows' maxima, a row's base,
// a row's exponentials over a range of score pairs; online_softmax runs them in one step, softmax_max and
// softmax_exp2 in steps that a caller can run work between (run_tiles' P V wait: kPvWaitMid).

// Both rows' maxima (with their running ones), each a balanced tree over the thread's kBlockN / 4 scores of
// the row (depth log2 of that, kBlockN / 4 - 1 FMNMX a row), then the two rows' quad shuffles (written
// together; ptxas still places row 1's after row 0's exp2 in the one-step form). Against chains of 4
// partial maxima (which began at -inf: 6 more FMNMX) d 64 is 1.4% faster, d 128 level: with ~7 registers
// free at this point, ptxas serializes either form (ncu: the max 28% of the softmax's stall samples;
// bench/NOTES.md, session 24).
template <int kBlockN>
__device__ __forceinline__ void row_maxima(const float (&s)[kBlockN / 2], const float (&row_max)[2],
                                           float (&mx)[2]) {
  constexpr int kPairs = kBlockN / 8;  // a row's score pairs in s
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    float m[kPairs];
#pragma unroll
    for (int j = 0; j < kPairs; ++j) m[j] = fmaxf(s[4 * j + 2 * k], s[4 * j + 2 * k + 1]);
    mx[k] = fmaxf(row_max[k], tree_max<kPairs>(m));
  }
#pragma unroll
  for (int lanes = 1; lanes <= 2; lanes *= 2) {
    const float other0 = __shfl_xor_sync(0xffffffffu, mx[0], lanes);
    const float other1 = __shfl_xor_sync(0xffffffffu, mx[1], lanes);
    mx[0] = fmaxf(mx[0], other0);
    mx[1] = fmaxf(mx[1], other1);
  }
}

// Row k's base (its max times factor, log2 units; kLog2Scale: P comes out times 2^kLog2Scale, and so does
// the row sum: KvFp8Mma's P for e4m3) and correction; its running max moves on.
template <int kLog2Scale>
__device__ __forceinline__ float row_base(int k, const float (&mx)[2], float factor, float (&row_max)[2],
                                          float (&correction)[2]) {
  constexpr float kShift = static_cast<float>(kLog2Scale);
  const float base = safe_max_base(mx[k]) * factor - kShift;
  correction[k] = mx[k] == row_max[k] ? 1.f : fast_exp2(row_max[k] * factor - kShift - base);
  row_max[k] = mx[k];
  return base;
}

// Pairs [kJ0, kJ1) of row k: s -> exp2, summed onto sum in 4 partial chains (dependent FADD chains of a
// quarter of the range instead of all of it: the consumers are latency-bound, bench/NOTES.md). Chain 0
// starts at sum, chains 1-3 at their first pair, not at 0 (0 + x is an FADD under IEEE's -0: 6 a range; a
// pair of exp2 is >= 0); a range of fewer than 4 pairs leaves its unused chains at -0 (x + -0 is x,
// exactly: folded away).
// (kSum false: the exponentials alone, sum returned as it came: kMmaSums.)
template <int kBlockN, int kJ0, int kJ1, bool kSum = true>
__device__ __forceinline__ float row_exp2(int k, float (&s)[kBlockN / 2], float factor, float base,
                                          float sum) {
  static_assert(0 <= kJ0 && kJ0 < kJ1 && kJ1 <= kBlockN / 8, "a range of pairs");
  float chain[4] = {-0.f, -0.f, -0.f, -0.f};
#pragma unroll
  for (int j = kJ0; j < kJ1; ++j) {
    s[4 * j + 2 * k] = fast_exp2(fmaf(s[4 * j + 2 * k], factor, -base));
    s[4 * j + 2 * k + 1] = fast_exp2(fmaf(s[4 * j + 2 * k + 1], factor, -base));
    if constexpr (kSum) {
      const float pair = s[4 * j + 2 * k] + s[4 * j + 2 * k + 1];
      const int c = j - kJ0;
      if (c == 0) {
        chain[0] = sum + pair;
      } else if (c < 4) {
        chain[c] = pair;
      } else {
        chain[c % 4] += pair;
      }
    }
  }
  if constexpr (!kSum) return sum;
  return (chain[0] + chain[1]) + (chain[2] + chain[3]);
}

// In one step, each row's base then its exponentials (the MLA kernel's softmax, and the prefill kernels'
// where the P V wait follows the softmax). kSums false: row_sum untouched (kMmaSums: the tensor cores sum).
template <int kBlockN, int kLog2Scale = 0, bool kSums = true>
__device__ __forceinline__ void online_softmax(float (&s)[kBlockN / 2], float factor, float (&row_max)[2],
                                               float (&row_sum)[2], float (&correction)[2]) {
  float mx[2];
  row_maxima<kBlockN>(s, row_max, mx);
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    const float base = row_base<kLog2Scale>(k, mx, factor, row_max, correction);
    if constexpr (kSums) {
      row_sum[k] = row_exp2<kBlockN, 0, kBlockN / 8>(k, s, factor, base, row_sum[k] * correction[k]);
    } else {
      row_exp2<kBlockN, 0, kBlockN / 8, false>(k, s, factor, base, 0.f);
    }
  }
}

// In steps: softmax_max, then softmax_exp2 over consecutive ranges of score pairs, the last one ending the
// rows' sums. What a step leaves for the next is two registers a row (the base, the sum so far): more, live
// across the P V wait, spilled in the persistent kernel's tile loop.
template <int kBlockN>
struct SoftmaxState {
  static constexpr int kPairs = kBlockN / 8;  // a row's score pairs in s
  float base[2];
  float sum[2];  // over the pairs done
};

template <int kBlockN, int kLog2Scale = 0>
__device__ __forceinline__ void softmax_max(const float (&s)[kBlockN / 2], float factor, float (&row_max)[2],
                                            float (&correction)[2], SoftmaxState<kBlockN>& st) {
  float mx[2];
  row_maxima<kBlockN>(s, row_max, mx);
#pragma unroll
  for (int k = 0; k < 2; ++k) st.base[k] = row_base<kLog2Scale>(k, mx, factor, row_max, correction);
}

// Pairs [kJ0, kJ1) of both rows (kJ0 = 0: onto the running sums times their correction); kJ1 = kPairs ends
// the rows' sums (row_sum). kSums false: the exponentials alone (kMmaSums).
template <int kBlockN, int kJ0, int kJ1, bool kSums = true>
__device__ __forceinline__ void softmax_exp2(float (&s)[kBlockN / 2], float factor, float (&row_sum)[2],
                                             const float (&correction)[2], SoftmaxState<kBlockN>& st) {
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    if constexpr (kSums) {
      const float sum = kJ0 == 0 ? row_sum[k] * correction[k] : st.sum[k];
      st.sum[k] = row_exp2<kBlockN, kJ0, kJ1>(k, s, factor, st.base[k], sum);
    } else {
      row_exp2<kBlockN, kJ0, kJ1, false>(k, s, factor, st.base[k], 0.f);
    }
  }
  if constexpr (kSums && kJ1 == SoftmaxState<kBlockN>::kPairs) {
    row_sum[0] = st.sum[0];
    row_sum[1] = st.sum[1];
  }
}

// The pairs a row before run_tiles' P V wait: a third at d 128 and 256 (FA3's place: 5 of 16, 2 of 6; H100,
// session 35, W6 against the wait after the softmax: 16x128 -2 to -5%, fp8 level; 8x256 -2 to -7%), all of
// them at d 64 and (192, 128), where a third lost (32x64 +7 to +12%: three consumers, P through shared
// memory; 16x192/128 +2 to +9% with 80-key tiles): there the kernels keep the wait after the softmax, their
// code as before (kPvWaitMid false; SASS identical). SASS with a third: at most 1 LDL more a tile in a loop.
template <class Cfg>
constexpr int kPairsBeforePv =
    Cfg::kHeadDim == 128 || Cfg::kHeadDim == 256 ? SoftmaxState<Cfg::kBlockN>::kPairs / 3
                                                 : SoftmaxState<Cfg::kBlockN>::kPairs;
template <class Cfg>
constexpr bool kPvWaitMid = kPairsBeforePv<Cfg> < SoftmaxState<Cfg::kBlockN>::kPairs;

// Three consumers with P in registers (d 64) hold S 64, O 32 and P of the previous tile 32 through the
// softmax at 160 registers: what the tile loop does not need every tile leaves the registers. The thread's
// two QueryRows (12 values, read on masked tiles and by the epilogue only) stay in local memory, and the
// tile bounds and the first key (one value a warpgroup) in uniform registers. Held in registers, they cost
// the plain tile ~26 local loads and stores (ptxas spilled the softmax's own state around them: SASS,
// d 64 persistent kernel); moved, 5 + 5.
template <class Cfg>
constexpr bool kLeanTileLoop = Cfg::kConsumers == 3;

// Out = O / l and lse of this thread's two rows, the sink counted here; a split of the split kernel
// (Cfg::kSplit, p.num_splits > 1) writes its normalized partial instead (the combine counts the sink).
template <class Cfg>
__device__ __forceinline__ void write_rows(const AttnParams& p, const Sequence& seq, const CtaRows& cta,
                                           int64_t m0, const QueryRow (&row)[2], const float (&o)[kOAcc<Cfg>],
                                           const float (&row_max)[2], float (&row_sum)[2], float factor,
                                           float o_descale = 1.f) {
  using T = typename Cfg::T;
  constexpr int kD = Cfg::kHeadDimV;
  const int ctid = threadIdx.x % 128, warp = ctid / 32, lane = ctid % 32, quad = lane % 4;
  const int64_t rows = static_cast<int64_t>(seq.q_len) * p.group;
  if constexpr (!kMmaSums<Cfg>) {  // (the tensor cores' sums are whole in each thread)
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      row_sum[k] += __shfl_xor_sync(0xffffffffu, row_sum[k], 1);
      row_sum[k] += __shfl_xor_sync(0xffffffffu, row_sum[k], 2);
    }
  }
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    const int64_t r = m0 + 16 * warp + lane / 4 + 8 * k;
    if (r >= rows) continue;
    const int64_t t = split_row(r, p.group).t;
    const int h = row[k].head;
    const RowState st{row_max[k] * factor, row_sum[k]};  // log2 units
    if constexpr (Cfg::kSplit) {
      const int64_t prow = piece_partial_row(p, split_piece(cta), seq, r);
      if (prow >= 0) {  // a split's normalized partial, the sink left to the combine
        const RowEnd part = end_row(st, row[k].attends, false, p.sinks, h, o_descale);
        float* o_part = p.o_partial + prow * p.head_dim_v;  // (8-byte aligned: c is even)
#pragma unroll
        for (int j = 0; j < kD / 8; ++j) {
          const int c = 8 * j + 2 * quad;
          *reinterpret_cast<float2*>(o_part + c) =
              make_float2(o[4 * j + 2 * k] * part.o_scale, o[4 * j + 2 * k + 1] * part.o_scale);
        }
        if (quad == 0) p.lse_partial[prow] = part.lse;
        continue;
      }
    }
    const RowEnd end = end_row(st, row[k].attends, true, p.sinks, h, o_descale);
    const float lse = end.lse, inv_l = end.o_scale;
    T* out = out_row<T>(p, seq, cta.i, t, h);
    // A thread's two adjacent columns as one 32-bit store (half the store instructions) where the row
    // allows it (out's strides are any element counts), else two.
    const bool pairs = reinterpret_cast<uintptr_t>(out) % 4 == 0;
#pragma unroll
    for (int j = 0; j < kD / 8; ++j) {
      const int c = 8 * j + 2 * quad;
      const float x0 = o[4 * j + 2 * k] * inv_l, x1 = o[4 * j + 2 * k + 1] * inv_l;
      if (pairs) {
        *reinterpret_cast<uint32_t*>(out + c) = pack2<T>(x0, x1);
      } else {
        out[c] = from_float<T>(x0);
        out[c + 1] = from_float<T>(x1);
      }
    }
    if (p.lse && quad == 0) *lse_at(p, seq, cta.i, t, h) = lse;
  }
}

// Ping-pong (Cfg::kPingPong): the consumers take turns issuing their wgmma groups, round robin, so that
// one's softmax runs while the others' matrix products occupy the tensor cores. Consumer c waits on
// barrier kTurnBarrier + c before issuing and then lets the next go (bar.arrive on kTurnBarrier + c + 1,
// modulo the consumers); each has n_tiles + 1 issue points, the last consumer starts by letting consumer 0
// go and skips its last hand-over, so every barrier phase completes before the CTA ends.
template <class Cfg>
struct PingPong {
  static constexpr int kLast = Cfg::kConsumers - 1;
  int consumer;        // 0 .. kLast
  int64_t turns_left;  // issue points left

  __device__ __forceinline__ PingPong(int consumer_, int64_t n_tiles)
      : consumer(consumer_), turns_left(n_tiles + 1) {
    if (Cfg::kPingPong && consumer == kLast && n_tiles > 0) named_barrier_arrive(Cfg::kTurnBarrier, 256);
  }
  __device__ __forceinline__ void my_turn() const {
    if constexpr (Cfg::kPingPong) named_barrier_sync(Cfg::kTurnBarrier + consumer, 256);
  }
  __device__ __forceinline__ void your_turn() {
    if constexpr (Cfg::kPingPong) {
      --turns_left;
      if (consumer != kLast || turns_left > 0) {
        named_barrier_arrive(Cfg::kTurnBarrier + (consumer == kLast ? 0 : consumer + 1), 256);
      }
    }
  }
};

// The consumer's tiles, S and P V in flight: the softmax of tile t overlaps the P V of tile t - 1 on the
// tensor cores. Per iteration, issue S_t = Q K_t and O += P_{t-1} V_{t-1}, wait for S_t (split stages,
// Cfg::kSplitKv: release K_t), softmax it; at d 128 and 256 a third of the way into its exponentials (FA3's
// place: P V, issued after S_t, is expected done by then; at d 64 and (192, 128) after all of them:
// kPairsBeforePv), wait for P V, release stage t - 1 (split stages: its V), rescale
// O by tile t's correction, so that P's packing (and O's rescale's latency) run under the rest of the MUFU
// stream instead of after it (bench/NOTES.md, sessions 34-35). wait_full(tile):
// the tile's stage, once its K (joint stages: K and V) is loaded; wait_full(tile, VOperand{}): its V (split
// stages); softmax(s, tile, correction, sums, rest): S -> P (the score mods, the online
// softmax) in two calls around the P V wait (consume). A WaitFullThenLast's
// last() runs while the last P V is on the tensor cores (every Q K^T of the tiles is done then).
// (The hook rides on wait_full: an added parameter, even unused, moved the other kernels' code.)
template <class Cfg, class WaitFull, class Softmax>
__device__ __forceinline__ void run_tiles(int64_t n_tiles, uint32_t q_addr, uint32_t s_k, uint32_t s_v,
                                          uint32_t empty_bar, PingPong<Cfg>& turns, const WaitFull& wait_full,
                                          const Softmax& softmax, float (&o)[kOAcc<Cfg>]) {
  constexpr int kBlockN = Cfg::kBlockN;
  // (Q's address from lane 0: one value a warp, which the compiler can then keep in the uniform registers
  // that wgmma takes its descriptors from, instead of moving it there for every wgmma.)
  const SmemDesc q_desc(desc_k_major(__shfl_sync(0xffffffffu, q_addr, 0))), k_desc(desc_k_major(s_k));
  // (e4m3: V^T, K-major, after the landed V in each stage)
  const SmemDesc v_desc(Cfg::kFp8Mma ? desc_k_major(s_v + kVtOffsetOf<Cfg>)
                                     : desc_mn_major(s_v, Cfg::kKvPanelBytes));
  uint32_t pa[kBlockN / 16][4];
  auto keep_p = [&](const float(&s)[kBlockN / 2]) { pack_p<Cfg>(s, pa); };
  // (kMmaSums: this consumer's ones block, as Q's address: from lane 0)
  uint64_t ones = 0;
  if constexpr (kMmaSums<Cfg>) {
    ones = desc_ones(ones_block_of<Cfg>(empty_bar, __shfl_sync(0xffffffffu, threadIdx.x / 128 - 1, 0)));
  }
  auto issue_pv = [&](int stage) { issue_pv_tile<Cfg>(o, pa, v_desc, stage * Cfg::kVStageBytes, ones); };
  auto fence_p = [&] { fence_fragments(reinterpret_cast<uint32_t(&)[kBlockN / kKStep<Cfg>][4]>(pa)); };
  const uint32_t v_empty = v_bars_of<Cfg>(0, empty_bar).empty;  // (joint stages: empty_bar)
  // A warp's stage release: by elect.sync over 16-bit caches (no lane number to read a tile); the fp8
  // caches' kernels keep lane 0's (elect.sync moved ptxas's spills there: the fp8-by-TMA split kernel at
  // d 128, 16 / 64 -> 300 / 380 bytes).
  auto release = [](uint32_t bar) {
    if constexpr (Cfg::kKvFp8) {
      warp_arrive(bar);
    } else {
      warp_arrive_elected(bar);
    }
  };
  int prev_stage = 0;
  if (n_tiles > 0) {
    float s[kBlockN / 2];
    KVATTN_PTL(pu_stamp(0));
    prev_stage = wait_full(0);
    turns.my_turn();
    wgmma_fence();
    issue_qk_tile<Cfg>(s, q_desc, k_desc, prev_stage * Cfg::kKStageBytes);
    turns.your_turn();
    wgmma_wait<0>();
    if constexpr (Cfg::kSplitKv) release(empty_bar + 8 * prev_stage);  // K_0 is read
    fence_registers(s);
    float correction[2];
    SoftmaxState<kBlockN> sums;
    if (softmax(s, 0, correction, sums, false)) softmax(s, 0, correction, sums, true);
    keep_p(s);  // (O is still zero: nothing to wait for or rescale)
  }
  // (32-bit tile numbers: a unit's tiles number < 2^31 / kBlockN; a 64-bit counter cost 2 a tile)
  const int n_tiles32 = static_cast<int>(n_tiles);
  for (int tile = 1; tile < n_tiles32; ++tile) {
    float s[kBlockN / 2];
    KVATTN_PTL(ptl_stamp(tile, kPtlHead));
    KVATTN_PTL(pu_stamp(static_cast<int>(tile < kPuTiles ? tile : kPuTiles - 1)));
    const int stage = wait_full(tile);
    if constexpr (Cfg::kSplitKv) wait_full(tile - 1, VOperand{});
    KVATTN_PTL(ptl_stamp(tile, kPtlStage));
    fence_p();
    fence_registers(o);
    turns.my_turn();
    wgmma_fence();
    KVATTN_PTL(ptl_stamp(tile, kPtlFenced));
    issue_qk_tile<Cfg>(s, q_desc, k_desc, stage * Cfg::kKStageBytes);
    issue_pv(prev_stage);
    turns.your_turn();
    KVATTN_PTL(ptl_stamp(tile, kPtlIssued));
    wgmma_wait<1>();  // S_t is done (P V may still run)
    // (split stages: K_t is read)
    if constexpr (Cfg::kSplitKv) release(empty_bar + 8 * stage);
    fence_registers(s);
    KVATTN_PTL(ptl_stamp(tile, kPtlS));
    float correction[2];
    SoftmaxState<kBlockN> sums;
    const bool on = softmax(s, tile, correction, sums, false);  // a third of the exponentials
    KVATTN_PTL(ptl_stamp(tile, kPtlSoftmax));  // (the timeline's softmax phase: its first third now)
    wgmma_wait<0>();  // P_{t-1} V_{t-1} is done: its registers and its stage are free
    fence_registers(o);
    fence_p();
    KVATTN_PTL(ptl_stamp(tile, kPtlPv));
    release(v_empty + 8 * prev_stage);  // (the warp is past its wait)
    if (__any_sync(0xffffffffu, correction[0] != 1.f || correction[1] != 1.f)) {  // once maxima settle: rare
#pragma unroll
      for (int e = 0; e < kOAcc<Cfg>; ++e) o[e] *= correction[(e % 4) / 2];
    }
    if (kPvWaitMid<Cfg> && on) {
      softmax(s, tile, correction, sums, true);  // the other exponentials
      keep_p(s);  // (in their block: ptxas interleaves the first pairs' packing with their MUFU stream)
    } else {
      keep_p(s);
    }
    KVATTN_PTL(ptl_stamp(tile, kPtlEnd));
    prev_stage = stage;
  }
  if (n_tiles > 0) {
    if constexpr (Cfg::kSplitKv) wait_full(n_tiles - 1, VOperand{});
    fence_p();
    fence_registers(o);
    turns.my_turn();
    wgmma_fence();
    issue_pv(prev_stage);
    turns.your_turn();
    KVATTN_PTL(pu_stamp(kPuTiles + kPuLastPv));
    if constexpr (HasLast<WaitFull>::value) wait_full.last();
    KVATTN_PTL(pu_stamp(kPuTiles + kPuNextQ));
    wgmma_wait<0>();
    KVATTN_PTL(pu_stamp(kPuTiles + kPuPvDone));
    fence_registers(o);
    release(v_empty + 8 * prev_stage);  // (the warp is past its wait)
  }
}

// A consumer past the rows of its CTA (a decode or a short chunk in a varlen batch): no row to compute or
// write. It keeps run_tiles' protocol (its n_tiles + 1 turns, each stage released once full) without a
// wgmma, so the consumers with rows run unchanged with the tensor cores to themselves.
template <class Cfg>
__device__ __forceinline__ void idle_consumer(int consumer, int64_t n_tiles, uint32_t full_bar,
                                              uint32_t empty_bar) {
  if (n_tiles == 0) return;  // run_tiles takes no turn either
  PingPong<Cfg> turns(consumer, n_tiles);
  const VBars v = v_bars_of<Cfg>(full_bar, empty_bar);
  for (int64_t tile = 0; tile <= n_tiles; ++tile) {
    if (tile < n_tiles) {
      const auto [stage, parity] = ring_slot<Cfg>(tile, 0);
      mbar_wait(full_bar + 8 * stage, parity);
      if constexpr (Cfg::kSplitKv) {  // K and V freed as they land
        warp_arrive(empty_bar + 8 * stage);
        mbar_wait(v.full + 8 * stage, parity);
        warp_arrive(v.empty + 8 * stage);
      }
    }
    turns.my_turn();
    turns.your_turn();
    if constexpr (!Cfg::kSplitKv) {
      if (tile > 0) warp_arrive(empty_bar + 8 * ring_slot<Cfg>(tile - 1, 0).stage);
    }
  }
}

// Cfg::kPersistent: unit is a UnitTiles (the other kernels: 0, unused; its type a template parameter so
// that their code stays as it was).
template <class Cfg, class Unit = int64_t>
__device__ __forceinline__ void consume(const AttnParams& p, const Sequence& seq, const CtaRows& cta,
                                        const KeyRange& cta_keys, int64_t n_tiles, unsigned char* s_q_all,
                                        uint32_t s_k, uint32_t s_v, uint32_t full_bar, uint32_t empty_bar,
                                        uint32_t fence_from, bool diag_no_softmax, Unit unit = 0) {
  using T = typename Cfg::T;
  constexpr int kBlockN = Cfg::kBlockN, kD = Cfg::kHeadDimV;  // (O's channels)
  const int consumer = threadIdx.x / 128 - 1;
  const int ctid = threadIdx.x % 128, warp = ctid / 32, lane = ctid % 32, quad = lane % 4;
  const int64_t m0 = cta.m0 + 64 * consumer;  // this warpgroup's first packed row
  unsigned char* s_q = s_q_all + consumer * (Cfg::kQBytes / Cfg::kConsumers);
  if constexpr (Cfg::kVarlen || Cfg::kSplit) {
    if (consumer > 0 && m0 >= static_cast<int64_t>(seq.q_len) * p.group) {
      idle_consumer<Cfg>(consumer, n_tiles, full_bar, empty_bar);
      return;
    }
  }

  // The ones block (4 bytes a thread), which wgmma reads after Q's proxy fence and barrier below.
  if constexpr (kMmaSums<Cfg>) {
    constexpr uint32_t kOnePair = std::is_same_v<typename Cfg::TM, half> ? 0x3C003C00u : 0x3F803F80u;
    static_assert(kOnesBlockBytes == 4 * 128, "a 32-bit store a thread fills the block");
    st_shared_b32(ones_block_of<Cfg>(empty_bar, consumer) + 4 * ctid, kOnePair);
  }
  constexpr bool kUnit = !std::is_integral_v<Unit>;  // a persistent kernel's unit
  if constexpr (kUnit) {                             // (apart: the other kernels' code as it was)
    if (unit.q_loaded) {
      cp_async_wait_all();  // load_q_async's copies
    } else {
      load_q<Cfg>(p, seq, cta.i, cta.kv_head, m0, s_q);
    }
    fence_proxy_async();
  } else if (!Cfg::kSplit || n_tiles > 0) {  // (a split past a short sequence's tiles reads no Q)
    load_q<Cfg>(p, seq, cta.i, cta.kv_head, m0, s_q);
    fence_proxy_async();  // Q is read by wgmma (async proxy)
  }
  if (!Cfg::kSplit || n_tiles > 0) named_barrier_sync(Cfg::kQBarrier + consumer, 128);
  // fp8 caches: the scores' descale (k's times q's) and, for bf16 q, Q to f16 (q_to_f16) and its scale back.
  float qk_descale = 1.f;
  if constexpr (Cfg::kKvFp8) {
    qk_descale = load_descales<true>(p, cta.i, cta.kv_head).qk;
    if constexpr (Cfg::kFp8Mma) {
      if (p.rotary.rotary_dim > 0) qk_descale *= 2.f;  // Q was halved (load_q_fp8_as)
    }
    if constexpr (std::is_same_v<typename Cfg::TM, half> && !std::is_same_v<T, half>) {
      if (!Cfg::kSplit || n_tiles > 0) {
        qk_descale *= q_to_f16<Cfg>(s_q);
        fence_proxy_async();
        named_barrier_sync(Cfg::kQBarrier + consumer, 128);
      }
    }
  }
  KVATTN_PTL(pu_stamp(kPuTiles + kPuQReady));

  const int64_t kv_len = seq.end - seq.leftpad;
  // Tiles [in_first, in_last] lie inside the keys every row of this warpgroup sees: they skip the mask.
  // As 32-bit tile numbers (a unit's tiles number < 2^31 / kBlockN), two registers through the loop instead
  // of two 64-bit key bounds and the tile's 64-bit first key (which the d 64 kernel spilled).
  const KeyRange mine = key_range(p, seq, m0, 64, kBlockN);
  const int64_t to_first = mine.all_first - cta_keys.first,
                to_last = mine.all_last - cta_keys.first - kBlockN + 1;
  // (kLeanTileLoop: warp-uniform values as lane 0's, which ptxas keeps in uniform registers)
  const auto lean = [](auto x) { return kLeanTileLoop<Cfg> ? __shfl_sync(0xffffffffu, x, 0) : x; };
  const int in_first = lean(static_cast<int>(to_first <= 0 ? 0 : (to_first + kBlockN - 1) / kBlockN));
  const int in_last = lean(static_cast<int>(to_last < 0 ? -1 : to_last / kBlockN));
  const int32_t kp_first = lean(static_cast<int32_t>(cta_keys.first));  // (keys are int32 positions)
  const int32_t kv_len32 = lean(static_cast<int32_t>(kv_len));          // (kLeanTileLoop only)
  // This thread's two rows of the accumulator layout, as the score modifications see them.
  const QueryRow row[2] = {query_row(p, seq, cta.i, cta.kv_head, m0 + 16 * warp + lane / 4),
                           query_row(p, seq, cta.i, cta.kv_head, m0 + 16 * warp + lane / 4 + 8)};
  // kLeanTileLoop: the rows where they are used are copies of row_mem read through an index ptxas cannot
  // see, so the array stays in local memory and the copies are loads (in the masked tiles' branch and the
  // epilogue); otherwise row itself.
  QueryRow row_mem[2] = {row[0], row[1]};
  const QueryRow(&row_ref)[2] = row;  // (returned by reference: nvcc's #836 took `row` itself for a local)
  const auto rows = [&](QueryRow(&copy)[2]) -> const QueryRow(&)[2] {
    if constexpr (kLeanTileLoop<Cfg>) {
      const int k = opaque(0);
      copy[0] = row_mem[k];
      copy[1] = row_mem[k + 1];
      return copy;
    } else {
      return row_ref;
    }
  };

  float o[kOAcc<Cfg>];  // (kMmaSums: and the rows' sums)
#pragma unroll
  for (int e = 0; e < kOAcc<Cfg>; ++e) o[e] = 0.f;
  // (fp8: the descales in the factor, or, where the score mods scale (softcap, ALiBi), in the scores first)
  const bool descale_scores = Cfg::kKvFp8 && score_mods_scale(p);
  const float factor = descale_scores ? score_factor(p) : score_factor(p) * qk_descale;
  float row_max[2] = {-INFINITY, -INFINITY};  // in the units of score_mods' output (x factor: log2)
  float row_sum[2] = {0.f, 0.f};              // this thread's share; quad-reduced at the end (or kMmaSums')
  const uint32_t q_addr = smem_addr(s_q);

  // Without softcap and ALiBi (and so without descaled scores) an inside tile takes no score mod: the tiles
  // [plain_first, plain_last] skip the mods' tests (an empty range otherwise; -10 instructions a tile at
  // d 128, tested once a tile at the softmax's start).
  const bool plain = !score_mods_scale(p);
  const int plain_first = lean(plain ? in_first : 1), plain_last = lean(plain ? in_last : 0);
  // The softmax in two calls around run_tiles' P V wait: softmax(s, tile, correction, sums, false) the score
  // mods, the maxima and the first kPairsBeforePv pairs a row; returns false under diag_no_softmax (then
  // nothing ran, correction = 1). softmax(.., true): the other pairs, ending the row sums. run_tiles' wait
  // sits at the join of that branch's two paths: a basic-block boundary, which keeps ptxas from hoisting it
  // to the softmax's start (with the wait in the block of the exponentials it did: P V and the softmax
  // serialized; SASS, session 33). Remove the branch only with another boundary there.
  auto softmax = [&](float(&s)[kBlockN / 2], int64_t tile, float(&correction)[2], SoftmaxState<kBlockN>& sums,
                     bool rest) {
    constexpr int kPairs = SoftmaxState<kBlockN>::kPairs;
    if (rest) {
      if constexpr (kPvWaitMid<Cfg>)
        softmax_exp2<kBlockN, kPairsBeforePv<Cfg>, kPairs, !kMmaSums<Cfg>>(s, factor, row_sum, correction,
                                                                           sums);
      return true;
    }
    if (diag_no_softmax) {
      correction[0] = correction[1] = 1.f;
      return false;
    }
    const int t = static_cast<int>(tile);
    if (t < plain_first || t > plain_last) {
      const bool inside = t >= in_first && t <= in_last;
      QueryRow copy[2];
      WgmmaScoreTile<kBlockN> score_tile{s, rows(copy), kp_first + t * kBlockN + 2 * quad};
      if constexpr (Cfg::kKvFp8) {
        if (descale_scores) score_tile.for_each([&](float& x, const QueryRow&, int32_t) { x *= qk_descale; });
      }
      apply_score_mods<true>(p, kLeanTileLoop<Cfg> ? kv_len32 : static_cast<int32_t>(kv_len), inside,
                             score_tile);
    }
    if constexpr (kPvWaitMid<Cfg>) {
      softmax_max<kBlockN, kPLog2Of<Cfg>>(s, factor, row_max, correction, sums);
      softmax_exp2<kBlockN, 0, kPairsBeforePv<Cfg>, !kMmaSums<Cfg>>(s, factor, row_sum, correction, sums);
    } else {
      online_softmax<kBlockN, kPLog2Of<Cfg>, !kMmaSums<Cfg>>(s, factor, row_max, row_sum, correction);
    }
    return true;
  };
  const uint32_t v_full = v_bars_of<Cfg>(full_bar, empty_bar).full;  // (joint stages: full_bar)
  auto wait_full = [&](int64_t tile, auto... v_operand) {
    const bool fence_now = fences_tile(fence_from, tile);
    int64_t tile0 = 0;  // the unit's first tile in the CTA's ring (producer.cuh)
    if constexpr (kUnit) tile0 = unit.tile0;
    const RingSlot ring = ring_slot<Cfg>(tile, tile0);
    mbar_wait((sizeof...(v_operand) > 0 ? v_full : full_bar) + 8 * ring.stage, ring.parity);
    if (fence_now) fence_proxy_async();
    return ring.stage;
  };

  PingPong<Cfg> turns(consumer, n_tiles);
  if constexpr (kUnit) {
    const WaitFullThenLast<decltype(wait_full), std::remove_reference_t<decltype(unit.last)>> waits{
        wait_full, unit.last};
    run_tiles<Cfg>(n_tiles, q_addr, s_k, s_v, empty_bar, turns, waits, softmax, o);
  } else {
    run_tiles<Cfg>(n_tiles, q_addr, s_k, s_v, empty_bar, turns, wait_full, softmax, o);
  }
  if constexpr (kMmaSums<Cfg>) {  // the rows' sums, whole in each thread
    row_sum[0] = o[kD / 2];
    row_sum[1] = o[kD / 2 + 2];
  }
  // (v's descale loaded again here: one register less through the tiles)
  float o_descale = 1.f;
  if constexpr (Cfg::kKvFp8) o_descale = load_descales<true>(p, cta.i, cta.kv_head).o;
  if constexpr (Cfg::kFp8Mma) {  // O and l carry P's 2^kPLog2: l back to its value (the lse), O with it
    constexpr float kInv = 1.f / static_cast<float>(1 << Cfg::kPLog2);
    row_sum[0] *= kInv;
    row_sum[1] *= kInv;
    o_descale *= kInv;
  }
  QueryRow copy[2];
  write_rows<Cfg>(p, seq, cta, m0, rows(copy), o, row_max, row_sum, factor, o_descale);
  KVATTN_PTL(pu_stamp(kPuTiles + kPuWritten));
}

#endif  // sm_90a

}  // namespace kvattn::cuda::sm90
