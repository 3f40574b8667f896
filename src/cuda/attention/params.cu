// FwdProblem -> the kernels' parameter structs (host side).
#include <cmath>

#include "cuda/attention/params.cuh"

namespace kvattn::cuda {

SeqParams make_seq_params(const FwdProblem& p) {
  SeqParams s{};
  s.batch = p.batch;
  s.max_seqlen_q = p.max_seqlen_q;
  s.total_q = p.total_q;
  s.cu_seqlens_q = p.cu_seqlens_q;
  s.seqused_q = p.seqused_q;
  s.has_new = p.k_new.ptr != nullptr;
  s.max_seqlen_k_new = p.max_seqlen_k_new;
  s.total_k_new = p.total_k_new;
  s.cu_seqlens_k_new = p.cu_seqlens_k_new;
  s.num_pages = p.num_pages;
  s.page_size = p.page_size;
  s.capacity = p.capacity;
  s.page_table = p.page_table;
  s.page_table_stride = p.page_table_stride;
  s.page_table_rows = p.page_table_rows;
  s.kv_indptr = p.kv_indptr;
  s.page_table_entries = p.page_table_entries;
  s.cu_seqlens_k = p.cu_seqlens_k;
  s.cache_batch_idx = p.cache_batch_idx;
  s.cache_leftpad = p.cache_leftpad;
  s.cache_seqlens = p.cache_seqlens;
  s.cache_seqlens_value = p.cache_seqlens_value;
  s.has_rotary = p.rotary_dim > 0;
  s.rotary_q_per_token = p.rotary_q_per_token;
  s.seqlen_ro = p.seqlen_ro;
  s.rotary_seqlens = p.rotary_seqlens;
  return s;
}

RotaryParams make_rotary_params(const FwdProblem& p) {
  RotaryParams r{};
  r.cos = p.rotary_cos;
  r.sin = p.rotary_sin;
  r.cos_stride = p.rotary_cos_stride;
  r.sin_stride = p.rotary_sin_stride;
  r.rotary_dim = p.rotary_dim;
  r.table_f32 = p.rotary_dtype == DType::f32;
  r.interleaved = p.rotary_interleaved;
  return r;
}

namespace {
// Rows of `elems` elements a 16-byte chunk start 16-byte aligned.
bool rows_vec16(const CacheTensor& c, int elems) {
  return reinterpret_cast<uintptr_t>(c.ptr) % 16 == 0 && c.page_stride % elems == 0 &&
         c.slot_stride % elems == 0 && c.head_stride % elems == 0;
}
}  // namespace

bool kv_rows_vec16(const FwdProblem& p) {
  const int chunk = p.kv_dtype == DType::fp8_e4m3 ? 16 : 8;  // elements in 16 bytes
  return rows_vec16(p.k_cache, chunk) && rows_vec16(p.v_cache, chunk) && p.head_dim % chunk == 0 &&
         p.head_dim_v % chunk == 0;
}

AttnParams make_attn_params(const FwdProblem& p, const AttentionPlan& plan, DeviceErrorRecord* errors) {
  AttnParams a{};
  a.seq = make_seq_params(p);
  a.num_q_heads = p.num_q_heads;
  a.num_kv_heads = p.num_kv_heads;
  a.group = p.num_q_heads / p.num_kv_heads;
  a.head_dim = p.head_dim;
  a.head_dim_v = p.head_dim_v;
  a.q = p.q;
  a.qv = p.qv;
  a.out = p.out;
  a.k_cache = p.k_cache;
  a.v_cache = p.v_cache;
  a.kv_vec16 = kv_rows_vec16(p);
  a.q_fp8 = p.q_dtype == DType::fp8_e4m3;
  a.q_descale = p.q_descale;
  a.k_descale = p.k_descale;
  a.v_descale = p.v_descale;
  for (int k = 0; k < 2; ++k) {
    a.q_descale_strides[k] = p.q_descale_strides[k];
    a.k_descale_strides[k] = p.k_descale_strides[k];
    a.v_descale_strides[k] = p.v_descale_strides[k];
  }
  a.rotary = make_rotary_params(p);
  a.scale = p.softmax_scale;
  a.scale_log2 = static_cast<float>(p.softmax_scale * 1.4426950408889634);
  a.softcap = p.softcap;
  a.mask = {p.window_left, p.window_right, p.attention_chunk};
  a.alibi_slopes = p.alibi_slopes;
  a.alibi_batch_stride = p.alibi_batch_stride;
  a.sinks = p.sinks;
  a.lse = p.lse;
  a.lse_batch_stride = p.lse_batch_stride;
  a.lse_head_stride = p.lse_head_stride;
  a.lse_token_stride = p.lse_token_stride;
  a.m_blocks = static_cast<int32_t>(plan.m_blocks);
  a.num_splits = plan.splits;
  a.chunk_keys = plan.chunk_keys;
  a.balanced = plan.balanced;
  a.balanced_ctas = static_cast<int32_t>(plan.balanced_ctas);
  a.balanced_slots = static_cast<int32_t>(plan.balanced_slots);
  a.balanced_whole_grid = static_cast<int32_t>(plan.balanced_whole_grid);
  a.balanced_min_cost = static_cast<int32_t>(plan.balanced_min_cost);
  a.balanced_unit_cost = static_cast<int32_t>(plan.balanced_unit_cost);
  a.rows_per_unit = plan.rows_per_unit;
  if (plan.splits > 1 || plan.balanced) {
    char* ws = static_cast<char*>(p.workspace);
    a.o_partial = reinterpret_cast<float*>(ws + plan.o_partial_offset);
    a.lse_partial = reinterpret_cast<float*>(ws + plan.lse_partial_offset);
    if (plan.balanced) a.unit_pieces = reinterpret_cast<int32_t*>(ws + plan.unit_pieces_offset);
  }
  if (plan.unit_counter) a.unit_pieces = static_cast<int32_t*>(p.workspace);
  if (plan.q_rotated) {
    // q as the rotate kernel leaves it in the workspace (dispatch.cu launches it with this tensor):
    // contiguous (total_q, hq, d), row i * sq + t when fixed, q_row0 + t when varlen. The kernel then
    // rotates nothing (the append rotates the keys with its own params; seq keeps the position checks).
    const int64_t row = static_cast<int64_t>(p.num_q_heads) * p.head_dim;
    a.q.ptr = static_cast<char*>(p.workspace) + plan.q_rot_offset;
    a.q.batch_stride = p.cu_seqlens_q != nullptr ? 0 : static_cast<int64_t>(p.max_seqlen_q) * row;
    a.q.token_stride = row;
    a.q.head_stride = p.head_dim;
    a.rotary.rotary_dim = 0;
  }
  a.errors = errors;
  return a;
}

}  // namespace kvattn::cuda
