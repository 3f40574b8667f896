// Where the fp8 producer's lanes copy, convert and transpose in a stage (producer.cuh, produce_fp8), as
// constexpr arithmetic: the lane's addresses made once, before the tile loop, and stepped by immediates,
// so that the producer issues little beside its copies (its instructions take issue slots from the
// consumers on the same SM sub-partitions). tests/cpp/test_prefill_fp8_lanes.cpp checks each form against
// the layout it stands for, for every lane.
#pragma once

#include <cstdint>

namespace kvattn::cuda::sm90 {

// Byte offset of 16-byte chunk c of row r in a tile of 64-channel panels (panel_bytes apart), 128B swizzle:
// the chunk's position within its 128-byte row is XORed with r % 8. Its bits 4-6 are that position, so a
// row's chunks c and c' (same panel) differ by the XOR of ((c ^ c') % 8) << 4, and with a 1024-aligned
// base (the stages: the swizzle's atom) the XOR may be taken after the base is added.
constexpr uint32_t swizzle_offset(int r, int c, int panel_bytes) {
  return (c / 8) * panel_bytes + r * 128 + (((c % 8) ^ (r % 8)) << 4);
}

// A warp's kRows key rows of kC 16-byte chunks, copied in warp steps of 32 chunks (consecutive lanes,
// consecutive 16 bytes of a row): at step j, lane l copies chunk c = l % kC of the warp's row kR j + l / kC
// (kR = 32 / kC rows a step; kC a power of two). The lane's source is base + 16 c + 16 row_offset, and its
// destination swizzle_offset(w kRows + kR j + l / kC, c) repeats, up to 128 kR bytes a step, with the
// period kP of (kR j) % 8 in j: dst_base(w, l, j % kP) + dst_step(j).
template <int kRows, int kC>
struct RowCopySteps {
  static_assert(kC >= 1 && kC <= 32 && 32 % kC == 0, "chunks a row: a power of two up to 32");
  static constexpr int kR = 32 / kC;
  static constexpr int kSteps = kRows * kC / 32;
  static_assert(kRows % kR == 0, "whole warp steps");
  static constexpr int kP = kR >= 8 ? 1 : 8 / kR;
  static constexpr int src_lane(int lane, int j) { return kR * j + lane / kC; }
  static constexpr uint32_t dst_base(int warp, int lane, int k, int panel_bytes) {
    return swizzle_offset(warp * kRows + kR * k + lane / kC, lane % kC, panel_bytes);
  }
  static constexpr uint32_t dst_step(int j) { return 128u * kR * (j - j % kP); }
  // dst_base(w, l, k) as (dst_base(w, l, 0) ^ dst_phase(k)) + dst_rows(k): the kR k rows down add to the
  // row's swizzle phase without a carry in the layouts used (the step-0 row's phase below kR, or a
  // multiple of 4 at kR = 1, whose adding mod 8 is an XOR; checked by the test), so one destination a lane
  // and an XOR a step can stand for kP of them (d 256's eight).
  static constexpr uint32_t dst_phase(int k) { return static_cast<uint32_t>((kR * k) % 8) << 4; }
  static constexpr uint32_t dst_rows(int k) { return 128u * kR * k; }
  // Rows whose offsets the lanes hold laid out so that step j's row (src_lane) comes from lane j of the
  // lane's kC-lane segment: a shuffle of width kC by an immediate lane, none computed (the 16-bit
  // producer). Lane l holds row kR (l % kC) + l / kC when l % kC < kSteps (kSteps <= kC: kRows <= 32).
  static_assert(kSteps <= kC, "a step's row owner within the lane's segment");
  static constexpr bool holds_row(int lane) { return lane % kC < kSteps; }
  static constexpr int held_row(int lane) { return kR * (lane % kC) + lane / kC; }
  static constexpr int holder_lane(int lane, int j) { return lane / kC * kC + j; }
};

// fp8 rows converted to f16 in place (KvFp8): lane row r's f16 chunk c is at
// (stage + row_base(r)) ^ chunk_xor(c) + chunk_panel(c) (stage 1024-aligned).
constexpr uint32_t row_base(int r) {
  return r * 128 + ((r % 8) << 4);
}
constexpr uint32_t chunk_xor(int c) {
  return (c % 8) << 4;
}
constexpr uint32_t chunk_panel(int c, int panel_bytes) {
  return (c / 8) * panel_bytes;
}

// V^T of a 128-key e4m3 V tile (KvFp8Mma, cta.cuh): channel c's row of 128 key bytes at vt + 128 c, its
// 16-key group G's 16 bytes at chunk position G ^ (c % 8), byte 4 t + m holding key 16 G + 2 t +
// {0, 1, 8, 9}[m]. Warp w transposes the groups 2 w + g (g = 0, 1) of the landed V (rows of 128 channel
// bytes, swizzle_offset's layout), 16 channels a step j = 0, 2, .. (chunks j and j + 1):
// - ldmatrix.x4.trans: matrix q = l / 8 is keys 8 (q % 2) .. + 7 (rows) of chunk j + q / 2; lane l's row
//   address is (v + vt_ld_base(w, l, g)) ^ (j << 4) (j even: chunk j + q / 2 is j ^ (q / 2));
// - stmatrix.x4: matrix 2 h + e holds the channels 16 (j + h) + 2 i + e (row i = l % 8 of it) of the
//   group; lane l's row address is v + vt_st_base(w, l, g) + 2048 j.
// ldmatrix.trans of 8 keys x 8 channel pairs gives lane (t = l % 4, p = l / 4) keys 2t, 2t + 1 of channels
// 2p, 2p + 1; with the matrix of keys 8-15, two byte permutes give the words of channels 2p and 2p + 1,
// row p and word t of the stmatrix fragments.
constexpr uint32_t vt_place(int c, int group, int pos) {  // V^T byte of (channel c, group, pos), from vt
  return c * 128 + ((group ^ (c % 8)) << 4) + pos;
}
constexpr uint32_t vt_ld_base(int warp, int lane, int g) {
  const int q = lane / 8, i = lane % 8;
  return swizzle_offset(16 * (2 * warp + g) + 8 * (q % 2) + i, q / 2, 0);  // chunks < 8: panel 0
}
constexpr uint32_t vt_st_base(int warp, int lane, int g) {
  const int q = lane / 8, i = lane % 8;
  const int c = 16 * (q / 2) + 2 * i + q % 2;
  return vt_place(c, 2 * warp + g, 0);
}
// Step j's row addresses: (v + vt_ld_base) ^ vt_ld_step(j), v + vt_st_base + vt_st_step(j).
constexpr uint32_t vt_ld_step(int j) {
  return static_cast<uint32_t>(j) << 4;
}
constexpr uint32_t vt_st_step(int j) {
  return 2048u * static_cast<uint32_t>(j);
}
// The permutes (prmt selectors) of the matrices of keys 0-7 (x) and 8-15 (y) of a chunk: the words of
// channels 2p and 2p + 1.
constexpr uint32_t kVtPermEven = 0x6420u, kVtPermOdd = 0x7531u;

}  // namespace kvattn::cuda::sm90
