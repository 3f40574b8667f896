// The decode cluster form's shape (cluster.cuh): C CTAs a cluster and S clusters a unit, or none (the
// persistent kernel), as a pure function of the static shapes, the card's figures and the switches, so that
// the model's picks are tested without a GPU (tests/cpp/test_cluster_shape.cpp). launch.cu reads the
// switches and asks the device; bench/NOTES.md (sessions 45-47) holds the measurements behind the numbers.
//
// The model, from the H100's batch-1 streams (bench/cluster_rate.py): the cluster form has fewer CTAs than
// SMs (an H100 holds 7 clusters of 16), each streaming up to ~55-64 GB/s while the memory is not the limit
// (16-32 CTAs), a cluster of 16 at most one GPC's ~0.48 TB/s, all of them at most what the persistent
// kernel reaches, ~85% of the card's DRAM bandwidth (memory clock x bus width); the persistent kernel pays
// ~18-23 us of start (the scan, the walk) and combine that one cluster a unit does not (its own fixed cost
// 7-9 us): kFixedSavedUs, the low end. S > 1 clusters a unit bring back partials and the split combine:
// kSplitUs. The bytes are the cache's capacity (static: graph-safe), so a wide page table errs toward the
// persistent kernel.
#pragma once

#include <algorithm>
#include <cstdint>

#include "api/problem.hpp"

namespace kvattn::cuda {

struct ClusterShape {
  int ctas = 0;    // C (8 or 16); 0: not the cluster form
  int splits = 1;  // S clusters a unit
};

// What the plan knows of the card: its SMs (less sm_margin), DRAM bandwidth (0: unknown) and how many
// clusters of 8 / 16 CTAs of the kernel it holds at once (cudaOccupancyMaxActiveClusters).
struct ClusterCard {
  int64_t sms = 0;
  int64_t dram_bytes_per_us = 0;
  int64_t resident8 = 0, resident16 = 0;
};

// The switches (launch.cu reads them): KVATTN_DECODE_CLUSTER (16, 8, 0 off), KVATTN_DECODE_CLUSTER_SPLITS (0:
// the model's), KVATTN_DECODE_CLUSTER_MAX_KEYS (the capacity bound past which a sequence is long),
// KVATTN_DECODE_CLUSTER_LONG (-1: the model; 0 never; 1 always, for batch 1 on TMA layouts).
struct ClusterAsk {
  int max_ctas = 16;
  int splits = 0;
  int64_t max_keys = 4096;
  int long_rule = -1;
};

constexpr double kClusterCtaBytesPerUs = 55000;  // H100: 54-64 GB/s a CTA at 16-32 CTAs
// A cluster of 16 fills one GPC: H100, session 47, 4 kv heads b1 x 128k in 4 clusters of 16 1.91 TB/s (140
// us) against 12 clusters of 8 spread over every GPC (117 us); the same 64 CTAs at 32k over 1 kv head 23.0
// us in 4 clusters of 16, 19.4 in 8 of 8. A cluster of 8 (8 x 55 GB/s) stays under it.
constexpr double kClusterBytesPerUs = 480000;
constexpr double kFixedSavedUs = 11;   // H100 b1: 18-23 us (persistent) - 7-9 us (cluster)
constexpr double kSplitUs = 4;         // S > 1: the partials and the combine's tail (~2 us past the kernel)
constexpr int kMaxClusterSplits = 16;  // the combine's one-round-trip merge (merge_row_warp)
constexpr int64_t kClusterTmaKeys = 512;  // keys a CTA for the TMA kernel's 4 stages a ring (launch.cu)

inline bool paged_cache(const FwdProblem& p) {
  return p.page_table != nullptr && p.cu_seqlens_k == nullptr;
}
inline double capacity_bytes(const FwdProblem& p) {
  return static_cast<double>(max_sequence_keys(p)) * p.num_kv_heads * p.batch * (p.head_dim + p.head_dim_v) *
         (p.kv_dtype == DType::fp8_e4m3 ? 1 : 2);
}
inline double persistent_rate(int64_t dram_bytes_per_us) {
  return 0.85 * static_cast<double>(dram_bytes_per_us);
}
// The cluster form's modelled time (us) over `ctas` CTAs in all, in clusters of `size`, `splits` a unit.
inline double cluster_us(double bytes, int64_t ctas, int size, int splits, int64_t dram_bytes_per_us) {
  const double rate =
      std::min({static_cast<double>(ctas) * kClusterCtaBytesPerUs,
                static_cast<double>(ctas / size) * kClusterBytesPerUs, persistent_rate(dram_bytes_per_us)});
  return bytes / rate + (splits > 1 ? kSplitUs : 0.);
}

// Past the capacity bound the cluster form streams on its TMA kernel's layouts only (tma_eligible; by
// cp.async it streams slower: page 1 +14%, a paged leftpad's stages all off the 16-slot runs +45%, fp8
// +33%, H100; a leftpad or a window start is a value, so the TMA kernel starts a paged unit's tiles at its
// first key's run: cluster.cuh), where the model says it beats the persistent kernel on the whole capacity,
// and, for a batch, also where one sequence holding the whole capacity alone (the others empty) streams on
// its own clusters no slower than the persistent kernel would stream it over every SM: the lengths are on
// the device, and the persistent kernel's balanced schedule spreads a long sequence among short ones over
// every SM where the cluster form keeps it on its units' clusters. (4/1 b4 x 32k passes, on 24 CTAs a unit;
// 8/2 b4 x 32k, 8 CTAs a unit, and b4 x 128k do not.) KVATTN_DECODE_CLUSTER_LONG=1 skips the model, for
// batch 1 only.
inline bool cluster_streams_long(const FwdProblem& p, bool tma_eligible, const ClusterCard& card,
                                 const ClusterAsk& ask, ClusterShape c, int64_t units) {
  if (ask.long_rule == 0 || p.batch < 1 || !tma_eligible) return false;
  if (ask.long_rule == 1) return p.batch == 1;
  if (card.dram_bytes_per_us <= 0) return false;
  auto faster = [&](double bytes, int64_t ctas) {
    return cluster_us(bytes, ctas, c.ctas, c.splits, card.dram_bytes_per_us) <=
           bytes / persistent_rate(card.dram_bytes_per_us) + kFixedSavedUs;
  };
  const int64_t unit_ctas = int64_t{c.ctas} * c.splits;
  return faster(capacity_bytes(p), units * unit_ctas) &&
         (p.batch == 1 || faster(capacity_bytes(p) / p.batch, p.num_kv_heads * unit_ctas));
}

// For each C whose clusters of every unit fit one wave (units x C <= SMs, units <= the resident clusters of
// C), S = 1 or the most clusters a unit that fit (and keep >= kClusterTmaKeys keys a CTA, 16-bit TMA
// layouts only), the fastest by the model, from C = 8 up (equal times go to 8: its clusters spread over more
// GPCs); where the card's bandwidth is unknown the first C from 16 down with S = 1, and under ask.splits the
// first from 16 down with that S (what fits). Past the capacity bound, only where cluster_streams_long says.
// The caller has checked the rest (a balanced decode of <= 16 packed rows a unit, not deterministic, no
// sm_margin, a cluster kernel built for the dtypes).
inline ClusterShape cluster_shape(const FwdProblem& p, bool tma_eligible, const ClusterCard& card,
                                  const ClusterAsk& ask) {
  constexpr int kMin = 8;
  if (ask.max_ctas < kMin) return {};
  const int64_t units = static_cast<int64_t>(p.batch) * p.num_kv_heads;
  const int64_t keys = max_sequence_keys(p);
  const double bytes = capacity_bytes(p);
  const bool modelled = ask.splits == 0 && card.dram_bytes_per_us > 0;
  int sizes[2] = {ask.max_ctas, ask.max_ctas / 2};
  if (modelled && ask.max_ctas > kMin) std::swap(sizes[0], sizes[1]);
  ClusterShape best;
  double best_us = 0;
  for (const int ctas : sizes) {
    if (ctas < kMin) continue;
    const int64_t resident = ctas == 16 ? card.resident16 : card.resident8;
    if (units == 0 || units * ctas > card.sms || units > resident) continue;
    int64_t most = std::min<int64_t>({card.sms / (units * ctas), resident / units, kMaxClusterSplits});
    if (!modelled) {
      best = {ctas, ask.splits > 0 ? static_cast<int>(std::min<int64_t>(most, ask.splits)) : 1};
      break;
    }
    most = tma_eligible ? std::min<int64_t>(most, keys / (ctas * kClusterTmaKeys)) : 1;
    for (const int64_t splits : {int64_t{1}, most}) {
      if (splits < 1) continue;
      const double us =
          cluster_us(bytes, units * ctas * splits, ctas, static_cast<int>(splits), card.dram_bytes_per_us);
      if (best.ctas == 0 || us < best_us) {
        best = {ctas, static_cast<int>(splits)};
        best_us = us;
      }
    }
  }
  if (best.ctas == 0 || keys <= ask.max_keys) return best;
  return cluster_streams_long(p, tma_eligible, card, ask, best, units) ? best : ClusterShape{};
}

}  // namespace kvattn::cuda
