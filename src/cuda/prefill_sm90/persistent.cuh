// The persistent Hopper prefill kernel (PrefillConfig::kPersistent): a grid of at most one CTA an SM, each
// taking work units (a unit is what one CTA of the other kernel computes: 128 packed rows of one
// (sequence, kv head)) in unit_rows' order (cta.cuh: longest first within sections whose K/V fit in L2):
// CTA b first takes unit b, then the next unclaimed one from a counter in the workspace (atomicAdd;
// zeroed by the launcher on the stream), so the CTAs end together whatever the units' lengths; the
// producer's set-up and first loads of the next unit overlap the consumers' last tiles and epilogue of
// this one (kernel.cuh: the overview).
//
// The producer warpgroup leads: per unit it loads the sequence, checks it (on its own named barrier,
// Cfg::kProducerBarrier), finds the unit's tiles, hands the consumers a descriptor (PrefillUnit) through a
// ring of two slots with their own full / empty mbarriers, produces the unit's tiles, then claims the next
// unit (thread 0's atomicAdd, passed to the warpgroup through shared memory). Past the last unit it hands
// over an end descriptor. The stage ring's (stage, phase) run on across units: tile n of a unit is tile tile0
// + n of the CTA, tile0 the unit's predecessors' tiles (kept modulo 2 kStages), the same count in the
// producer and the consumers. The consumers copy the descriptor, free its slot and compute the unit as the
// other kernel's consumers do (consume), or write the NaN rows of an offending sequence (64 rows each); while
// a unit's last P V runs, each consumer waits for the next descriptor and issues the loads of its 64 Q rows
// into its s_q (every Q K^T of the unit is done by then: no second Q buffer, which would not fit at d 128 and
// 256; plain chunks by cp.async, landing under the P V and the epilogue), so the next unit starts at its
// first tile. (Its consumers do not take turns: launch.cuh.)
#pragma once

#include <cstdint>

#include "cuda/attention/schedule.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/common/sequence.cuh"
#include "cuda/prefill_sm90/consumer.cuh"
#include "cuda/prefill_sm90/cta.cuh"
#include "cuda/prefill_sm90/producer.cuh"
#include "cuda/prefill_sm90/ptx.cuh"
#include "cuda/prefill_sm90/timeline.cuh"

namespace kvattn::cuda::sm90 {

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)

// A work unit as the producer found it.
enum UnitState : int32_t {
  kUnitSkip = 0,  // no row to write (cu_seqlens_q broken, or the m-block lies past the sequence's rows)
  kUnitNan = 1,   // an offending sequence: NaN rows
  kUnitRun = 2,
  kUnitEnd = 3,  // no unit left: the consumers leave
};
struct PrefillUnit {
  Sequence seq;
  CtaRows cta;
  int64_t first_key;  // the first tile's first key (key_range's first, TMA-aligned)
  int64_t n_tiles;
  int32_t state;
  // The consumers' reader-fence rule and the diagnostic flag, as values of the unit: from the kernel's
  // parameters, ptxas made them again every tile.
  uint32_t fence_from;
  bool diag_no_softmax;
};
static_assert(sizeof(PrefillUnit) <= kPrefillUnitBytes, "config.hpp's descriptor slot holds a unit");

// The stage ring's position (its tiles so far) modulo 2 kStages: the stage and its phase's parity.
template <class Cfg>
__device__ __forceinline__ int ring_after(int at, int64_t n_tiles) {
  return static_cast<int>((at + n_tiles) % (2 * Cfg::kStages));
}

// The producer warpgroup (all 128 threads, with TMA too: produce_tma). claim: two
// shared words, the next unit of units n and n + 1 (two, so that one barrier a unit orders them).
template <class Cfg>
__device__ __forceinline__ void produce_units(const PrefillArgs& a, uint32_t s_k, uint32_t s_v,
                                              uint32_t full_bar, uint32_t empty_bar, uint32_t unit_full,
                                              uint32_t unit_empty, PrefillUnit* ring,
                                              volatile uint32_t* claim) {
  using Producers = LeadingThreads<Cfg::kProducerBarrier, 128>;
  const AttnParams& p = a.p;
  const bool tma = (!Cfg::kKvFp8 || Cfg::kFp8Tma) && (a.flags & kTma) != 0,
             diag_no_load = (a.flags & kDiagNoLoad) != 0, diag_no_softmax = (a.flags & kDiagNoSoftmax) != 0;
  // (< 2^31: the launcher's grid limit)
  const unsigned units = static_cast<unsigned>(a.m_blocks) * p.seq.batch * p.num_kv_heads;
  unsigned* counter = reinterpret_cast<unsigned*>(p.unit_pieces);
  unsigned x = blockIdx.x;  // the first unit: the CTA's own
  int at = 0;               // the stage ring's position
  for (int n = 0;; ++n) {
    const int slot = n % 2;
    if (x >= units) {
      if (threadIdx.x == 0) {
        mbar_wait(unit_empty + 8 * slot, static_cast<uint32_t>((n / 2) & 1) ^ 1u);
        ring[slot].state = kUnitEnd;
        mbar_arrive(unit_full + 8 * slot);
      }
      break;
    }
    KVATTN_PTL(pu_set_unit(n));
    KVATTN_PTL(pu_stamp(kPuTiles + kPuProdStart, n));
    const CtaRows cta = unit_rows<Cfg>(a, x);
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
        n_tiles = unit_tiles<Cfg>(p.seq, seq, tma, keys);
        first_key = keys.first;
      }
    }
    const uint32_t unit_fence = fence_from(reader_fence(a.flags), n_tiles);
    if (threadIdx.x == 0) {
      mbar_wait(unit_empty + 8 * slot, static_cast<uint32_t>((n / 2) & 1) ^ 1u);
      ring[slot] = PrefillUnit{seq, cta, first_key, n_tiles, state, unit_fence, diag_no_softmax};
      mbar_arrive(unit_full + 8 * slot);  // (release: the descriptor's stores before the arrival)
    }
    KVATTN_PTL(pu_stamp(kPuTiles + kPuProdDesc, n));
    __syncwarp();
    // Launched early behind the append (PDL): its K/V and the unit counter it zeroes are in place past
    // here (a no-op after the first unit and without the launch attribute).
    wait_for_prior_grid();
    if (n_tiles > 0) {
      if (tma) {
        produce_tma<Cfg>(a, seq, cta.kv_head, seq.leftpad + first_key, n_tiles, s_k, s_v, full_bar, empty_bar,
                         diag_no_load, at, false);
      } else {
        produce<Cfg>(p, seq, cta.kv_head, seq.leftpad + first_key, n_tiles, s_k, s_v, full_bar, empty_bar,
                     diag_no_load, at, false);
      }
    }
    KVATTN_PTL(pu_stamp(kPuTiles + kPuProdLast, n));
    at = ring_after<Cfg>(at, n_tiles);
    // The next unit, claimed once this one's tiles are issued: the consumers still have its last stages
    // to compute, which hide the atomic's round trip. A word written at unit n is rewritten at n + 2, after
    // unit n + 1's barrier, which every thread passes after reading it.
    if (threadIdx.x == 0) claim[slot] = gridDim.x + atomicAdd(counter, 1u);
    named_barrier_sync(Cfg::kProducerBarrier, 128);
    KVATTN_PTL(pu_stamp(kPuTiles + kPuProdNext, n));
    x = claim[slot];
  }
  cp_async_wait_all();  // nothing in flight when the producer leaves
}

// A consumer warpgroup: the units in the producer's order, until the end descriptor.
template <class Cfg>
__device__ __forceinline__ void consume_units(const PrefillArgs& a, unsigned char* s_q_all, uint32_t s_k,
                                              uint32_t s_v, uint32_t full_bar, uint32_t empty_bar,
                                              uint32_t unit_full, uint32_t unit_empty,
                                              const PrefillUnit* ring) {
  const AttnParams& p = a.p;
  const int consumer = threadIdx.x / 128 - 1;
  unsigned char* s_q = s_q_all + consumer * (Cfg::kQBytes / Cfg::kConsumers);  // this warpgroup's rows
  // Descriptor n, once the producer has written it (waiting twice is harmless: the slot is not rewritten
  // before this warpgroup frees it).
  auto wait_unit = [&](int n) -> const PrefillUnit& {
    mbar_wait(unit_full + 8 * (n % 2), static_cast<uint32_t>((n / 2) & 1));
    return ring[n % 2];
  };
  int at = 0;             // the stage ring's position
  bool q_loaded = false;  // this unit's Q is in s_q already (loaded under the last unit's last P V)
  bool q_used = false;    // s_q holds a previous unit's Q, maybe still read by its wgmma
  for (int n = 0;; ++n) {
    const PrefillUnit u = wait_unit(n);
    KVATTN_PTL(pu_set_unit(n));
    KVATTN_PTL(pu_stamp(kPuTiles + kPuDesc));
    mbar_arrive(unit_empty + 8 * (n % 2));  // (the copy's loads before the arrival: "memory")
    if (u.state == kUnitEnd) break;
    bool next_q = false;
    if (u.state == kUnitNan) {
      const CtaRows mine{u.cta.i, u.cta.kv_head, u.cta.m0 + 64 * consumer};
      write_nan_rows<Cfg, true>(p, mine, u.seq);
    } else if (u.state == kUnitRun) {
      // Every thread of this warpgroup is past the previous unit's wgmma reads of s_q before load_q.
      if (!q_loaded && q_used) named_barrier_sync(Cfg::kQBarrier + consumer, 128);
      // Under the last P V: the next unit's Q (all of this unit's Q K^T are done: the barrier makes sure
      // for every warp of the warpgroup).
      auto next_q_load = [&] {
        const PrefillUnit& v = wait_unit(n + 1);
        if (v.state != kUnitRun) return;
        named_barrier_sync(Cfg::kQBarrier + consumer, 128);
        KVATTN_PTL(pu_stamp(kPuTiles + kPuNextQMet));
        load_q_async<Cfg>(p, v.seq, v.cta.i, v.cta.kv_head, v.cta.m0 + 64 * consumer, s_q);
        next_q = true;  // (consume waits for the copies and fences them before its first wgmma)
      };
      KeyRange keys;
      keys.first = u.first_key;
      consume<Cfg>(p, u.seq, u.cta, keys, u.n_tiles, s_q_all, s_k, s_v, full_bar, empty_bar, u.fence_from,
                   u.diag_no_softmax, UnitTiles<decltype(next_q_load)>{at, q_loaded, next_q_load});
      at = ring_after<Cfg>(at, u.n_tiles);
      q_used = true;
    }
    q_loaded = next_q;
  }
}

template <class Cfg>
__device__ __forceinline__ void prefill_persistent_cta(const PrefillArgs& a, unsigned char* s_q, uint32_t s_k,
                                                       uint32_t s_v, uint32_t full_bar, uint32_t empty_bar) {
  // After the stage barriers: the ring's two full and two empty barriers, then its two slots.
  const uint32_t unit_full = empty_bar + 8 * Cfg::kStages, unit_empty = unit_full + 16;
  PrefillUnit* ring = reinterpret_cast<PrefillUnit*>(s_q + (unit_empty + 16 - smem_addr(s_q)));
  volatile uint32_t* claim = reinterpret_cast<volatile uint32_t*>(ring + 2);
  if (threadIdx.x == 0) {
    init_stage_barriers<Cfg>(full_bar, empty_bar);
    for (int s = 0; s < 2; ++s) {
      mbar_init(unit_full + 8 * s, 1);                       // the producer's thread 0
      mbar_init(unit_empty + 8 * s, 128 * Cfg::kConsumers);  // the consumer threads
    }
  }
  __syncthreads();
  if (threadIdx.x < 128) {
    regs_dealloc<Cfg::kRegsProducer>();
    produce_units<Cfg>(a, s_k, s_v, full_bar, empty_bar, unit_full, unit_empty, ring, claim);
  } else {
    regs_alloc<Cfg::kRegsConsumer>();
    consume_units<Cfg>(a, s_q, s_k, s_v, full_bar, empty_bar, unit_full, unit_empty, ring);
  }
}

#endif  // sm_90a

}  // namespace kvattn::cuda::sm90
