// The balanced split schedule of the decode kernel (src/cuda/attention/schedule.cuh), checked on the host:
// the line arithmetic of balance.hpp, and a model of each CTA's walk that mirrors the kernel's (pieces, the
// partial slots, the unit table the combine reads) against the invariants the combine relies on.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <vector>

#include "cuda/attention/balance.hpp"

namespace {

using namespace kvattn::cuda;

TEST(Balance, EveryPositionBelongsToTheCtaWhoseRangeHoldsIt) {
  for (int64_t w : {1, 2, 7, 64, 1000, 123457}) {
    for (int64_t g : {1, 2, 3, 16, 396, 1584}) {
      if (g > w) continue;
      for (int64_t x = 0; x < w; x += std::max<int64_t>(1, w / 997)) {
        const int64_t k = cta_of(x, g, w);
        ASSERT_GE(k, 0);
        ASSERT_LT(k, g);
        ASSERT_LE(cta_begin(k, g, w), x);
        ASSERT_GT(cta_begin(k + 1, g, w), x);
      }
      // Shares differ by at most one cost unit.
      int64_t lo = w, hi = 0;
      for (int64_t k = 0; k < g; ++k) {
        const int64_t share = cta_begin(k + 1, g, w) - cta_begin(k, g, w);
        lo = std::min(lo, share), hi = std::max(hi, share);
      }
      EXPECT_LE(hi - lo, 1) << "w=" << w << " g=" << g;
    }
  }
}

// The CTA count: equal units fewer than the resident CTAs get whole CTAs each (every CTA then computes one
// piece of one unit), the cost floor and the slots respected; else the grid under the cost floor.
TEST(Balance, CtaCountGivesEqualUnitsWholeCtas) {
  for (int64_t units : {1, 2, 3, 8, 32, 100, 131, 132, 500}) {
    for (int64_t slots : {132, 396}) {
      for (int64_t tiles : {0, 1, 2, 5, 8, 32, 256}) {
        const int64_t cost = tiles + kUnitCost, w = units * cost, grid = std::max(slots, units);
        const int64_t g = balanced_ctas(w, units, slots, grid);
        const int64_t by_cost = (w + kMinCtaCost - 1) / kMinCtaCost;
        ASSERT_GE(g, 1);
        ASSERT_LE(g, std::max<int64_t>(1, by_cost)) << units << " " << slots << " " << tiles;
        ASSERT_LE(g, grid);
        if (units >= slots || g < units) continue;
        ASSERT_EQ(g % units, 0) << units << " " << slots << " " << tiles;
        ASSERT_LE(g, units * (slots / units));
        for (int64_t k = 0; k < g; ++k) {  // no CTA's share crosses a unit end
          const int64_t b = cta_begin(k, g, w), e = cta_begin(k + 1, g, w);
          ASSERT_EQ(b / cost, (e - 1) / cost) << "units " << units << " tiles " << tiles << " cta " << k;
        }
      }
    }
  }
  // The tiny decode of the session-6 timeline (b1 1k, 8 kv heads, 64-key tiles: 16 + 2 a unit): 32 CTAs
  // of one piece each, where the cost floor alone gave 36 (4 with two pieces).
  EXPECT_EQ(balanced_ctas(8 * 18, 8, 132, 132), 32);
}

// The floor as a parameter (the sm_90a decode kernel's is 2 tiles): the same b1 1k line takes 72 CTAs of 2
// (9 a unit), and at 1 tile 128 (16 a unit, the most one wave of 132 gives 8 units).
TEST(Balance, CostFloorParameter) {
  EXPECT_EQ(balanced_ctas(8 * 18, 8, 132, 132, 1024, 2), 72);
  EXPECT_EQ(balanced_ctas(8 * 18, 8, 132, 132, 1024, 1), 128);
  EXPECT_EQ(balanced_ctas(8 * 18, 8, 132, 132, 1024, kMinCtaCost), 32);
}

// The whole grid once each slot gets whole_grid_cost: 128 units of a long decode (b16 x 8 kv heads, 128k
// keys) take all 132 SMs instead of 128, a shorter one keeps whole CTAs a unit, 0 never switches.
TEST(Balance, WholeGridForLongShares) {
  const int64_t long_w = 128 * (2048 + kUnitCost), short_w = 128 * (8 + kUnitCost);
  EXPECT_EQ(balanced_ctas(long_w, 128, 132, 132, 0), 128);
  EXPECT_EQ(balanced_ctas(long_w, 128, 132, 132, 384), 132);
  EXPECT_EQ(balanced_ctas(short_w, 128, 132, 132, 384), 128);
  EXPECT_EQ(balanced_ctas(8 * (2048 + kUnitCost), 8, 132, 132, 96), 132);   // 124 tiles a slot
  EXPECT_EQ(balanced_ctas(8 * (2048 + kUnitCost), 8, 132, 132, 128), 128);  // 16 CTAs a unit
  // The cost floor still applies to the whole grid (200 tiles: 50 CTAs of 4), and a line below the
  // threshold keeps whole CTAs a unit (40 tiles over 4 units: 2 CTAs each).
  EXPECT_EQ(balanced_ctas(200, 4, 132, 132, 1), 50);
  EXPECT_EQ(balanced_ctas(40, 4, 132, 132, 1), 8);
}

struct Piece {
  int64_t unit, tile_begin, tile_end;
  int slot;  // -1: the whole unit (written directly), 0 or 1: a partial
};

// The kernel's walk for CTA k (attention_decode_kernel), unit costs = tiles + unit_cost laid end to end
// (AttnParams::balanced_unit_cost: kUnitCost on the portable kernel, 8 on the sm_90a one
// for many units).
std::vector<Piece> walk(const std::vector<int64_t>& tiles, int64_t k, int64_t g, int64_t total,
                        std::map<int64_t, std::pair<int64_t, int64_t>>* unit_pieces, int64_t unit_cost) {
  const int64_t a = cta_begin(k, g, total), b = cta_begin(k + 1, g, total);
  std::vector<Piece> out;
  int64_t u_start = 0;
  for (int64_t u = 0; u < static_cast<int64_t>(tiles.size()); ++u) {
    const int64_t u_end = u_start + tiles[u] + unit_cost;
    if (u_end > a && u_start < b) {
      Piece w{u, std::max<int64_t>(0, std::max(a, u_start) - u_start - unit_cost),
              std::max<int64_t>(0, std::min(b, u_end) - u_start - unit_cost), -1};
      if (u_start < a || u_end > b) w.slot = u_start < a ? 0 : 1;
      if (u_start >= a) (*unit_pieces)[u] = {k, cta_of(u_end - 1, g, total) - k + 1};
      out.push_back(w);
    }
    u_start = u_end;
  }
  return out;
}

void check_schedule(const std::vector<int64_t>& tiles, int64_t grid, int64_t unit_cost = kUnitCost) {
  int64_t total = 0;
  for (int64_t t : tiles) total += t + unit_cost;
  const int64_t g = balanced_ctas(total, static_cast<int64_t>(tiles.size()), grid, grid);  // the kernel's
  std::map<int64_t, std::pair<int64_t, int64_t>> unit_pieces;  // unit -> (first CTA, pieces)
  std::map<int64_t, std::vector<std::pair<int64_t, Piece>>> by_unit;
  for (int64_t k = 0; k < g; ++k) {
    int slots_used[2] = {0, 0};
    for (const Piece& w : walk(tiles, k, g, total, &unit_pieces, unit_cost)) {
      if (w.slot >= 0) ++slots_used[w.slot];
      by_unit[w.unit].push_back({k, w});
    }
    ASSERT_LE(slots_used[0], 1) << "CTA " << k;  // the partials are (2, G, rows, dv): one piece a slot
    ASSERT_LE(slots_used[1], 1) << "CTA " << k;
  }
  ASSERT_EQ(by_unit.size(), tiles.size());
  for (const auto& [u, pieces] : by_unit) {
    // The pieces cover the unit's tiles once, in order, in consecutive CTAs.
    int64_t next = 0;
    for (size_t j = 0; j < pieces.size(); ++j) {
      const Piece& w = pieces[j].second;
      ASSERT_EQ(w.tile_begin, next) << "unit " << u;
      ASSERT_GE(w.tile_end, w.tile_begin);
      next = w.tile_end;
      if (j > 0) {
        ASSERT_EQ(pieces[j].first, pieces[j - 1].first + 1);
      }
    }
    ASSERT_EQ(next, tiles[u]) << "unit " << u;
    // What the combine reads: (first CTA, pieces); a single piece is the whole unit, else slot 1 of the
    // first CTA and slot 0 of the following ones.
    ASSERT_TRUE(unit_pieces.count(u));
    const auto [k_a, n] = unit_pieces[u];
    ASSERT_EQ(k_a, pieces.front().first);
    ASSERT_EQ(n, static_cast<int64_t>(pieces.size()));
    for (size_t j = 0; j < pieces.size(); ++j) {
      const int want = n == 1 ? -1 : (j == 0 ? 1 : 0);
      ASSERT_EQ(pieces[j].second.slot, want) << "unit " << u << " piece " << j;
    }
  }
}

TEST(Balance, PiecesCoverEveryUnitOnceAndTheCombineFindsThem) {
  check_schedule({512, 512, 512, 512}, 396);             // few long units: many pieces each
  check_schedule({0, 0, 0}, 396);                        // empty units still get a (whole) piece
  check_schedule({9000, 1, 0, 64, 65}, 40);              // one long unit among tiny ones
  check_schedule(std::vector<int64_t>(2048, 34), 1584);  // more units than CTAs
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<int64_t> tiles(1 + rng() % 64);
    for (int64_t& t : tiles)
      t = rng() % 5 == 0 ? 0 : static_cast<int64_t>(rng() % (rng() % 3 == 0 ? 2000 : 40));
    check_schedule(tiles, 1 + static_cast<int64_t>(rng() % 800));
  }
}

// The unit cost as a parameter (the sm_90a decode kernel charges 8 tiles a unit when units outnumber its
// CTAs): the same invariants, down to a charge of one tile.
TEST(Balance, UnitCostParameter) {
  for (int64_t unit_cost : {1, 8, 16}) {
    check_schedule(std::vector<int64_t>(1024, 32), 132, unit_cost);  // W2-like: 1024 units on 132 CTAs
    check_schedule({9000, 1, 0, 64, 65}, 40, unit_cost);
    std::mt19937_64 rng(11 + unit_cost);
    for (int trial = 0; trial < 100; ++trial) {
      std::vector<int64_t> tiles(1 + rng() % 512);
      for (int64_t& t : tiles) t = rng() % 7 == 0 ? 0 : static_cast<int64_t>(rng() % 70);
      check_schedule(tiles, 1 + static_cast<int64_t>(rng() % 400), unit_cost);
    }
  }
}

// Deterministic mode (schedule.cuh, walk_balanced_pieces, on owned_chunk_tiles): each CTA of g over the line
// takes the whole chunks between its range's ends snapped to chunk boundaries. A model of the walk: the
// pieces (unit, first tile, end tile) of every CTA; they must be each unit's chunks [c C, min((c + 1) C,
// tiles)) exactly once (an empty unit: one empty piece), whatever g: the pieces, and so each sequence's
// result, never depend on the grid or on the rest of the batch. And a CTA's chunks cost its range's within
// half a boundary gap (unit_cost + chunk at most) at each end, the snap being to the nearest boundary (an
// empty unit, unit_cost on the line, goes to the CTA whose range holds its start: up to unit_cost).
std::map<std::pair<size_t, int64_t>, int64_t> chunk_pieces(const std::vector<int64_t>& tiles, int64_t g,
                                                           int64_t unit_cost, int64_t chunk) {
  std::vector<int64_t> start(tiles.size() + 1, 0);
  for (size_t u = 0; u < tiles.size(); ++u) start[u + 1] = start[u] + unit_cost + tiles[u];
  const int64_t w = start.back();
  std::map<std::pair<size_t, int64_t>, int64_t> pieces;  // (unit, first tile) -> end tile
  for (int64_t k = 0; k < g; ++k) {
    const int64_t a = cta_begin(k, g, w), b = cta_begin(k + 1, g, w);
    int64_t owned_cost = 0;  // the line cost of the CTA's pieces: tiles, and unit_cost with a first chunk
    for (size_t u = 0; u < tiles.size(); ++u) {
      if (start[u + 1] <= a || start[u] >= b) continue;  // the walk visits the units its range touches
      if (tiles[u] == 0) {
        if (a <= start[u]) {
          EXPECT_TRUE(pieces.emplace(std::make_pair(u, int64_t{0}), 0).second) << "unit " << u;
          owned_cost += unit_cost;
        }
        continue;
      }
      const OwnedTiles own = owned_chunk_tiles(a, b, start[u], unit_cost, tiles[u], chunk);
      EXPECT_TRUE(own.begin == tiles[u] || own.begin % chunk == 0) << "unit " << u;
      if (own.end > own.begin) owned_cost += own.end - own.begin + (own.begin == 0 ? unit_cost : 0);
      for (int64_t c0 = own.begin; c0 < own.end; c0 += chunk) {
        const int64_t c1 = std::min(tiles[u], c0 + chunk);
        EXPECT_TRUE(pieces.emplace(std::make_pair(u, c0), c1).second)
            << "unit " << u << " tile " << c0 << " twice";
      }
    }
    EXPECT_LE(std::abs(owned_cost - (b - a)), 2 * std::max(unit_cost, (unit_cost + chunk + 1) / 2))
        << "CTA " << k << " of " << g;
  }
  return pieces;
}

void check_chunks(const std::vector<int64_t>& tiles, int64_t unit_cost, int64_t chunk) {
  std::map<std::pair<size_t, int64_t>, int64_t> want;
  for (size_t u = 0; u < tiles.size(); ++u) {
    if (tiles[u] == 0) want[{u, 0}] = 0;
    for (int64_t c0 = 0; c0 < tiles[u]; c0 += chunk) want[{u, c0}] = std::min(tiles[u], c0 + chunk);
  }
  for (int64_t g : {int64_t{1}, int64_t{2}, int64_t{7}, int64_t{132}, int64_t{1000}}) {
    ASSERT_EQ(chunk_pieces(tiles, g, unit_cost, chunk), want) << "g " << g << " chunk " << chunk;
  }
}

TEST(Balance, DeterministicChunksOwnedOnceWhateverTheGrid) {
  for (int64_t chunk : {1, 3, 63, 64}) {
    for (int64_t unit_cost : {1, 2, 8}) {
      check_chunks({171, 5, 0, 63, 64, 65, 126, 127, 0, 1}, unit_cost, chunk);
      std::mt19937_64 rng(static_cast<uint64_t>(100 * chunk + unit_cost));
      for (int trial = 0; trial < 30; ++trial) {
        std::vector<int64_t> tiles(1 + rng() % 80);
        for (int64_t& t : tiles)
          t = rng() % 6 == 0 ? 0 : static_cast<int64_t>(rng() % (rng() % 4 == 0 ? 600 : 70));
        check_chunks(tiles, unit_cost, chunk);
      }
    }
  }
}

}  // namespace
