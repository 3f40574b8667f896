// The sm_90a prefill kernel: which problems its table rows take (prefill_sm90_supports).
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "cuda/prefill_sm90/config.hpp"
#include "cuda/prefill_sm90/launch.hpp"
#include "cuda/prefill_sm90/timeline.cuh"

namespace kvattn::cuda::sm90 {
namespace {

template <typename T, typename TKV>
bool loaded(int head_dim) {
  switch (head_dim) {
    case 64:
      return prefill_kernel_loaded<T, 64, TKV>();
    case 128:
      return prefill_kernel_loaded<T, 128, TKV>();
    case 192:
      return prefill_kernel_loaded<T, 192, TKV>();
    case 256:
      return prefill_kernel_loaded<T, 256, TKV>();
    default:
      return false;
  }
}
template <typename T>
bool loaded(int head_dim, DType kv) {
  return kv == DType::fp8_e4m3 ? loaded<T, __nv_fp8_e4m3>(head_dim) : loaded<T, T>(head_dim);
}

}  // namespace

bool prefill_sm90_supports(const FwdProblem& p) {
  // 16-bit q with a cache of its dtype or of fp8 e4m3 (converted to f16 in the kernel: cta.cuh, KvFp8), or
  // fp8 q with an fp8 cache (the bf16 kernel: out bf16, q read as fp8 by load_q_fp8)
  const DType compute = p.q_dtype == DType::fp8_e4m3 ? DType::bf16 : p.q_dtype;
  if ((p.kv_dtype != p.q_dtype && p.kv_dtype != DType::fp8_e4m3) || p.out_dtype != compute ||
      !prefill_built(compute, p.head_dim)) {
    return false;
  }
  // d = dv, or (192, 128) (prefill_head_dim_v)
  if (p.head_dim_v != prefill_head_dim_v(p.head_dim) || p.qv.ptr != nullptr) return false;
  if (!cp_async_cache_rows_ok(p, p.k_cache, p.head_dim) ||
      !cp_async_cache_rows_ok(p, p.v_cache, p.head_dim_v) || !kv_rows_vec16(p)) {
    return false;
  }
  // The shape rule (KVATTN_FORCE_SM90_PREFILL=1, tests, drops it). q without cu_seqlens_q: >= 64 packed
  // rows a kv head (a consumer's; a unit of <= 64 rows runs the split kernel, consumer 1 idle), >= 32 at
  // d 128 over 16-bit caches (there 4-9% under the decode kernel's two row groups: W4's 32-row cases,
  // H100, session 34; fp8 caches and the other head dims unmeasured at 32; KVATTN_SM90_SPLIT_ROWS sets
  // the floor, for A/B), the plan adding static key splits
  // (prefill_sm90_splits); a rule of the sequence's shape alone, so that in deterministic mode the kernel,
  // like its splits, does not depend on the batch. Varlen q (one pass, no splits): >= 128 rows (below, a CTA
  // would be mostly padding) and >= 64 CTAs (half a wave on the 114-132 SMs of sm_90 parts; below, the
  // portable kernel's split-KV schedule fills the machine instead).
  const int64_t rows = prefill_rows(p);
  const int64_t block_m = 64 * prefill_tile_of(p).consumers;
  const int64_t ctas = (rows + block_m - 1) / block_m * p.batch * p.num_kv_heads;
  bool shape_ok = rows >= 128 && ctas >= 64;
  if (p.cu_seqlens_q == nullptr) {
    const char* floor = std::getenv("KVATTN_SM90_SPLIT_ROWS");
    const int64_t rule = p.head_dim == 128 && p.kv_dtype != DType::fp8_e4m3 ? 32 : 64;
    shape_ok = rows >= (floor != nullptr ? std::max(1, std::atoi(floor)) : rule);
  }
  if (!shape_ok && !env_is_1("KVATTN_FORCE_SM90_PREFILL")) return false;
  // The sm_90a binary must be the one the device runs (not an sm_80 one picked for lack of it).
  return compute == DType::bf16 ? loaded<__nv_bfloat16>(p.head_dim, p.kv_dtype)
                                : loaded<half>(p.head_dim, p.kv_dtype);
}

#if KVATTN_PREFILL_TIMELINE
unsigned long long* g_prefill_timeline_host = nullptr;
#endif

}  // namespace kvattn::cuda::sm90

#if KVATTN_PREFILL_TIMELINE
// The developer timeline (timeline.cuh): each later sm_90a prefill launch copies its stamps (kPtlWords
// 64-bit words) into `host` once the kernel is done; nullptr stops it. Returns kPtlWords.
extern "C" __attribute__((visibility("default"))) int kvattn_debug_prefill_timeline_buffer(
    unsigned long long* host) {
  kvattn::cuda::sm90::g_prefill_timeline_host = host;
  return kvattn::cuda::sm90::kPtlWords;
}
#endif
