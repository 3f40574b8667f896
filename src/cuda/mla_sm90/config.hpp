// Shape of the sm_90a MLA decode kernel (q . k over 64 channels + qv . v over 512, out over v's 512), shared
// by the host launcher and the kernel.
#pragma once

#include <cstddef>

#include "api/problem.hpp"
#include "cuda/prefill_sm90/config.hpp"

namespace kvattn::cuda::sm90 {

// One CTA: 64 packed query rows (MLA's many query heads on one kv head: 128 heads are two CTAs) against the
// keys of one sequence, in 64-key stages. Warpgroup 0 copies the stages, warpgroup 1 computes S over all
// 576 channels, the softmax and O's first 256 channels, warpgroup 2 O's last 256 channels from P in shared
// memory: O (64 x 512 fp32) is 256 registers a thread in one warpgroup, 128 in two, and S is computed once
// (the portable kernel's two dv halves each computed it: 1,664 multiply-adds a row and key for 1,088).
struct MlaTile {
  static constexpr int kDimK = 64;   // q, k: the rotary channels
  static constexpr int kDimV = 512;  // qv, v, out: the latent channels
  static constexpr int kBlockM = 64;
  static constexpr int kBlockN = 64;
  static constexpr int kStages = 2;
  static constexpr int kPanelBytes = 64 * 128;               // 64 rows (keys) of one 64-channel panel
  static constexpr int kPanels = (kDimK + kDimV) / 64;       // panel 0: q / k; 1-8: qv / v
  static constexpr int kQBytes = kPanels * kPanelBytes;      // 72 KiB
  static constexpr int kStageBytes = kPanels * kPanelBytes;  // 72 KiB: k and v of 64 keys
  static constexpr int kPBytes = kPanelBytes;                // P: 64 rows x 64 keys, K-major
  static constexpr int kVecBytes = 64 * 4;                   // a float a row
  static constexpr int kBarriers = 2 * kStages + 3;  // full / empty a stage, P full / free, final (m, l)
  static constexpr int kRegsProducer = 40, kRegsConsumer = 232;  // 40 + 2 x 232 = 3 x 168
};

// Dynamic shared memory: 1024 bytes of alignment slack, Q, the stages, P, the rows' corrections and final
// (m, l), the mbarriers. Two stages, not three: Q takes 72 KiB (227 KiB is the most a CTA can have).
constexpr size_t mla_smem_bytes() {
  return 1024 + size_t(MlaTile::kQBytes) + size_t(MlaTile::kStages) * MlaTile::kStageBytes +
         MlaTile::kPBytes + 3 * MlaTile::kVecBytes + 8 * MlaTile::kBarriers;
}
static_assert(mla_smem_bytes() <= 227 * 1024, "the opt-in shared memory of a CTA on sm_90");

// The kernel for <= 16 packed rows a kv head (MLA's 16 heads on one kv head, or 8 x 2 speculative tokens,
// ...): with the rows along wgmma's N instead of its 64-row M, S^T = [k v] [q qv]^T (64 keys x 16 rows) and
// O^T = v^T P^T (512 channels x 16 rows) by m64n16k16, a quarter of the 64-row kernel's tensor work, which
// would spend 48 of its 64 rows on padding. One consumer warpgroup; the stages are the 64-row kernel's
// (its producer), Q is 16 rows of 9 panels.
struct MlaRowsTile {
  static constexpr int kDimK = 64;
  static constexpr int kDimV = 512;
  static constexpr int kRows = 16;  // wgmma's N
  static constexpr int kBlockM = kRows;
  static constexpr int kBlockN = 64;  // keys a stage: wgmma's M of S^T
  static constexpr int kStages = 2;
  static constexpr int kPanelBytes = 64 * 128;
  static constexpr int kPanels = (kDimK + kDimV) / 64;
  static constexpr int kStageBytes = kPanels * kPanelBytes;  // 72 KiB
  static constexpr int kQPanelBytes = kRows * 128;           // 16 rows of a 64-channel panel
  static constexpr int kQBytes = kPanels * kQPanelBytes;     // 18 KiB
  static constexpr int kPBytes = kRows * 128;                // P: 16 rows x 64 keys, K-major; two of them
  static constexpr int kVecBytes = 4 * kRows * 4;            // a float a (warp, row)
};
// 1024 bytes of alignment slack, Q, the stages, two P buffers, the rows' per-warp maxima of two tiles and
// per-warp sums, the stages' mbarriers. Q first: a panel of 16 rows is 2 KiB, the stages stay 1024-aligned.
constexpr size_t mla_rows_smem_bytes() {
  return 1024 + size_t(MlaRowsTile::kQBytes) + size_t(MlaRowsTile::kStages) * MlaRowsTile::kStageBytes +
         2 * MlaRowsTile::kPBytes + 3 * MlaRowsTile::kVecBytes + 16 * MlaRowsTile::kStages;
}
static_assert(mla_rows_smem_bytes() <= 227 * 1024, "the opt-in shared memory of a CTA on sm_90");

// The compiled kernels: those of the sm_90a prefill kernel at d 64 (the same dtypes, the same developer-build
// rule: a build of one head dim has this kernel at KVATTN_DEV_HEAD_DIM=64, as the portable (64, 512) row).
constexpr bool mla_built(DType dt) {
  return prefill_built(dt, 64);
}

}  // namespace kvattn::cuda::sm90
