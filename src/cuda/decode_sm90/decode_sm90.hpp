// The Hopper decode kernel (sm_90a): host side. One persistent CTA per SM walks its share of the balanced
// schedule (attention/schedule.cuh); two producer warps stream K/V rows with 16-byte cp.async into a ring
// of mbarrier-guarded shared-memory stages, four consumer warps each take whole stages (no block barrier in
// the K/V loop) and merge at the end of each piece. Same key-split math and the same partials format as
// the portable decode kernel, so the split combine merges its pieces unchanged.
//
// It takes the decode shapes it supports (decode_sm90_supports) and leaves the rest to the portable
// kernels: the caller asks, then launches one or the other.
#pragma once

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
  static constexpr int kHeadDim = 128;         // d = dv = 128 only: the most common decode head
  static constexpr int kRows = kKeySplitRows;  // 16 packed rows (g x q), one mma row block
  static constexpr int kConsumerWarps = 4;
  static constexpr int threads(int producer_warps) { return 32 * (kConsumerWarps + producer_warps); }
  // The ring: 10 stages (160 KB) with 2 producer warps; 8 with 4 or 8, so that every round of a slot is
  // filled by the same producer warp (stage g by warp g mod P, slot g mod stages): a warp waiting on a
  // slot's empty barrier can then never be a full round ahead of the slot (parity waits alias otherwise).
  static constexpr int stages(int producer_warps) { return producer_warps == 2 ? 10 : 8; }
  static constexpr int kBlockN = 64;  // keys of a schedule tile (the balanced schedule's cost unit)
  static constexpr int kQStride = kHeadDim + 8;  // s_q row, elements (16-byte pad: no ldmatrix conflicts)
  static constexpr int kOStride = kHeadDim + 8;  // merge state row, floats (8 banks apart: float2 stores)
  static constexpr int kStateFloats = kRows * kOStride + 2 * kRows;  // O, m, l of one consumer warp

  // Keys of a stage: 16 KB of K + V per stage whatever the cache dtype.
  static constexpr int stage_keys(bool fp8) { return fp8 ? 64 : 32; }
  static constexpr int row_stride(bool fp8) { return kHeadDim * (fp8 ? 1 : 2) + 16; }  // bytes, padded
  static constexpr size_t stage_bytes(bool fp8) { return size_t(stage_keys(fp8)) * row_stride(fp8) * 2; }
  static constexpr size_t smem_bytes(bool fp8, int producer_warps) {
    const int kStages = stages(producer_warps);
    return kStages * stage_bytes(fp8)                   // the ring
           + size_t(kConsumerWarps) * kStateFloats * 4  // the merge states
           + size_t(kRows) * kQStride * 2               // Q
           + 2 * kStages * 8                            // full / empty mbarriers
           + kConsumerWarps * 4;                        // max |q| of each consumer warp
  }
};

// Whether the sm_90 decode kernel runs p (with the plan the portable path made for it): an sm_90 device,
// a library built for sm_90a, the portable switch off (the caller checks it), a balanced key-split decode
// plan, d = dv = 128 (the kernel's own dims), no qv, 16-byte aligned K/V rows, and a dtype pair it was
// compiled for. Anything else runs on the row the table picked (the portable kernels).
//
// ON BY DEFAULT with 8 producer warps (setmaxnreg gives their registers to the consumers): measured on
// the H200 (bench/NOTES.md, 2026-12-01) 1.03-1.13x the portable decode kernel on bf16 caches and 2.2-2.8x
// on fp8 caches. KVATTN_DECODE_SM90 = "0" turns it off, "2" or "4" picks that many producer warps (the
// A/B of bench/decode_ab.py). KVATTN_DECODE_SM90_FP8_BF16=1: fp8 caches under
// bf16 q convert K/V to bf16 instead of computing in f16.
int decode_sm90_producer_warps();  // 0 (off), 2, 4 or 8 (default), from the environment
bool decode_sm90_supports(const FwdProblem& p, const AttentionPlan& plan, const AttnParams& params,
                          const AttentionKernel& row, const DeviceShape& device);

// Launches it (after decode_sm90_supports said yes). Sets params.balanced_ctas / balanced_slots to its own
// grid (one CTA an SM, at most the plan's grid, so the plan's workspace holds its partials): pass the same
// params to launch_split_combine.
kvattn_status launch_decode_sm90(AttnParams& params, const FwdProblem& p, DType compute_dtype,
                                 const AttentionPlan& plan, const DeviceShape& device, cudaStream_t stream);

}  // namespace kvattn::cuda
