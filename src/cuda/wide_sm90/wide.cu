// The sm_90a head-dim-512 decode kernel: which problems its table rows take (wide_sm90_supports).
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "cuda/wide_sm90/wide_sm90.hpp"

namespace kvattn::cuda::sm90 {

bool wide_sm90_supports(const FwdProblem& p) {
  if (p.q_dtype != p.kv_dtype || p.out_dtype != p.q_dtype || !wide_built(p.q_dtype)) return false;
  if (p.head_dim != WideTile::kDim || p.head_dim_v != WideTile::kDim || p.qv.ptr != nullptr) return false;
  if (p.cu_seqlens_q != nullptr) return false;
  const int64_t rows = static_cast<int64_t>(p.max_seqlen_q) * (p.num_q_heads / p.num_kv_heads);
  if (rows > WideTile::kRows) return false;
  if (!cp_async_cache_rows_ok(p, p.k_cache, p.head_dim) ||
      !cp_async_cache_rows_ok(p, p.v_cache, p.head_dim_v) || !kv_rows_vec16(p)) {
    return false;
  }
  const char* off = std::getenv("KVATTN_SM90_WIDE");
  if (off != nullptr && std::strcmp(off, "0") == 0) return false;
  return p.q_dtype == DType::bf16 ? wide_kernel_loaded<__nv_bfloat16>() : wide_kernel_loaded<half>();
}

}  // namespace kvattn::cuda::sm90
