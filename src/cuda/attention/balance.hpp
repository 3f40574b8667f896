// The arithmetic of the balanced schedule (schedule.cuh) that the host can run too: its constants and
// the CTA ranges of the line of unit costs. tests/cpp/test_balance.cpp checks the schedule built on them
// without a GPU.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define KVATTN_HOST_DEVICE __host__ __device__
#else
#define KVATTN_HOST_DEVICE
#endif

namespace kvattn::cuda {

constexpr int64_t kUnitCost = 2;        // a unit's fixed work (Q, pipeline fill, epilogue), in tiles
constexpr int64_t kMinCtaCost = 4;      // a CTA's share is at least this: small problems use fewer CTAs
constexpr int kBalancedMaxBatch = 512;  // the balanced schedule's scan (schedule.cuh) takes this many

// The cost range [begin, end) of CTA k of g over a line of total cost w.
KVATTN_HOST_DEVICE inline int64_t cta_begin(int64_t k, int64_t g, int64_t w) {
  return k * w / g;
}
// The CTA whose range holds cost position x.
KVATTN_HOST_DEVICE inline int64_t cta_of(int64_t x, int64_t g, int64_t w) {
  int64_t k = x * g / w;
  while (k + 1 < g && cta_begin(k + 1, g, w) <= x) ++k;
  while (k > 0 && cta_begin(k, g, w) > x) --k;
  return k;
}

// CTAs with work over a line of total cost w made of `units` units: with fewer units than resident CTAs
// (`slots`), a whole number of CTAs a unit, so that equal units are cut at unit ends (one piece a CTA);
// else the grid; and at least kMinCtaCost a CTA, rounded down to whole CTAs a unit where that rule applies
// (a CTA whose share crosses a unit end computes two pieces back to back: on a tiny problem that is the
// kernel's last 4-5 us, bench/NOTES.md session 6). whole_grid_cost > 0: when each of `slots` CTAs would
// get at least that much, the whole grid instead (8 units on 132 SMs leave 4 idle, 3% of a long decode,
// more than one piece switch costs).
KVATTN_HOST_DEVICE inline int64_t balanced_ctas(int64_t w, int64_t units, int64_t slots, int64_t grid,
                                                int64_t whole_grid_cost = 0, int64_t min_cost = kMinCtaCost) {
  const int64_t by_cost = (w + min_cost - 1) / min_cost;
  const bool whole_grid = whole_grid_cost > 0 && w >= whole_grid_cost * slots;
  if (units > 0 && units < slots && !whole_grid) {
    const int64_t per_unit = slots / units;  // >= 1
    const int64_t fit = by_cost / units;     // whole CTAs a unit within the cost floor
    if (fit >= 1) return units * (fit < per_unit ? fit : per_unit);
    return by_cost > 1 ? by_cost : 1;  // less than a CTA a unit: the cost floor alone
  }
  const int64_t ctas = grid < by_cost ? grid : by_cost;
  return ctas > 1 ? ctas : 1;
}

// Deterministic mode (schedule.cuh, walk_balanced_pieces): the tiles [begin, end) of a unit that the CTA of
// line range [a, b) owns when the unit's tiles come in indivisible chunks of `chunk` tiles. The unit lies
// on the line at [u_start, u_start + unit_cost + tiles), its chunk j's boundary at u_start for j = 0 (the
// unit's fixed cost goes with its first chunk), else at u_start + unit_cost + j chunk (the last at the
// unit's end); a position x inside it moves to the nearest boundary (ties: the later), as a tile offset.
// Two neighbouring CTAs snap their shared boundary alike, so every chunk is owned once; to the nearest
// boundary, a CTA's share is off its range by at most half a chunk at each end (rounding up: up to a whole
// chunk; H200, W2 b128 Zipf, one chunk a unit: 1.12x -> 1.10x the default schedule's time).
struct OwnedTiles {
  int64_t begin, end;
};
KVATTN_HOST_DEVICE inline OwnedTiles owned_chunk_tiles(int64_t a, int64_t b, int64_t u_start,
                                                       int64_t unit_cost, int64_t tiles, int64_t chunk) {
  // (A unit's tile offsets fit 32 bits: its keys are an int32 length. 32-bit division: the decode kernel
  // walks this in both of its roles, where a 64-bit one is ~80 instructions.)
  auto snap = [&](int64_t x) -> int64_t {
    const int64_t t = x - u_start;  // line offset inside the unit
    if (t <= 0) return 0;
    if (t >= unit_cost + tiles) return tiles;
    const int64_t in_tiles = t - unit_cost;
    const int64_t lo =
        in_tiles <= 0
            ? 0
            : static_cast<int64_t>(static_cast<uint32_t>(in_tiles) / static_cast<uint32_t>(chunk)) * chunk;
    const int64_t hi = lo + chunk < tiles ? lo + chunk : tiles;
    const int64_t lo_at = lo == 0 ? 0 : unit_cost + lo;  // boundaries' line offsets
    return t - lo_at < unit_cost + hi - t ? lo : hi;
  };
  const int64_t u_end = u_start + unit_cost + tiles;
  return {a <= u_start ? 0 : snap(a), b >= u_end ? tiles : snap(b)};
}

}  // namespace kvattn::cuda
