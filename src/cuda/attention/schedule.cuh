// The tile scheduler: which keys a CTA reads, and where its result goes.
//
// A unit is (sequence, kv head, m-block): its packed rows against the keys they can see, cut into key
// tiles. A piece is a contiguous run of a unit's tiles that one CTA computes in one pass. Two schedules:
//   static splits (general kernel, explicit num_splits, deterministic mode): CTA (unit, split) computes
//     the split's share of the unit's tiles; partials (splits, total_q, hq, dv);
//   balanced (the decode kernel when num_splits = 0): the units' costs (tiles + a unit cost,
//     AttnParams::balanced_unit_cost) are laid end to end, and CTA k of G computes the cost range [k W / G,
//     (k + 1) W / G) of that line, unit by unit. A unit that straddles a boundary becomes pieces in
//     consecutive CTAs; each CTA holds at most two such pieces, slot 0 (the unit that continues into it) and
//     slot 1 (the unit that starts in it and goes on), so the partials are (2, G, rows_per_unit, dv) whatever
//     the lengths. The work of each CTA is the same within one tile, however skewed the lengths: no CTA waits
//     on one long sequence.
#pragma once

#include <cstdint>

#include "cuda/attention/balance.hpp"
#include "cuda/attention/params.cuh"
#include "cuda/common/sequence.cuh"

namespace kvattn::cuda {

struct Piece {
  int i;
  int kv_head;
  int64_t m0;          // first packed row of the unit's m-block
  int split;           // static splits: this CTA's split; -1 in the balanced schedule
  int64_t tile_begin;  // balanced: the piece's tiles [tile_begin, tile_end) of the unit
  int64_t tile_end;
  int64_t partial;   // balanced: first partial row of the piece ((slot * G + cta) * rows_per_unit), or -1
                     // when the piece is the whole unit (out, lse and the sink are written directly)
  int next_kv_head;  // balanced: the CTA's next piece is this kv head of the same sequence; else -1
};

// A CTA's m-block on the varlen m-block line (varlen_line_block below).
struct LineBlock {
  int i;  // batch: no work for this CTA
  int kv_head;
  int64_t m0;
};

// The partial row of packed row r of a piece, or -1 when the piece writes out directly.
__device__ __forceinline__ int64_t piece_partial_row(const AttnParams& p, const Piece& w, const Sequence& seq,
                                                     int64_t r) {
  if (w.split < 0) return w.partial < 0 ? -1 : w.partial + (r - w.m0);
  if (p.num_splits == 1) return -1;
  const int64_t t = r / p.group;
  const int h = w.kv_head * p.group + static_cast<int>(r % p.group);
  return (w.split * p.seq.total_q + partial_row(p.seq, seq, w.i, t)) * p.num_q_heads + h;
}

// The keys visible to the attending rows [m0, m0 + rows) of a sequence (the mask is monotone in qp, so
// the first and the last row bound the range), and the keys EVERY attending row sees (tiles inside them
// skip the mask), as key positions kp in [0, kv_len).
struct KeyRange {
  int64_t first = 0, last = -1;
  int64_t all_first = 0, all_last = -1;
  int64_t tiles = 0;  // ceil((last - first + 1) / block_n)
};

__device__ __forceinline__ KeyRange key_range(const AttnParams& p, const Sequence& seq, int64_t m0, int rows,
                                              int block_n) {
  KeyRange k;
  const int64_t kv_len = seq.end - seq.leftpad;
  const int64_t used_rows = static_cast<int64_t>(seq.q_used) * p.group;
  if (m0 < used_rows) {
    const int64_t qp_first = split_row(m0, p.group).t + kv_len - seq.q_used;
    const int64_t qp_last = split_row(min(m0 + rows, used_rows) - 1, p.group).t + kv_len - seq.q_used;
    k.first = p.mask.first_key(qp_first);
    k.last = p.mask.last_key(qp_last, kv_len);
    k.all_first = p.mask.first_key(qp_last);
    k.all_last = p.mask.last_key(qp_first, kv_len);
  }
  k.tiles = k.last >= k.first ? (k.last - k.first + block_n) / block_n : 0;
  return k;
}

// A sequence as the scan loaded it (record = false) and its unit's key range.
struct SeqKeys {
  Sequence seq;
  KeyRange keys;
};

// ---- the balanced schedule (decode: one m-block of rows_per_unit <= 16 rows per unit)

// Sequence i and its unit's keys (every kv head of a sequence has the same); unit_tiles: their tiles.
template <int kRows, int kBlockN>
__device__ __forceinline__ SeqKeys unit_keys(const AttnParams& p, int i) {
  SeqKeys k;
  k.seq = load_sequence(p.seq, i, nullptr, false);
  if (k.seq.rows_known) k.keys = key_range(p, k.seq, 0, kRows, kBlockN);
  return k;
}
template <int kRows, int kBlockN>
__device__ __forceinline__ int64_t unit_tiles(const AttnParams& p, int i) {
  return unit_keys<kRows, kBlockN>(p, i).keys.tiles;
}

struct BalancedStart {
  int64_t total;         // W: the whole line
  int ctas;              // G: CTAs with work (the grid may have more; they exit)
  int seq;               // the sequence of the unit holding this CTA's first cost position
  int64_t seq_start;     // where that sequence's first unit starts on the line
  int64_t seq_tiles;     // its tiles
  const SeqKeys* known;  // shared memory: sequences [seq, known_end) as the scan loaded them (known[i - seq])
  int known_end;
};

// Sequence i as the scan loaded it (BalancedStart::known), or nullptr.
__device__ __forceinline__ const SeqKeys* known_keys(const BalancedStart& st, int i) {
  return st.known != nullptr && i >= st.seq && i < st.known_end ? st.known + (i - st.seq) : nullptr;
}

// The kv head of the unit holding cost position a, the CTA's first (its sequence is st.seq): where the
// walk starts, and which Q the decode consumers load right after the scan.
__device__ __forceinline__ int first_kv_head(const AttnParams& p, const BalancedStart& st, int64_t a) {
  return static_cast<int>((a - st.seq_start) / (st.seq_tiles + p.balanced_unit_cost));
}

// Every CTA scans the batch (batch <= kBalancedMaxBatch, checked by the plan) in rounds of kThreads
// sequences: in round r thread t owns sequence r x kThreads + t, a block-wide exclusive scan of each
// round (carried over the rounds) gives each its start on the line, and the thread whose sequence holds
// this CTA's first position publishes it. Round r runs only when the batch reaches it (a block-uniform
// test): a batch of <= kThreads sequences runs one copy of load_sequence, whose code is fetched once, in
// parallel over the threads (four sequences a thread, unrolled, ran four cold copies one after another:
// 3-6 us a call at batch >= 4 on the H200, bench/NOTES.md, session 15). The first kKnown sequences of the
// CTA's range (from round 0) stay in shared memory for its pieces (BalancedStart::known): a CTA's pieces
// then load no sequence again, which at every piece switch was a dependent load behind the K/V stream
// (bench/NOTES.md, session 16). Call from all threads.
template <int kRows, int kBlockN, int kThreads, int kKnown = 1>
__device__ inline BalancedStart balanced_start(const AttnParams& p) {
  constexpr int kRounds = (kBalancedMaxBatch + kThreads - 1) / kThreads;
  __shared__ int64_t s_warp_sums[kRounds][kThreads / 32];
  __shared__ BalancedStart s_start;
  const int64_t unit_cost = p.balanced_unit_cost;
  // A sequence's cost on the line: its kv heads' units (tiles < 0: past the batch, none).
  auto line_cost = [&](int64_t tiles) { return tiles >= 0 ? p.num_kv_heads * (tiles + unit_cost) : 0; };
  const int batch = p.seq.batch;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  // Raw storage: a __shared__ variable cannot run SeqKeys' default member initializers (nvcc #20054).
  __shared__ alignas(SeqKeys) unsigned char s_known_bytes[kKnown * sizeof(SeqKeys)];
  SeqKeys* const s_known = reinterpret_cast<SeqKeys*>(s_known_bytes);
  // Every active round's lengths first, so that their loads overlap. Round 0 keeps its sequences for the
  // table (BalancedStart::known), whose pieces then skip load_sequence and key_range: cold code on the
  // path to the first copy (bench/NOTES.md, session 15), loads behind the stream at a switch (session 16).
  int64_t tiles[kRounds];
  const int i0 = static_cast<int>(threadIdx.x);
  const SeqKeys first = i0 < batch ? unit_keys<kRows, kBlockN>(p, i0) : SeqKeys{};
  tiles[0] = i0 < batch ? first.keys.tiles : -1;
#pragma unroll
  for (int r = 1; r < kRounds; ++r) {
    const int i = r * kThreads + static_cast<int>(threadIdx.x);
    tiles[r] = -1;
    if (r * kThreads < batch && i < batch) tiles[r] = unit_tiles<kRows, kBlockN>(p, i);
  }
  // Exclusive scan of each round's costs over the block: within each warp, then over the warp totals.
  int64_t incl[kRounds] = {};
#pragma unroll
  for (int r = 0; r < kRounds; ++r) {
    if (r * kThreads >= batch) break;  // block-uniform
    const int64_t mine = line_cost(tiles[r]);
    incl[r] = mine;
#pragma unroll
    for (int off = 1; off < 32; off *= 2) {
      const int64_t up = __shfl_up_sync(0xffffffffu, incl[r], off);
      if (lane >= off) incl[r] += up;
    }
    if (lane == 31) s_warp_sums[r][warp] = incl[r];
  }
  __syncthreads();
  int64_t total = 0, excl[kRounds] = {};
#pragma unroll
  for (int r = 0; r < kRounds; ++r) {
    if (r * kThreads >= batch) break;
    int64_t before = 0, round_total = 0;
#pragma unroll
    for (int w = 0; w < kThreads / 32; ++w) {
      if (w < warp) before += s_warp_sums[r][w];
      round_total += s_warp_sums[r][w];
    }
    const int64_t mine = line_cost(tiles[r]);
    excl[r] = total + before + incl[r] - mine;
    total += round_total;
  }
  // CTAs with work (balance.hpp): whole CTAs a unit in one wave when the units are fewer than the
  // resident CTAs, else the grid, at least p.balanced_min_cost tiles a CTA.
  const int64_t units = static_cast<int64_t>(batch) * p.num_kv_heads;
  const int64_t ctas =
      balanced_ctas(total, units, p.balanced_slots, gridDim.x, p.balanced_whole_grid, p.balanced_min_cost);
  const int64_t a = cta_begin(blockIdx.x, ctas, max(total, int64_t{1}));
  // The sequence holding position a publishes the CTA's start (one thread: the costs tile the line).
  if (blockIdx.x >= ctas) {
    if (threadIdx.x == 0) s_start = {total, static_cast<int>(ctas), batch, total, 0, nullptr, 0};
  } else {
#pragma unroll
    for (int r = 0; r < kRounds; ++r) {
      if (r * kThreads >= batch) break;
      const int64_t mine = line_cost(tiles[r]);
      if (excl[r] <= a && a < excl[r] + mine) {
        const int i = r * kThreads + static_cast<int>(threadIdx.x);
        const int known_end = r == 0 ? min(i + kKnown, min(kThreads, batch)) : i;
        s_start = {total,    static_cast<int>(ctas),     i,        excl[r],
                   tiles[r], r == 0 ? s_known : nullptr, known_end};
      }
    }
  }
  __syncthreads();
  // The CTA's next sequences of round 0, up to kKnown from its first (some may lie past its range: the
  // pieces never ask for those).
  const int k = i0 - s_start.seq;
  if (blockIdx.x < ctas && k >= 0 && i0 < s_start.known_end) s_known[k] = first;
  __syncthreads();
  return s_start;
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
          -1,
          -1};
}

// Where a unit's pieces are, for the combine: (its first CTA, how many CTAs its pieces span). Written once,
// by one thread of the CTA of the unit's first piece.
__device__ __forceinline__ void record_unit_pieces(const AttnParams& p, const Piece& w, int64_t pieces) {
  const int64_t u = static_cast<int64_t>(w.i) * p.num_kv_heads + w.kv_head;
  p.unit_pieces[2 * u] = static_cast<int32_t>(blockIdx.x);
  p.unit_pieces[2 * u + 1] = static_cast<int32_t>(pieces);
}

// The balanced walk: f(w, first_of_unit, unit_pieces) for each piece w of CTA blockIdx.x's cost range, in
// order; first_of_unit: the unit starts in this CTA (record_unit_pieces is then this CTA's to write);
// unit_pieces: the CTAs the unit's pieces span. No barrier: every thread that walks sees the same pieces,
// so warp-specialized kernels (decode_sm90: producers and consumers) agree on every piece without talking.
//
// Deterministic mode (AttnParams::chunk_keys > 0): a unit's tiles come in chunks of chunk_keys keys, each
// chunk a piece of its own, so that a unit's result depends on its chunks alone (their partials merge in
// chunk order in the combine), never on the batch or the grid. The CTA owns the chunks between its range's
// ends snapped to chunk boundaries (owned_chunk_tiles, balance.hpp). A unit of one chunk is written
// directly (split -1); of n chunks, chunk c goes to split c of the static partials (piece_partial_row). A
// unit without tiles is one empty piece, the CTA's whose range holds the unit's start. The Q hint
// next_kv_head names the same kv head for a unit's next chunk. (f has one call site: the decode kernel
// inlines its whole piece there.)
template <int kRows, int kBlockN, class F>
__device__ __forceinline__ void walk_balanced_pieces(const AttnParams& p, const BalancedStart& st, F&& f) {
  const int64_t k = blockIdx.x, ctas = st.ctas;
  if (k >= ctas) return;
  const int64_t a = cta_begin(k, ctas, st.total), b = cta_begin(k + 1, ctas, st.total);
  int i = st.seq;
  const int64_t unit_cost = p.balanced_unit_cost;
  int64_t tiles = st.seq_tiles;
  int h = first_kv_head(p, st, a);
  int64_t u_start = st.seq_start + h * (tiles + unit_cost);
  // > 0: deterministic mode's chunks, in tiles. Its walk keeps one value across a piece (next_chunk: the
  // decode kernel's 8 producer warps walk in 96 registers, and a loop counter and its bounds held across
  // the inlined piece spilled there).
  const int64_t chunk = p.chunk_keys / kBlockN;
  int64_t next_chunk = -1;  // where this CTA's next chunk of the current unit starts, or -1
  while (i < p.seq.batch && u_start < b) {
    // The unit's line: unit_cost of fixed work, then its tiles.
    const int64_t u_end = u_start + tiles + unit_cost;
    Piece w{i,
            h,
            0,
            -1,
            max(int64_t{0}, max(a, u_start) - u_start - unit_cost),
            max(int64_t{0}, min(b, u_end) - u_start - unit_cost),
            -1,
            u_end < b && h + 1 < p.num_kv_heads ? h + 1 : -1};
    bool emit = true, first_of_unit = false;
    int64_t unit_pieces = 0;
    if (chunk > 0) {
      const OwnedTiles own = owned_chunk_tiles(a, b, u_start, unit_cost, tiles, chunk);
      w.tile_begin = next_chunk >= 0 ? next_chunk : own.begin;
      w.tile_end = min(own.end, w.tile_begin + chunk);
      emit = tiles == 0 ? a <= u_start : w.tile_begin < own.end;
      if (tiles > chunk) {  // more than one chunk (32-bit: a unit's tile offsets fit, owned_chunk_tiles)
        w.split = static_cast<int>(static_cast<uint32_t>(w.tile_begin) / static_cast<uint32_t>(chunk));
      }
      next_chunk = w.tile_end < own.end ? w.tile_end : -1;
      if (next_chunk >= 0) w.next_kv_head = h;
    } else {
      if (u_start < a || u_end > b) {
        const int slot = u_start < a ? 0 : 1;  // continues into this CTA, or starts here and goes on
        w.partial = (static_cast<int64_t>(slot) * p.balanced_ctas + k) * p.rows_per_unit;
      }
      first_of_unit = u_start >= a;
      unit_pieces = cta_of(u_end - 1, ctas, st.total) - k + 1;
    }
    if (emit) f(w, first_of_unit, unit_pieces);
    if (next_chunk >= 0) continue;  // the unit's next chunk
    u_start = u_end;
    if (++h == p.num_kv_heads) {
      h = 0;
      if (++i < p.seq.batch) {
        const SeqKeys* known = known_keys(st, i);
        tiles = known != nullptr ? known->keys.tiles : unit_tiles<kRows, kBlockN>(p, i);
      }
    }
  }
}

// The balanced schedule's tile scheduler for kernels whose threads all compute each piece: piece(w) for
// each piece of this CTA, a barrier after each (the next piece reuses the shared memory). Call from all
// threads.
template <int kRows, int kBlockN, int kThreads, class PieceBody>
__device__ __forceinline__ void for_each_balanced_piece(const AttnParams& p, PieceBody piece) {
  const BalancedStart st = balanced_start<kRows, kBlockN, kThreads>(p);
  walk_balanced_pieces<kRows, kBlockN>(p, st, [&](const Piece& w, bool first_of_unit, int64_t unit_pieces) {
    if (first_of_unit && threadIdx.x == 0) record_unit_pieces(p, w, unit_pieces);
    piece(w);
    __syncthreads();  // the next piece reuses the shared memory
  });
}

// ---- the varlen m-block line (prefill kernels whose q is packed by cu_seqlens_q)
//
// A grid of (max m-blocks x batch x kv heads) CTAs is mostly empty when one long chunk shares a call with
// many decodes (a chunked-prefill step: 16 m-blocks for the chunk, 1 for each of 64 decodes: 8320 CTAs
// of which 7680 only load their sequence and exit, ~2 ms on the H200). Instead sequence i's units take
// max(1, ceil(rows_i / block_m)) m-blocks each (a sequence without rows keeps one CTA, so that its index
// errors are recorded as before), laid on a line (common/sequence.cuh, find_on_line) in sequence order,
// the kv heads of a sequence one after the other and the m-blocks of a unit last (causal: the most keys)
// first; CTA x takes position x. The line is at most varlen_line_bound(total_q x group, batch, block_m)
// per kv head (the launcher's grid) when cu_seqlens_q is valid; a broken one may be longer, and then its
// errors are recorded by the grid's last CTA.

// m-blocks of sequence i's units on the line (1 when cu_seqlens_q is broken at i).
__device__ __forceinline__ int64_t line_m_blocks(const AttnParams& p, int i, int block_m) {
  const int64_t a = p.seq.cu_seqlens_q[i], b = p.seq.cu_seqlens_q[i + 1];
  if (a < 0 || b < a || b > p.seq.total_q || b - a > p.seq.max_seqlen_q) return 1;
  return max(int64_t{1}, ((b - a) * p.group + block_m - 1) / block_m);
}

// Call from all threads.
template <int kThreads>
__device__ inline LineBlock varlen_line_block(const AttnParams& p, int block_m) {
  const int heads = p.num_kv_heads;
  const LinePos at =
      find_on_line<kThreads>(p.seq, p.errors, [&](int i) { return heads * line_m_blocks(p, i, block_m); });
  if (at.i >= p.seq.batch) return {p.seq.batch, 0, 0};
  const int64_t blocks = at.count / heads;
  return {at.i, static_cast<int>(at.offset / blocks), (blocks - 1 - at.offset % blocks) * block_m};
}

}  // namespace kvattn::cuda
