// The Hopper prefill kernel's producers: K/V tiles into the stage ring, by cp.async or TMA (kernel.cuh:
// the overview).
#pragma once

#include <cstdint>
#include <type_traits>

#include "cuda/common/fp8.cuh"
#include "cuda/common/mma.cuh"
#include "cuda/common/sequence.cuh"
#include "cuda/prefill_sm90/cta.cuh"
#include "cuda/prefill_sm90/ptx.cuh"
#include "cuda/prefill_sm90/timeline.cuh"

#ifndef KVATTN_PREFILL_FP8_DIAG
#define KVATTN_PREFILL_FP8_DIAG 0
#endif

namespace kvattn::cuda::sm90 {

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)

// ---- producer: K/V tiles into the stage ring

// Where a slot's row of kv_head starts in each cache, in 16-byte units of kElems16 elements (8: 16-bit
// caches, 16: fp8; 32 bits: the launcher checks that the caches span less than 64 GiB), or kNoRow (the
// slot's copies are zero-filled) where it has no page.
constexpr uint32_t kNoRow = 0xffffffffu;
struct KvRowUnits {
  uint32_t k = kNoRow, v = kNoRow;
};
template <int kElems16 = 8>
__device__ __forceinline__ KvRowUnits kv_row_units(const AttnParams& p, const SlotAddress& a, int kv_head) {
  KvRowUnits r;
  if (a.page >= 0) {
    r.k = static_cast<uint32_t>((a.page * p.k_cache.page_stride + a.in_page * p.k_cache.slot_stride +
                                 kv_head * p.k_cache.head_stride) /
                                kElems16);
    r.v = static_cast<uint32_t>((a.page * p.v_cache.page_stride + a.in_page * p.v_cache.slot_stride +
                                 kv_head * p.v_cache.head_stride) /
                                kElems16);
  }
  return r;
}

// A decode producer's key row (the MLA and d 512 kernels, 4 warps of kBlockN / 4 rows): row key_row of each
// tile of [slot0, slot0 + n_tiles kBlockN), its page-table entry (loaded ahead of its tile) and its rows'
// offsets in each cache (kv_row_units; kNoRow past the tiles, the sequence or the warp's rows).
template <int kBlockN>
struct TileKeyRow {
  const AttnParams& p;
  const Sequence& seq;
  int kv_head;
  int64_t slot0, n_tiles;
  int key_row;    // kBlockN / 4 warp + lane
  bool owns_row;  // lane < kBlockN / 4
  bool paged;
  __device__ __forceinline__ TileKeyRow(const AttnParams& p_, const Sequence& seq_, int kv_head_,
                                        int64_t slot0_, int64_t n_tiles_)
      : p(p_), seq(seq_), kv_head(kv_head_), slot0(slot0_), n_tiles(n_tiles_) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    owns_row = lane < kBlockN / 4;
    key_row = warp * (kBlockN / 4) + lane;
    paged = p.seq.page_table != nullptr && p.seq.cu_seqlens_k == nullptr;
  }
  __device__ __forceinline__ int32_t entry(int64_t tile) const {
    const int64_t s = slot0 + tile * kBlockN + key_row;
    return paged && owns_row && tile < n_tiles && s < seq.end ? page_entry(p.seq, seq, s) : 0;
  }
  __device__ __forceinline__ void offsets(int64_t tile, int32_t entry, uint32_t& k_off,
                                          uint32_t& v_off) const {
    const int64_t s = slot0 + tile * kBlockN + key_row;
    k_off = v_off = kNoRow;
    if (owns_row && tile < n_tiles && s < seq.end) {
      const KvRowUnits row = kv_row_units(p, slot_address_at(p.seq, seq, s, entry), kv_head);
      k_off = row.k;
      v_off = row.v;
    }
  }
};

// kv_row_units in unsigned 32-bit arithmetic, the strides in 16-byte units made once: exact for the caches
// the sm_90a kernels take (cp_async_cache_rows_ok: non-negative strides, multiples of 16 bytes, every row
// within 2^32 - 1 units, so no product or sum wraps; a packed cache's page is 0 and its page stride unused).
// kv_row_units' signed 64-bit multiply-adds and division are ~40 instructions a row.
template <int kElems16>
struct KvRowStrides {
  uint32_t k_page, k_slot, k_head, v_page, v_slot, v_head;  // *_head: the kv head's offset
  __device__ __forceinline__ KvRowStrides(const AttnParams& p, int kv_head)
      : k_page(static_cast<uint32_t>(p.k_cache.page_stride / kElems16)),
        k_slot(static_cast<uint32_t>(p.k_cache.slot_stride / kElems16)),
        k_head(static_cast<uint32_t>(kv_head * (p.k_cache.head_stride / kElems16))),
        v_page(static_cast<uint32_t>(p.v_cache.page_stride / kElems16)),
        v_slot(static_cast<uint32_t>(p.v_cache.slot_stride / kElems16)),
        v_head(static_cast<uint32_t>(kv_head * (p.v_cache.head_stride / kElems16))) {}
  __device__ __forceinline__ KvRowUnits operator()(const SlotAddress& a) const {
    KvRowUnits r;
    if (a.page >= 0) {
      const uint32_t page = static_cast<uint32_t>(a.page), slot = static_cast<uint32_t>(a.in_page);
      r.k = page * k_page + slot * k_slot + k_head;
      r.v = page * v_page + slot * v_slot + v_head;
    }
    return r;
  }
};

// The ring's barriers (thread 0, before the block's first barrier): a stage's "full" counts the producer
// warps (TMA or cp.async), its "empty" the consumer warps (Cfg::kFullArrivals / kEmptyArrivals); with
// Cfg::kSplitKv a second pair for the stage's V (v_bars_of), K's on the first.
// fp8 caches: a third barrier a stage, "landed" (the producer's own: K / V in the stage before it converts
// them; produce_fp8_tma), after everything else (config.hpp).
template <class Cfg>
__device__ __forceinline__ uint32_t landed_bar_of(uint32_t empty_bar) {
  return past_ring_of<Cfg>(empty_bar);
}
template <class Cfg>
__device__ __forceinline__ void init_stage_barriers(uint32_t full_bar, uint32_t empty_bar) {
  const VBars v = v_bars_of<Cfg>(full_bar, empty_bar);
  for (int s = 0; s < Cfg::kStages; ++s) {
    mbar_init(full_bar + 8 * s, Cfg::kFullArrivals);
    mbar_init(empty_bar + 8 * s, Cfg::kEmptyArrivals);
    if constexpr (Cfg::kFp8Tma) mbar_init(landed_bar_of<Cfg>(empty_bar) + 8 * s, Cfg::kFullArrivals);
    if constexpr (Cfg::kSplitKv) {
      mbar_init(v.full + 8 * s, Cfg::kFullArrivals);
      mbar_init(v.empty + 8 * s, Cfg::kEmptyArrivals);
    }
  }
}

// One cache's rows of a warp's kRowsPerWarp key rows into a stage, by 16-byte cp.async in warp-wide steps of
// 32 chunks: lane l copies chunk (j * 32 + l) % kC of the warp's row (j * 32 + l) / kC (consecutive lanes
// read consecutive 16 bytes of a row) to its swizzled place; off: this lane's key row's offset in 16-byte
// units (kv_row_units), shuffled from the row's lane; kNoRow: zeros. skip: copy nothing (the timing
// diagnostic).
template <int kRowsPerWarp, int kC>
__device__ __forceinline__ void copy_key_rows(uint32_t dst, const unsigned char* base, uint32_t off, int warp,
                                              int lane, int panel_bytes, bool skip = false) {
#pragma unroll
  for (int j = 0; j < kRowsPerWarp * kC / 32; ++j) {
    if (skip) break;
    const int idx = j * 32 + lane;
    const int row_in_warp = idx / kC, c = idx % kC;
    const uint32_t row = __shfl_sync(0xffffffffu, off, row_in_warp);
    const bool ok = row != kNoRow;
    const uint32_t at = swizzled(warp * kRowsPerWarp + row_in_warp, c, panel_bytes);
    cp_async_16(dst + at, base + static_cast<uint64_t>(ok ? row + c : 0) * 16, ok);
  }
}

// A warp's fp8 rows of one cache into a stage (copy_key_rows' steps) with the lane's destinations made once
// (fp8_lanes.hpp, RowCopySteps): a step is a shuffle, a select, an address multiply-add and the copy. kC
// not a power of two (d 192's K rows): copy_key_rows' arithmetic every step. l: the lane (the caller's
// choice of an opaque copy, below).
template <int kRows, int kC, bool = (32 % kC == 0)>
struct Fp8RowCopy {
  int warp, panel_bytes;
  __device__ __forceinline__ Fp8RowCopy(int w, int, int panel) : warp(w), panel_bytes(panel) {}
  // off: this lane's key row's offset in 16-byte units from base (kNoRow: zeros).
  __device__ __forceinline__ void operator()(uint32_t dst, const unsigned char* base, uint32_t off,
                                             int l) const {
    copy_key_rows<kRows, kC>(dst, base, off, warp, l, panel_bytes);
  }
};
// src + 16 row as one multiply-add (from C++, ptxas adds the chunk's offset and the base apart: three
// instructions a copy).
__device__ __forceinline__ const void* plus_rows16(const unsigned char* src, uint32_t row) {
  uint64_t at;
  asm("mad.wide.u32 %0, %1, 16, %2;" : "=l"(at) : "r"(row), "l"(reinterpret_cast<uint64_t>(src)));
  return reinterpret_cast<const void*>(at);
}
template <int kRows, int kC>
struct Fp8RowCopy<kRows, kC, true> {
  using Steps = RowCopySteps<kRows, kC>;
  uint32_t at[Steps::kP];
  __device__ __forceinline__ Fp8RowCopy(int warp, int lane, int panel) {
#pragma unroll
    for (int k = 0; k < Steps::kP; ++k) at[k] = Steps::dst_base(warp, lane, k, panel);
  }
  __device__ __forceinline__ void operator()(uint32_t dst, const unsigned char* base, uint32_t off,
                                             int l) const {
    const unsigned char* src = base + 16 * (l % kC);  // this lane's chunk of row offset 0
#pragma unroll
    for (int j = 0; j < Steps::kSteps; ++j) {
      const uint32_t row = __shfl_sync(0xffffffffu, off, Steps::src_lane(l, j));
      const bool ok = row != kNoRow;
      cp_async_16(dst + at[j % Steps::kP] + Steps::dst_step(j), plus_rows16(src, ok ? row : 0), ok);
    }
  }
};

// fp8 caches (Cfg::kKvFp8): tile n's fp8 rows land by 16-byte cp.async in its K / V stage where their f16
// rows go (fp8 chunk j, 16 channels, at the place of f16 chunk j of the swizzled layout: a row's fp8 bytes
// lie inside its own f16 row), then lane l of warp w converts key row w kBlockN / 4 + l in place, from its
// last fp8 chunk down: fp8 chunk j's f16 chunks 2j and 2j + 1 overwrite fp8 chunks 2j and 2j + 1, read
// before (both above j for j >= 1; at j = 0, chunk 0 is in registers and chunk 1 was read before).
// So the stages and the shared memory are the 16-bit kernel's. The stage is full once every warp has
// converted its rows and fenced them for wgmma (async proxy): unlike the 16-bit producer's copies, the
// copies' latency is waited for here, between a slot's release and its fill (one consumer tile of slack
// with three stages: the consumers hold K_t and V_t-1). row: stage + row_base(r) (fp8_lanes.hpp).
// In batches of up to 4 fp8 chunks from the last down, each batch's loads first: their round trips overlap
// (the asm's memory clobbers keep every load after every earlier store, so one chunk at a time made 16
// dependent shared-memory round trips a tile at d 128: bench/NOTES.md, session 35). Safe: a batch [j0, j0 +
// kBatch) writes f16 chunks [2 j0, 2 j0 + 2 kBatch), none of them an fp8 chunk still unread (those are < j0).
// It costs the producer loops ~10 spill instructions a tile at 56 registers and paid: -6 to -9% on the fp8
// cache's prefill (H100, session 36).
template <int kChunks8>
__device__ __forceinline__ void fp8_row_to_f16(uint32_t row, int panel_bytes) {
  constexpr int kBatch = kChunks8 < 4 ? kChunks8 : 4;
  static_assert(kChunks8 % kBatch == 0, "whole batches");
#pragma unroll
  for (int j0 = kChunks8 - kBatch; j0 >= 0; j0 -= kBatch) {
    uint4 in[kBatch];
#pragma unroll
    for (int b = kBatch - 1; b >= 0; --b) {
      in[b] = ld_shared_v4((row ^ chunk_xor(j0 + b)) + chunk_panel(j0 + b, panel_bytes));
    }
#pragma unroll
    for (int b = kBatch - 1; b >= 0; --b) {
      const int j = j0 + b;
      uint4 lo, hi;
      e4m3x16_to_f16x16(in[b], lo, hi);
      st_shared_v4((row ^ chunk_xor(2 * j)) + chunk_panel(2 * j, panel_bytes), lo);
      st_shared_v4((row ^ chunk_xor(2 * j + 1)) + chunk_panel(2 * j + 1, panel_bytes), hi);
    }
  }
}
// Cfg::kFp8Mma: warp w's 32 landed fp8 V rows (keys 32 w ..) into V^T at v + kVtOffset (fp8_lanes.hpp has
// the layout and the lanes' addresses). Per lane: 8 ldmatrix.trans, 32 byte permutes, 8 stmatrix a tile.
template <class Cfg>
struct Fp8VTranspose {
  uint32_t ld[2], st[2];  // the lane's row addresses of groups 2 w and 2 w + 1, less the stage
  __device__ __forceinline__ Fp8VTranspose(int warp, int lane) {
#pragma unroll
    for (int g = 0; g < 2; ++g) {
      ld[g] = vt_ld_base(warp, lane, g);
      st[g] = Cfg::kVtOffset + vt_st_base(warp, lane, g);
    }
  }
  __device__ __forceinline__ void operator()(uint32_t v) const {
#pragma unroll
    for (int g = 0; g < 2; ++g) {
      const uint32_t ld_row = v + ld[g], st_row = v + st[g];
#pragma unroll
      for (int j = 0; j < Cfg::kHeadDimV / 16; j += 2) {
        uint32_t m[4], w[4];
        ldmatrix_x4_trans(m, ld_row ^ vt_ld_step(j));
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          w[2 * h] = byte_perm(m[2 * h], m[2 * h + 1], kVtPermEven);     // channel 16 (j + h) + 2 p
          w[2 * h + 1] = byte_perm(m[2 * h], m[2 * h + 1], kVtPermOdd);  // and 2 p + 1
        }
        stmatrix_x4(st_row + vt_st_step(j), w);
      }
    }
  }
};

struct NoVTranspose {  // KvFp8: no V^T
  __device__ __forceinline__ NoVTranspose(int, int) {}
};

// A stage's landed fp8 rows made what the consumers read (warp w's rows, lane l; opaque for f16, as in
// produce_fp8): f16 in place (KvFp8) or V^T beside V (KvFp8Mma); fenced for wgmma, then the warp's arrival
// on the stage's full barrier. (produce_fp8 writes the same steps out: through this function its kernels'
// code moved.)
template <class Cfg>
__device__ __forceinline__ void fp8_stage_finish(uint32_t k_dst, uint32_t v_dst, int warp, int l,
                                                 uint32_t full) {
  constexpr int kRowsPerWarp = Cfg::kBlockN / 4;
  if constexpr (Cfg::kFp8Mma) {
    Fp8VTranspose<Cfg>(warp, l)(v_dst);
  } else if (l < kRowsPerWarp) {
    const uint32_t row = row_base(warp * kRowsPerWarp + l);
    fp8_row_to_f16<Cfg::kHeadDim / 16>(k_dst + row, Cfg::kKvPanelBytes);
    fp8_row_to_f16<Cfg::kHeadDimV / 16>(v_dst + row, Cfg::kKvPanelBytes);
  }
  fence_proxy_async();
  __syncwarp();
  warp_arrive(full);
}

template <class Cfg>
__device__ __forceinline__ void produce_fp8(const AttnParams& p, const Sequence& seq, int kv_head,
                                            int64_t slot0, int64_t n_tiles, uint32_t s_k, uint32_t s_v,
                                            uint32_t full_bar, uint32_t empty_bar, bool diag_no_load,
                                            int64_t tile0 = 0) {
  constexpr int kRowsPerWarp = Cfg::kBlockN / 4;
  constexpr int kKChunks = Cfg::kHeadDim / 16, kVChunks = Cfg::kHeadDimV / 16;  // of an fp8 row
  static_assert(kRowsPerWarp * kKChunks % 32 == 0 && kRowsPerWarp * kVChunks % 32 == 0,
                "whole warp copy steps");
  // (s_k is 1024-aligned, as the swizzle needs: kernel.cuh)
  static_assert(Cfg::kKStageBytes % 1024 == 0 && Cfg::kVStageBytes % 1024 == 0,
                "1024-aligned stages: the lanes' swizzle XORs after the stage's address (fp8_lanes.hpp)");
  const int ptid = threadIdx.x % 128, warp = ptid / 32, lane = ptid % 32;
  const bool owns_row = lane < kRowsPerWarp;
  const int key_row = warp * kRowsPerWarp + lane;
  const bool paged = p.seq.page_table != nullptr && p.seq.cu_seqlens_k == nullptr;
  const unsigned char* k_base = static_cast<const unsigned char*>(p.k_cache.ptr);
  const unsigned char* v_base = static_cast<const unsigned char*>(p.v_cache.ptr);
  const Fp8RowCopy<kRowsPerWarp, kKChunks> copy_k(warp, lane, Cfg::kKvPanelBytes);
  const Fp8RowCopy<kRowsPerWarp, kVChunks> copy_v(warp, lane, Cfg::kKvPanelBytes);
  const std::conditional_t<Cfg::kFp8Mma, Fp8VTranspose<Cfg>, NoVTranspose> transpose_v(warp, lane);
  const uint32_t my_row = row_base(key_row);
  const KvRowStrides<16> row_units(p, kv_head);
  auto entry_of = [&](int64_t tile) -> int32_t {  // this thread's key row's page-table entry, a tile ahead
    const int64_t s = slot0 + tile * Cfg::kBlockN + key_row;
    return paged && owns_row && tile < n_tiles && s < seq.end ? page_entry(p.seq, seq, s) : 0;
  };
  int32_t entry = entry_of(0);
  for (int64_t tile = 0; tile < n_tiles; ++tile) {
    const RingSlot ring = ring_slot<Cfg>(tile, tile0);
    const int stage = ring.stage;
    const int64_t s = slot0 + tile * Cfg::kBlockN + key_row;
    uint32_t k_off = kNoRow, v_off = kNoRow;
    if (owns_row && s < seq.end) {
      const KvRowUnits row = row_units(slot_address_at(p.seq, seq, s, entry));
      k_off = row.k;
      v_off = row.v;
    }
    entry = entry_of(tile + 1);
    mbar_wait(empty_bar + 8 * stage, ring.parity ^ 1u);
    // (The timing diagnostic of a -DKVATTN_PREFILL_FP8_DIAG=1 developer build, KVATTN_SM90_DIAG=4: past the
    // first kStages tiles no copy and no conversion, stale stages; compiled out otherwise.)
    if (!(KVATTN_PREFILL_FP8_DIAG && diag_no_load && tile >= Cfg::kStages)) {
      const uint32_t k_dst = s_k + stage * Cfg::kKStageBytes, v_dst = s_v + stage * Cfg::kVStageBytes;
      // (The f16 kernels' lane opaque each tile: ptxas otherwise holds the copies' shuffle sources and
      // source pointers in registers across the tiles, and spills past the producer's 56. The e4m3
      // kernel's producer fits without.)
      const int l = Cfg::kFp8Mma ? lane : opaque(lane);
      copy_k(k_dst, k_base, k_off, l);
      copy_v(v_dst, v_base, v_off, l);
      cp_async_wait_all();
      __syncwarp();                  // the warp's rows, copied by all its lanes, are in place for each lane
      if constexpr (Cfg::kFp8Mma) {  // K stays e4m3 as it landed; V^T beside V
        transpose_v(v_dst);
      } else if (owns_row) {
        fp8_row_to_f16<kKChunks>(k_dst + my_row, Cfg::kKvPanelBytes);
        fp8_row_to_f16<kVChunks>(v_dst + my_row, Cfg::kKvPanelBytes);
      }
    }
    fence_proxy_async();  // the f16 rows (generic proxy writes) before wgmma reads them
    __syncwarp();
    warp_arrive(full_bar + 8 * stage);
  }
}

// A producer thread's key row through a unit's tiles (the 16-bit producer): the slots left in the sequence
// from its slot in the current tile, and that slot's place (page, in-page slot) by slot_address_at's rule,
// stepped kBlockN slots a tile without a division (a paged cache's in-page slot and page-table column advance
// by kBlockN's remainder and quotient by the page size) and with a paged cache's page-table entry loaded a
// tile ahead of its use. Slots, columns and in-page slots fit 32 bits (int32 lengths, page tables and
// cu_seqlens_k). (Every 64-bit multiply, division and remainder of a tile's row was ~100 instructions of
// the producer warp's ~400 a tile, on the sub-partitions the consumers issue from.)
template <int kBlockN>
struct KeyRowWalk {
  const int32_t* entries;           // paged: the sequence's page-table row; nullptr: contiguous or packed
  int32_t left;                     // slots from the current one to the sequence's end (<= 0: past it)
  uint32_t page;                    // the current tile's: its entry (paged), the cache row, 0 (packed)
  uint32_t in_page;                 // the current tile's in-page slot (packed: the token row)
  uint32_t column;                  // paged: the page-table column of the current slot
  uint32_t step_pages, step_slots;  // kBlockN = step_pages page sizes + step_slots slots (paged)
  uint32_t pages;  // entries below this are pages (slot_address_at's range check; every page otherwise)
  bool holds;      // the thread holds a row (RowCopySteps::holds_row)

  // slot: the thread's row's slot in the unit's first tile; first_used: that tile is one of the unit's.
  __device__ __forceinline__ KeyRowWalk(const SeqParams& sp, const Sequence& seq, int64_t slot,
                                        bool holds_row, bool first_used)
      : entries(sp.page_table != nullptr && sp.cu_seqlens_k == nullptr ? sp.page_table + seq.page_row0
                                                                       : nullptr),
        left(static_cast<int32_t>(seq.end - slot)),
        holds(holds_row) {
    const uint32_t s = static_cast<uint32_t>(slot);
    if (entries != nullptr) {
      const uint32_t page_size = static_cast<uint32_t>(sp.page_size);
      column = s / page_size;
      in_page = s % page_size;
      step_pages = kBlockN / page_size;
      step_slots = kBlockN % page_size;
      pages = static_cast<uint32_t>(min(sp.num_pages, int64_t{1} << 31));  // (entries are int32)
      page = first_used && holds && left > 0 ? static_cast<uint32_t>(entries[column]) : 0;
    } else {
      const bool packed = sp.cu_seqlens_k != nullptr;
      column = step_pages = 0;
      step_slots = kBlockN;
      pages = 0xffffffffu;
      page = packed ? 0 : static_cast<uint32_t>(seq.cache_row);
      in_page = packed ? static_cast<uint32_t>(seq.packed_row0) + s : s;
    }
  }
  // Whether the current tile's row is one: held, before the end, its entry a page (else zero-filled).
  __device__ __forceinline__ bool valid() const { return holds && left > 0 && page < pages; }
  // The current tile's row offsets (kv_row_units'), in range where valid().
  __device__ __forceinline__ KvRowUnits offsets(const KvRowStrides<8>& st) const {
    return {page * st.k_page + in_page * st.k_slot + st.k_head,
            page * st.v_page + in_page * st.v_slot + st.v_head};
  }
  // On to the next tile; load: it is one of the unit's (its entry is read, a tile ahead of its use).
  __device__ __forceinline__ void next(const SeqParams& sp, bool load) {
    left -= kBlockN;
    if (entries != nullptr) {
      in_page += step_slots;
      column += step_pages;
      if (in_page >= static_cast<uint32_t>(sp.page_size)) {
        in_page -= static_cast<uint32_t>(sp.page_size);
        ++column;
      }
      page = load && holds && left > 0 ? static_cast<uint32_t>(entries[column]) : 0;
    } else {
      in_page += kBlockN;
    }
  }
};

// Whether x has a bit of mask set, as one predicate-writing instruction (NVVM turns the C++ test of a bit
// of a shifted value into a shift, a mask and a compare).
__device__ __forceinline__ bool any_bit(uint32_t x, uint32_t mask) {
  uint32_t r;
  asm("and.b32 %0, %1, %2;" : "=r"(r) : "r"(x), "r"(mask));
  return r != 0;
}

// The 16-bit producer's copies of a warp's rows of K and V of one width, kC = Cfg::kChunks 16-byte chunks a
// power of two: RowCopySteps' warp steps, the lane's destinations and chunk sources made once, its rows'
// offsets shuffled from their holder lanes by immediate lanes (RowCopySteps::holder_lane) and whether each
// is a row from one ballot a tile. A step is 8 instructions: a shuffle, a bit test, K's source address,
// V's (K's plus the caches' distance where their layouts match; else a shuffle and an address), the two
// copies (the loop before: ~13 and a spilled destination reloaded).
template <class Cfg>
struct RowPairCopy {
  static constexpr int kC = Cfg::kChunks;
  using Steps = RowCopySteps<Cfg::kBlockN / 4, kC>;
  // The lane's kP destinations held (d 64: 2, d 128: 4), or (d 256: a swizzle phase a row, 8) the first
  // and the others by an XOR a step (dst_phase): 7 registers of the producer's 40.
  static constexpr bool kHeld = Steps::kP <= 4;
  static_assert(Cfg::kKStageBytes % 1024 == 0 && Cfg::kVStageBytes % 1024 == 0,
                "1024-aligned stages: the XOR of a destination's phase after the stage's address");
  const unsigned char *k_src, *v_src;  // this lane's chunk of the kv head's row at offset 0
  uint32_t at[kHeld ? Steps::kP : 1];  // destinations from a stage's start, less dst_step
  int segment;                         // the lane's segment's first lane: step j's holder is segment + j
  __device__ __forceinline__ RowPairCopy(const AttnParams& p, int kv_head, int warp, int lane)
      : k_src(static_cast<const unsigned char*>(p.k_cache.ptr) +
              16 * (kv_head * (p.k_cache.head_stride / 8) + lane % kC)),
        v_src(static_cast<const unsigned char*>(p.v_cache.ptr) +
              16 * (kv_head * (p.v_cache.head_stride / 8) + lane % kC)),
        segment(lane / kC * kC) {
#pragma unroll
    for (int k = 0; k < (kHeld ? Steps::kP : 1); ++k)
      at[k] = Steps::dst_base(warp, lane, k, Cfg::kKvPanelBytes);
  }
  // off: this lane's row's offsets less the kv head's (KvRowStrides without it), 0 where it is none (a
  // source in range); rows: the warp's ballot of rows (lane l's bit: its row is one; the others' copies
  // are zero-filled); same_rows: the caches' page and slot strides are equal, so are the offsets (K and V
  // of one layout, the common case: one shuffle a step). kParts: kBoth, or K's or V's copies alone (split
  // stages: Cfg::kSplitKv).
  static constexpr int kK = 1, kV = 2, kBoth = 3;
  template <int kParts = kBoth>
  __device__ __forceinline__ void operator()(uint32_t k_dst, uint32_t v_dst, const KvRowUnits& off,
                                             uint32_t rows, bool same_rows) const {
    if (same_rows) {
      steps<true, kParts>(k_dst, v_dst, off, rows);
    } else {
      steps<false, kParts>(k_dst, v_dst, off, rows);
    }
  }
  template <bool kSameRows, int kParts>
  __device__ __forceinline__ void steps(uint32_t k_dst, uint32_t v_dst, const KvRowUnits& off,
                                        uint32_t rows) const {
    const uint32_t mine = rows >> segment;
    // kSameRows: V's source is K's plus the caches' distance (a 64-bit add; as a second multiply-add of the
    // same row, ptxas shares the row's 64-bit product and adds it twice: more instructions, not fewer)
    const uint64_t v_minus_k = reinterpret_cast<uint64_t>(v_src) - reinterpret_cast<uint64_t>(k_src);
#pragma unroll
    for (int j = 0; j < Steps::kSteps; ++j) {
      const uint32_t k_row = __shfl_sync(0xffffffffu, off.k, j, kC);
      const bool ok = any_bit(mine, 1u << j);
      const int k = j % Steps::kP;
      const uint32_t k_to =
          kHeld ? k_dst + at[k] + Steps::dst_step(j)
                : ((k_dst + at[0]) ^ Steps::dst_phase(k)) + Steps::dst_rows(k) + Steps::dst_step(j);
      const uint32_t v_to = k_to + (v_dst - k_dst);
      const void* k_at = plus_rows16(k_src, k_row);
      if constexpr ((kParts & kK) != 0) cp_async_16(k_to, k_at, ok);
      if constexpr ((kParts & kV) == 0) {
      } else if constexpr (kSameRows) {
        cp_async_16(v_to, reinterpret_cast<const void*>(reinterpret_cast<uint64_t>(k_at) + v_minus_k), ok);
      } else {
        cp_async_16(v_to, plus_rows16(v_src, __shfl_sync(0xffffffffu, off.v, j, kC)), ok);
      }
    }
  }
};

struct NoPairCopy {  // (192, 128): copy_key_rows
  __device__ __forceinline__ NoPairCopy(const AttnParams&, int, int, int) {}
};

// Cfg::kPersistent: tile n is the CTA's tile tile0 + n of the stage ring (the units so far), and drain =
// false leaves the copies in flight (the persistent kernel waits once, at its end).
template <class Cfg>
__device__ __forceinline__ void produce(const AttnParams& p, const Sequence& seq, int kv_head, int64_t slot0,
                                        int64_t n_tiles, uint32_t s_k, uint32_t s_v, uint32_t full_bar,
                                        uint32_t empty_bar, bool diag_no_load, int64_t tile0 = 0,
                                        bool drain = true) {
  if constexpr (Cfg::kKvFp8) {
    produce_fp8<Cfg>(p, seq, kv_head, slot0, n_tiles, s_k, s_v, full_bar, empty_bar, diag_no_load, tile0);
    return;
  }
  constexpr int kRowsPerWarp = Cfg::kBlockN / 4;
  // K and V rows of one width, a power of two of chunks: RowPairCopy; (192, 128): copy_key_rows at each
  // width, lane r holding the warp's row r.
  constexpr bool kPaired = Cfg::kChunksV == Cfg::kChunks && 32 % Cfg::kChunks == 0;
  const int ptid = threadIdx.x;  // 0..127
  const int warp = ptid / 32, lane = ptid % 32;
  bool holds = lane < kRowsPerWarp;
  int row = lane;  // of the warp's rows of a tile
  if constexpr (kPaired) {
    holds = RowPairCopy<Cfg>::Steps::holds_row(lane);
    row = RowPairCopy<Cfg>::Steps::held_row(lane);
  }
  KeyRowWalk<Cfg::kBlockN> walk(p.seq, seq, slot0 + warp * kRowsPerWarp + row, holds, n_tiles > 0);
  const KvRowStrides<8> strides(p, kPaired ? 0 : kv_head);  // (RowPairCopy's sources hold the head)
  const bool same_rows =
      p.k_cache.page_stride == p.v_cache.page_stride && p.k_cache.slot_stride == p.v_cache.slot_stride;
  const std::conditional_t<kPaired, RowPairCopy<Cfg>, NoPairCopy> copy(p, kv_head, warp, lane);
  const VBars v = v_bars_of<Cfg>(full_bar, empty_bar);  // (joint stages: K's, the same barriers)
  // 32-bit tile counts and ring position: a unit's tiles number < 2^31 / kBlockN, tile0 < 2 kStages. The
  // tiles counted down (left: this one and those after it) and the diagnostic's first tile without copies
  // as a count too: one register less through the loop (the non-persistent kernels spilled the count).
  const int tiles = static_cast<int>(n_tiles);
  const int copies_until = diag_no_load ? tiles - Cfg::kStages : 0;  // left <= this: no copies
  const RingSlot first = ring_slot<Cfg>(0, tile0);
  uint32_t stage = first.stage, phase = first.parity;
  for (int left = tiles; left > 0; --left) {
    const bool valid = walk.valid();
    KvRowUnits off = walk.offsets(strides);
    off.k = valid ? off.k : (kPaired ? 0 : kNoRow);
    off.v = valid ? off.v : (kPaired ? 0 : kNoRow);
    const uint32_t rows = kPaired ? __ballot_sync(0xffffffffu, valid) : 0;
    walk.next(p.seq, left > 1);
    mbar_wait(empty_bar + 8 * stage, phase ^ 1u);
    const uint32_t k_dst = s_k + stage * Cfg::kKStageBytes, v_dst = s_v + stage * Cfg::kVStageBytes;
    const bool skip = left <= copies_until;
    if constexpr (kPaired && Cfg::kSplitKv) {  // K's share of the stage, then V's once the consumers free it
      using Copy = RowPairCopy<Cfg>;
      if (!skip) copy.template operator()<Copy::kK>(k_dst, v_dst, off, rows, same_rows);
      warp_arrive_after_copies(full_bar + 8 * stage);
      mbar_wait(v.empty + 8 * stage, phase ^ 1u);
      if (!skip) copy.template operator()<Copy::kV>(k_dst, v_dst, off, rows, same_rows);
    } else if constexpr (kPaired) {
      if (!skip) copy(k_dst, v_dst, off, rows, same_rows);
    } else {  // (d, dv) = (192, 128): each cache's rows at its own width
      const unsigned char* k_base = static_cast<const unsigned char*>(p.k_cache.ptr);
      const unsigned char* v_base = static_cast<const unsigned char*>(p.v_cache.ptr);
      copy_key_rows<kRowsPerWarp, Cfg::kChunks>(k_dst, k_base, off.k, warp, lane, Cfg::kKvPanelBytes, skip);
      if constexpr (Cfg::kSplitKv) {  // K's share of the stage, then V's once the consumers free it
        warp_arrive_after_copies(full_bar + 8 * stage);
        mbar_wait(v.empty + 8 * stage, phase ^ 1u);
      }
      copy_key_rows<kRowsPerWarp, Cfg::kChunksV>(v_dst, v_base, off.v, warp, lane, Cfg::kKvPanelBytes, skip);
    }
    // The stage is full once every producer thread's copies of it have landed (no wait here).
    warp_arrive_after_copies(v.full + 8 * stage);
    if (++stage == Cfg::kStages) {
      stage = 0;
      phase ^= 1u;
    }
  }
  if (!Cfg::kPersistent || drain) cp_async_wait_all();  // nothing in flight when the producer leaves
}

// A TMA producer's source (produce_tma, produce_fp8_tma): tma_geometry's boxes over the cache, the maps
// (prefetched by the warpgroup's thread 0) and which tiles go as whole boxes: those inside [leftpad, end),
// and a last tile reaching past `end` where `end` is the map's end (a contiguous row filled to its
// capacity, the last packed sequence), whose slots past it the TMA unit writes as zeros.
template <class Cfg>
struct TmaSource {
  bool paged;
  TmaGeometry g;
  int boxes;       // a tile's boxes of a panel
  bool zero_tail;  // the slots from `end` on lie past the map's slot dim
  uint64_t k_map, v_map;
  __device__ __forceinline__ TmaSource(const PrefillArgs& a, const Sequence& seq, int ptid) {
    const SeqParams& sp = a.p.seq;
    const bool packed = sp.cu_seqlens_k != nullptr;
    paged = sp.page_table != nullptr && !packed;
    g = tma_geometry(packed, paged, sp.num_pages, sp.page_size, Cfg::kBlockN);
    boxes = Cfg::kBlockN / g.box;
    zero_tail = !paged && slot_address_at(sp, seq, seq.end, 0).in_page == g.slots;
    k_map = reinterpret_cast<uint64_t>(&a.k_map);
    v_map = reinterpret_cast<uint64_t>(&a.v_map);
    if (ptid == 0) {
      tma_prefetch_map(k_map);
      tma_prefetch_map(v_map);
    }
  }
  // Whether the tile of slots [t0, t0 + kBlockN) goes as whole boxes.
  __device__ __forceinline__ bool whole(const Sequence& seq, int64_t t0) const {
    return t0 >= seq.leftpad && (t0 + Cfg::kBlockN <= seq.end || zero_tail);
  }
};

// fp8 caches by TMA (the WithFp8Tma kernels: d and dv multiples of 128; make_kv_maps): produce_tma's boxes
// and edge tiles at 128 e4m3 channels a box (one 128-byte swizzled row), landing on the stage's "landed"
// barrier; every producer thread waits for it, then converts or transposes (fp8_stage_finish). Edge tiles
// by 16-byte cp.async, row r by thread r, held open on the landed barrier until they land. Warps without
// a (K or V, panel) pair arrive with no bytes. Only in the WithFp8Tma kernels (cta.cuh).
template <class Cfg>
__device__ __forceinline__ void produce_fp8_tma(const PrefillArgs& a, const Sequence& seq, int kv_head,
                                                int64_t slot0, int64_t n_tiles, uint32_t s_k, uint32_t s_v,
                                                uint32_t full_bar, uint32_t empty_bar, int64_t tile0) {
  const AttnParams& p = a.p;
  const int ptid = threadIdx.x % 128, warp = ptid / 32, lane = ptid % 32;
  constexpr int kPanelsK = Cfg::kHeadDim / 128, kPanelsV = Cfg::kHeadDimV / 128;
  constexpr int kPairs = kPanelsK + kPanelsV;
  static_assert(Cfg::kHeadDim % 128 == 0 && Cfg::kHeadDimV % 128 == 0 && kPairs <= 4,
                "a pair a warp at most");
  constexpr int kKChunks = Cfg::kHeadDim / 16, kVChunks = Cfg::kHeadDimV / 16;
  const bool has_pair = warp < kPairs;
  const TmaSource<Cfg> src(a, seq, ptid);
  const TmaGeometry& g = src.g;
  const unsigned char* k_base = static_cast<const unsigned char*>(p.k_cache.ptr);
  const unsigned char* v_base = static_cast<const unsigned char*>(p.v_cache.ptr);
  const uint32_t landed = landed_bar_of<Cfg>(empty_bar);
  for (int64_t tile = 0; tile < n_tiles; ++tile) {
    const RingSlot ring = ring_slot<Cfg>(tile, tile0);
    const int stage = ring.stage;
    const uint32_t bar = landed + 8 * stage;
    const uint32_t k_dst = s_k + stage * Cfg::kKStageBytes, v_dst = s_v + stage * Cfg::kVStageBytes;
    const int64_t t0 = slot0 + tile * Cfg::kBlockN;
    const bool whole = src.whole(seq, t0);
    const int64_t box_slot = t0 + lane * g.box;
    const int32_t entry = src.paged && whole && lane < src.boxes ? page_entry(p.seq, seq, box_slot) : 0;
    mbar_wait(empty_bar + 8 * stage, ring.parity ^ 1u);
    if (whole) {
      fence_proxy_async();  // (the stage's last writes were generic: the conversion, or an edge tile)
      if (lane == 0) mbar_arrive_expect_tx(bar, has_pair ? static_cast<uint32_t>(Cfg::kKvPanelBytes) : 0u);
      __syncwarp();
      if (has_pair && lane < src.boxes) {
        const SlotAddress box_at = slot_address_at(p.seq, seq, box_slot, entry);
        const uint32_t rows_at = static_cast<uint32_t>(lane * g.box * 128);
        const int panel = warp < kPanelsK ? warp : warp - kPanelsK;
        const uint32_t at = panel * Cfg::kKvPanelBytes + rows_at;
        if (warp < kPanelsK) {
          tma_load_4d(k_dst + at, src.k_map, bar, 128 * panel, box_at.in_page, kv_head, box_at.page);
        } else {
          tma_load_4d(v_dst + at, src.v_map, bar, 128 * panel, box_at.in_page, kv_head, box_at.page);
        }
      }
    } else {
      for (int r = ptid; r < Cfg::kBlockN; r += 128) {
        const int64_t s = t0 + r;
        uint32_t k_off = kNoRow, v_off = kNoRow;
        if (s >= seq.leftpad && s < seq.end) {
          const KvRowUnits row = kv_row_units<16>(p, slot_address(p.seq, seq, s), kv_head);
          k_off = row.k;
          v_off = row.v;
        }
        const bool ok = k_off != kNoRow;
#pragma unroll 4
        for (int c = 0; c < kKChunks; ++c) {
          const uint32_t at = swizzled(r, c, Cfg::kKvPanelBytes);
          cp_async_16(k_dst + at, k_base + static_cast<uint64_t>(ok ? k_off + c : 0) * 16, ok);
          if (c < kVChunks)
            cp_async_16(v_dst + at, v_base + static_cast<uint64_t>(ok ? v_off + c : 0) * 16, ok);
        }
      }
      warp_arrive_after_copies(bar);
    }
    mbar_wait(bar, ring.parity);
    fp8_stage_finish<Cfg>(k_dst, v_dst, warp, Cfg::kFp8Mma ? lane : opaque(lane), full_bar + 8 * stage);
  }
}

// The TMA producer (the producer warpgroup; kTma): tile t covers slots [slot0 + t kBlockN, + kBlockN), slot0
// a multiple of tma_geometry's align, so each box of `box` slots lies in one page: one page's rows (paged,
// page size <= kBlockN), a part of one page, or of a contiguous cache's row / the packed token rows, where it
// may reach past the row's end (the TMA unit writes zeros there). A tile inside [leftpad, end) is
// kBlockN / box boxes a panel of K and of V at slot_address_at's (page, slot in page): warp w issues the
// (K or V, panel) pairs w, w + 4, ... and lane j of it box j (its page-table entry loaded before the stage
// is free). Four warps, not one: a TMA instruction takes ~85 SM clocks to issue whatever its box, so page
// 16's 32 boxes a tile from one warp took ~3,000 clocks, longer than the consumers' tile (bench/NOTES.md,
// session 17). Each warp expects its own bytes before its copies; the full barrier (a warp's lane 0 each)
// completes when all have landed. So is a last tile reaching past `end` into the map's zeros (TmaSource).
// Any other tile reaching outside [leftpad, end) (at most the first and the last of a CTA) goes by
// 16-byte cp.async, a key row a thread, its slots outside zero-filled, as the other producer does (they may
// hold NaN, and P V needs 0 there). Split stages (Cfg::kSplitKv): K's pairs on the stage's full barrier,
// then, once the consumers have freed the stage's V (v_bars_of), V's on V's own.
template <class Cfg>
__device__ __forceinline__ void produce_tma(const PrefillArgs& a, const Sequence& seq, int kv_head,
                                            int64_t slot0, int64_t n_tiles, uint32_t s_k, uint32_t s_v,
                                            uint32_t full_bar, uint32_t empty_bar, bool diag_no_load,
                                            int64_t tile0 = 0, bool drain = true) {
  if constexpr (Cfg::kKvFp8) {  // (only the WithFp8Tma kernels: the others are given no maps)
    if constexpr (Cfg::kFp8Tma)
      produce_fp8_tma<Cfg>(a, seq, kv_head, slot0, n_tiles, s_k, s_v, full_bar, empty_bar, tile0);
    return;
  }
  const AttnParams& p = a.p;
  const int ptid = threadIdx.x % 128, warp = ptid / 32, lane = ptid % 32;
  constexpr int kPairs = Cfg::kPanels + Cfg::kPanelsV;  // (K or V, panel): K's panels, then V's
  const TmaSource<Cfg> src(a, seq, ptid);
  const TmaGeometry& g = src.g;
  const unsigned char* k_base = static_cast<const unsigned char*>(p.k_cache.ptr);
  const unsigned char* v_base = static_cast<const unsigned char*>(p.v_cache.ptr);
  const VBars vb = v_bars_of<Cfg>(full_bar, empty_bar);  // (joint stages: K's, the same barriers)
  for (int64_t tile = 0; tile < n_tiles; ++tile) {
    const RingSlot ring = ring_slot<Cfg>(tile, tile0);
    const int stage = ring.stage;
    const uint32_t bar = full_bar + 8 * stage;
    const uint32_t free_parity = ring.parity ^ 1u;
    const uint32_t k_dst = s_k + stage * Cfg::kKStageBytes, v_dst = s_v + stage * Cfg::kVStageBytes;
    const int64_t t0 = slot0 + tile * Cfg::kBlockN;
    const bool whole = src.whole(seq, t0);
    const int64_t box_slot = t0 + lane * g.box;
    // (warps past the pairs, d 64's 2 and 3, have no boxes: no entry, no box address)
    const int32_t entry =
        src.paged && whole && lane < src.boxes && warp < kPairs ? page_entry(p.seq, seq, box_slot) : 0;
    // This warp's boxes of the pairs [kLo, kHi) (w, w + 4, ... of them), expected on barrier `on` first.
    auto issue_boxes = [&](auto lo, auto hi, uint32_t on) {
      constexpr int kLo = decltype(lo)::value, kHi = decltype(hi)::value;
      const int first = kLo == 0 ? warp : kLo + ((warp - kLo) & 3);
      if (lane == 0)
        mbar_arrive_expect_tx(on, static_cast<uint32_t>((kHi - first + 3) / 4 * Cfg::kKvPanelBytes));
      __syncwarp();  // this warp's bytes are expected before any of its copies can land
      if (lane < src.boxes && first < kHi) {
        const SlotAddress box_at = slot_address_at(p.seq, seq, box_slot, entry);  // entries were checked
        const uint32_t rows_at = static_cast<uint32_t>(lane * g.box * 128);
#pragma unroll
        for (int k = 0; k < (kHi - kLo - 1) / 4 + 1; ++k) {
          const int pair = first + 4 * k;
          const int panel = Cfg::kPanelsV == Cfg::kPanels
                                ? pair % Cfg::kPanels
                                : (pair < Cfg::kPanels ? pair : pair - Cfg::kPanels);
          if (pair >= kHi) break;
          const uint32_t at = panel * Cfg::kKvPanelBytes + rows_at;
          if (pair < Cfg::kPanels) {
            tma_load_4d(k_dst + at, src.k_map, on, 64 * panel, box_at.in_page, kv_head, box_at.page);
          } else {
            tma_load_4d(v_dst + at, src.v_map, on, 64 * panel, box_at.in_page, kv_head, box_at.page);
          }
        }
      }
    };
    // The edge tile's rows of one cache by cp.async (row r by thread r), its slots outside zero-filled.
    auto copy_rows = [&](uint32_t dst, const unsigned char* base, bool v, auto chunks) {
      for (int r = ptid; r < Cfg::kBlockN; r += 128) {
        const int64_t s = t0 + r;
        uint32_t off = kNoRow;
        if (s >= seq.leftpad && s < seq.end) {  // entries of these slots were checked (check_pages)
          const KvRowUnits row = kv_row_units(p, slot_address(p.seq, seq, s), kv_head);
          off = v ? row.v : row.k;
        }
        const bool ok = off != kNoRow;
#pragma unroll 4
        for (int c = 0; c < decltype(chunks)::value; ++c) {
          const uint32_t at = swizzled(r, c, Cfg::kKvPanelBytes);
          cp_async_16(dst + at, base + static_cast<uint64_t>(ok ? off + c : 0) * 16, ok);
        }
      }
    };
    using KPairs = std::integral_constant<int, Cfg::kPanels>;
    using AllPairs = std::integral_constant<int, kPairs>;
    KVATTN_PTL(ptl_producer_stamp(tile, kPtlHead));
    mbar_wait(empty_bar + 8 * stage, free_parity);
    KVATTN_PTL(ptl_producer_stamp(tile, kPtlStage));
    if (diag_no_load && tile >= Cfg::kStages) {
      warp_arrive(bar);  // stale stage (timing only)
      if constexpr (Cfg::kSplitKv) {
        mbar_wait(vb.empty + 8 * stage, free_parity);
        warp_arrive(vb.full + 8 * stage);
      }
    } else if (whole) {
      // This stage's last writes may have been an edge tile's cp.async (generic proxy); the copies below
      // write it through the async proxy.
      fence_proxy_async();
      if constexpr (Cfg::kSplitKv) {  // K's boxes, then V's once the consumers free the stage's V
        issue_boxes(std::integral_constant<int, 0>{}, KPairs{}, bar);
        mbar_wait(vb.empty + 8 * stage, free_parity);
        fence_proxy_async();
        issue_boxes(KPairs{}, AllPairs{}, vb.full + 8 * stage);
      } else {
        issue_boxes(std::integral_constant<int, 0>{}, AllPairs{}, bar);
      }
      KVATTN_PTL(ptl_producer_stamp(tile, kPtlFenced));
      KVATTN_PTL(if (tile == 0) pu_stamp(kPuTiles + kPuProdFirst));
    } else {  // K's rows, then V's (split stages: once the consumers free the stage's V)
      copy_rows(k_dst, k_base, false, std::integral_constant<int, Cfg::kChunks>{});
      if constexpr (Cfg::kSplitKv) {
        warp_arrive_after_copies(bar);
        mbar_wait(vb.empty + 8 * stage, free_parity);
      }
      copy_rows(v_dst, v_base, true, std::integral_constant<int, Cfg::kChunksV>{});
      warp_arrive_after_copies(vb.full + 8 * stage);
    }
  }
  if (!Cfg::kPersistent || drain) cp_async_wait_all();
}

#endif  // sm_90a

}  // namespace kvattn::cuda::sm90
