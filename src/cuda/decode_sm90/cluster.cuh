// The Hopper decode kernel's cluster form (decode_sm90.hpp, DecodeClusterShape): for batches of few
// (sequence, kv head) units, a cluster of C CTAs a unit, CTA r taking the r-th C-th of the unit's key tiles
// as the device reads them; the C partial (m, l, O) merge through distributed shared memory, so there is no
// scan, no workspace and no combine kernel. The merge is pushed, not pulled: each CTA stores every rank's
// C-th of its state into that rank's inbox with st.async, completing on the rank's mbarrier, so no thread
// waits on a remote load's round trip (bench/NOTES.md, session 41). Few units of long sequences (batch 1 over
// 1-7 kv heads) take S > 1 clusters a unit (AttnParams::num_splits): cluster g computes the g-th S-th of the
// unit's tiles and writes its rows as split g's partial, which the split combine merges (a workspace and a
// combine, but C S CTAs stream the unit where one cluster would leave most SMs idle). Per CTA, 4 consumer
// warps, each with its own ring of kDepth stages, which a producer warp of its own fills with 16-byte
// cp.async copies (a cp.async.mbarrier.arrive a lane on the slot's full mbarrier; the consumer's lanes arrive
// on its empty one): the consumers compute with the persistent kernel's stage math (consumer.cuh) and never
// issue a copy, and two warps share each scheduler (bench/NOTES.md, session 42: one warp a scheduler left the
// 4k case's ~14 us to the warps' own instruction latency). 16-bit caches: the stages are swizzled
// (DecodeCfg::kv_offset) and a stage of whole runs of 16 slots comes by TMA (issue_stage), so that a producer
// hands the copy engine 8 boxes instead of issuing 32 copies a lane (bench/NOTES.md, session 44). On paged
// caches the unit's tiles then start at its first visible key's run (`origin`), so that a leftpad or a
// window's first key off the runs leaves only the first stage to cp.async (bench/NOTES.md, session 48).
//   grid (C S, kv heads, batch), cluster (C, 1, 1): blockIdx.x is C g + rank (rank: the CTA's in its
//   cluster).
#pragma once

#include "cuda/common/pdl.cuh"
#include "cuda/decode_sm90/consumer.cuh"
#include "cuda/decode_sm90/producer.cuh"

namespace kvattn::cuda::sm90 {

// A stage's copies unrolled by 4, not 16 / 32: a producer runs them a few times a call, and at a short
// decode's start each instruction-cache line executed for the first time costs a fetch (H100, session 43:
// W1 b1 1k-4k -3 to -6% rolled by 1 or by 4 against fully unrolled).
constexpr int kClusterCopyUnroll = 4;
// A TMA box's slots: a page's runs start at slot multiples of this (the maps take page sizes that are
// multiples of it).
constexpr int kRunSlots = 16;

// The key lane `lane` copies as row j * 32 + lane of stage s: the piece's, clamped into [keys.first, kp_end)
// past its end and before the first visible key (the run-aligned tiles' first stage): a finite row of the
// sequence (unused slots may hold NaN) whose score the mask drops, so that P = 0 meets a finite V.
template <class Cfg>
__device__ __forceinline__ int32_t stage_key(const PieceKeys& pk, int s, int j, int lane) {
  const int32_t kp = pk.kp_begin + s * Cfg::kStageKeys + j * 32 + lane;
  return min(max(kp, static_cast<int32_t>(pk.keys.first)), pk.kp_end - 1);
}

// This warp's copies of one stage (CTA-wide stage s of the piece) into `dst`, completing on `full` (one
// arrival a lane): lane k owns keys j * 32 + k (entry: their page-table entries), clamped by stage_key, a bad
// page id a row of zeros; one warp instruction covers whole rows. Swizzled stages (16-bit caches) whose keys
// are all the piece's and lie in runs of 16 consecutive slots of a page go by TMA instead (maps, where tma
// says so): lane 0 issues the stage's 8 boxes (2 runs x 2 panels, K and V) with the bytes to expect, the
// other lanes arrive. (A stage that starts before the first visible key has lane 0 clamped to that key, off
// its run's start: by cp.async.) Returns false when one of this lane's entries is out of range (the error
// recorded).
template <class Cfg>
__device__ __forceinline__ bool issue_stage(const AttnParams& p, const DecodeKvMaps& maps, bool tma,
                                            const PieceKeys& pk, int kv_head, int s,
                                            const int32_t (&entry)[Cfg::kKeysPerLane], uint32_t dst,
                                            uint64_t* full, uint64_t policy) {
  using TKV = typename Cfg::TKV;
  constexpr int kLanesPerRow = Cfg::kRowBytes / 16;
  constexpr int kRowsPerCopy = 32 / kLanesPerRow;
  constexpr int kCopies = Cfg::kStageKeys / kRowsPerCopy;
  constexpr int kCopiesPerSet = 32 / kRowsPerCopy;  // copies whose rows are keys of one j
  const int lane = threadIdx.x % 32, chunk = lane % kLanesPerRow, row_in_copy = lane / kLanesPerRow;
  const Sequence& seq = pk.seq;
  bool ok = true;
  int64_t k_off[Cfg::kKeysPerLane], v_off[Cfg::kKeysPerLane];
  SlotAddress at[Cfg::kKeysPerLane];
#pragma unroll
  for (int j = 0; j < Cfg::kKeysPerLane; ++j) {
    const int64_t slot = seq.leftpad + stage_key<Cfg>(pk, s, j, lane);
    at[j] = slot_address_at(p.seq, seq, slot, entry[j]);
    if (at[j].page < 0) {
      ok = false;
      record_page_error(p.seq, seq, p.errors, slot / p.seq.page_size, entry[j]);
    }
    k_off[j] = at[j].page < 0 ? -1
                              : at[j].page * p.k_cache.page_stride + at[j].in_page * p.k_cache.slot_stride +
                                    static_cast<int64_t>(kv_head) * p.k_cache.head_stride;
    v_off[j] = at[j].page < 0 ? -1
                              : at[j].page * p.v_cache.page_stride + at[j].in_page * p.v_cache.slot_stride +
                                    static_cast<int64_t>(kv_head) * p.v_cache.head_stride;
  }
  if constexpr (Cfg::kSwizzled) {
    static_assert(Cfg::kKeysPerLane == 1 && Cfg::kStageKeys == 32, "a stage: one key a lane, 2 runs of 16");
    // A page's runs start at slot multiples of kRunSlots; contiguous and packed caches: any slot.
    const bool paged = p.seq.page_table != nullptr && p.seq.cu_seqlens_k == nullptr;
    const bool whole = pk.kp_begin + (s + 1) * Cfg::kStageKeys <= pk.kp_end;
    if (__all_sync(0xffffffffu, tma && whole && at[0].page >= 0 &&
                                    (!paged || lane % kRunSlots != 0 || at[0].in_page % kRunSlots == 0))) {
      const int page[2] = {__shfl_sync(0xffffffffu, at[0].page, 0), __shfl_sync(0xffffffffu, at[0].page, 16)};
      const int in_page[2] = {__shfl_sync(0xffffffffu, at[0].in_page, 0),
                              __shfl_sync(0xffffffffu, at[0].in_page, 16)};
      if (lane == 0) {
        mbar_arrive_expect_tx(full, Cfg::kTxBytes);
#pragma unroll
        for (int run = 0; run < 2; ++run) {
#pragma unroll
          for (int panel = 0; panel < 2; ++panel) {
            const uint32_t box = dst + Cfg::kv_offset(16 * run, 8 * panel);  // (1024-byte aligned)
            tma_load_4d_hint(box, &maps.k, full, 64 * panel, in_page[run], kv_head, page[run], policy);
            tma_load_4d_hint(box + Cfg::kKBytes, &maps.v, full, 64 * panel, in_page[run], kv_head, page[run],
                             policy);
          }
        }
      } else {
        mbar_arrive(full);
      }
      return ok;
    }
  }
  const uint32_t k_dst = dst;
  const uint32_t v_dst = dst + Cfg::kKBytes;
  const unsigned char* k_base = static_cast<const unsigned char*>(p.k_cache.ptr) + chunk * 16;
  const unsigned char* v_base = static_cast<const unsigned char*>(p.v_cache.ptr) + chunk * 16;
  const unsigned char* zero = g_zero_row + chunk * 16;
  static_assert(kCopies == Cfg::kKeysPerLane * kCopiesPerSet, "a set of copies a key of each lane");
#pragma unroll
  for (int j = 0; j < Cfg::kKeysPerLane; ++j) {
#pragma unroll kClusterCopyUnroll
    for (int cc = 0; cc < kCopiesPerSet; ++cc) {
      const int c = j * kCopiesPerSet + cc;
      const int owner = cc * kRowsPerCopy + row_in_copy;
      const int64_t ko = __shfl_sync(0xffffffffu, k_off[j], owner);
      const int64_t vo = __shfl_sync(0xffffffffu, v_off[j], owner);
      const uint32_t at_bytes = Cfg::kv_offset(c * kRowsPerCopy + row_in_copy, chunk);
      if constexpr (Cfg::kCopyViaL1) {
        cp_async_16_l1(k_dst + at_bytes, ko < 0 ? zero : k_base + ko * sizeof(TKV));
        cp_async_16_l1(v_dst + at_bytes, vo < 0 ? zero : v_base + vo * sizeof(TKV));
      } else {
        cp_async_16_hint(k_dst + at_bytes, ko < 0 ? zero : k_base + ko * sizeof(TKV), policy);
        cp_async_16_hint(v_dst + at_bytes, vo < 0 ? zero : v_base + vo * sizeof(TKV), policy);
      }
    }
  }
  cp_async_mbar_arrive(full);  // this lane's copies of the stage, once landed
  return ok;
}

// The page-table entries of this lane's keys of stage s (0 past the piece's stages or for unpaged caches).
template <class Cfg>
__device__ __forceinline__ void stage_entries(const AttnParams& p, const PieceKeys& pk, int s,
                                              int32_t (&entry)[Cfg::kKeysPerLane]) {
  const bool paged = p.seq.page_table != nullptr && p.seq.cu_seqlens_k == nullptr;
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int j = 0; j < Cfg::kKeysPerLane; ++j) {
    entry[j] = paged && s < pk.stages
                   ? page_entry(p.seq, pk.seq, pk.seq.leftpad + stage_key<Cfg>(pk, s, j, lane))
                   : 0;
  }
}

template <class Cfg>
__global__ void __launch_bounds__(DecodeClusterShape::kThreads, 1)
    decode_cluster_kernel(const __grid_constant__ AttnParams p, const __grid_constant__ DecodeKvMaps maps) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  using T = typename Cfg::T;
  constexpr int kW = DecodeClusterShape::kWarps, kDepth = DecodeClusterShape::kDepth;
  constexpr int kNTilesS = Cfg::kNTilesS, kNTilesO = Cfg::kNTilesO, kS = Cfg::kStateFloats;
  constexpr int kMl = Cfg::kGroupRows * Cfg::kOStride;  // where a warp state's m and l start
  static_assert(Cfg::kConsumerWarps == kW && Cfg::kGroups == 1,
                "the consumers' helpers for 4 warps, 16 rows");
  extern __shared__ __align__(128) unsigned char smem_raw[];
  unsigned char* ring = smem_raw;                       // warp w's slots: (w kDepth + slot) stages
  float* s_state = reinterpret_cast<float*>(smem_raw);  // the warps' (m, l, O), after the ring's last use
  using Shape = DecodeClusterShape;
  unsigned char* inbox_raw = smem_raw + kW * kDepth * Cfg::kStageBytes;
  float* inbox = reinterpret_cast<float*>(inbox_raw);  // the other ranks' states for this CTA (Shape)
  T* s_q = reinterpret_cast<T*>(inbox_raw);            // before the cluster's barrier: Q, max |q|
  float* s_qmax = reinterpret_cast<float*>(s_q + Cfg::kGroupRows * Cfg::kQStride);
  uint64_t* inbox_full = reinterpret_cast<uint64_t*>(inbox_raw + Shape::kInboxRegion);
  uint64_t* ring_full = inbox_full + 1;  // ring r's slots: [r kDepth, (r + 1) kDepth)
  uint64_t* ring_empty = ring_full + kW * kDepth;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, group = lane / 4, quad = lane % 4;
  // C = ctas, the cluster's CTAs; split: the unit's cluster (of num_splits; 1: the unit's whole result).
  const int splits = max(1, p.num_splits), ctas = static_cast<int>(gridDim.x) / splits;
  const int rank = static_cast<int>(blockIdx.x) % ctas, split = static_cast<int>(blockIdx.x) / ctas;
  const int kv_head = blockIdx.y, i = blockIdx.z;
  allow_dependent_launch();  // the split combine (S > 1) may be scheduled now; it waits for this grid's end
  KVATTN_TL(tl_enter());
  if (Cfg::kSwizzled && maps.tma != 0 &&
      tid == 32 * kW) {  // the descriptors on their way before the first box
    tma_prefetch_map(&maps.k);
    tma_prefetch_map(&maps.v);
  }
  if (tid == 0) {  // one phase: the other C - 1 ranks' bytes (no thread arrives on it but this one, now)
    mbar_init(inbox_full, 1);
    mbar_arrive_expect_tx(inbox_full, Shape::inbox_tx_bytes(ctas));
  }
  if (tid < kW * kDepth) {
    mbar_init(&ring_full[tid], 32);   // the 32 lanes of the slot's producer warp
    mbar_init(&ring_empty[tid], 32);  // the 32 lanes of its consumer warp
    mbar_init_fence();
  }

  // The unit's keys and this CTA's share of its 64-key tiles: the (split C + rank)-th of C S (the same
  // split of the tiles on every CTA of the unit's clusters).
  PieceKeys pk;
  pk.seq = load_sequence(p.seq, i, p.errors, blockIdx.x == 0 && kv_head == 0 && tid == 0);
  const Sequence& seq = pk.seq;
  const bool has_rows = seq.rows_known && seq.q_len > 0;  // the same on every CTA of the cluster
  pk.keys = has_rows ? key_range(p, seq, 0, Cfg::kRows, Cfg::kBlockN) : KeyRange{};
  // The TMA kernel over a paged cache: the tiles start at the first visible key's run (origin, at most
  // kRunSlots - 1 keys early, in its page), so that every whole stage is two runs whatever the leftpad or
  // the window's first key; the keys before the first are masked (kp < every row's first key) and copied as
  // that key (stage_key).
  const bool run_tiles = Cfg::kSwizzled && maps.tma != 0 && p.seq.page_table != nullptr &&
                         p.seq.cu_seqlens_k == nullptr && pk.keys.tiles > 0;
  const int64_t origin = pk.keys.first - (run_tiles ? (seq.leftpad + pk.keys.first) % kRunSlots : 0);
  if (run_tiles) pk.keys.tiles = (pk.keys.last - origin + Cfg::kBlockN) / Cfg::kBlockN;
  const int share = split * ctas + rank, shares = splits * ctas;
  pk.tile_begin = pk.keys.tiles * share / shares;
  pk.tile_end = pk.keys.tiles * (share + 1) / shares;
  pk.kp_begin = static_cast<int32_t>(origin + pk.tile_begin * Cfg::kBlockN);
  pk.kp_end = static_cast<int32_t>(min(pk.keys.last + 1, origin + pk.tile_end * Cfg::kBlockN));
  pk.stages = pk.kp_end > pk.kp_begin ? (pk.kp_end - pk.kp_begin + Cfg::kStageKeys - 1) / Cfg::kStageKeys : 0;
  // The CTA's piece: S > 1, split `split`'s partial rows (piece_partial_row; else out directly).
  const Piece w{i, kv_head, 0, splits > 1 ? split : -1, pk.tile_begin, pk.tile_end, -1, -1};
  KVATTN_TL(if (tid == 0 && pk.stages != -1) tl_stamp(kTlStarted));
  wait_for_prior_grid();  // launched early after the append (PDL): the appended K/V are in place past here
  KVATTN_TL(if (tid == 0) {
    tl_stamp(kTlPdl);
    tl_set(kTlPieces, has_rows ? 1 : 0);
    tl_stamp_piece(0, kTlpBegin);
  });

  // The rings' mbarriers made before either side uses them (a barrier here, not after the inits, so that
  // every warp's sequence loads are in flight while warp 0 makes them).
  __syncthreads();
  bool ok = true;
  // Ring r (of kW): consumer warp r computes stages r + kW k (k < n) in slot k mod kDepth, which producer
  // warp kW + r fills; full (count 32: a cp.async.mbarrier.arrive a producer lane) and empty (count 32: a
  // consumer lane's reads done) mbarriers a slot.
  const bool producer = warp >= kW;
  const int r = warp % kW;
  const int n = has_rows && pk.stages > r ? (pk.stages - r + kW - 1) / kW : 0;
  unsigned char* slots = ring + r * kDepth * Cfg::kStageBytes;
  uint64_t* full = ring_full + r * kDepth;
  uint64_t* empty = ring_empty + r * kDepth;
  if (has_rows && producer) {
    // Every thread of the cluster arrives once (the consumers after their Q); the producers touch neither
    // Q nor the inbox, so they arrive before their copies.
    cluster_arrive();
    const uint64_t policy = evict_first_policy();
    // The page-table entries of the ring's first 2 kDepth stages (every stage it has under the capacity
    // bound), loaded together before any copy: a load issued after the copies waits behind the SM's bytes
    // in flight (bench/NOTES.md, session 42).
    int32_t entry[2 * kDepth][Cfg::kKeysPerLane];
#pragma unroll
    for (int k = 0; k < 2 * kDepth; ++k) stage_entries<Cfg>(p, pk, r + kW * k, entry[k]);
    KVATTN_TL(if (warp == kW && lane == 0 && entry[0][0] != -2) tl_stamp(kTlProdAddr));
    const bool tma = Cfg::kSwizzled && maps.tma != 0;
    for (int k = 0; k < n; ++k) {
      const int s = r + kW * k;
      int32_t e[Cfg::kKeysPerLane] = {};
      if (k < 2 * kDepth) {  // (selected, not indexed: they stay registers)
#pragma unroll
        for (int d = 0; d < 2 * kDepth; ++d) {
#pragma unroll
          for (int j = 0; j < Cfg::kKeysPerLane; ++j) {
            if (d == k) e[j] = entry[d][j];
          }
        }
      } else {  // (past 2 kDepth stages a ring: only with the capacity bound raised)
        stage_entries<Cfg>(p, pk, s, e);
      }
      if (k >= kDepth) mbar_wait(&empty[k % kDepth], ((k / kDepth) & 1) ^ 1);  // the slot's last stage read
      ok &= issue_stage<Cfg>(p, maps, tma, pk, kv_head, s, e,
                             smem_addr(slots + (k % kDepth) * Cfg::kStageBytes), &full[k % kDepth], policy);
      KVATTN_TL(if (warp == kW && lane == 0) {
        if (k == 0) tl_stamp(kTlFirstIssue);
        if (k == n - 1) tl_stamp_piece(0, kTlpLastIssued);
      });
    }
    asm volatile("cp.async.wait_all;" ::: "memory");
  } else if (has_rows) {
    const QRows<Cfg> q = load_q<Cfg>(p, seq, i, kv_head, tid);
    // (Its check of the slots before the unit's keys stops at the first visible key, not at origin.)
    PieceKeys visible = pk;
    visible.kp_begin = max(pk.kp_begin, static_cast<int32_t>(pk.keys.first));
    ok &= piece_ok<Cfg>(p, w, visible, tid);
    KVATTN_TL(if (tid == 0 && ok != (pk.stages == -1)) tl_stamp_piece(0, kTlpChecked));
    uint32_t q_frag[Cfg::kHeadDim / 16][4];
    const float q_unscale = load_q_fragments<Cfg>(q, s_q, s_qmax, 0, q_frag, 0);
    // Q and max |q| read (and the inbox's mbarrier made): the other ranks may store into the inbox once every
    // CTA of the cluster has arrived here (has_rows is the same on all of them).
    cluster_arrive();
    KVATTN_TL(if (tid == 0) tl_stamp_piece(0, kTlpQ));
    float qk_descale = 1.f;
    if constexpr (Cfg::kFp8) {
      qk_descale = descale_at(p.q_descale, p.q_descale_strides, i, kv_head) *
                   descale_at(p.k_descale, p.k_descale_strides, i, kv_head) * q_unscale;
    }
    const ScoreScale scale(p, qk_descale);
    const bool upper = static_cast<int64_t>(seq.q_used) * p.group > 8;
    const QueryRow rows_of_thread[2] = {query_row(p, seq, i, kv_head, group),
                                        query_row(p, seq, i, kv_head, group + 8)};
    float o_acc[kNTilesO][4];
#pragma unroll
    for (int t = 0; t < kNTilesO; ++t) o_acc[t][0] = o_acc[t][1] = o_acc[t][2] = o_acc[t][3] = 0.f;
    float row_max[2] = {-INFINITY, -INFINITY};
    float row_sum[2] = {0.f, 0.f};
    for (int k = 0; k < n; ++k) {
      const int s = r + kW * k;
      const unsigned char* s_k = slots + (k % kDepth) * Cfg::kStageBytes;
      mbar_wait(&full[k % kDepth], (k / kDepth) & 1);  // every producer lane's copies of the stage landed
      KVATTN_TL(if (tid == 0 && k == 0) {
        tl_stamp(kTlFirstFull);
        tl_stamp_piece(0, kTlpFirstFull);
      });
      const int32_t kp0 = pk.kp_begin + s * Cfg::kStageKeys;
      float s_acc[kNTilesS][4];
      stage_scores<Cfg>(s_acc, q_frag, s_k);
      if (scale.pre != 1.f) {
#pragma unroll
        for (int t = 0; t < kNTilesS; ++t) {
#pragma unroll
          for (int e = 0; e < 4; ++e) s_acc[t][e] *= scale.pre;
        }
      }
      const bool inside = kp0 >= pk.keys.all_first && kp0 + Cfg::kStageKeys - 1 <= pk.keys.all_last;
      MmaScoreTile<kNTilesS> score_tile{s_acc, rows_of_thread, kp0 + 2 * quad};
      apply_score_mods<true>(p, pk.kp_end, inside, score_tile);
      stage_softmax<Cfg>(s_acc, scale.factor, upper, row_max, row_sum, o_acc);
      stage_pv<Cfg>(o_acc, s_acc, s_k + Cfg::kKBytes);
      mbar_arrive(&empty[k % kDepth]);  // every lane: its reads of the stage are done
      KVATTN_TL(if (tid == 0 && k == n - 1) tl_stamp_piece(0, kTlpLastConsumed));
    }
    const float state_max[2] = {row_max[0] * scale.factor, row_max[1] * scale.factor};  // log2 units
    // Every consumer warp is done with the ring, which the states overwrite (every stage's copies landed:
    // each was waited for).
    consumers_sync<32 * kW>();
    store_warp_state<Cfg>(s_state, o_acc, state_max, row_sum);
  }
  const bool bad = __syncthreads_or(!ok);    // (and the warps' states written)
  if (has_rows && producer) cluster_wait();  // (every thread of the cluster waits once, as it arrived)
  if (has_rows && !producer) {
    // The CTA's 4 warp states merged in warp order into one (m, l, O) (thread tid: row tid / 8, 16 channels;
    // and, for the unit's merge below, the `per` channels of this CTA's own C-th that it merges there).
    constexpr int kCols = Cfg::kHeadDim / 8;
    constexpr int kMaxPer = Cfg::kHeadDim / 8 / Shape::kMinCtas;
    const int per_rank = Cfg::kHeadDim / ctas, per = per_rank / 8;
    const int rr = tid / 8, c0 = tid % 8 * kCols, cr = tid % 8 * per;
    RowState st;
    float o[kCols], own[kMaxPer];
#pragma unroll
    for (int c = 0; c < kCols; ++c) o[c] = 0.f;
#pragma unroll
    for (int c = 0; c < kMaxPer; ++c) own[c] = 0.f;
#pragma unroll
    for (int v = 0; v < kW; ++v) {
      const float* sv = s_state + v * kS;
      const MergeScales f = st.merge(sv[kMl + rr], sv[kMl + Cfg::kGroupRows + rr]);
#pragma unroll
      for (int c = 0; c < kCols; ++c) o[c] = o[c] * f.a + sv[rr * Cfg::kOStride + c0 + c] * f.b;
#pragma unroll
      for (int c = 0; c < kMaxPer; ++c) {
        if (c < per) own[c] = own[c] * f.a + sv[rr * Cfg::kOStride + rank * per_rank + cr + c] * f.b;
      }
    }
    // Pushed to the other ranks: rank j merges channels [j d / C, (j + 1) d / C) of every row, so this
    // thread's 16 channels go 4 at a time to the rank they belong to, its row's (m, l) to ranks tid % 8 + 8
    // n, and threads tid < C send rank tid the CTA's error flag; into slot rank - (rank > j) of rank j's
    // inbox. Every store completes on the receiver's mbarrier.
    cluster_wait();  // every rank's Q read: the inboxes are free
    const uint32_t inbox_at = smem_addr(inbox), bar_at = smem_addr(inbox_full);
    auto slot_at = [&](int to) { return rank - (rank > to ? 1 : 0); };
#pragma unroll
    for (int c = 0; c < kCols; c += 4) {
      const int to = (c0 + c) / per_rank;
      if (to != rank) {
        const uint32_t at =
            inbox_at + 4 * ((slot_at(to) * Cfg::kGroupRows + rr) * per_rank + (c0 + c) % per_rank);
        st_async_v4(cluster_smem_addr(at, to), make_float4(o[c], o[c + 1], o[c + 2], o[c + 3]),
                    cluster_smem_addr(bar_at, to));
      }
    }
    for (int to = tid % 8; to < ctas; to += 8) {
      if (to != rank) {
        const uint32_t at = inbox_at + 4 * (Shape::kInboxMl + 2 * (slot_at(to) * Cfg::kGroupRows + rr));
        st_async_v2(cluster_smem_addr(at, to), st.m, st.l, cluster_smem_addr(bar_at, to));
      }
    }
    if (tid < ctas && tid != rank) {
      st_async_b32(cluster_smem_addr(inbox_at + 4 * (Shape::kInboxFlags + slot_at(tid)), tid), bad ? 1u : 0u,
                   cluster_smem_addr(bar_at, tid));
    }
    mbar_wait_cluster(inbox_full, 0);  // every other rank's bytes landed
    KVATTN_TL(if (tid == 0) tl_stamp_piece(0, kTlpCluster));

    // The unit's rows from the C rank states, merged in rank order (the one merge, RowState): thread tid row
    // tid / 8, its `per` channels of this CTA's C-th (its own rank's from registers); rank 0 the lse.
    const int64_t q_rows = static_cast<int64_t>(seq.q_len) * p.group;
    if (rr < q_rows) {
      const uint32_t* flags = reinterpret_cast<const uint32_t*>(inbox + Shape::kInboxFlags);
      // (The loop over the ranks below is rolled: it runs once a call, where each instruction-cache line
      // costs a fetch; unrolled over the 16 possible ranks it was ~1 us of a b1 1k decode, NOTES s43.)
      RowState unit;
      float out_acc[kMaxPer];
      bool unit_bad = bad;
#pragma unroll
      for (int c = 0; c < kMaxPer; ++c) out_acc[c] = 0.f;
#pragma unroll 1
      for (int j = 0; j < ctas; ++j) {
        // (this rank's part from registers: selected, not addressed, so that they stay registers)
        const bool mine = j == rank;
        const int slot = j - (j > rank ? 1 : 0);
        float2 ml = make_float2(st.m, st.l);
        float ov[kMaxPer];
#pragma unroll
        for (int c = 0; c < kMaxPer; ++c) ov[c] = own[c];
        if (!mine) {
          unit_bad |= flags[slot] != 0;
          ml = *reinterpret_cast<const float2*>(inbox + Shape::kInboxMl + 2 * (slot * Cfg::kGroupRows + rr));
#pragma unroll
          for (int c = 0; c < kMaxPer; ++c) {
            if (c < per) ov[c] = inbox[(slot * Cfg::kGroupRows + rr) * per_rank + cr + c];
          }
        }
        const MergeScales f = unit.merge(ml.x, ml.y);
#pragma unroll
        for (int c = 0; c < kMaxPer; ++c) {
          if (c < per) out_acc[c] = out_acc[c] * f.a + ov[c] * f.b;
        }
      }
      const int64_t t = rr / p.group;
      const int h = kv_head * p.group + static_cast<int>(rr % p.group);
      const float o_descale = Cfg::kFp8 ? descale_at(p.v_descale, p.v_descale_strides, i, kv_head) : 1.f;
      const bool attends = rr < static_cast<int64_t>(seq.q_used) * p.group;
      // S > 1: split `split`'s partial row (the static splits' layout; the combine folds the sink in).
      const int64_t prow = piece_partial_row(p, w, seq, rr);
      const RowEnd end = end_row(unit, attends, prow < 0, p.sinks, h, o_descale);
      if (prow >= 0) {
        float* o_part = p.o_partial + prow * p.head_dim_v + rank * per_rank + cr;
#pragma unroll
        for (int c = 0; c < kMaxPer; ++c) {
          if (c < per) o_part[c] = unit_bad ? NAN : out_acc[c] * end.o_scale;
        }
        if (rank == 0 && cr == 0) p.lse_partial[prow] = unit_bad ? NAN : end.lse;
      } else {
        T* out = out_row<T>(p, seq, i, t, h) + rank * per_rank + cr;
#pragma unroll
        for (int c = 0; c < kMaxPer; ++c) {
          if (c < per) out[c] = from_float<T>(unit_bad ? NAN : out_acc[c] * end.o_scale);
        }
        if (rank == 0 && cr == 0 && p.lse) *lse_at(p, seq, i, t, h) = unit_bad ? NAN : end.lse;
      }
      KVATTN_TL(if (tid == 0) tl_stamp_piece(0, kTlpEnd));
    }
  }
  // (No barrier before leaving: a CTA reads only its own inbox, and leaves after every rank's bytes landed.)
  KVATTN_TL(if (tid == 0) {
    tl_stamp(kTlExit);
    tl_stamp_ns(kTlExitNs);
  });
#endif
}

}  // namespace kvattn::cuda::sm90
