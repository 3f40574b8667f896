// The sm_90a prefill kernel: which problems its table rows take (prefill_sm90_supports).
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "cuda/prefill_sm90/config.hpp"
#include "cuda/prefill_sm90/launch.hpp"
#include "cuda/prefill_sm90/timeline.cuh"

namespace kvattn::cuda::sm90 {
namespace {

template <typename T>
bool loaded(int head_dim) {
  switch (head_dim) {
    case 64:
      return prefill_kernel_loaded<T, 64>();
    case 128:
      return prefill_kernel_loaded<T, 128>();
    case 256:
      return prefill_kernel_loaded<T, 256>();
    default:
      return false;
  }
}

}  // namespace

bool prefill_sm90_supports(const FwdProblem& p) {
  if (p.q_dtype != p.kv_dtype || p.out_dtype != p.q_dtype || !prefill_built(p.q_dtype, p.head_dim)) {
    return false;
  }
  if (p.head_dim_v != p.head_dim || p.qv.ptr != nullptr || p.num_splits > 1) return false;
  if (!cp_async_cache_rows_ok(p, p.k_cache, p.head_dim) ||
      !cp_async_cache_rows_ok(p, p.v_cache, p.head_dim) || !kv_rows_vec16(p)) {
    return false;
  }
  // Prefill shapes only: below 128 packed rows a CTA (128 rows; 192 at d 64) would be mostly padding, and
  // below 64 CTAs (half a wave on the 114-132 SMs of sm_90 parts) the portable kernel's split-KV schedule
  // fills the machine instead. KVATTN_FORCE_SM90_PREFILL=1 (tests) drops this rule.
  const int64_t rows = static_cast<int64_t>(p.max_seqlen_q) * (p.num_q_heads / p.num_kv_heads);
  const int64_t block_m = 64 * prefill_tile(p.head_dim).consumers;
  const int64_t ctas = (rows + block_m - 1) / block_m * p.batch * p.num_kv_heads;
  if (!(rows >= 128 && ctas >= 64) && !env_is_1("KVATTN_FORCE_SM90_PREFILL")) return false;
  // The sm_90a binary must be the one the device runs (not an sm_80 one picked for lack of it).
  return p.q_dtype == DType::bf16 ? loaded<__nv_bfloat16>(p.head_dim) : loaded<half>(p.head_dim);
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
