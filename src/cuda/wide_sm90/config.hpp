// Shape of the sm_90a decode kernel for head dim 512 (d = dv = 512: Gemma's global layers), shared by the
// host launcher and the kernel.
#pragma once

#include <cstddef>

#include "api/problem.hpp"

namespace kvattn::cuda::sm90 {

// One CTA: the <= 16 packed rows of one (sequence, kv head, split) along wgmma's N (rows_sm90/consumer.cuh),
// 64-key tiles whose K and V (64 KiB each) take slots of their own in a ring of three, so that one or two
// of them load while the consumer reads the others: the producer runs up to about a tile and a half ahead
// (two stages of K and V would need 256 KiB).
struct WideTile {
  static constexpr int kDim = 512;  // d = dv
  static constexpr int kRows = 16;
  static constexpr int kBlockM = kRows;
  static constexpr int kBlockN = 64;
  static constexpr int kPanelBytes = 64 * 128;              // 64 keys of one 64-channel panel
  static constexpr int kPanels = kDim / 64;                 // 8
  static constexpr int kSlotBytes = kPanels * kPanelBytes;  // K or V of a tile: 64 KiB
  static constexpr int kSlots = 3;                          // K_t in slot 2t % 3, V_t in (2t + 1) % 3
  static constexpr int kQPanelBytes = kRows * 128;          // 16 rows of a panel
  static constexpr int kQBytes = kPanels * kQPanelBytes;    // 16 KiB
  static constexpr int kPBytes = kRows * 128;               // P: 16 rows x 64 keys, K-major; two of them
  static constexpr int kVecBytes = 4 * kRows * 4;           // a float a (warp, row)
};

// 1024 bytes of alignment slack, Q, the slots, two P buffers, the rows' maxima of two tiles and their sums,
// a full / empty mbarrier pair a slot (Q first: 16 KiB keeps the slots 1024-aligned).
constexpr size_t wide_smem_bytes() {
  return 1024 + size_t(WideTile::kQBytes) + size_t(WideTile::kSlots) * WideTile::kSlotBytes +
         2 * WideTile::kPBytes + 3 * WideTile::kVecBytes + 16 * WideTile::kSlots;
}
static_assert(wide_smem_bytes() <= 227 * 1024, "the opt-in shared memory of a CTA on sm_90");

// The compiled kernels: fp16 / bf16 with a 90a target, minus what a developer build leaves out
// (KVATTN_DEV_DTYPE, and KVATTN_DEV_HEAD_DIM other than 512).
constexpr bool wide_built(DType dt) {
#if !defined(KVATTN_HAVE_SM90A)
  return false && dt == dt;
#else
#if defined(KVATTN_DEV_DTYPE_f16)
  if (dt != DType::f16) return false;
#elif defined(KVATTN_DEV_DTYPE_bf16)
  if (dt != DType::bf16) return false;
#endif
#if defined(KVATTN_DEV_HEAD_DIM)
  if (KVATTN_DEV_HEAD_DIM != 512) return false;
#endif
  return dt == DType::f16 || dt == DType::bf16;
#endif
}

}  // namespace kvattn::cuda::sm90
