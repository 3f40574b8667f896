// The sm_90a prefill path: which problems it takes, and the dispatch over (dtype, head dim).
#include <cstdlib>
#include <cstring>
#include <string>

#include "cuda/prefill_sm90/config.hpp"
#include "cuda/prefill_sm90/launch.hpp"

namespace kvattn::cuda::sm90 {
namespace {

bool env_is_1(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && std::strcmp(v, "1") == 0;
}

template <typename T>
bool loaded(int head_dim) {
  switch (head_dim) {
    case 128:
      return prefill_kernel_loaded<T, 128>();
    default:
      return false;
  }
}

}  // namespace

bool prefill_takes(const FwdProblem& p, const AttnParams& params, const DeviceLimits& limits) {
  if (limits.cc_major != 9 || env_is_1("KVATTN_FORCE_PORTABLE")) return false;
  if (p.q_dtype != p.kv_dtype || p.out_dtype != p.q_dtype || !prefill_built(p.q_dtype, p.head_dim))
    return false;
  if (p.head_dim_v != p.head_dim || p.qv.ptr != nullptr || !params.kv_vec16 || p.num_splits > 1) return false;
  // The producer addresses cache rows by 32-bit offsets in 16-byte units: each cache spans < 64 GiB.
  const auto span16 = [&](const CacheTensor& c) {
    const int64_t rows = p.cu_seqlens_k ? p.num_pages * c.slot_stride : p.num_pages * c.page_stride;
    return (rows + p.page_size * c.slot_stride + p.num_kv_heads * c.head_stride + p.head_dim) / 8;
  };
  if (span16(p.k_cache) >= (int64_t{1} << 32) - 1 || span16(p.v_cache) >= (int64_t{1} << 32) - 1)
    return false;
  // Prefill shapes only: below 128 packed rows a 128-row CTA would be mostly padding, and with fewer than
  // half a wave of CTAs the portable kernel's split-KV schedule fills the machine instead.
  const int64_t rows = static_cast<int64_t>(p.max_seqlen_q) * (p.num_q_heads / p.num_kv_heads);
  const int64_t block_m = 64 * prefill_tile(p.head_dim).consumers;
  const int64_t ctas = (rows + block_m - 1) / block_m * p.batch * p.num_kv_heads;
  // KVATTN_FORCE_SM90_PREFILL=1 (tests) drops this shape rule: every problem the kernel covers runs on it.
  if ((rows < block_m || 2 * ctas < limits.sm_count) && !env_is_1("KVATTN_FORCE_SM90_PREFILL")) return false;
  // The sm_90a binary must be the one loaded (checked once per kernel: the device is the same).
  return p.q_dtype == DType::bf16 ? loaded<__nv_bfloat16>(p.head_dim) : loaded<half>(p.head_dim);
}

kvattn_status launch_prefill(const FwdProblem& p, const AttnParams& params, cudaStream_t stream) {
  const bool bf16 = p.q_dtype == DType::bf16;
  switch (p.head_dim) {
    case 128:
      return bf16 ? launch_prefill_kernel<__nv_bfloat16, 128>(params, stream)
                  : launch_prefill_kernel<half, 128>(params, stream);
    default:
      return fail(KVATTN_ERROR_UNSUPPORTED,
                  "head_dim=" + std::to_string(p.head_dim) + ": no sm_90a prefill kernel");
  }
}

}  // namespace kvattn::cuda::sm90
