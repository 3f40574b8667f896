// The body of launch_prefill_kernel, included by the instantiation files only (it pulls in the kernel).
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>

#include "cuda/common/host.hpp"
#include "cuda/common/tensor_map.hpp"
#include "cuda/prefill_sm90/kernel.cuh"
#include "cuda/prefill_sm90/launch.hpp"

namespace kvattn::cuda::sm90 {

// The kernel configuration of (q dtype T, cache elements TKV, head dim) and the variant's flags (fp8 caches
// at head dims multiples of 128: the WithFp8Tma kernels, as launch_prefill_kernel takes them).
template <typename T, typename TKV, int kHeadDim, bool... kFlags>
using PrefillCfgOf =
    std::conditional_t<std::is_same_v<TKV, __nv_fp8_e4m3>,
                       std::conditional_t<kHeadDim % 128 == 0 && prefill_head_dim_v(kHeadDim) % 128 == 0,
                                          WithFp8Tma<KvFp8<PrefillConfig<T, kHeadDim, kFlags...>>>,
                                          KvFp8<PrefillConfig<T, kHeadDim, kFlags...>>>,
                       PrefillConfig<T, kHeadDim, kFlags...>>;

template <typename T, int kHeadDim, typename TKV>
bool prefill_kernel_loaded() {
  if constexpr (!prefill_built(dtype_of_storage<T>(), kHeadDim)) {
    return false;
  } else {
    return sm90a_binary_loaded(
        reinterpret_cast<const void*>(prefill_kernel<PrefillCfgOf<T, TKV, kHeadDim, true>>));
  }
}

// K/V by TMA (kernel.cuh, produce_tma) where the cache allows it, else the cp.async producer (any layout and
// page size); KVATTN_SM90_TMA=0 forces the cp.async one (A/B). One 4-D map per cache over the pages of
// tma_geometry (config.hpp): paged caches of tma_pages_ok's page sizes (multiples of 8 that divide the key
// tile or are multiples of it; d 256's tile: or share 16 slots or more with it), contiguous caches whose rows
// hold at least a tile, packed caches of at least a tile of tokens. Every documented precondition of
// cuTensorMapEncodeTiled is checked here and declines rather than fails: a 16-byte aligned base
// (prefill_sm90_supports checked it too), strides multiples of 16 bytes below 2^40, dims in [1, 2^32]; and
// ours: a box within the slot dim (the box copies a whole tile from any slot; a box larger than the tensor is
// not documented either way), coordinates within int32. The driver's own refusal declines too. fp8 caches:
// only the WithFp8Tma kernels (head dims multiples of 128: launch_prefill_kernel), e4m3 boxes of 128 channels
// (one 128-byte swizzle row; produce_fp8_tma).
template <class Cfg>
bool make_kv_maps(const AttnParams& params, PrefillArgs& a) {
  using TKV = typename Cfg::TKV;
  constexpr int kBoxChannels = 128 / static_cast<int>(sizeof(TKV));
  if constexpr (Cfg::kKvFp8 && !Cfg::kFp8Tma) return false;  // the fp8 kernels without TMA (cta.cuh)
  const SeqParams& sp = params.seq;
  if (const char* v = std::getenv("KVATTN_SM90_TMA"); v != nullptr && std::strcmp(v, "0") == 0) return false;
  const bool packed = sp.cu_seqlens_k != nullptr, paged = sp.page_table != nullptr && !packed;
  if (paged && !tma_pages_ok(sp.page_size, Cfg::kBlockN, Cfg::kTile.gcd_boxes)) return false;
  if (params.head_dim != Cfg::kHeadDim || params.head_dim_v != Cfg::kHeadDimV) return false;
  const TmaGeometry g = tma_geometry(packed, paged, sp.num_pages, sp.page_size, Cfg::kBlockN);
  const CUtensorMapDataType dtype = std::is_same_v<TKV, __nv_fp8_e4m3> ? CU_TENSOR_MAP_DATA_TYPE_UINT8
                                    : std::is_same_v<TKV, half>        ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                                                       : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  const KvMapShape shape{
      dtype, static_cast<int>(sizeof(TKV)), g.slots, g.pages, params.num_kv_heads, packed, kBoxChannels,
      g.box};
  return encode_kv_maps(params.k_cache, Cfg::kHeadDim, params.v_cache, Cfg::kHeadDimV, shape, &a.k_map,
                        &a.v_map);
}

// The persistent kernel's unit order (cta.cuh unit_rows): sections of (sequence, kv head) pairs whose K/V
// (as much as the cache holds a sequence) fit in kSectionL2 bytes, equal to within one pair, so that the
// units in flight share K/V in L2 and each section is longest first. KVATTN_SM90_SECTIONS=n sets it (A/B:
// the pairs' count is v1's unit-major order, 1 longest first over the whole grid).
inline int64_t persistent_sections(const AttnParams& params, int head_dim, int elem_bytes) {
  // 8 MiB (H200, W6 16x128 causal, 8-MiB pairs: one a section 2,064 us, three 2,119, all in one 2,248)
  constexpr int64_t kSectionL2 = int64_t{8} << 20;
  const int64_t pairs = std::max<int64_t>(1, static_cast<int64_t>(params.seq.batch) * params.num_kv_heads);
  const SeqParams& sp = params.seq;
  const int64_t keys = std::min(
      kMaxSequenceKeys, sp.cu_seqlens_k != nullptr ? sp.num_pages / std::max(1, sp.batch) : sp.capacity);
  const int64_t pair_bytes = std::max<int64_t>(1, keys) * head_dim * 2 * elem_bytes;  // K and V
  int64_t per = std::clamp<int64_t>(kSectionL2 / pair_bytes, 1, pairs);
  int64_t sections = (pairs + per - 1) / per;
  if (const char* v = std::getenv("KVATTN_SM90_SECTIONS"); v != nullptr && std::atoll(v) > 0) {
    sections = std::atoll(v);
  }
  return std::clamp<int64_t>(sections, 1, pairs);
}

template <class Cfg>
kvattn_status launch_config(const AttnParams& params, cudaStream_t stream, bool early_launch = false,
                            bool counter_by_append = false) {
  const int64_t rows = static_cast<int64_t>(params.seq.max_seqlen_q) * params.group;
  PrefillArgs a{};
  a.p = params;
  a.m_blocks = static_cast<int32_t>((rows + Cfg::kBlockM - 1) / Cfg::kBlockM);
  a.flags = kUnitMajor;
  // A/B knobs (bench/prefill_sm90_check.py): KVATTN_SM90_ORDER=0 m-block-major grid; KVATTN_SM90_NOFENCE=1.
  if (const char* v = std::getenv("KVATTN_SM90_ORDER"); v != nullptr && std::strcmp(v, "0") == 0) a.flags = 0;
  if (const char* v = std::getenv("KVATTN_SM90_NOFENCE"); v != nullptr && std::strcmp(v, "1") == 0) {
    a.flags |= kNoReaderFence;
  }
  if (const char* v = std::getenv("KVATTN_SM90_DIAG"); v != nullptr)
    a.flags |= std::atoi(v) & (kDiagNoLoad | kDiagNoSoftmax);
  if (make_kv_maps<Cfg>(params, a)) a.flags |= kTma;
  int64_t line = static_cast<int64_t>(a.m_blocks) * params.seq.batch;  // m-blocks a kv head
  if constexpr (Cfg::kVarlen) {
    // The varlen line (attention/schedule.cuh): no CTA for the m-blocks a short sequence does not have.
    line =
        std::min(line, varlen_line_bound(params.seq.total_q * params.group, params.seq.batch, Cfg::kBlockM));
  }
  int64_t ctas = line * params.num_kv_heads;
  // The split kernel: a CTA a (unit, split), the splits in blockIdx.y (the plan's num_splits).
  const unsigned splits = Cfg::kSplit ? static_cast<unsigned>(params.num_splits) : 1u;
  if (ctas > 0x7fffffff) {
    return fail(KVATTN_ERROR_UNSUPPORTED, "q: batch * kv heads * row blocks = " + std::to_string(ctas) +
                                              " CTAs exceeds the grid limit");
  }
  const int smem = static_cast<int>(prefill_smem_bytes(Cfg::kHeadDim, Cfg::kPersistent, Cfg::kKvFp8));
  static std::atomic<uint64_t> opted_in{0};  // the devices this kernel has opted into its shared memory on
  int device = 0;
  if (const cudaError_t err = cudaGetDevice(&device); err != cudaSuccess) {
    return cuda_fail(err, "prefill_kernel device");
  }
  if constexpr (Cfg::kPersistent) {
    // A CTA an SM (the kernel's shared memory holds one), each taking units from the counter
    // (persistent.cuh), which starts at 0: a memset node on the stream (graph-capturable; the API promises
    // nothing of a workspace's contents).
    const DeviceInfo* info = nullptr;
    if (const kvattn_status st = device_info(device, &info); st != KVATTN_OK) return st;
    ctas = std::min<int64_t>(ctas, std::max(1, info->shape.sm_count));
    a.sections = static_cast<int32_t>(persistent_sections(params, (Cfg::kHeadDim + Cfg::kHeadDimV) / 2,
                                                          static_cast<int>(sizeof(typename Cfg::TKV))));
    // (Or the append kernel ahead of it zeroes it: counter_by_append, dispatch.cu.)
    if (const cudaError_t err =
            counter_by_append ? cudaSuccess : cudaMemsetAsync(params.unit_pieces, 0, sizeof(int32_t), stream);
        err != cudaSuccess) {
      return cuda_fail(err, "prefill_kernel unit counter");
    }
  }
  if (const kvattn_status st = set_max_dynamic_smem_once(reinterpret_cast<const void*>(prefill_kernel<Cfg>),
                                                         device, smem, &opted_in, "prefill_kernel");
      st != KVATTN_OK) {
    return st;
  }
#if KVATTN_PREFILL_TIMELINE
  if (g_prefill_timeline_host != nullptr) {  // stamps of this launch only (a unit's slot may stay unused)
    void* stamps = nullptr;
    if (cudaGetSymbolAddress(&stamps, g_prefill_timeline) == cudaSuccess) {
      cudaMemsetAsync(stamps, 0, sizeof(g_prefill_timeline), stream);
    }
  }
#endif
  // Early behind the append (PDL): the CTAs set up, load their sequence, check its pages and load Q
  // while the append ends; the producers wait for it before the first K/V copy (kernel.cuh).
  const LaunchShape shape{dim3(static_cast<unsigned>(ctas), splits), dim3(Cfg::kThreads),
                          static_cast<size_t>(smem), stream, early_launch};
  if (const kvattn_status st = launch_kernel("prefill_kernel (sm_90a)", prefill_kernel<Cfg>, shape, a);
      st != KVATTN_OK) {
    return st;
  }
#if KVATTN_PREFILL_TIMELINE
  if (g_prefill_timeline_host != nullptr) {  // the developer timeline (timeline.cuh), after the kernel
    cudaMemcpyFromSymbolAsync(g_prefill_timeline_host, g_prefill_timeline, sizeof(g_prefill_timeline), 0,
                              cudaMemcpyDeviceToHost, stream);
  }
#endif
  return KVATTN_OK;
}

// The kernel variant of a call (persistent, split, turns, varlen), each as Wrap<PrefillConfig<...>>.
template <template <class> class Wrap, typename T, int kHeadDim>
kvattn_status launch_variant(const AttnParams& params, cudaStream_t stream, bool early_launch,
                             bool counter_by_append) {
  // The persistent kernel when the plan chose it (launch.hpp: prefill_persistent_selected) and so gave
  // it its unit counter. Without turns: the consumers' units drift apart anyway, and the turns only add
  // waits (H200, W6 16k: d 64 full 5,858 -> 5,450 us, session 9; d 128 full / causal -1% / -3%, d 256
  // -4% / -3%, session 10; bench/NOTES.md).
  if (params.seq.cu_seqlens_q == nullptr && params.unit_pieces != nullptr) {
    return launch_config<Wrap<PrefillConfig<T, kHeadDim, false, false, true>>>(params, stream, early_launch,
                                                                               counter_by_append);
  }
  // Static key splits (the plan's, for decode-like shapes that leave SMs idle) or a unit whose rows leave
  // a consumer without rows (idle instead of computing padding rows: launch.hpp,
  // prefill_split_kernel_rows): the split kernel, with the head dim's usual turns.
  const int64_t rows = static_cast<int64_t>(params.seq.max_seqlen_q) * params.group;
  constexpr int64_t kIdleRows = 64 * (prefill_tile(kHeadDim).consumers - 1);
  if (params.seq.cu_seqlens_q == nullptr && (params.num_splits > 1 || rows <= kIdleRows)) {
    return launch_config<Wrap<PrefillConfig<T, kHeadDim, kHeadDim != 128, false, false, true>>>(
        params, stream, early_launch);
  }
  // d = 128, q not varlen: the consumers issue their wgmma groups independently, 0-1.5% faster than
  // taking turns on every W3 / W6 case measured (bench/NOTES.md, session 6); KVATTN_SM90_PINGPONG=1 takes
  // turns (A/B). The other head dims compile the ping-pong kernel only.
  if constexpr (kHeadDim == 128) {
    const char* pingpong = std::getenv("KVATTN_SM90_PINGPONG");
    const bool turns = pingpong != nullptr && std::strcmp(pingpong, "1") == 0;
    if (!turns && params.seq.cu_seqlens_q == nullptr) {
      return launch_config<Wrap<PrefillConfig<T, kHeadDim, false>>>(params, stream, early_launch);
    }
  }
  // Varlen q runs the varlen kernel (the m-block line: no CTA of an empty m-block, consumer 1 idle on a
  // decode's rows). KVATTN_SM90_VARLEN=0: main's kernel on the max-length grid (for A/B timing).
  const char* varlen = std::getenv("KVATTN_SM90_VARLEN");
  const bool line = varlen == nullptr || std::strcmp(varlen, "0") != 0;
  if (params.seq.cu_seqlens_q != nullptr && line) {
    return launch_config<Wrap<PrefillConfig<T, kHeadDim, true, true>>>(params, stream, early_launch);
  }
  return launch_config<Wrap<PrefillConfig<T, kHeadDim, true>>>(params, stream, early_launch);
}

template <class C>
using NoWrap = C;
template <class C>
using KvFp8Tma = WithFp8Tma<KvFp8<C>>;
template <class C>
using KvFp8MmaTma = WithFp8Tma<KvFp8Mma<C>>;

// KVATTN_SM90_FP8_MMA=0: fp8 q takes the f16 kernel (KvFp8) instead of the e4m3 one (A/B). Read on every
// call.
inline bool fp8_mma_enabled() {
  const char* v = std::getenv("KVATTN_SM90_FP8_MMA");
  return v == nullptr || std::strcmp(v, "0") != 0;
}

template <typename T, int kHeadDim, typename TKV>
kvattn_status launch_prefill_kernel(const AttnParams& params, cudaStream_t stream, bool early_launch,
                                    bool counter_by_append) {
  if constexpr (!prefill_built(dtype_of_storage<T>(), kHeadDim)) {
    return fail(KVATTN_ERROR_UNSUPPORTED, "the sm_90a prefill kernel for head_dim=" +
                                              std::to_string(kHeadDim) + " is not compiled in this build");
  } else if constexpr (!std::is_same_v<TKV, __nv_fp8_e4m3>) {
    return launch_variant<NoWrap, T, kHeadDim>(params, stream, early_launch, counter_by_append);
  } else {
    // fp8 q over fp8 caches at d 128: e4m3 wgmma (KvFp8Mma); otherwise f16 (KvFp8). Not with rotary: q
    // rotated in the kernel is rounded to e4m3 again for the tensor cores, which took the output 0.05-0.06
    // of its scale from the oracle on the H200 (the bound is 0.03); the f16 kernel keeps it in bf16.
    // Head dims multiples of 128: the WithFp8Tma kernels (K / V by TMA where the layout allows, else by
    // cp.async, as KVATTN_SM90_TMA=0 forces; -4% fp8 cache, -7% e4m3 on W6 16x128, session 36); the others
    // have the cp.async producer only. One kernel a (config, head dim) either way.
    if constexpr (kHeadDim % 128 == 0 && prefill_head_dim_v(kHeadDim) % 128 == 0) {
      if constexpr (kHeadDim == 128 && std::is_same_v<T, __nv_bfloat16>) {
        if (params.q_fp8 && params.rotary.rotary_dim == 0 && fp8_mma_enabled())
          return launch_variant<KvFp8MmaTma, T, kHeadDim>(params, stream, early_launch, counter_by_append);
      }
      return launch_variant<KvFp8Tma, T, kHeadDim>(params, stream, early_launch, counter_by_append);
    } else {
      return launch_variant<KvFp8, T, kHeadDim>(params, stream, early_launch, counter_by_append);
    }
  }
}

}  // namespace kvattn::cuda::sm90
