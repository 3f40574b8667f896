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

namespace {

double descale(const float* ptr, const int64_t (&strides)[2], int i, int h) {
  return ptr ? double(ptr[i * strides[0] + h * strides[1]]) : 1.0;
}

// x / scale in place (a division, not a multiplication by 1 / scale, which would round twice).
void divide_row(std::vector<double>& x, double scale) {
  if (scale == 1.0) return;
  for (double& e : x) e /= scale;
}

}  // namespace

// fp16/bf16 tokens into an fp8 cache are quantized: stored = e4m3(x / descale) (after rotary for k). fp8
// tokens (under fp8 q) are already in the cache's scaled domain (they carry the same descale): x * descale
// / descale = x, so they are written as they are (rotated and re-rounded with rotary).
void append_new_tokens(const FwdProblem& p) {
  if (!p.k_new.ptr) return;
  const bool quantize = p.kv_dtype == DType::fp8_e4m3 && p.q_dtype != DType::fp8_e4m3;
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
        if (quantize) divide_row(k, descale(p.k_descale, p.k_descale_strides, i, h));
        store_row(p.kv_dtype, p.k_cache.ptr, k_dst + h * p.k_cache.head_stride, p.head_dim, k.data());
        load_row(p.q_dtype, p.v_new.ptr, v_src + h * p.v_new.head_stride, p.head_dim_v, v.data());
        if (quantize) divide_row(v, descale(p.v_descale, p.v_descale_strides, i, h));
        store_row(p.kv_dtype, p.v_cache.ptr, v_dst + h * p.v_cache.head_stride, p.head_dim_v, v.data());
      }
    }
  }
}

}  // namespace cpu

// Token t goes to slot slot_mapping[t] (negative: skipped) of a paged cache: page slot / page_size,
// offset slot % page_size. An fp8 cache stores e4m3(key / k_scale) (scales validated: fp8 caches only).
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
      if (p.k_scale) cpu::divide_row(k, p.k_scale[p.scale_per_head ? h : 0]);
      cpu::store_row(p.cache_dtype, p.k_cache.ptr, k_dst + h * p.k_cache.head_stride, p.head_dim, k.data());
      cpu::load_row(p.src_dtype, p.value.ptr, t * p.value.token_stride + h * p.value.head_stride,
                    p.head_dim_v, v.data());
      if (p.v_scale) cpu::divide_row(v, p.v_scale[p.scale_per_head ? h : 0]);
      cpu::store_row(p.cache_dtype, p.v_cache.ptr, v_dst + h * p.v_cache.head_stride, p.head_dim_v, v.data());
    }
  }
  return KVATTN_OK;
}

}  // namespace kvattn
