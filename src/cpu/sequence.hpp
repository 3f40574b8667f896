// Per-sequence geometry of a FwdProblem (CONTRACT.md steps 1-4) and the addressing rules of problem.hpp.
#pragma once

#include <cstdint>

#include "api/problem.hpp"

namespace kvattn::cpu {

// Sequence i of a FwdProblem. Valid cache slots are [leftpad, cache_len + new_len); slot s has logical
// key position kp = s - leftpad, and query token t < q_used has logical position t + kv_len - q_used.
struct Sequence {
  int64_t q_len = 0;       // query rows of the sequence in q / out / lse
  int64_t q_used = 0;      // rows that attend (seqused_q); rows [q_used, q_len) get out 0, lse -inf
  int64_t cache_len = 0;   // cache_seqlens[i]: tokens in the cache before the append (absolute slot)
  int64_t new_len = 0;     // n_i, appended at slots [cache_len, cache_len + new_len)
  int64_t leftpad = 0;     // first valid slot
  int64_t kv_len = 0;      // seqlen_k = cache_len + new_len - leftpad
  int64_t rotary_pos = 0;  // p_i: new key j is rotated at p_i + j, query token t at p_i (+ t)
};

inline Sequence sequence_of(const FwdProblem& p, int i) {
  Sequence seq;
  seq.q_len = p.cu_seqlens_q ? p.cu_seqlens_q[i + 1] - p.cu_seqlens_q[i] : p.max_seqlen_q;
  seq.q_used = p.seqused_q ? p.seqused_q[i] : seq.q_len;
  if (seq.q_used > seq.q_len) seq.q_used = seq.q_len;  // validated; kept so no row outside q is ever read
  const int64_t row = p.cache_batch_idx ? p.cache_batch_idx[i] : i;
  const int64_t capacity = p.cu_seqlens_k ? p.cu_seqlens_k[i + 1] - p.cu_seqlens_k[i]
                           : p.kv_indptr  ? (int64_t{p.kv_indptr[row + 1]} - p.kv_indptr[row]) * p.page_size
                                          : p.capacity;
  seq.cache_len = p.cache_seqlens              ? p.cache_seqlens[i]
                  : p.cache_seqlens_value >= 0 ? p.cache_seqlens_value
                                               : capacity;
  if (p.k_new.ptr) {
    seq.new_len = p.cu_seqlens_k_new ? p.cu_seqlens_k_new[i + 1] - p.cu_seqlens_k_new[i] : p.max_seqlen_k_new;
  }
  seq.leftpad = p.cache_leftpad ? p.cache_leftpad[i] : 0;
  seq.kv_len = seq.cache_len + seq.new_len - seq.leftpad;
  seq.rotary_pos = p.rotary_seqlens ? p.rotary_seqlens[i] : seq.cache_len;
  return seq;
}

// Element offset of (sequence i, token t, head 0, channel 0) of q, qv, out, k_new or v_new, where `cu` is
// the tensor's cu_seqlens (nullptr when fixed-length).
inline int64_t token_offset(const TokenTensor& x, const int32_t* cu, int i, int64_t t) {
  const int64_t row = (cu ? cu[i] : 0) + t;
  return i * x.batch_stride + row * x.token_stride;
}

// Element offset of (sequence i, slot s, head 0, channel 0) of k_cache or v_cache: the single rule of
// problem.hpp for contiguous, paged and packed caches. Call it for valid slots only: it reads the page
// table entry of s, and a contiguous cache with no slots has page_size 0.
inline int64_t slot_offset(const FwdProblem& p, const CacheTensor& cache, int i, int64_t s) {
  if (p.cu_seqlens_k) return (p.cu_seqlens_k[i] + s) * cache.slot_stride;
  const int64_t row = p.cache_batch_idx ? p.cache_batch_idx[i] : i;
  const int64_t first = p.kv_indptr ? int64_t{p.kv_indptr[row]} : row * p.page_table_stride;
  const int64_t page = p.page_table ? p.page_table[first + s / p.page_size] : row;
  return page * cache.page_stride + (s % p.page_size) * cache.slot_stride;
}

}  // namespace kvattn::cpu
