// Host buffers, a valid baseline call per operation, and error assertions for the C ABI tests.
#pragma once

#include <gtest/gtest.h>
#include <kvattn/kvattn.h>

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <list>
#include <string>
#include <vector>

namespace kvattn_test {

constexpr kvattn_dtype F32 = KVATTN_DTYPE_F32;
constexpr kvattn_dtype F16 = KVATTN_DTYPE_F16;
constexpr kvattn_dtype BF16 = KVATTN_DTYPE_BF16;
constexpr kvattn_dtype FP8 = KVATTN_DTYPE_FP8_E4M3;
constexpr kvattn_dtype I32 = KVATTN_DTYPE_I32;
constexpr kvattn_dtype I64 = KVATTN_DTYPE_I64;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// A host buffer with a contiguous tensor view. The storage holds 8 bytes per element, enough for any dtype.
class Buf {
 public:
  Buf(kvattn_dtype dtype, std::vector<int64_t> shape) {
    t.dtype = dtype;
    t.ndim = static_cast<int32_t>(shape.size());
    int64_t numel = 1;
    for (int32_t i = t.ndim - 1; i >= 0; --i) {
      t.shape[i] = shape[i];
      t.strides[i] = numel;
      numel *= shape[i];
    }
    storage_.assign(static_cast<size_t>(numel > 0 ? numel : 1), 0.0);
    t.data = storage_.data();
    numel_ = numel;
  }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;

  int64_t numel() const { return numel_; }
  float* f32() { return reinterpret_cast<float*>(storage_.data()); }
  int32_t* i32() { return reinterpret_cast<int32_t*>(storage_.data()); }
  int64_t* i64() { return reinterpret_cast<int64_t*>(storage_.data()); }
  void fill_f32(float v) {
    for (int64_t i = 0; i < numel_; ++i) f32()[i] = v;
  }
  void set_i32(std::initializer_list<int32_t> values) {
    int64_t i = 0;
    for (int32_t v : values) i32()[i++] = v;
  }

  kvattn_tensor t{};

 private:
  std::vector<double> storage_;
  int64_t numel_ = 0;
};

// Owns the buffers behind a params struct; attach() sets a tensor field to a new buffer.
template <class Params>
class Call {
 public:
  Params p{};
  Buf& attach(kvattn_tensor Params::*field, kvattn_dtype dtype, std::vector<int64_t> shape) {
    Buf& buf = bufs_.emplace_back(dtype, std::move(shape));
    p.*field = buf.t;
    return buf;
  }

 private:
  std::list<Buf> bufs_;  // stable addresses
};

// A valid kvattn_fwd call on the CPU backend: b = 2, sq = 1, hq = 4, hk = 2, d = dv = 8, contiguous cache of
// s_cache = 16 slots, f32, cache_seqlens = {3, 5}. Inputs are small deterministic values.
struct FwdCall : Call<kvattn_fwd_params> {
  static constexpr int64_t b = 2, sq = 1, hq = 4, hk = 2, d = 8, dv = 8, s_cache = 16;
  Buf *q, *k_cache, *v_cache, *out, *cache_seqlens;

  explicit FwdCall(kvattn_dtype dtype = F32) {
    kvattn_fwd_params_init(&p);
    q = &attach(&kvattn_fwd_params::q, dtype, {b, sq, hq, d});
    k_cache = &attach(&kvattn_fwd_params::k_cache, dtype, {b, s_cache, hk, d});
    v_cache = &attach(&kvattn_fwd_params::v_cache, dtype, {b, s_cache, hk, dv});
    out = &attach(&kvattn_fwd_params::out, dtype, {b, sq, hq, dv});
    cache_seqlens = &attach(&kvattn_fwd_params::cache_seqlens, I32, {b});
    cache_seqlens->set_i32({3, 5});
    if (dtype == F32) {
      for (Buf* x : {q, k_cache, v_cache}) {
        for (int64_t i = 0; i < x->numel(); ++i) x->f32()[i] = static_cast<float>((i * 7) % 11) / 11.f - 0.5f;
      }
      out->fill_f32(kNaN);
    }
  }

  // Appended tokens: k, v of (b, s_new, hk, d / dv).
  void add_new_tokens(int64_t s_new) {
    attach(&kvattn_fwd_params::k, p.q.dtype, {b, s_new, hk, d}).fill_f32(0.25f);
    attach(&kvattn_fwd_params::v, p.q.dtype, {b, s_new, hk, dv}).fill_f32(0.75f);
  }

  // Turns the cache into a paged one: num_pages pages of page_size slots, page_table (b, pages_per_row)
  // with rows {0, 1, ...}, {pages_per_row, ...}.
  Buf& make_paged(int64_t num_pages, int64_t page_size, int64_t pages_per_row) {
    k_cache = &attach(&kvattn_fwd_params::k_cache, p.q.dtype, {num_pages, page_size, hk, d});
    v_cache = &attach(&kvattn_fwd_params::v_cache, p.q.dtype, {num_pages, page_size, hk, dv});
    Buf& table = attach(&kvattn_fwd_params::page_table, I32, {b, pages_per_row});
    for (int64_t i = 0; i < table.numel(); ++i) table.i32()[i] = static_cast<int32_t>(i % num_pages);
    return table;
  }
};

// The status and message of one call, for assertions.
struct Result {
  kvattn_status status;
  std::string message;
};

inline Result check(const kvattn_fwd_params& p) {
  const kvattn_status s = kvattn_check(&p);
  return {s, kvattn_last_error()};
}
inline Result fwd(const kvattn_fwd_params& p) {
  const kvattn_status s = kvattn_fwd(&p);
  return {s, kvattn_last_error()};
}

// `result` failed with `status` and its message contains every fragment (argument name, index, value).
inline ::testing::AssertionResult rejected(const Result& result, kvattn_status status,
                                           std::initializer_list<const char*> fragments) {
  if (result.status != status) {
    return ::testing::AssertionFailure() << "status " << result.status << ", expected " << status
                                         << "; message: \"" << result.message << "\"";
  }
  for (const char* fragment : fragments) {
    if (result.message.find(fragment) == std::string::npos) {
      return ::testing::AssertionFailure()
             << "message \"" << result.message << "\" lacks \"" << fragment << "\"";
    }
  }
  return ::testing::AssertionSuccess();
}

// kvattn_check and kvattn_fwd both reject `p` with the same status and message.
inline ::testing::AssertionResult fwd_rejected(const kvattn_fwd_params& p, kvattn_status status,
                                               std::initializer_list<const char*> fragments) {
  const Result checked = check(p);
  ::testing::AssertionResult by_check = rejected(checked, status, fragments);
  if (!by_check) return by_check << " (kvattn_check)";
  const Result ran = fwd(p);
  if (ran.status != checked.status || ran.message != checked.message) {
    return ::testing::AssertionFailure() << "kvattn_fwd disagrees with kvattn_check: status " << ran.status
                                         << ", message \"" << ran.message << "\"";
  }
  return ::testing::AssertionSuccess();
}

inline ::testing::AssertionResult invalid(const kvattn_fwd_params& p,
                                          std::initializer_list<const char*> fragments) {
  return fwd_rejected(p, KVATTN_ERROR_INVALID_ARGUMENT, fragments);
}

inline ::testing::AssertionResult ok(const Result& result) {
  if (result.status == KVATTN_OK && result.message.empty()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "status " << result.status << ", message \"" << result.message << "\"";
}

}  // namespace kvattn_test
