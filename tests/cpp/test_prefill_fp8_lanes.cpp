// The fp8 prefill producer's lane arithmetic (src/cuda/prefill_sm90/fp8_lanes.hpp), checked on the host for
// every lane against the layouts it stands for, written here from their definitions: the hardware's 128B
// swizzle (a 16-byte chunk's position within a 128-byte row XORed with the row's index mod 8, rows of a
// 1024-aligned panel), and V^T as the e4m3 consumers read it. The V^T check runs the producer's steps on a
// model of shared memory with ldmatrix.trans, prmt and stmatrix as the PTX ISA defines them.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "cuda/prefill_sm90/fp8_lanes.hpp"

namespace {

using namespace kvattn::cuda::sm90;

// Chunk c of row r in panels of 64 16-bit channels (128-byte rows), panel_bytes apart.
uint32_t swizzle_ref(int r, int c, int panel_bytes) {
  const uint32_t o = static_cast<uint32_t>(r * 128 + (c % 8) * 16);  // unswizzled, within its panel
  return static_cast<uint32_t>((c / 8) * panel_bytes) + (o ^ (((o >> 7) & 7u) << 4));
}

TEST(PrefillFp8Lanes, SwizzleOffsetIsTheHardwareSwizzle) {
  for (int panel : {48 * 128, 64 * 128, 128 * 128}) {
    for (int r = 0; r < panel / 128; ++r) {
      for (int c = 0; c < 32; ++c)
        ASSERT_EQ(swizzle_offset(r, c, panel), swizzle_ref(r, c, panel)) << r << " " << c;
    }
  }
}

// Every (row, chunk) of a warp's kRows rows is copied once, by the lane and step whose source row comes from
// the shuffle's lane, to the swizzled place; the lane's destinations from dst_base / dst_step.
template <int kRows, int kC>
void check_copy_steps(int panel) {
  using S = RowCopySteps<kRows, kC>;
  ASSERT_EQ(S::kSteps * 32, kRows * kC);
  for (int warp = 0; warp < 4; ++warp) {
    std::vector<int> seen(kRows * kC, 0);
    for (int lane = 0; lane < 32; ++lane) {
      for (int j = 0; j < S::kSteps; ++j) {
        const int row = S::src_lane(lane, j), c = lane % kC;  // the warp's row and the lane's chunk
        ASSERT_GE(row, 0);
        ASSERT_LT(row, kRows);
        ++seen[row * kC + c];
        ASSERT_EQ(S::dst_base(warp, lane, j % S::kP, panel) + S::dst_step(j),
                  swizzle_ref(warp * kRows + row, c, panel))
            << "rows " << kRows << " chunks " << kC << " warp " << warp << " lane " << lane << " step " << j;
        ASSERT_EQ((S::dst_base(warp, lane, 0, panel) ^ S::dst_phase(j % S::kP)) + S::dst_rows(j % S::kP),
                  S::dst_base(warp, lane, j % S::kP, panel))
            << "rows " << kRows << " chunks " << kC << " warp " << warp << " lane " << lane << " step " << j;
      }
    }
    for (int n : seen) ASSERT_EQ(n, 1);
  }
}

TEST(PrefillFp8Lanes, CopyStepsCoverEachChunkOnceAtItsSwizzledPlace) {
  check_copy_steps<32, 8>(128 * 128);   // d 128 (and dv 128 at d 192): 128-key tiles, 8 fp8 chunks a row
  check_copy_steps<16, 8>(64 * 128);    // (192, 128)'s V rows, 64-key tiles
  check_copy_steps<32, 4>(128 * 128);   // d 64
  check_copy_steps<12, 16>(48 * 128);   // d 256, 48-key tiles
  check_copy_steps<32, 16>(128 * 128);  // 16-bit rows (d 64's are <32, 8>): d 128
  check_copy_steps<12, 32>(48 * 128);   // d 256
  check_copy_steps<20, 32>(80 * 128);   // d 256, 80-key tiles (since session 53)
}

// The row holders (the 16-bit producer): each of the warp's kRows rows is held by one lane, and step j's
// lane l finds its row (src_lane) at holder_lane, inside l's segment of kC lanes (a shuffle of width kC).
template <int kRows, int kC>
void check_row_holders() {
  using S = RowCopySteps<kRows, kC>;
  std::vector<int> held(kRows, 0);
  for (int lane = 0; lane < 32; ++lane) {
    if (!S::holds_row(lane)) continue;
    ASSERT_GE(S::held_row(lane), 0);
    ASSERT_LT(S::held_row(lane), kRows);
    ++held[S::held_row(lane)];
  }
  for (int n : held) ASSERT_EQ(n, 1);
  for (int lane = 0; lane < 32; ++lane) {
    for (int j = 0; j < S::kSteps; ++j) {
      const int from = S::holder_lane(lane, j);
      ASSERT_EQ(from / kC, lane / kC) << "rows " << kRows << " chunks " << kC << " lane " << lane;
      ASSERT_EQ(from % kC, j);
      ASSERT_TRUE(S::holds_row(from));
      ASSERT_EQ(S::held_row(from), S::src_lane(lane, j))
          << "rows " << kRows << " chunks " << kC << " lane " << lane << " step " << j;
    }
  }
}

TEST(PrefillFp8Lanes, RowHoldersAreOneLaneARowInTheShufflesSegment) {
  check_row_holders<32, 16>();  // d 128, 128-key tiles
  check_row_holders<32, 8>();   // d 64
  check_row_holders<12, 32>();  // d 256, 48-key tiles
  check_row_holders<20, 32>();  // d 256, 80-key tiles
  check_row_holders<16, 16>();  // a 64-key tile of 16 chunks a row
  check_row_holders<32, 4>();   // fp8 rows: d 64
  check_row_holders<12, 16>();  // and d 256
}

// The in-place conversion's addresses: (stage + row_base(r)) ^ chunk_xor(c) + chunk_panel(c) for 1024-aligned
// stages, each 16-bit chunk of an f16 row (two a fp8 chunk).
TEST(PrefillFp8Lanes, ConversionAddressesAreTheSwizzledChunks) {
  for (int panel : {48 * 128, 64 * 128, 128 * 128}) {
    for (uint32_t stage : {0u, 1024u, 32768u, 65536u + 3 * 1024u}) {
      for (int r = 0; r < panel / 128; ++r) {
        for (int c = 0; c < 32; ++c) {
          ASSERT_EQ(((stage + row_base(r)) ^ chunk_xor(c)) + chunk_panel(c, panel),
                    stage + swizzle_ref(r, c, panel))
              << stage << " " << r << " " << c;
        }
      }
    }
  }
}

// V^T by the producer's steps on a model of shared memory whose bytes hold the id of the V element in them
// (key * 128 + channel), -1 unwritten.
TEST(PrefillFp8Lanes, VTransposeWritesTheConsumersLayout) {
  constexpr int kKeys = 128, kDv = 128, kVt = kKeys * kDv;  // V^T after the landed V (cta.cuh kVtOffset)
  const uint32_t v = 3 * 32768;                             // a stage's V, 1024-aligned
  std::vector<int> smem(v + 2 * kVt, -1);
  for (int key = 0; key < kKeys;
       ++key) {  // landed fp8 rows: chunk j (channels 16 j ..) at its swizzled place
    for (int ch = 0; ch < kDv; ++ch) smem[v + swizzle_ref(key, ch / 16, 0) + ch % 16] = key * kDv + ch;
  }
  using Word = std::vector<int>;  // 4 bytes, low first
  const auto byte_perm = [](const Word& x, const Word& y, uint32_t sel) {
    Word out(4);
    for (int b = 0; b < 4; ++b) {
      const uint32_t n = (sel >> (4 * b)) & 7u;
      out[b] = n < 4 ? x[n] : y[n - 4];
    }
    return out;
  };
  for (int warp = 0; warp < 4; ++warp) {
    for (int g = 0; g < 2; ++g) {
      for (int j = 0; j < kDv / 16; j += 2) {
        // ldmatrix.x4.trans: lane l gives row l % 8 of matrix l / 8; lane (t, p) = (l % 4, l / 4) receives,
        // of each matrix M (8 rows of 8 b16 elements), M[2t][p] (low half) and M[2t + 1][p].
        uint32_t row_addr[32];
        for (int l = 0; l < 32; ++l) row_addr[l] = (v + vt_ld_base(warp, l, g)) ^ vt_ld_step(j);
        std::vector<Word> m(32 * 4, Word(4));
        for (int l = 0; l < 32; ++l) {
          const int t = l % 4, p = l / 4;
          for (int mi = 0; mi < 4; ++mi) {
            for (int half = 0; half < 2; ++half) {
              const uint32_t at = row_addr[8 * mi + 2 * t + half] + 2 * p;
              m[4 * l + mi][2 * half] = smem[at];
              m[4 * l + mi][2 * half + 1] = smem[at + 1];
            }
          }
        }
        // Two permutes a matrix pair; stmatrix.x4: lane l gives row l % 8 of matrix l / 8, lane (t, p)'s
        // register of matrix mi goes to row p, bytes 4t .. 4t + 3.
        uint32_t st_addr[32];
        for (int l = 0; l < 32; ++l) st_addr[l] = v + kVt + vt_st_base(warp, l, g) + vt_st_step(j);
        for (int l = 0; l < 32; ++l) {
          const int t = l % 4, p = l / 4;
          for (int h = 0; h < 2; ++h) {
            const Word w[2] = {byte_perm(m[4 * l + 2 * h], m[4 * l + 2 * h + 1], kVtPermEven),
                               byte_perm(m[4 * l + 2 * h], m[4 * l + 2 * h + 1], kVtPermOdd)};
            for (int e = 0; e < 2; ++e) {
              for (int b = 0; b < 4; ++b) {
                int& cell = smem[st_addr[8 * (2 * h + e) + p] + 4 * t + b];
                ASSERT_EQ(cell, -1) << "written twice";
                cell = w[e][b];
              }
            }
          }
        }
      }
    }
  }
  // The consumers' V^T: channel c's row of 128 key bytes at 128 c, 16-key group G's 16 bytes at chunk
  // position G ^ (c % 8), byte 4 t + m holding key 16 G + 2 t + {0, 1, 8, 9}[m].
  const int of_m[4] = {0, 1, 8, 9};
  for (int c = 0; c < kDv; ++c) {
    for (int group = 0; group < kKeys / 16; ++group) {
      for (int t = 0; t < 4; ++t) {
        for (int mm = 0; mm < 4; ++mm) {
          const int key = 16 * group + 2 * t + of_m[mm];
          ASSERT_EQ(smem[v + kVt + 128 * c + ((group ^ (c % 8)) << 4) + 4 * t + mm], key * kDv + c)
              << "channel " << c << " key " << key;
          ASSERT_EQ(vt_place(c, group, 4 * t + mm),
                    static_cast<uint32_t>(128 * c + ((group ^ (c % 8)) << 4) + 4 * t + mm));
        }
      }
    }
  }
}

}  // namespace
