// The sm_90a MLA decode kernel: which problems its table rows take (mla_sm90_supports).
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "cuda/mla_sm90/mla_sm90.hpp"

namespace kvattn::cuda::sm90 {

bool mla_sm90_supports(const FwdProblem& p) {
  if (p.q_dtype != p.kv_dtype || p.out_dtype != p.q_dtype || !mla_built(p.q_dtype)) return false;
  if (p.head_dim != MlaTile::kDimK || p.head_dim_v != MlaTile::kDimV || p.qv.ptr == nullptr) return false;
  if (p.cu_seqlens_q != nullptr) return false;
  if (!cp_async_cache_rows_ok(p, p.k_cache, p.head_dim) ||
      !cp_async_cache_rows_ok(p, p.v_cache, p.head_dim_v) || !kv_rows_vec16(p)) {
    return false;
  }
  // On by default since session 41 (an H100: racecheck and memcheck clean on both kernels, W5 at 128 heads
  // 2.1-2.2x the portable kernel, at 16 heads 0.91-1.07x; bench/NOTES.md). KVATTN_SM90_MLA=0 declines it
  // (A/B; the force switch, for tests, wins over it).
  const char* off = std::getenv("KVATTN_SM90_MLA");
  if (!env_is_1("KVATTN_FORCE_SM90_MLA") && off != nullptr && std::strcmp(off, "0") == 0) return false;
  return p.q_dtype == DType::bf16 ? mla_kernel_loaded<__nv_bfloat16>() : mla_kernel_loaded<half>();
}

}  // namespace kvattn::cuda::sm90
