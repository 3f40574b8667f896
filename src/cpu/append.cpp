// Appending to a KV cache: the fwd append (step 1) and vLLM's reshape_and_cache_flash (cpu_append).
//
// Both run on one thread, in token order. An append is a copy, cheap next to attention, and a serial
// order makes a repeated destination (two slot_mapping entries, or two page-table rows sharing a page)
// deterministic: the later token wins.
#include "cpu/append.hpp"

#include <vector>

#include "api/backend.hpp"
#include "cpu/numeric.hpp"
#include "cpu/rotary.hpp"
#include "cpu/sequence.hpp"

namespace kvattn {
namespace cpu {

void append_new_tokens(const FwdProblem& p) {
  if (!p.k_new.ptr) return;
  std::vector<double> k(p.head_dim);    // (d) one new key, rotated in double
  std::vector<double> v(p.head_dim_v);  // (dv)
  for (int i = 0; i < p.batch; ++i) {
    const Sequence seq = sequence_of(p, i);
    for (int64_t j = 0; j < seq.new_len; ++j) {
      const int64_t k_src = token_offset(p.k_new, p.cu_seqlens_k_new, i, j);
      const int64_t v_src = token_offset(p.v_new, p.cu_seqlens_k_new, i, j);
      const int64_t slot = seq.cache_len + j;
      const int64_t k_dst = slot_offset(p, p.k_cache, i, slot);
      const int64_t v_dst = slot_offset(p, p.v_cache, i, slot);
      for (int h = 0; h < p.num_kv_heads; ++h) {
        load_row(p.q_dtype, p.k_new.ptr, k_src + h * p.k_new.head_stride, p.head_dim, k.data());
        if (p.rotary_dim > 0) rotate(p, seq.rotary_pos + j, k.data());
        store_row(p.kv_dtype, p.k_cache.ptr, k_dst + h * p.k_cache.head_stride, p.head_dim, k.data());
        load_row(p.q_dtype, p.v_new.ptr, v_src + h * p.v_new.head_stride, p.head_dim_v, v.data());
        store_row(p.kv_dtype, p.v_cache.ptr, v_dst + h * p.v_cache.head_stride, p.head_dim_v, v.data());
      }
    }
  }
}

}  // namespace cpu

// Token t goes to slot slot_mapping[t] (negative: skipped) of a paged cache: page slot / page_size,
// offset slot % page_size.
kvattn_status cpu_append(const AppendProblem& p) {
  if (!cpu::is_cpu_storage_dtype(p.src_dtype)) return cpu::unsupported_dtype("key", p.src_dtype);
  if (!cpu::is_cpu_storage_dtype(p.cache_dtype)) return cpu::unsupported_dtype("k_cache", p.cache_dtype);
  std::vector<double> k(p.head_dim);    // (d)
  std::vector<double> v(p.head_dim_v);  // (dv)
  for (int64_t t = 0; t < p.num_tokens; ++t) {
    const int64_t slot = p.slot_mapping[t];
    if (slot < 0) continue;
    const int64_t page = slot / p.page_size;
    const int64_t offset = slot % p.page_size;
    const int64_t k_dst = page * p.k_cache.page_stride + offset * p.k_cache.slot_stride;
    const int64_t v_dst = page * p.v_cache.page_stride + offset * p.v_cache.slot_stride;
    for (int h = 0; h < p.num_kv_heads; ++h) {
      cpu::load_row(p.src_dtype, p.key.ptr, t * p.key.token_stride + h * p.key.head_stride, p.head_dim,
                    k.data());
      cpu::store_row(p.cache_dtype, p.k_cache.ptr, k_dst + h * p.k_cache.head_stride, p.head_dim, k.data());
      cpu::load_row(p.src_dtype, p.value.ptr, t * p.value.token_stride + h * p.value.head_stride,
                    p.head_dim_v, v.data());
      cpu::store_row(p.cache_dtype, p.v_cache.ptr, v_dst + h * p.v_cache.head_stride, p.head_dim_v, v.data());
    }
  }
  return KVATTN_OK;
}

}  // namespace kvattn
