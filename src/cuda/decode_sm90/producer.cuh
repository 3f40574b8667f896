// The producer warps of the Hopper decode kernel (kernel.cuh): K/V rows of each stage with 16-byte cp.async
// (through L1 where copy_via_l1 says so) into the ring, the stage's full mbarrier armed by one
// cp.async.mbarrier.arrive a lane.
#pragma once

#include <type_traits>

#include "cuda/decode_sm90/pieces.cuh"
#include "cuda/decode_sm90/sync.cuh"
#include "cuda/decode_sm90/timeline.cuh"

namespace kvattn::cuda::sm90 {

// A cache row of zeros (the longest: 128 16-bit channels), never written.
static __device__ __align__(16) unsigned char g_zero_row[256];

template <class Cfg>
__device__ __forceinline__ void produce(const AttnParams& p, const BalancedStart& st, unsigned char* ring,
                                        uint64_t* full, uint64_t* empty) {
  using TKV = typename Cfg::TKV;
  static_assert(!Cfg::kSwizzled, "the persistent kernel's stages: padded rows");
  constexpr int kLanesPerRow = Cfg::kRowBytes / 16;  // 16-byte chunks of a row
  constexpr int kRowsPerCopy = 32 / kLanesPerRow;    // rows one warp-wide cp.async covers
  constexpr int kCopies = Cfg::kStageKeys / kRowsPerCopy;
  constexpr int kP = Cfg::kProducerWarps;
  const int lane = threadIdx.x % 32, producer = threadIdx.x / 32 - Cfg::kConsumerWarps;
  const int chunk = lane % kLanesPerRow, row_in_copy = lane / kLanesPerRow;
  // The L2-only copies' policy: K/V rows are read once.
  const uint64_t policy = evict_first_policy();
  const bool via_l1 = copy_via_l1<Cfg>(p, st);
  uint32_t stage_count = 0;  // CTA-wide stage index of the piece's first stage
  [[maybe_unused]] int piece_index = -1;
  for_each_piece<Cfg>(p, st, [&](const Piece& w, bool, int64_t) {
    KVATTN_TL(++piece_index; if (stage_count == 0 && producer == 0 && lane == 0) tl_stamp(kTlProdPiece));
    const PieceKeys pk = piece_keys<Cfg>(p, st, w, false);
    KVATTN_TL(if (stage_count == 0 && producer == 0 && lane == 0 && pk.stages > 0) tl_stamp(kTlProdSeq));
    const uint32_t first_stage = stage_count;
    stage_count += pk.stages;
    // This warp's stages of the piece: CTA-wide index = producer mod kP.
    const int s_first = static_cast<int>((producer - first_stage % kP + kP) % kP);
    if (s_first >= pk.stages) return;
    const Sequence& seq = pk.seq;
    const bool paged = p.seq.page_table != nullptr && p.seq.cu_seqlens_k == nullptr;
    const int64_t head_k = static_cast<int64_t>(w.kv_head) * p.k_cache.head_stride;
    const int64_t head_v = static_cast<int64_t>(w.kv_head) * p.v_cache.head_stride;
    // The cache slot of this lane's key j of stage s (keys j * 32 + lane): past the piece's keys, its last
    // key (always valid).
    auto slot_of = [&](int s, int j) {
      const int32_t kp = min(pk.kp_begin + s * Cfg::kStageKeys + j * 32 + lane, pk.kp_end - 1);
      return seq.leftpad + kp;
    };
    // Page-table entries of this warp's next kAhead + 1 stages (one a key a lane).
    int32_t entry[Cfg::kAhead + 1][Cfg::kKeysPerLane];
#pragma unroll
    for (int a = 0; a <= Cfg::kAhead; ++a) {
#pragma unroll
      for (int j = 0; j < Cfg::kKeysPerLane; ++j) {
        const int s = s_first + a * kP;
        entry[a][j] = paged && s < pk.stages ? page_entry(p.seq, seq, slot_of(s, j)) : 0;
      }
    }
    // The stage loop, instantiated for each copy path (a runtime test a copy interleaved branches and
    // address arithmetic with the copies: W2 b128 +7% on the H200, bench/NOTES.md, session 15).
    auto stream_stages = [&](auto via_l1_tag) {
      for (int s = s_first; s < pk.stages; s += kP) {
        const uint32_t g = first_stage + s;
        const int slot = static_cast<int>(g % Cfg::kStages);
        // Row offsets (elements) of this lane's keys; an out-of-range page id (the consumers record it and
        // write NaN) reads a row of zeros instead (offset -1: every valid row's offset is >= 0, the gate
        // leaves caches with negative strides to the portable kernel).
        int64_t k_off[Cfg::kKeysPerLane], v_off[Cfg::kKeysPerLane];
#pragma unroll
        for (int j = 0; j < Cfg::kKeysPerLane; ++j) {
          const SlotAddress at = slot_address_at(p.seq, seq, slot_of(s, j), entry[0][j]);
          k_off[j] = at.page < 0
                         ? -1
                         : at.page * p.k_cache.page_stride + at.in_page * p.k_cache.slot_stride + head_k;
          v_off[j] = at.page < 0
                         ? -1
                         : at.page * p.v_cache.page_stride + at.in_page * p.v_cache.slot_stride + head_v;
        }
#pragma unroll
        for (int j = 0; j < Cfg::kKeysPerLane; ++j) {
#pragma unroll
          for (int a = 0; a < Cfg::kAhead; ++a) entry[a][j] = entry[a + 1][j];
          const int next = s + (Cfg::kAhead + 1) * kP;
          entry[Cfg::kAhead][j] = paged && next < pk.stages ? page_entry(p.seq, seq, slot_of(next, j)) : 0;
        }
        // (The timeline's stamp reads k_off through a shuffle: after the page-table entry has landed.)
        KVATTN_TL(if (__shfl_sync(0xffffffffu, k_off[0], 0) != -2 && g == 0 && lane == 0)
                      tl_stamp(kTlProdAddr));
        mbar_wait(&empty[slot], ((g / Cfg::kStages) & 1) ^ 1);  // the previous round's consumer is done
        // Warp-wide copy c covers rows c * kRowsPerCopy + row_in_copy, chunk `chunk` each: whole rows per
        // instruction (coalesced); the row offsets come from the lanes that own the keys.
        const uint32_t k_dst =
            smem_addr(ring + slot * Cfg::kStageBytes) + row_in_copy * Cfg::kRowStride + chunk * 16;
        const uint32_t v_dst = k_dst + Cfg::kStageKeys * Cfg::kRowStride;
        const unsigned char* k_base = static_cast<const unsigned char*>(p.k_cache.ptr) + chunk * 16;
        const unsigned char* v_base = static_cast<const unsigned char*>(p.v_cache.ptr) + chunk * 16;
        const unsigned char* zero = g_zero_row + chunk * 16;
#pragma unroll
        for (int c = 0; c < kCopies; ++c) {
          constexpr int kCopiesPerSet = 32 / kRowsPerCopy;  // copies whose rows are keys of one j
          const int owner = (c % kCopiesPerSet) * kRowsPerCopy + row_in_copy;
          const int64_t ko = __shfl_sync(0xffffffffu, k_off[c / kCopiesPerSet], owner);
          const int64_t vo = __shfl_sync(0xffffffffu, v_off[c / kCopiesPerSet], owner);
          const uint32_t row_bytes = c * kRowsPerCopy * Cfg::kRowStride;
          // (The "8th" stamp: the stage's last copy where it has 8, the fp8 kernel of 16 stages.)
          KVATTN_TL(if (g == 0 && lane == 0 && (c == 1 || c == (kCopies > 8 ? 8 : kCopies - 1)))
                        tl_stamp(c == 1 ? kTlFirstCopy : kTlEighthCopy));
          if constexpr (decltype(via_l1_tag)::value) {
            cp_async_16_l1(k_dst + row_bytes, ko < 0 ? zero : k_base + ko * sizeof(TKV));
            cp_async_16_l1(v_dst + row_bytes, vo < 0 ? zero : v_base + vo * sizeof(TKV));
          } else {
            cp_async_16_hint(k_dst + row_bytes, ko < 0 ? zero : k_base + ko * sizeof(TKV), policy);
            cp_async_16_hint(v_dst + row_bytes, vo < 0 ? zero : v_base + vo * sizeof(TKV), policy);
          }
        }
        cp_async_mbar_arrive(&full[slot]);  // this lane's copies of the stage, once landed
        KVATTN_TL(if (lane == 0) {
          if (g == 0) tl_stamp(kTlFirstIssue);
          if (s == pk.stages - 1) tl_stamp_piece(piece_index, kTlpLastIssued);
        });
      }
    };
    if (via_l1) {
      stream_stages(std::true_type{});
    } else {
      stream_stages(std::false_type{});
    }
  });
}

}  // namespace kvattn::cuda::sm90
