// The normalized problem: what validation (src/api/validate_*.cpp) hands to a backend.
//
// Every field here has been checked against CONTRACT.md; backends trust it and never re-validate.
// Strides are in ELEMENTS. Optional pointers are nullptr when absent. Shapes that the C ABI accepts in
// several forms are folded into one addressing rule each, written beside the fields.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvattn/kvattn.h"

namespace kvattn {

enum class DType : int32_t {
  none = KVATTN_DTYPE_NONE,
  f32 = KVATTN_DTYPE_F32,
  f16 = KVATTN_DTYPE_F16,
  bf16 = KVATTN_DTYPE_BF16,
  fp8_e4m3 = KVATTN_DTYPE_FP8_E4M3,
  i32 = KVATTN_DTYPE_I32,
  i64 = KVATTN_DTYPE_I64,
};

// Token rows of q, qv, out, k_new, v_new (fixed or varlen alike):
//   row(i, t) = (cu ? cu[i] : 0) + t
//   element(i, t, h, c) = ptr + i * batch_stride + row(i, t) * token_stride + h * head_stride + c
// (varlen tensors have batch_stride == 0).
struct TokenTensor {
  void* ptr = nullptr;  // optional where noted
  int64_t batch_stride = 0;
  int64_t token_stride = 0;
  int64_t head_stride = 0;
};

// KV cache addressing, one rule for the three layouts. Sequence i, slot s, kv head h, channel c:
//   packed (cu_seqlens_k): element = ptr + (cu_seqlens_k[i] + s) * slot_stride + h * head_stride + c
//   otherwise:  row   = cache_batch_idx ? cache_batch_idx[i] : i
//               first = kv_indptr ? kv_indptr[row] : row * page_table_stride   (the row's first entry)
//               page  = page_table ? page_table[first + s / page_size] : row
//               element = ptr + page * page_stride + (s % page_size) * slot_stride + h * head_stride + c
// A contiguous cache is the paged rule with no table and page_size = s_cache (one page per row). The
// ragged index (kv_indptr, kv_indices) is a page table whose rows have their own lengths: page_table
// holds kv_indices and each row starts at kv_indptr[row]; a slot pool is its page_size = 1 case.
struct CacheTensor {
  void* ptr = nullptr;
  int64_t page_stride = 0;  // stride of dim 0 (cache row, or page)
  int64_t slot_stride = 0;
  int64_t head_stride = 0;
};

// The most keys a sequence may hold, L_i = cache_seqlens[i] + n_i (both backends; kvattn.h): the kernels'
// key positions are int32, and their tiles and stages (<= 256 keys) round a position up, so a margin of
// 2^16 below 2^31 keeps every such sum in range. A paged capacity (pages_per_row * page_size) may be larger:
// only the keys a sequence holds are bounded. The planners take it as the longest sequence.
constexpr int64_t kMaxSequenceKeys = (int64_t{1} << 31) - (int64_t{1} << 16);
// The most query rows a (sequence, kv head) may pack, its tokens x hq / hk (both backends): the kernels
// divide a packed row index in 32 bits.
constexpr int64_t kMaxPackedRows = (int64_t{1} << 31) - 1;

struct FwdProblem {
  kvattn_device_type device_type = KVATTN_DEVICE_CPU;
  int32_t device_id = 0;
  void* stream = nullptr;

  // ---- sizes
  int32_t batch = 0;         // b
  int32_t max_seqlen_q = 0;  // sq, or max_seqlen_q with cu_seqlens_q (an upper bound of every q length)
  int32_t num_q_heads = 0;   // hq
  int32_t num_kv_heads = 0;  // hk; query head h reads kv head h / (hq / hk)
  int32_t head_dim = 0;      // d (q, k)
  int32_t head_dim_v = 0;    // dv (v, qv, out)
  int64_t total_q = 0;       // rows of q when varlen, else b * sq

  DType q_dtype = DType::none;    // also of qv, k_new, v_new
  DType kv_dtype = DType::none;   // of k_cache, v_cache
  DType out_dtype = DType::none;  // of out

  // ---- queries: q (i, t, h, 0..d), qv (.., 0..dv) optional
  TokenTensor q;
  TokenTensor qv;
  const int32_t* cu_seqlens_q = nullptr;  // (b + 1) optional; q length of i = cu[i+1] - cu[i]
  const int32_t* seqused_q = nullptr;     // (b) optional; tokens t >= seqused_q[i] give out 0, lse -inf

  // ---- KV cache
  CacheTensor k_cache;
  CacheTensor v_cache;
  int64_t num_pages = 0;  // dim 0 of the cache: b_cache, num_pages, or total_k (packed)
  int64_t page_size = 0;  // paged: page size; contiguous: s_cache; packed: unused (0)
  int64_t capacity = 0;   // slots a row can hold: s_cache or pages_per_row * page_size (packed, ragged: per
                          // sequence, and this an upper bound)
  const int32_t* page_table = nullptr;  // (b_pt, pages_per_row) optional
  int64_t page_table_stride = 0;
  int64_t page_table_rows = 0;  // b_pt
  int64_t pages_per_row = 0;    // 0 with kv_indptr (rows have their own lengths)
  // (b_pt + 1) optional: the ragged index; page_table is then kv_indices (nnz = page_table_entries) and
  // the capacity of row r is (kv_indptr[r + 1] - kv_indptr[r]) * page_size (`capacity` an upper bound).
  const int32_t* kv_indptr = nullptr;
  int64_t page_table_entries = 0;            // nnz of kv_indices (ragged only)
  const int32_t* cu_seqlens_k = nullptr;     // (b + 1) optional: packed varlen cache
  const int32_t* cache_batch_idx = nullptr;  // (b) optional
  const int32_t* cache_leftpad = nullptr;    // (b) optional
  // Tokens already in the cache of sequence i (absolute slot index):
  //   cache_seqlens ? cache_seqlens[i] : (cache_seqlens_value >= 0 ? cache_seqlens_value : capacity of i)
  // where the capacity of i is `capacity`, or cu_seqlens_k[i+1] - cu_seqlens_k[i] when packed, or its
  // row's (kv_indptr[row + 1] - kv_indptr[row]) * page_size when ragged.
  const int32_t* cache_seqlens = nullptr;
  int64_t cache_seqlens_value = -1;

  // ---- append: n_i new tokens written at slots cache_seqlens[i] + j, then attended to
  TokenTensor k_new;  // ptr == nullptr: no append
  TokenTensor v_new;
  int32_t max_seqlen_k_new = 0;               // s_new (fixed), or an upper bound with cu_seqlens_k_new
  const int32_t* cu_seqlens_k_new = nullptr;  // (b + 1) optional; n_i = cu[i+1] - cu[i], else s_new
  int64_t total_k_new = 0;

  // ---- rotary (rotary_dim == 0: none). cos/sin element (pos, m) = ptr + pos * rotary_stride + m
  const void* rotary_cos = nullptr;
  const void* rotary_sin = nullptr;
  DType rotary_dtype = DType::none;
  int64_t rotary_cos_stride = 0;
  int64_t rotary_sin_stride = 0;
  int32_t rotary_dim = 0;  // even, <= d; cos/sin have rotary_dim / 2 columns
  int32_t seqlen_ro = 0;
  bool rotary_interleaved = true;           // pairs (2m, 2m+1); false: (m, m + rotary_dim / 2)
  bool rotary_q_per_token = false;          // causal or window: q token t at p_i + t, else every token at p_i
  const int32_t* rotary_seqlens = nullptr;  // (b) optional; p_i, default the cache length of i

  // ---- scores and mask
  double softmax_scale = 0.0;  // resolved (never the <= 0 default); kernels round it to float
  double softcap = 0.0;        // 0 = off
  bool causal = false;         // already folded into window_right = 0
  int32_t window_left = -1;    // -1 = unbounded
  int32_t window_right = -1;   // -1 = unbounded
  int32_t attention_chunk = 0;
  const float* alibi_slopes = nullptr;  // slope(i, h) = alibi_slopes[i * alibi_batch_stride + h]
  int64_t alibi_batch_stride = 0;       // 0 for (hq,)
  const float* sinks = nullptr;         // (hq) optional

  // ---- fp8 descales, element (i, kvh) = ptr[i * batch_stride + kvh * head_stride]; nullptr = 1
  const float* q_descale = nullptr;
  const float* k_descale = nullptr;
  const float* v_descale = nullptr;
  int64_t q_descale_strides[2] = {0, 0};
  int64_t k_descale_strides[2] = {0, 0};
  int64_t v_descale_strides[2] = {0, 0};

  // ---- outputs
  TokenTensor out;  // required, dv channels, out_dtype
  // lse element (i, h, t) = lse + i * lse_batch_stride + h * lse_head_stride + row(i, t) * lse_token_stride
  float* lse = nullptr;  // optional
  int64_t lse_batch_stride = 0;
  int64_t lse_head_stride = 0;
  int64_t lse_token_stride = 0;

  // ---- speed only
  int32_t num_splits = 0;
  int32_t pack_gqa = -1;
  int32_t sm_margin = 0;
  bool deterministic = false;
  bool force_portable = false;  // CUDA: run the portable sm_80 kernels even where a newer arch's exist
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

// Keys of the longest sequence a call may have, the plans' bound: the capacity (packed: total_k), at most
// kMaxSequenceKeys.
inline int64_t max_sequence_keys(const FwdProblem& p) {
  const int64_t keys = p.cu_seqlens_k != nullptr ? p.num_pages : p.capacity;
  return keys < kMaxSequenceKeys ? keys : kMaxSequenceKeys;
}

struct AppendProblem {
  kvattn_device_type device_type = KVATTN_DEVICE_CPU;
  int32_t device_id = 0;
  void* stream = nullptr;
  int64_t num_tokens = 0;
  int32_t num_kv_heads = 0, head_dim = 0, head_dim_v = 0;
  int64_t num_pages = 0, page_size = 0;
  DType src_dtype = DType::none, cache_dtype = DType::none;
  // key element (t, h, c) = key + t * token_stride + h * head_stride + c
  TokenTensor key, value;  // batch_stride unused
  CacheTensor k_cache, v_cache;
  const int64_t* slot_mapping = nullptr;  // (num_tokens)
  const float* k_scale = nullptr;         // fp8 only; per head when k_scale_per_head
  const float* v_scale = nullptr;
  bool scale_per_head = false;
};

// Merge of n partials over `rows` rows of dv channels. Row r has a multi-index over the "..." dims;
// we flatten it with the strides below (up to 3 "..." dims, padded with size-1 dims in front).
struct CombineProblem {
  kvattn_device_type device_type = KVATTN_DEVICE_CPU;
  int32_t device_id = 0;
  void* stream = nullptr;
  int32_t num_splits = 0;            // n
  int32_t head_dim_v = 0;            // dv
  int64_t row_shape[3] = {1, 1, 1};  // "..." padded to 3 dims; the last is the head axis for sinks
  const float* out_partials = nullptr;
  int64_t op_split_stride = 0;
  int64_t op_row_strides[3] = {0, 0, 0};
  const float* lse_partials = nullptr;
  int64_t lp_split_stride = 0;
  int64_t lp_row_strides[3] = {0, 0, 0};
  const float* sinks = nullptr;  // (row_shape[2]) optional
  void* out = nullptr;
  DType out_dtype = DType::none;
  int64_t out_row_strides[3] = {0, 0, 0};
  float* lse = nullptr;  // optional
  int64_t lse_row_strides[3] = {0, 0, 0};
};

}  // namespace kvattn
