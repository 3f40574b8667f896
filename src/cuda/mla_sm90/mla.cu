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
  // Opt-in until compute-sanitizer's racecheck is clean on it (KVATTN_SM90_MLA=1; the force switch implies
  // it): session 28 measured this version right against the oracle and memcheck-clean, but racecheck
  // reported the S warpgroup's writes of the corrections and the final (m, l) against the V warpgroup's
  // reads, ordered by a lane-0 mbarrier arrival and a 256-thread named barrier (bench/NOTES.md).
  const bool force = env_is_1("KVATTN_FORCE_SM90_MLA");
  if (!force && !env_is_1("KVATTN_SM90_MLA")) return false;
  return p.q_dtype == DType::bf16 ? mla_kernel_loaded<__nv_bfloat16>() : mla_kernel_loaded<half>();
}

}  // namespace kvattn::cuda::sm90
