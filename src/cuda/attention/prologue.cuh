// The prologue of a piece, shared by every architecture's mainloop: which of the unit's keys and tiles it
// reads, and the checks of the device-side indices it depends on (a piece that fails them writes NaN rows,
// epilogue.cuh).
#pragma once

#include <cstdint>

#include "cuda/attention/params.cuh"
#include "cuda/attention/schedule.cuh"
#include "cuda/common/sequence.cuh"

namespace kvattn::cuda {

// The keys of a piece, as key positions kp in [0, kv_len) and cache slots.
struct PieceKeys {
  int64_t kv_len;      // keys of the sequence: end - leftpad
  KeyRange keys;       // visible to the piece's rows; tile t holds kp [first + t block_n, ... + block_n)
  int64_t tile_begin;  // the piece's tiles [tile_begin, tile_end) of the unit
  int64_t tile_end;
  int64_t slot0;  // cache slot of kp = keys.first
};

// rows_per_cta: the packed rows of the CTA's m-block (from w.m0).
template <int kBlockN>
__device__ __forceinline__ PieceKeys piece_keys(const AttnParams& p, const Piece& w, const Sequence& seq,
                                                int rows_per_cta) {
  PieceKeys k;
  k.kv_len = seq.end - seq.leftpad;
  k.keys = key_range(p, seq, w.m0, rows_per_cta, kBlockN);
  const int64_t n_tiles = k.keys.tiles;
  k.tile_begin = min(n_tiles, w.tile_begin);
  k.tile_end = min(n_tiles, w.tile_end);
  if (w.split >= 0) {  // static splits: the split's share of whole tiles
    const int64_t tiles_per_split =
        p.chunk_keys > 0 ? p.chunk_keys / kBlockN : (n_tiles + p.num_splits - 1) / p.num_splits;
    k.tile_begin = min(n_tiles, w.split * tiles_per_split);
    k.tile_end = min(n_tiles, k.tile_begin + tiles_per_split);
  }
  k.slot0 = seq.leftpad + k.keys.first;
  return k;
}

// Page ids of the whole sequence [leftpad, end), shared among the pieces of this (m-block, kv head): every
// group checks them all, and an offending piece's NaN reaches every row through the combine. False: the
// piece must write NaN rows and nothing else.
template <int kBlockN>
__device__ __forceinline__ bool check_piece(const AttnParams& p, const Piece& w, const Sequence& seq,
                                            const PieceKeys& k) {
  bool ok = check_unique_row(p.seq, w.i, p.errors) && seq.ok;
  if (p.seq.page_table && ok) {
    int64_t begin, end;
    if (w.split >= 0) {
      const int64_t share = (k.kv_len + p.num_splits - 1) / p.num_splits;
      begin = seq.leftpad + w.split * share;
      end = min(seq.end, begin + share);
    } else {  // its own tiles, and the slots before (after) the visible keys for the first (last) piece
      begin = k.tile_begin == 0 ? seq.leftpad : k.slot0 + k.tile_begin * kBlockN;
      end = k.tile_end == k.keys.tiles ? seq.end : min(seq.end, k.slot0 + k.tile_end * kBlockN);
    }
    ok = check_pages(p.seq, seq, begin, end, p.errors);
  }
  return ok;
}

// fp8 caches: the descales of a CTA's (sequence, kv head); 1 otherwise.
struct Descales {
  float qk = 1.f;  // qd kd, of Q K^T
  float qv = 1.f;  // qd vd, of Qv V^T
  float o = 1.f;   // vd, of P V
};

template <bool kKvFp8>
__device__ __forceinline__ Descales load_descales(const AttnParams& p, int i, int kv_head) {
  Descales d;
  if constexpr (kKvFp8) {
    const float qd = descale_at(p.q_descale, p.q_descale_strides, i, kv_head);
    const float vd = descale_at(p.v_descale, p.v_descale_strides, i, kv_head);
    d.qk = qd * descale_at(p.k_descale, p.k_descale_strides, i, kv_head);
    d.qv = qd * vd;
    d.o = vd;
  }
  return d;
}

}  // namespace kvattn::cuda
