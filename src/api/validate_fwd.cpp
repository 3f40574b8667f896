// kvattn_fwd's arguments -> FwdProblem: the rules of CONTRACT.md that shapes, dtypes and scalars decide,
// as a checklist in contract order. Per-sequence index values are checked in validate_fwd_seqs.cpp.
#include <cmath>
#include <cstdint>
#include <iterator>
#include <string>
#include <vector>

#include "api/backend.hpp"
#include "api/checks.hpp"
#include "api/extent.hpp"
#include "api/status.hpp"
#include "api/validate.hpp"

namespace kvattn {
namespace {

struct NamedTensor {
  const char* name;
  kvattn_tensor kvattn_fwd_params::*member;
};

// Every tensor argument, in kvattn.h order.
constexpr NamedTensor kTensors[] = {
    {"q", &kvattn_fwd_params::q},
    {"k_cache", &kvattn_fwd_params::k_cache},
    {"v_cache", &kvattn_fwd_params::v_cache},
    {"k", &kvattn_fwd_params::k},
    {"v", &kvattn_fwd_params::v},
    {"qv", &kvattn_fwd_params::qv},
    {"rotary_cos", &kvattn_fwd_params::rotary_cos},
    {"rotary_sin", &kvattn_fwd_params::rotary_sin},
    {"rotary_seqlens", &kvattn_fwd_params::rotary_seqlens},
    {"cache_seqlens", &kvattn_fwd_params::cache_seqlens},
    {"cache_batch_idx", &kvattn_fwd_params::cache_batch_idx},
    {"cache_leftpad", &kvattn_fwd_params::cache_leftpad},
    {"page_table", &kvattn_fwd_params::page_table},
    {"cu_seqlens_q", &kvattn_fwd_params::cu_seqlens_q},
    {"seqused_q", &kvattn_fwd_params::seqused_q},
    {"cu_seqlens_k_new", &kvattn_fwd_params::cu_seqlens_k_new},
    {"cu_seqlens_k", &kvattn_fwd_params::cu_seqlens_k},
    {"alibi_slopes", &kvattn_fwd_params::alibi_slopes},
    {"sinks", &kvattn_fwd_params::sinks},
    {"q_descale", &kvattn_fwd_params::q_descale},
    {"k_descale", &kvattn_fwd_params::k_descale},
    {"v_descale", &kvattn_fwd_params::v_descale},
    {"out", &kvattn_fwd_params::out},
    {"lse", &kvattn_fwd_params::lse},
    {"kv_indptr", &kvattn_fwd_params::kv_indptr},
    {"kv_indices", &kvattn_fwd_params::kv_indices},
};

// The int32 index tensors of length b (per sequence).
constexpr NamedTensor kPerSequence[] = {
    {"cache_seqlens", &kvattn_fwd_params::cache_seqlens},
    {"cache_batch_idx", &kvattn_fwd_params::cache_batch_idx},
    {"cache_leftpad", &kvattn_fwd_params::cache_leftpad},
    {"seqused_q", &kvattn_fwd_params::seqused_q},
    {"rotary_seqlens", &kvattn_fwd_params::rotary_seqlens},
};

// Every int32 index tensor.
constexpr NamedTensor kIndexTensors[] = {
    {"cache_seqlens", &kvattn_fwd_params::cache_seqlens},
    {"cache_batch_idx", &kvattn_fwd_params::cache_batch_idx},
    {"cache_leftpad", &kvattn_fwd_params::cache_leftpad},
    {"seqused_q", &kvattn_fwd_params::seqused_q},
    {"rotary_seqlens", &kvattn_fwd_params::rotary_seqlens},
    {"page_table", &kvattn_fwd_params::page_table},
    {"cu_seqlens_q", &kvattn_fwd_params::cu_seqlens_q},
    {"cu_seqlens_k_new", &kvattn_fwd_params::cu_seqlens_k_new},
    {"cu_seqlens_k", &kvattn_fwd_params::cu_seqlens_k},
    {"kv_indptr", &kvattn_fwd_params::kv_indptr},
    {"kv_indices", &kvattn_fwd_params::kv_indices},
};

bool is_descale(const NamedTensor& t) {
  return t.member == &kvattn_fwd_params::q_descale || t.member == &kvattn_fwd_params::k_descale ||
         t.member == &kvattn_fwd_params::v_descale;
}

// Fixed token tensors are (b, s, h, c); varlen ones (total, h, c) with batch_stride 0.
TokenTensor token_tensor(const kvattn_tensor& t, bool varlen) {
  if (!given(t)) return {};
  if (varlen) return {t.data, 0, t.strides[0], t.strides[1]};
  return {t.data, t.strides[0], t.strides[1], t.strides[2]};
}

// Packed caches are (total_k, hk, c); contiguous and paged ones (rows or pages, slots, hk, c).
CacheTensor cache_tensor(const kvattn_tensor& t, bool packed) {
  if (packed) return {t.data, 0, t.strides[0], t.strides[1]};
  return {t.data, t.strides[0], t.strides[1], t.strides[2]};
}

// A slot pool (num_slots, hk, c) as pages of one slot.
CacheTensor slot_pool_tensor(const kvattn_tensor& t) {
  return {t.data, t.strides[0], t.strides[0], t.strides[1]};
}

const int32_t* ints(const kvattn_tensor& t) {
  return static_cast<const int32_t*>(t.data);
}

class FwdValidator {
 public:
  FwdValidator(const kvattn_fwd_params& a, FwdProblem& p) : a_(a), p_(p) {}

  void run() {
    check_device();
    check_tensors_well_formed();
    check_queries();
    check_cache_layout();
    check_new_tokens();
    check_per_sequence_arrays();
    check_dtypes();
    check_outputs();
    check_fwd_options(a_, p_);
    check_fwd_sequences(p_, a_.device_type == KVATTN_DEVICE_CPU);
    check_aliasing();
  }

 private:
  bool varlen_q() const { return given(a_.cu_seqlens_q); }
  bool packed() const { return given(a_.cu_seqlens_k); }
  bool ragged() const { return given(a_.kv_indptr); }
  bool paged() const { return given(a_.page_table) || ragged(); }

  void check_device() {
    expect_device(a_.device_type, a_.device_id);
    p_.device_type = a_.device_type;
    p_.device_id = a_.device_id;
    p_.stream = a_.stream;
  }

  void check_tensors_well_formed() {
    // Descales are often broadcast views (stride 0 everywhere) and lse has no channel dim: their strides
    // are free.
    for (const NamedTensor& t : kTensors) {
      expect_well_formed(t.name, a_.*t.member, is_descale(t) || t.member == &kvattn_fwd_params::lse);
    }
    for (const NamedTensor& t : kIndexTensors) {
      if (given(a_.*t.member)) expect_dtype(t.name, a_.*t.member, kI32);
    }
  }

  // q: (b, sq, hq, d), or (total_q, hq, d) with cu_seqlens_q (b + 1,) and max_seqlen_q.
  void check_queries() {
    const kvattn_tensor& q = a_.q;
    expect_given("q", q);
    if (varlen_q()) {
      expect_ndim("cu_seqlens_q", a_.cu_seqlens_q, 1, "(b + 1,)");
      expect_dim_at_least("cu_seqlens_q", a_.cu_seqlens_q, 0, "b + 1", 1);
      expect_ndim("q", q, 3, "(total_q, hq, d) with cu_seqlens_q");
      if (a_.max_seqlen_q <= 0) {
        invalid("max_seqlen_q: must be > 0 with cu_seqlens_q, got " + std::to_string(a_.max_seqlen_q));
      }
      b_ = a_.cu_seqlens_q.shape[0] - 1;
      sq_ = a_.max_seqlen_q;
      p_.total_q = q.shape[0];
    } else {
      expect_ndim("q", q, 4, "(b, sq, hq, d)");
      b_ = q.shape[0];
      sq_ = q.shape[1];
      p_.total_q = b_ * sq_;
      if (a_.max_seqlen_q != 0 && a_.max_seqlen_q != sq_) {
        invalid("max_seqlen_q: " + std::to_string(a_.max_seqlen_q) +
                " given without cu_seqlens_q does not match sq = " + std::to_string(sq_) + " of q");
      }
    }
    const int32_t head_dim = q.ndim - 1;
    expect_dim_at_least("q", q, head_dim - 1, "hq", 1);
    expect_dim_at_least("q", q, head_dim, "d", 1);
    hq_ = q.shape[head_dim - 1];
    d_ = q.shape[head_dim];
    p_.batch = to_int32("q: b", b_);
    p_.max_seqlen_q = to_int32(varlen_q() ? "max_seqlen_q" : "q: sq", sq_);
    p_.num_q_heads = to_int32("q: hq", hq_);
    p_.head_dim = to_int32("q: d", d_);
    p_.q = token_tensor(q, varlen_q());
    p_.cu_seqlens_q = ints(a_.cu_seqlens_q);
  }

  // Contiguous (b_cache, s_cache, hk, d), paged (num_pages, page_size, hk, d) with page_table, or packed
  // (total_k, hk, d) with cu_seqlens_k; v_cache alike with dv.
  void check_cache_layout() {
    const kvattn_tensor& kc = a_.k_cache;
    const kvattn_tensor& vc = a_.v_cache;
    expect_given("k_cache", kc);
    expect_given("v_cache", vc);
    expect_together("kv_indptr", a_.kv_indptr, "kv_indices", a_.kv_indices);
    if (ragged()) {
      expect_absent("page_table", a_.page_table, "with kv_indptr, kv_indices (two page indexes)");
      expect_absent("cu_seqlens_k", a_.cu_seqlens_k,
                    "with kv_indptr, kv_indices (a packed cache has no pages)");
    }
    if (ragged() && kc.ndim == 3) {
      check_slot_pool();
    } else if (packed()) {
      const std::string because = "with cu_seqlens_k (the rows of a packed cache belong to the sequences)";
      expect_absent("page_table", a_.page_table, because);
      expect_absent("cache_batch_idx", a_.cache_batch_idx, because);
      expect_shape("cu_seqlens_k", a_.cu_seqlens_k, {{b_ + 1, "b + 1"}});
      expect_ndim("k_cache", kc, 3, "(total_k, hk, d) with cu_seqlens_k");
      expect_shape("k_cache", kc, {{kAny, "total_k"}, {kAny, "hk"}, {d_, "d"}});
      expect_shape("v_cache", vc, {{kc.shape[0], "total_k"}, {kc.shape[1], "hk"}, {kAny, "dv"}});
      p_.num_pages = kc.shape[0];
      p_.page_size = 0;
      p_.capacity = kc.shape[0];  // an upper bound; each sequence holds cu_seqlens_k[i+1] - cu_seqlens_k[i]
    } else {
      const char* layout = ragged()  ? "(num_pages, page_size, hk, d), or (num_slots, hk, d), with kv_indptr"
                           : paged() ? "(num_pages, page_size, hk, d) with page_table"
                                     : "(b_cache, s_cache, hk, d)";
      const char* rows = paged() ? "num_pages" : "b_cache";
      const char* slots = paged() ? "page_size" : "s_cache";
      expect_ndim("k_cache", kc, 4, layout);
      expect_shape("k_cache", kc, {{kAny, rows}, {kAny, slots}, {kAny, "hk"}, {d_, "d"}});
      expect_shape("v_cache", vc,
                   {{kc.shape[0], rows}, {kc.shape[1], slots}, {kc.shape[2], "hk"}, {kAny, "dv"}});
      p_.num_pages = kc.shape[0];
      p_.page_size = kc.shape[1];
      p_.capacity = kc.shape[1];
      if (ragged()) {
        check_ragged_index();
      } else if (paged()) {
        check_page_table();
      }
    }
    if (!packed()) {
      // Without cache_batch_idx, sequence i uses row i.
      const int64_t row_count = paged() ? p_.page_table_rows : kc.shape[0];
      if (!given(a_.cache_batch_idx) && row_count < b_) {
        const char* table = ragged() ? "kv_indptr" : paged() ? "page_table" : "k_cache";
        invalid(std::string(table) + ": has " + std::to_string(row_count) +
                " rows, fewer than the batch size b = " + std::to_string(b_) + " (and no cache_batch_idx)" +
                (ragged() ? " (kv_indptr holds rows + 1 entries)" : ""));
      }
    }
    const int32_t last = kc.ndim - 1;
    expect_dim_at_least("k_cache", kc, last - 1, "hk", 1);
    expect_dim_at_least("v_cache", vc, last, "dv", 1);
    hk_ = kc.shape[last - 1];
    dv_ = vc.shape[last];
    if (hq_ % hk_ != 0) {
      invalid("k_cache: hk = " + std::to_string(hk_) +
              " kv heads does not divide hq = " + std::to_string(hq_) + " query heads of q");
    }
    p_.num_kv_heads = to_int32("k_cache: hk", hk_);
    p_.head_dim_v = to_int32("v_cache: dv", dv_);
    // A token's channels over its heads: the 32-bit loop bounds of the q rotation ahead of the sm_90a prefill
    // kernel (q heads) and of the append kernels (kv heads; hk * d <= hq * d).
    to_int32("q: hq * d", hq_ * d_);
    to_int32("v_cache: hk * dv", hk_ * dv_);
    // The kernels index the rows a (sequence, kv head) packs, tokens x the hq / hk heads of its group, in 32
    // bits. q can hold 2^31 of them (a broadcast view, or a small head dim): an error, not a wrong row.
    if (const int64_t rows = sq_ * (hq_ / hk_); rows > kMaxPackedRows) {
      invalid("q: " + std::string(varlen_q() ? "max_seqlen_q" : "sq") + " * (hq / hk) = " +
              std::to_string(sq_) + " * " + std::to_string(hq_ / hk_) + " = " + std::to_string(rows) +
              " packed rows of a sequence and kv head, more than " + std::to_string(kMaxPackedRows));
    }
    p_.k_cache = ragged() && kc.ndim == 3 ? slot_pool_tensor(kc) : cache_tensor(kc, packed());
    p_.v_cache = ragged() && kc.ndim == 3 ? slot_pool_tensor(vc) : cache_tensor(vc, packed());
    p_.cu_seqlens_k = ints(a_.cu_seqlens_k);
    p_.cache_batch_idx = ints(a_.cache_batch_idx);
  }

  void check_page_table() {
    const kvattn_tensor& pt = a_.page_table;
    expect_ndim("page_table", pt, 2, "(b_pt, pages_per_row)");
    expect_dim_at_least("k_cache", a_.k_cache, 1, "page_size", 1);
    p_.page_table = ints(pt);
    p_.page_table_stride = pt.strides[0];
    p_.page_table_rows = pt.shape[0];
    p_.pages_per_row = pt.shape[1];
    p_.capacity = pt.shape[1] * a_.k_cache.shape[1];
  }

  // A slot pool (num_slots, hk, d) with the ragged index: pages of one slot, kv_indices are slot ids.
  void check_slot_pool() {
    const kvattn_tensor& kc = a_.k_cache;
    const kvattn_tensor& vc = a_.v_cache;
    expect_shape("k_cache", kc, {{kAny, "num_slots"}, {kAny, "hk"}, {d_, "d"}});
    expect_shape("v_cache", vc, {{kc.shape[0], "num_slots"}, {kc.shape[1], "hk"}, {kAny, "dv"}});
    p_.num_pages = kc.shape[0];
    p_.page_size = 1;
    check_ragged_index();
  }

  // kv_indptr (b_pt + 1,) and kv_indices (nnz,): their values are checked per sequence (validate_fwd_seqs).
  void check_ragged_index() {
    expect_ndim("kv_indptr", a_.kv_indptr, 1, "(b_pt + 1,)");
    expect_dim_at_least("kv_indptr", a_.kv_indptr, 0, "b_pt + 1", 1);
    expect_ndim("kv_indices", a_.kv_indices, 1, "(nnz,)");
    if (p_.page_size < 1) {
      invalid("k_cache: page_size (dim 1) = " + std::to_string(p_.page_size) +
              ", expected >= 1 with kv_indptr");
    }
    p_.kv_indptr = ints(a_.kv_indptr);
    p_.page_table = ints(a_.kv_indices);
    p_.page_table_stride = 0;
    p_.page_table_rows = a_.kv_indptr.shape[0] - 1;
    p_.page_table_entries = a_.kv_indices.shape[0];
    p_.pages_per_row = 0;
    p_.capacity = p_.page_table_entries * p_.page_size;  // an upper bound: one row may own every entry
  }

  // k, v: (b, s_new, hk, d / dv), or (total_new, hk, d / dv) with cu_seqlens_k_new (b + 1,).
  void check_new_tokens() {
    expect_together("k", a_.k, "v", a_.v);
    const bool varlen = given(a_.cu_seqlens_k_new);
    if (!given(a_.k)) {
      expect_absent("cu_seqlens_k_new", a_.cu_seqlens_k_new, "without k and v");
      return;
    }
    if (varlen) {
      expect_shape("cu_seqlens_k_new", a_.cu_seqlens_k_new, {{b_ + 1, "b + 1"}});
      expect_ndim("k", a_.k, 3, "(total_new, hk, d) with cu_seqlens_k_new");
      expect_shape("k", a_.k, {{kAny, "total_new"}, {hk_, "hk"}, {d_, "d"}});
      expect_shape("v", a_.v, {{a_.k.shape[0], "total_new"}, {hk_, "hk"}, {dv_, "dv"}});
      p_.total_k_new = a_.k.shape[0];
      p_.max_seqlen_k_new = to_int32("k: total_new", a_.k.shape[0]);  // an upper bound of every n_i
    } else {
      expect_ndim("k", a_.k, 4, "(b, s_new, hk, d)");
      expect_shape("k", a_.k, {{b_, "b"}, {kAny, "s_new"}, {hk_, "hk"}, {d_, "d"}});
      expect_shape("v", a_.v, {{b_, "b"}, {a_.k.shape[1], "s_new"}, {hk_, "hk"}, {dv_, "dv"}});
      p_.max_seqlen_k_new = to_int32("k: s_new", a_.k.shape[1]);
      p_.total_k_new = b_ * a_.k.shape[1];
    }
    p_.k_new = token_tensor(a_.k, varlen);
    p_.v_new = token_tensor(a_.v, varlen);
    p_.cu_seqlens_k_new = ints(a_.cu_seqlens_k_new);
  }

  void check_per_sequence_arrays() {
    for (const NamedTensor& t : kPerSequence) {
      if (given(a_.*t.member)) expect_shape(t.name, a_.*t.member, {{b_, "b"}});
    }
    if (given(a_.cache_seqlens) && a_.cache_seqlens_value >= 0) {
      invalid("cache_seqlens_value: " + std::to_string(a_.cache_seqlens_value) +
              " given together with cache_seqlens (set it to -1)");
    }
    p_.cache_seqlens = ints(a_.cache_seqlens);
    // kvattn.h: any negative value means the full capacity (-2^32 too: never narrowed to 0 by truncation).
    const int64_t value = a_.cache_seqlens_value;
    p_.cache_seqlens_value =
        given(a_.cache_seqlens) || value < 0 ? -1 : to_int32("cache_seqlens_value", value);
    p_.cache_leftpad = ints(a_.cache_leftpad);
    p_.seqused_q = ints(a_.seqused_q);
  }

  // q f32/f16/bf16/fp8 (f32 on the CPU backend only); caches as q, or fp8 under f16/bf16 q; k, v and qv
  // as q (fp8 q needs an fp8 cache).
  void check_dtypes() {
    const kvattn_dtype qd = a_.q.dtype;
    expect_dtype_in("q", a_.q, {kF32, kF16, kBF16, kFP8});
    if (a_.device_type == KVATTN_DEVICE_CUDA && qd == kF32) {
      reject(KVATTN_ERROR_UNSUPPORTED,
             "q: dtype float32 is supported on the CPU backend only (device_type=CUDA)");
    }
    const bool fp8_cache_ok = qd == kF16 || qd == kBF16 || qd == kFP8;
    if (!(fp8_cache_ok && a_.k_cache.dtype == kFP8)) expect_dtype_as("k_cache", a_.k_cache, "q", qd);
    expect_dtype_as("v_cache", a_.v_cache, "k_cache", a_.k_cache.dtype);
    if (given(a_.k)) expect_dtype_as("k", a_.k, "q", qd);
    if (given(a_.v)) expect_dtype_as("v", a_.v, "q", qd);
    if (given(a_.qv)) expect_dtype_as("qv", a_.qv, "q", qd);
    p_.q_dtype = static_cast<DType>(qd);
    p_.kv_dtype = static_cast<DType>(a_.k_cache.dtype);
  }

  // out (required) and qv: as q with dv; lse: fp32 (b, hq, sq), or (hq, total_q) with cu_seqlens_q.
  void check_outputs() {
    const kvattn_dtype qd = a_.q.dtype;
    expect_given("out", a_.out);
    const kvattn_dtype out_dtype = qd == kFP8 ? kBF16 : qd;
    expect_dtype_as("out", a_.out, qd == kFP8 ? "the output dtype of float8_e4m3fn q" : "q", out_dtype);
    for (const NamedTensor& t :
         {NamedTensor{"out", &kvattn_fwd_params::out}, NamedTensor{"qv", &kvattn_fwd_params::qv}}) {
      const kvattn_tensor& x = a_.*t.member;
      if (!given(x)) continue;
      if (varlen_q()) {
        expect_shape(t.name, x, {{p_.total_q, "total_q"}, {hq_, "hq"}, {dv_, "dv"}});
      } else {
        expect_shape(t.name, x, {{b_, "b"}, {sq_, "sq"}, {hq_, "hq"}, {dv_, "dv"}});
      }
    }
    p_.out_dtype = static_cast<DType>(out_dtype);
    p_.out = token_tensor(a_.out, varlen_q());
    p_.qv = token_tensor(a_.qv, varlen_q());
    const kvattn_tensor& lse = a_.lse;
    if (!given(lse)) return;
    expect_dtype("lse", lse, kF32);
    if (varlen_q()) {
      expect_shape("lse", lse, {{hq_, "hq"}, {p_.total_q, "total_q"}});
      p_.lse_head_stride = lse.strides[0];
      p_.lse_token_stride = lse.strides[1];
    } else {
      expect_shape("lse", lse, {{b_, "b"}, {hq_, "hq"}, {sq_, "sq"}});
      p_.lse_batch_stride = lse.strides[0];
      p_.lse_head_stride = lse.strides[1];
      p_.lse_token_stride = lse.strides[2];
    }
    p_.lse = static_cast<float*>(lse.data);
  }

  // out and lse are written, and so are k_cache and v_cache when k, v are appended (in place, on purpose:
  // they may be views of one buffer). Everything else is only read. docs/DESIGN.md, "Aliasing".
  void check_aliasing() {
    static_assert(std::size(kTensors) <= kMaxAccesses, "expect_disjoint_outputs' bound");
    const bool append = given(a_.k);
    Access written[kMaxAccesses] = {{"out", &a_.out}, {"lse", &a_.lse}};
    Access read[kMaxAccesses];
    size_t n_written = 2, n_read = 0;
    for (const NamedTensor& t : kTensors) {
      const bool cache = t.member == &kvattn_fwd_params::k_cache || t.member == &kvattn_fwd_params::v_cache;
      if (t.member == &kvattn_fwd_params::out || t.member == &kvattn_fwd_params::lse) continue;
      if (cache && append) {
        written[n_written++] = {t.name, &(a_.*t.member), true};
      } else {
        read[n_read++] = {t.name, &(a_.*t.member)};
      }
    }
    expect_disjoint_outputs(written, n_written, read, n_read);
  }

  const kvattn_fwd_params& a_;
  FwdProblem& p_;
  int64_t b_ = 0, sq_ = 0, hq_ = 0, d_ = 0, hk_ = 0, dv_ = 0;
};

}  // namespace

kvattn_status validate_fwd_workspace(const kvattn_fwd_params& args, size_t needed) {
  if (needed == 0) return KVATTN_OK;
  return run_checks([&] {
    const uintptr_t begin = reinterpret_cast<uintptr_t>(args.workspace);
    if (begin == 0) {
      invalid("workspace: required (" + std::to_string(needed) +
              " bytes, see kvattn_fwd_workspace_size), got NULL");
    }
    if (args.workspace_bytes < needed) {
      invalid("workspace_bytes: " + std::to_string(args.workspace_bytes) + " is less than the " +
              std::to_string(needed) + " bytes that kvattn_fwd_workspace_size() asks for");
    }
    constexpr uintptr_t kWorkspaceAlignment = 256;
    if (begin % kWorkspaceAlignment != 0) {
      invalid("workspace: must be 256-byte aligned, got address " + std::to_string(begin));
    }
    // The call writes the first `needed` bytes: an argument there would be overwritten under the kernels
    // (the decode kernel's producer and consumers, reading lengths it had changed, could wait forever).
    if (begin + needed < begin) {
      invalid("workspace: " + std::to_string(needed) + " bytes from address " + std::to_string(begin) +
              " wrap the address space");
    }
    const Extent ws{0, 0, 1, begin, begin + needed};
    for (const NamedTensor& t : kTensors) {
      if (!given(args.*t.member)) continue;
      const Extent e = expect_extent(t.name, args.*t.member);
      if (overlap(ws, e)) {
        invalid("workspace: its first " + std::to_string(needed) + " bytes, which the call writes, overlap " +
                t.name + " (workspace bytes [" + std::to_string(ws.begin) + ", " + std::to_string(ws.end) +
                "), " + t.name + " [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                ")); the workspace must not alias other arguments");
      }
    }
  });
}

kvattn_status validate_fwd(const kvattn_fwd_params& args, FwdProblem* problem, CudaFwdCall* cuda) {
  FwdProblem p;
  kvattn_fwd_params used = args;  // every tensor with_used_strides (checks.hpp)
  for (const NamedTensor& t : kTensors) used.*t.member = with_used_strides(used.*t.member);
  kvattn_status status = run_checks([&] { FwdValidator(used, p).run(); });
  if (status == KVATTN_OK && p.device_type == KVATTN_DEVICE_CUDA) status = cuda_fwd_resolve(p, cuda);
  if (status == KVATTN_OK) *problem = p;
  return status;
}

}  // namespace kvattn
