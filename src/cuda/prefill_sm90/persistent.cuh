// The persistent Hopper prefill kernel (PrefillConfig::kPersistent): a grid of at most one CTA an SM, CTA
// b taking work units b, b + gridDim.x, ... (a unit is what one CTA of the other kernel computes: 128
// packed rows of one (sequence, kv head), cta_rows' order), so that the producer's set-up and first loads
// of the next unit overlap the consumers' last tiles and epilogue of this one (kernel.cuh: the overview).
//
// The producer warpgroup leads: per unit it loads the sequence, checks it (on its own named barrier,
// kProducerBarrier), finds the unit's tiles, hands the consumers a descriptor (PrefillUnit) through a ring
// of two slots with their own full / empty mbarriers, then produces the unit's tiles. The stage ring's
// (stage, phase) run on across units: tile n of a unit is tile tile0 + n of the CTA, tile0 the unit's
// predecessors' tiles (kept modulo 2 kStages), the same count in the producer and the consumers. The
// consumers copy the descriptor, free its slot and compute the unit as the other kernel's consumers do
// (consume), or write the NaN rows of an offending sequence (64 rows each); the ping-pong turns complete
// within each unit.
#pragma once

#include <cstdint>

#include "cuda/attention/schedule.cuh"
#include "cuda/common/sequence.cuh"
#include "cuda/prefill_sm90/consumer.cuh"
#include "cuda/prefill_sm90/cta.cuh"
#include "cuda/prefill_sm90/producer.cuh"
#include "cuda/prefill_sm90/ptx.cuh"

namespace kvattn::cuda::sm90 {

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)

// A work unit as the producer found it.
enum UnitState : int32_t {
  kUnitSkip = 0,  // no row to write (cu_seqlens_q broken, or the m-block lies past the sequence's rows)
  kUnitNan = 1,   // an offending sequence: NaN rows
  kUnitRun = 2,
};
struct PrefillUnit {
  Sequence seq;
  CtaRows cta;
  int64_t first_key;  // the first tile's first key (key_range's first, TMA-aligned)
  int64_t n_tiles;
  int32_t state;
};
static_assert(sizeof(PrefillUnit) <= kPrefillUnitBytes, "config.hpp's descriptor slot holds a unit");

// The producer warpgroup's named barrier (1, 2: the consumers' Q; 3, 4: ping-pong).
constexpr int kProducerBarrier = 5;

// The units of this CTA: blockIdx.x + n gridDim.x for n < this count.
__device__ __forceinline__ int cta_units(const PrefillArgs& a) {
  const int64_t units = static_cast<int64_t>(a.m_blocks) * a.p.seq.batch * a.p.num_kv_heads;
  return static_cast<int>((units - blockIdx.x + gridDim.x - 1) / gridDim.x);
}
// The stage ring's position (its tiles so far) modulo 2 kStages: the stage and its phase's parity.
template <class Cfg>
__device__ __forceinline__ int ring_after(int at, int64_t n_tiles) {
  return static_cast<int>((at + n_tiles) % (2 * Cfg::kStages));
}

// The producer warpgroup (all 128 threads; with TMA warp 0 produces, warps 1-3 only check).
template <class Cfg>
__device__ __forceinline__ void produce_units(const PrefillArgs& a, uint32_t s_k, uint32_t s_v,
                                              uint32_t full_bar, uint32_t empty_bar, uint32_t unit_full,
                                              uint32_t unit_empty, PrefillUnit* ring) {
  using Producers = LeadingThreads<kProducerBarrier, 128>;
  const AttnParams& p = a.p;
  const bool tma = (a.flags & kTma) != 0, diag_no_load = (a.flags & kDiagNoLoad) != 0;
  const int my_units = cta_units(a);
  int at = 0;  // the stage ring's position
  for (int n = 0; n < my_units; ++n) {
    const CtaRows cta = unit_rows<Cfg>(a, blockIdx.x + static_cast<unsigned>(n) * gridDim.x);
    const Sequence seq = load_sequence(p.seq, cta.i, p.errors, threadIdx.x == 0);
    int32_t state = kUnitSkip;
    int64_t first_key = 0, n_tiles = 0;
    if (seq.rows_known && cta.m0 < static_cast<int64_t>(seq.q_len) * p.group) {
      // Page ids of the whole sequence [leftpad, end): an offending sequence is NaN in every row.
      bool ok = check_unique_row<Producers>(p.seq, cta.i, p.errors) && seq.ok;
      if (ok && p.seq.page_table) ok = check_pages<Producers>(p.seq, seq, seq.leftpad, seq.end, p.errors);
      state = ok ? kUnitRun : kUnitNan;
      if (ok) {
        KeyRange keys = key_range(p, seq, cta.m0, Cfg::kBlockM, Cfg::kBlockN);
        if (tma && keys.last >= keys.first) {  // the first tile starts at a multiple of align (produce_tma)
          const bool packed = p.seq.cu_seqlens_k != nullptr;
          const int align = tma_geometry(packed, p.seq.page_table != nullptr && !packed, p.seq.num_pages,
                                         p.seq.page_size, Cfg::kBlockN)
                                .align;
          keys.first -= (seq.leftpad + keys.first) % align;
        }
        first_key = keys.first;
        n_tiles = keys.last >= keys.first ? (keys.last - keys.first + Cfg::kBlockN) / Cfg::kBlockN : 0;
      }
    }
    if (threadIdx.x == 0) {
      const int slot = n % 2;
      mbar_wait(unit_empty + 8 * slot, static_cast<uint32_t>((n / 2) & 1) ^ 1u);
      ring[slot] = PrefillUnit{seq, cta, first_key, n_tiles, state};
      mbar_arrive(unit_full + 8 * slot);  // (release: the descriptor's stores before the arrival)
    }
    __syncwarp();
    if (n_tiles > 0) {
      if (tma) {
        if (threadIdx.x < 32) {
          produce_tma<Cfg>(a, seq, cta.kv_head, seq.leftpad + first_key, n_tiles, s_k, s_v, full_bar,
                           empty_bar, diag_no_load, at, false);
        }
      } else {
        produce<Cfg>(p, seq, cta.kv_head, seq.leftpad + first_key, n_tiles, s_k, s_v, full_bar, empty_bar,
                     diag_no_load, at, false);
      }
    }
    at = ring_after<Cfg>(at, n_tiles);
  }
  cp_async_wait_all();  // nothing in flight when the producer leaves
}

// A consumer warpgroup: the units in the producer's order.
template <class Cfg>
__device__ __forceinline__ void consume_units(const PrefillArgs& a, unsigned char* s_q, uint32_t s_k,
                                              uint32_t s_v, uint32_t full_bar, uint32_t empty_bar,
                                              uint32_t unit_full, uint32_t unit_empty,
                                              const PrefillUnit* ring) {
  const AttnParams& p = a.p;
  const int consumer = threadIdx.x / 128 - 1;
  const bool reader_fence = (a.flags & kNoReaderFence) == 0;
  const bool diag_no_softmax = (a.flags & kDiagNoSoftmax) != 0;
  const int my_units = cta_units(a);
  int at = 0;  // the stage ring's position
  for (int n = 0; n < my_units; ++n) {
    const int slot = n % 2;
    mbar_wait(unit_full + 8 * slot, static_cast<uint32_t>((n / 2) & 1));
    const PrefillUnit u = ring[slot];
    mbar_arrive(unit_empty + 8 * slot);  // (the copy's loads before the arrival: "memory")
    if (u.state == kUnitNan) {
      const CtaRows mine{u.cta.i, u.cta.kv_head, u.cta.m0 + 64 * consumer};
      write_nan_rows<Cfg, true>(p, mine, u.seq);
    } else if (u.state == kUnitRun) {
      // Every thread of this warpgroup is past the previous unit's wgmma reads of s_q before load_q.
      if (n > 0) named_barrier_sync(1 + consumer, 128);
      KeyRange keys;
      keys.first = u.first_key;
      consume<Cfg>(p, u.seq, u.cta, keys, u.n_tiles, s_q, s_k, s_v, full_bar, empty_bar, reader_fence,
                   diag_no_softmax, at);
      at = ring_after<Cfg>(at, u.n_tiles);
    }
  }
}

template <class Cfg>
__device__ __forceinline__ void prefill_persistent_cta(const PrefillArgs& a, unsigned char* s_q, uint32_t s_k,
                                                       uint32_t s_v, uint32_t full_bar, uint32_t empty_bar) {
  // After the stage barriers: the ring's two full and two empty barriers, then its two slots.
  const uint32_t unit_full = empty_bar + 8 * Cfg::kStages, unit_empty = unit_full + 16;
  PrefillUnit* ring = reinterpret_cast<PrefillUnit*>(s_q + (unit_empty + 16 - smem_addr(s_q)));
  const bool tma = (a.flags & kTma) != 0;
  if (threadIdx.x == 0) {
    for (int s = 0; s < Cfg::kStages; ++s) {
      mbar_init(full_bar + 8 * s, tma ? 32 : 128);          // the producer threads
      mbar_init(empty_bar + 8 * s, 128 * Cfg::kConsumers);  // the consumer threads
    }
    for (int s = 0; s < 2; ++s) {
      mbar_init(unit_full + 8 * s, 1);                       // the producer's thread 0
      mbar_init(unit_empty + 8 * s, 128 * Cfg::kConsumers);  // the consumer threads
    }
  }
  __syncthreads();
  if (threadIdx.x < 128) {
    regs_dealloc<Cfg::kRegsProducer>();
    produce_units<Cfg>(a, s_k, s_v, full_bar, empty_bar, unit_full, unit_empty, ring);
  } else {
    regs_alloc<Cfg::kRegsConsumer>();
    consume_units<Cfg>(a, s_q, s_k, s_v, full_bar, empty_bar, unit_full, unit_empty, ring);
  }
}

#endif  // sm_90a

}  // namespace kvattn::cuda::sm90
