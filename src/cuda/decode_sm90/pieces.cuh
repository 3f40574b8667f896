// The Hopper decode kernel's configuration and its walk over the balanced schedule, shared by the producer
// and the consumer warps (they walk the same pieces and so agree on every stage without talking).
#pragma once

#include <type_traits>

#include "cuda/attention/params.cuh"
#include "cuda/attention/schedule.cuh"
#include "cuda/common/dtype.cuh"
#include "cuda/decode_sm90/decode_sm90.hpp"

namespace kvattn::cuda::sm90 {

// kFp8F16: fp8 caches under bf16 q run their tensor-core math in f16 (TM): K and V convert in one
// instruction a pair (e4m3x2 -> f16x2, exact), Q is scaled by a power of two into f16's range (its max
// magnitude lands in [2^14, 2^15)) and the scores scaled back, P is f16; else (the first measured path)
// K and V go on to bf16 (3 more instructions a pair).
// kSwizzled: the stages in the swizzled layout (DecodeSm90Shape::stage_bytes; the cluster form's 16-bit
// caches), else rows padded to kRowStride.
template <typename T_, typename TKV_, int kProducerWarps_, bool kFp8F16_ = true, int kGroups_ = 1,
          int kConsumerWarps_ = DecodeSm90Shape::kConsumerWarps, bool kSwizzled_ = false>
struct DecodeCfg : DecodeSm90Shape {
  static constexpr int kProducerWarps = kProducerWarps_;  // stage s is filled by producer warp s mod this
  static constexpr int kConsumerWarps = kConsumerWarps_;  // 4, or 8 (fp8 caches, one group, 4 producers)
  static constexpr int kGroups = kGroups_;                // row groups of 16 packed rows (1 or 2)
  static constexpr int kRows = kGroups * kGroupRows;      // the unit's rows this kernel takes
  static constexpr int kThreads = threads(kProducerWarps, kConsumerWarps);
  // setmaxnreg (0: none): the producers' warpgroups give registers back and the consumers' take them, from
  // the CTA's pool, what it got at launch (384 threads x 168): 8 producers x 32 x 96 + 4 consumers x 32 x
  // 240 = 55,296; 4 x 32 x 88 + 8 x 32 x 208 = 64,512 (the whole pool; 96 for the producers there would
  // leave a consumer warp waiting in setmaxnreg.inc forever).
  static constexpr int kProducerRegs = kConsumerWarps == 8 ? 88 : kProducerWarps == 8 ? 96 : 0;
  static constexpr int kConsumerRegs = kConsumerWarps == 8 ? 208 : kProducerWarps == 8 ? 240 : 0;
  static_assert(kConsumerWarps == 4 || (kConsumerWarps == 8 && kProducerWarps == 4 && kGroups_ == 1),
                "8 consumer warps: one row group, 4 producer warps (three warpgroups of 128 threads)");
  static_assert(kProducerRegs * 32 * kProducerWarps + kConsumerRegs * 32 * kConsumerWarps <=
                    kThreads * (65536 / kThreads / 8 * 8),
                "setmaxnreg within the CTA's register pool (its launch allocation)");
  using T = T_;
  using TKV = TKV_;
  static constexpr bool kFp8 = std::is_same_v<TKV, __nv_fp8_e4m3>;
  static constexpr int kStages = stages(kProducerWarps, kFp8, kConsumerWarps);
  static_assert(kStages % kProducerWarps == 0, "each slot always filled by the same producer warp");
  using TM = std::conditional_t<kFp8 && kFp8F16_, half, T>;  // the tensor cores' operands
  static constexpr bool kScaleQ = !std::is_same_v<TM, T>;    // bf16 q into f16 math
  static constexpr int kStageKeys = stage_keys(kFp8, kConsumerWarps);
  static constexpr int kKeysPerLane = kStageKeys / 32;
  static constexpr int kRowBytes = kHeadDim * static_cast<int>(sizeof(TKV));  // one cache row of a head
  static constexpr bool kSwizzled = kSwizzled_;
  static_assert(!kSwizzled || (!kFp8 && kRowBytes == 256), "swizzled stages: 16-bit rows of two panels");
  static constexpr int kRowStride = row_stride(kFp8);  // (padded rows)
  static constexpr int kStageBytes = static_cast<int>(stage_bytes(kFp8, kConsumerWarps, kSwizzled));
  static constexpr int kKBytes = kStageBytes / 2;  // a stage's K rows; its V rows follow
  // Where 16-byte chunk `chunk` of a stage's K (or V) row `row` lies, from the stage's K (or V) base.
  // Swizzled: panel chunk / 8 (64 channels: kStageKeys rows of 128 bytes), the chunk at (chunk mod 8) xor
  // (row mod 8) of its row, as a 128-byte-swizzled TMA box writes it (the panels 1024-byte aligned); the
  // eight rows an ldmatrix reads then sit in eight different bank groups, as the pad does for padded rows.
  static __device__ __forceinline__ int kv_offset(int row, int chunk) {
    if constexpr (kSwizzled) {
      return (chunk >> 3) * (kStageKeys * 128) + row * 128 + (((chunk ^ row) & 7) << 4);
    } else {
      return row * kRowStride + chunk * 16;
    }
  }
  static constexpr uint32_t kTxBytes = 2u * kStageKeys * kRowBytes;  // K + V rows of a stage
  static constexpr int kNTilesS = kStageKeys / 8;                    // 8-key column tiles of S
  static constexpr int kNTilesO = kHeadDim / 8;                      // 8-column tiles of O
  static constexpr int kAhead = 3;  // stages whose page-table entries the producer holds ahead
  // Sequences of a CTA's range the scan keeps in shared memory for its pieces (~120 bytes each): W2's
  // CTAs span 1-3 sequences (b128-b256 uniform), past kKnown the pieces load theirs.
  static constexpr int kKnownSequences = 8;
  // The producers' copies may go through L1 (cp.async.ca: the L2 is asked once a sector, not 1.5x) in the
  // one-group 16-bit kernels (copy_via_l1 decides per CTA): H200 W1 -3 to -7%, W2 -2 to -3% (bench/NOTES.md,
  // session 13). The fp8 and two-group kernels, whose consumers read more shared memory a stage, were
  // slower with it (fp8 b4 32k +8%, W4 b8 4k q8 +21%) and keep the L2-only copies.
  static constexpr bool kCopyViaL1 = !kFp8 && kGroups == 1;
  static_assert(kStageKeys % 32 == 0 && kBlockN % kStageKeys == 0, "whole stages of lanes in a tile");
  static_assert(kRowStride % 16 == 0 && kRowBytes % 16 == 0, "16-byte rows for the bulk copies");
};

// The channel of O accumulator (n-tile n, column col of the mma C layout). 16-bit caches: the natural
// order. fp8: n-tile 2c + parity holds the channels 16c + 2j + parity, j = 0..7 (ldmatrix.trans of byte
// pairs, see the PV step).
template <bool kFp8>
__device__ __forceinline__ int o_channel(int n, int col) {
  if constexpr (kFp8) {
    return 16 * (n / 2) + 2 * col + (n % 2);
  } else {
    return 8 * n + col;
  }
}

// A piece's keys: the sequence, its visible-key range, and the piece's keys [kp_begin, kp_end) in stages.
struct PieceKeys {
  Sequence seq;
  KeyRange keys;
  int64_t tile_begin, tile_end;  // the piece's tiles of the unit, clamped to the unit's tiles
  int32_t kp_begin, kp_end;      // logical key positions; kp_end <= keys.last + 1
  int32_t stages;
};

// record: this thread records the sequence's index errors. The CTA's first sequences come from the scan
// (st.known, loaded without recording): such a sequence is loaded again, recording, only when it is broken.
template <class Cfg>
__device__ __forceinline__ PieceKeys piece_keys(const AttnParams& p, const BalancedStart& st, const Piece& w,
                                                bool record) {
  PieceKeys k;
  if (const SeqKeys* known = known_keys(st, w.i)) {
    k.seq = known->seq;
    k.keys = known->keys;
    if (record && !k.seq.ok) load_sequence(p.seq, w.i, p.errors, true);
  } else {
    k.seq = load_sequence(p.seq, w.i, p.errors, record);
    k.keys = key_range(p, k.seq, 0, Cfg::kRows, Cfg::kBlockN);
  }
  if (!k.seq.rows_known) k.keys.tiles = 0;
  k.tile_begin = min(k.keys.tiles, w.tile_begin);
  k.tile_end = min(k.keys.tiles, w.tile_end);
  k.kp_begin = static_cast<int32_t>(k.keys.first + k.tile_begin * Cfg::kBlockN);
  k.kp_end = static_cast<int32_t>(min(k.keys.last + 1, k.keys.first + k.tile_end * Cfg::kBlockN));
  k.stages = k.kp_end > k.kp_begin ? (k.kp_end - k.kp_begin + Cfg::kStageKeys - 1) / Cfg::kStageKeys : 0;
  return k;
}

// Whether this CTA's producers copy through L1 (Cfg::kCopyViaL1 kernels): only for shares of at least
// kCopyViaL1MinTiles schedule tiles a CTA (kCopyViaL1MinTiles16 for 9-16 packed rows). H200 (bench/NOTES.md,
// session 14), us L2-only -> through L1: long shares gain (W1 b1 128k / b4 32k, ~124 tiles a CTA, 153 -> 149
// / 157 -> 152; b16 128k 2,082 -> 1,982), short ones lose (b1 32k, 32 tiles, 52 -> 56; W4 b8 4k, 32 tiles,
// q1-q4 57-59 -> 60-67), and so do 16 rows a unit (W4 b32 4k q4, 124 tiles, 166 -> 173), whose consumers read
// the stages longer, unless their shares are long too (session 15: W4 b32 / b64 16k q4, 496 / 993 tiles
// a CTA, 525 -> 550 / 1,005 -> 1,063 L1 -> L2-only). st: the CTA's balanced start (every CTA the same
// total and CTA count).
constexpr int64_t kCopyViaL1MinTiles = 64;     // <= 8 packed rows
constexpr int64_t kCopyViaL1MinTiles16 = 384;  // 9-16 packed rows: 248 tiles level, 496 L1 faster
template <class Cfg>
__device__ __forceinline__ bool copy_via_l1(const AttnParams& p, const BalancedStart& st) {
  const int64_t min_tiles = p.rows_per_unit <= 8 ? kCopyViaL1MinTiles : kCopyViaL1MinTiles16;
  return Cfg::kCopyViaL1 && st.total >= min_tiles * st.ctas;
}

// The pieces of CTA blockIdx.x on the balanced schedule (attention/schedule.cuh), in order;
// f(piece, first_of_unit, unit_pieces). Producer and consumers walk the same list, so they agree on every
// stage without talking.
template <class Cfg, class F>
__device__ __forceinline__ void for_each_piece(const AttnParams& p, const BalancedStart& st, F&& f) {
  walk_balanced_pieces<Cfg::kRows, Cfg::kBlockN>(p, st, static_cast<F&&>(f));
}

}  // namespace kvattn::cuda::sm90
