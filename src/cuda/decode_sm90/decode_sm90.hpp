// The Hopper decode kernel (sm_90a): host side. One persistent CTA per SM walks its share of the balanced
// schedule (attention/schedule.cuh); two producer warps stream K/V rows with 16-byte cp.async into a ring
// of mbarrier-guarded shared-memory stages, four consumer warps each take whole stages (no block barrier in
// the K/V loop) and merge at the end of each piece. Same key-split math and the same partials format as
// the portable decode kernel, so the split combine merges its pieces unchanged.
//
// Rows of the dispatch table (arch sm_90) with a supports predicate: the decode shapes it declines run on
// the portable rows.
#pragma once

#include <cuda.h>  // CUtensorMap
#include <cuda_runtime.h>

#include <cstddef>

#include "api/problem.hpp"
#include "api/status.hpp"
#include "cuda/attention/params.cuh"
#include "cuda/common/host.hpp"
#include "cuda/heuristics.hpp"
#include "cuda/kernel_table.hpp"

namespace kvattn::cuda {

// The kernel's compile-time geometry, shared by the host (shared memory, support) and the device.
struct DecodeSm90Shape {
  static constexpr int kHeadDim = 128;  // d = dv = 128 only: the most common decode head
  // Packed rows (g x q) of a unit: up to 32 (speculative decode: 2-8 tokens under GQA groups of 4-8), in
  // mma row groups of 16. A consumer warp computes one row group; with G groups (row_groups) the C
  // consumer warps (4; 8 for fp8 caches with one group) form C / G stage phases of G warps, and every stage
  // is read by the G warps of its phase. G is a kernel of its own (DecodeCfg's kGroups: the one-group
  // kernel's code and layout stay as they were; a run-time G, or a second consumer in one kernel, cost
  // W2 1.5-3.4%). Four groups, 64 rows, lost on the H200: each warp then computes every stage and the
  // consumers fall behind the stream (bench/NOTES.md, session 11); those stay on the portable kernel.
  static constexpr int kMaxRows = 32;
  static constexpr int kGroupRows = 16;  // one mma row block
  // Consumer warps: 4, one a sub-partition; fp8 caches with one row group take 8 with 4 producer warps
  // (KVATTN_DECODE_SM90_FP8_CONSUMERS=4: not; W2 b128 -12% on the H200, bench/NOTES.md, session 26).
  static constexpr int kConsumerWarps = 4;
  static constexpr int threads(int producer_warps, int consumer_warps = kConsumerWarps) {
    return 32 * (consumer_warps + producer_warps);
  }
  // The ring: 10 stages (160 KB) with 2 producer warps; 8 with 4 or 8, so that every round of a slot is
  // filled by the same producer warp (stage g by warp g mod P, slot g mod stages): a warp waiting on a
  // slot's empty barrier can then never be a full round ahead of the slot (parity waits alias otherwise).
  // fp8 caches on 8 consumer warps: 16 stages of 32 keys (the same bytes): each consumer warp holds the
  // stage it computes, so with 8 stages of 64 keys the 8 warps held the whole ring and no copy was in
  // flight while they computed (bench/NOTES.md, session 26).
  static constexpr bool half_stages(bool fp8, int consumer_warps) { return fp8 && consumer_warps == 8; }
  static constexpr int stages(int producer_warps, bool fp8 = false, int consumer_warps = kConsumerWarps) {
    return half_stages(fp8, consumer_warps) ? 16 : producer_warps == 2 ? 10 : 8;
  }
  static constexpr int kBlockN = 64;  // keys of a schedule tile (the balanced schedule's cost unit)
  static constexpr int kQStride = kHeadDim + 8;  // s_q row, elements (16-byte pad: no ldmatrix conflicts)
  static constexpr int kOStride = kHeadDim + 8;  // merge state row, floats (8 banks apart: float2 stores)
  static constexpr int kStateFloats = kGroupRows * kOStride + 2 * kGroupRows;  // O, m, l of a consumer warp
  // Row groups of a unit of `rows` packed rows (1 or 2: a divisor of the consumer warps).
  static constexpr int row_groups(int rows) { return rows <= kGroupRows ? 1 : 2; }

  // Keys of a stage: 16 KB of K + V data per stage whatever the cache dtype (8 KB: half_stages), plus a
  // 16-byte pad a row.
  static constexpr int stage_keys(bool fp8, int consumer_warps = kConsumerWarps) {
    return fp8 && !half_stages(fp8, consumer_warps) ? 64 : 32;
  }
  static constexpr int row_stride(bool fp8) { return kHeadDim * (fp8 ? 1 : 2) + 16; }  // bytes, padded
  // swizzled (the cluster form's 16-bit caches, K / V by TMA): a stage's K, then its V, each as two panels
  // of 64 channels, rows of 128 bytes in the TMA unit's 128-byte swizzle, no pad (DecodeCfg::kv_offset).
  static constexpr size_t stage_bytes(bool fp8, int consumer_warps = kConsumerWarps, bool swizzled = false) {
    return size_t(stage_keys(fp8, consumer_warps)) * (swizzled ? kHeadDim * 2 : row_stride(fp8)) * 2;
  }
  static constexpr size_t smem_bytes(bool fp8, int producer_warps, int groups = 1,
                                     int consumer_warps = kConsumerWarps) {
    const int kStages = stages(producer_warps, fp8, consumer_warps);
    return kStages * stage_bytes(fp8, consumer_warps)    // the ring
           + size_t(consumer_warps) * kStateFloats * 4   // the merge states
           + size_t(groups) * kGroupRows * kQStride * 2  // Q
           + 2 * kStages * 8                             // full / empty mbarriers
           + consumer_warps * 4;                         // max |q| of each consumer warp
  }
};

// The cluster form of the kernel (cluster.cuh): a cluster of C <= kMaxCtas CTAs a (sequence, kv head) unit
// when the units are few (every CTA of every cluster resident at once), 4 consumer warps a CTA, each with
// a ring of kDepth stages of the persistent kernel's size that a producer warp of its own fills. The
// consumers' merge states alias the rings (written after their last use).
struct DecodeClusterShape {
  using S = DecodeSm90Shape;
  static constexpr int kWarps = 4;          // consumer warps, each with a ring of its own
  static constexpr int kProducerWarps = 4;  // warp kWarps + r fills ring r
  static constexpr int kThreads = 32 * (kWarps + kProducerWarps);
  static constexpr int kDepth = 3;
  static constexpr int kMaxCtas = 16;  // the non-portable cluster size of sm_90 (8 is portable)
  static constexpr int kMinCtas = 8;   // the plan's smallest C (the merge's registers are sized by it)
  // The push merge's inbox (floats), after the rings: the other C - 1 ranks' parts for this CTA, rank r in
  // slot r - (r > this rank) (this CTA's own part stays in registers): each slot's 16 rows of this CTA's
  // C-th of the channels ((C - 1) / C x 8 KB), the slots' rows' (m, l), their error flags; then its
  // mbarrier. Before the cluster barrier it holds Q and the warps' max |q| (every rank has read its Q by
  // the time the barrier completes). C is 8 or 16 (the plan's two sizes: C divides d, and the merge's
  // registers are sized for C >= 8).
  static constexpr int kInboxMl = S::kGroupRows * S::kHeadDim / kMaxCtas * (kMaxCtas - 1);
  static constexpr int kInboxFlags = kInboxMl + (kMaxCtas - 1) * S::kGroupRows * 2;
  static constexpr size_t kInboxBytes = (size_t(kInboxFlags + kMaxCtas - 1) * 4 + 15) / 16 * 16;
  static constexpr size_t kQBytes = size_t(S::kGroupRows) * S::kQStride * 2 + kWarps * 4;
  static constexpr size_t kInboxRegion = kInboxBytes > kQBytes ? kInboxBytes : kQBytes;
  // The bytes the other C - 1 ranks store into one CTA's inbox (the one phase of its mbarrier).
  static constexpr uint32_t inbox_tx_bytes(int ctas) {
    return uint32_t(ctas - 1) * (uint32_t(S::kGroupRows) * S::kHeadDim / ctas * 4 + S::kGroupRows * 8 + 4);
  }
  // Two kernels for 16-bit caches: the persistent kernel's padded rows by cp.async, and swizzled stages
  // with whole runs of 16 slots by TMA (the rest by cp.async into the same places), which the plan picks
  // where every ring holds at least kTmaMinStages stages, more than its depth: the slots refill
  // (plan.cluster_tma; bench/NOTES.md, session 44); fp8 caches: padded only.
  static constexpr int kTmaMinStages = kDepth + 1;
  static constexpr size_t stage_bytes(bool fp8, bool swizzled) {
    return S::stage_bytes(fp8, kWarps, swizzled);
  }
  static constexpr size_t smem_bytes(bool fp8, bool swizzled = false) {
    return size_t(kWarps) * kDepth * stage_bytes(fp8, swizzled)  // the rings (the merge states after them)
           + kInboxRegion                                        // the inbox (Q and max |q| before)
           + 8 * (1 + 2 * kWarps * kDepth);  // its mbarrier, the rings' full and empty ones
  }
  // A rank's C-th of the channels: whole 16-byte stores from the senders, 8 threads a row on the receiver.
  static_assert(S::kHeadDim / kMaxCtas % 8 == 0, "a rank's C-th of a row splits over its 8 threads");
  static_assert(S::kGroupRows * S::kHeadDim / kMinCtas * (kMinCtas - 1) <= kInboxMl,
                "the slots of C = 8 fit the O part laid out for C = 16");
};

// The cluster form's K and V caches as TMA tensor maps (launch.cu, cluster_kv_maps): (channel, slot in page,
// kv head, page) over TmaGeometry's pages (prefill_sm90/config.hpp), boxes of 64 channels x 16 slots in
// the 128-byte swizzle (the swizzled kernel's); tma == 0: none, every stage by cp.async.
struct DecodeKvMaps {
  CUtensorMap k;  // (a 64-byte aligned type)
  CUtensorMap v;
  int32_t tma;
};

static_assert(DecodeClusterShape::kWarps * DecodeSm90Shape::kStateFloats * 4 <=
                  DecodeClusterShape::kWarps * DecodeClusterShape::kDepth *
                      DecodeClusterShape::stage_bytes(false, true),
              "the warps' merge states fit the rings they alias");

// The bytes the wait counts are the bytes the layout holds (a mismatch would hang the wait, not fail).
static_assert(DecodeClusterShape::inbox_tx_bytes(DecodeClusterShape::kMaxCtas) ==
                      4 * (DecodeClusterShape::kInboxFlags + DecodeClusterShape::kMaxCtas - 1) &&
                  DecodeClusterShape::inbox_tx_bytes(DecodeClusterShape::kMinCtas) <=
                      DecodeClusterShape::kInboxBytes,
              "the inbox's expected bytes match its layout");

// The kernel's rows of the dispatch table (dispatch.cu: arch kArchSm90, d = dv = 128, every dtype pair).
//
// supports: p gets a balanced schedule (<= 32 packed rows, num_splits = 0, not deterministic, batch <= 512:
// plan_balanced; the portable plan's key-split schedule for <= 16), d = dv = 128, no qv, 16-byte aligned
// K/V rows, the library holds the kernel's sm_90a machine code, and KVATTN_DECODE_SM90 is not "0". The
// table asks it on sm_90 devices only, never under the portable switch; what it declines runs on the
// portable rows.
//
// ON BY DEFAULT with 8 producer warps (setmaxnreg gives their registers to the consumers): measured on
// the H200 (bench/NOTES.md, 2026-12-01) 1.03-1.13x the portable decode kernel on bf16 caches and 2.2-2.8x
// on fp8 caches. KVATTN_DECODE_SM90 = "0" turns it off, "2" or "4" picks that many producer warps (the
// A/B of bench/decode_ab.py). KVATTN_DECODE_SM90_FP8_BF16=1: fp8 caches under
// bf16 q convert K/V to bf16 instead of computing in f16.
int decode_sm90_producer_warps();  // 0 (off), 2, 4 or 8 (default), from the environment
bool decode_sm90_supports(const FwdProblem& p);

// plan: the portable plan (the balanced schedule, its workspace; for 17-32 packed rows the same schedule
// made here, where the portable plan has static splits) with the kernel's own grid, one
// persistent CTA an SM (sm_margin subtracted), never more than the portable grid whose partials the
// workspace holds, and the kernel's shared memory.
AttentionPlan plan_decode_sm90(const FwdProblem& p, const AttentionKernel& row, const DeviceShape& device);

// launch: the kernel for (compute dtype, cache dtype) and the producer warps of the environment, on the
// plan's grid; its pieces go to the split combine (the plan is balanced).
kvattn_status launch_decode_sm90(const AttnParams& params, const AttentionPlan& plan, DType compute_dtype,
                                 DType kv_dtype, cudaStream_t stream);
template <DType kCompute, DType kKv>
kvattn_status launch_decode_sm90_row(const AttnParams& params, const AttentionPlan& plan,
                                     CUstream_st* stream) {
  return launch_decode_sm90(params, plan, kCompute, kKv, stream);
}

}  // namespace kvattn::cuda
