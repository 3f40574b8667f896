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

constexpr int64_t kUnitCost = 2;           // a unit's fixed work (Q, pipeline fill, epilogue), in tiles
constexpr int64_t kMinCtaCost = 4;         // a CTA's share is at least this: small problems use fewer CTAs
constexpr int kBalancedSeqsPerThread = 4;  // the scan holds this many sequences a thread

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

}  // namespace kvattn::cuda
