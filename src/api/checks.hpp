// The vocabulary of validation: small checks that read like a checklist. Each returns normally or throws a
// Rejection; validate_*() catch it and turn it into fail(status, message), so a Rejection never leaves
// src/api. Messages are generated from the argument's name: "<name>: <what was expected>, got <value>".
#pragma once

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "kvattn/kvattn.h"

namespace kvattn {

// Short names of the dtypes the checks name.
constexpr kvattn_dtype kF32 = KVATTN_DTYPE_F32;
constexpr kvattn_dtype kF16 = KVATTN_DTYPE_F16;
constexpr kvattn_dtype kBF16 = KVATTN_DTYPE_BF16;
constexpr kvattn_dtype kFP8 = KVATTN_DTYPE_FP8_E4M3;
constexpr kvattn_dtype kI32 = KVATTN_DTYPE_I32;

struct Rejection {
  kvattn_status status;
  std::string message;
};

[[noreturn]] void reject(kvattn_status status, const std::string& message);
[[noreturn]] inline void invalid(const std::string& message) {
  reject(KVATTN_ERROR_INVALID_ARGUMENT, message);
}

// Runs `checks` (which may throw Rejection) and returns KVATTN_OK, or fail()s with the rejection.
template <class Checks>
kvattn_status run_checks(Checks&& checks);

const char* dtype_name(kvattn_dtype dtype);
const char* device_name(kvattn_device_type device);
std::string shape_str(const kvattn_tensor& t);  // "(2, 16, 4, 64)", "(3,)", "()"

inline bool given(const kvattn_tensor& t) {
  return t.data != nullptr;
}

// t with the stride of each size-1 dim replaced by the one a contiguous tensor would have there. No offset
// multiplies such a stride by anything but 0, so a caller may pass any value (PyTorch does), but backends
// also multiply strides by constants (a prefetch span, a TMA stride in bytes): a fuzzed -2^63 + 4 there
// overflowed the CPU backend's prefetch. The validators read their arguments through it.
kvattn_tensor with_used_strides(kvattn_tensor t);

// A named expected size of one dimension; kAny matches every size.
constexpr int64_t kAny = -1;
struct Dim {
  int64_t size;
  const char* symbol;  // "b", "hq", "d", ...
};

// The integer a C caller stored in an enum field, read without loading the enum: any int is legal in C,
// but loading a C++ enum outside its range is undefined behaviour.
template <class Enum>
int32_t raw_enum(const Enum& field) {
  static_assert(sizeof(Enum) == sizeof(int32_t), "C enums are int-sized");
  int32_t raw;
  std::memcpy(&raw, &field, sizeof(raw));
  return raw;
}

// device_type is CPU or CUDA; device_id >= 0 on CUDA.
void expect_device(const kvattn_device_type& device_type, int32_t device_id);

// For every tensor that is given: ndim in [0, KVATTN_MAX_DIMS], a known dtype, sizes >= 0 and (unless
// `last_dim_free`) a contiguous last dimension; its extent fits int64 and its data pointer is aligned to the
// dtype (extent.hpp). Later checks and the backends rely on these.
void expect_well_formed(const char* name, const kvattn_tensor& t, bool last_dim_free = false);

void expect_given(const char* name, const kvattn_tensor& t);
// "v: must be given together with k (k is given, v is not)"
void expect_together(const char* name_a, const kvattn_tensor& a, const char* name_b, const kvattn_tensor& b);
// "page_table: must not be given with cu_seqlens_k (...)"
void expect_absent(const char* name, const kvattn_tensor& t, std::string_view because);

// "q: expected 4 dims (b, sq, hq, d), got 3 dims, shape (2, 8, 64)"
void expect_ndim(const char* name, const kvattn_tensor& t, int32_t ndim, const char* layout);
// "k_cache: expected shape (b_cache, s_cache, hk, d) = (*, *, *, 128), got (2, 16, 4, 64)"
void expect_shape(const char* name, const kvattn_tensor& t, const Dim* dims, size_t n);
inline void expect_shape(const char* name, const kvattn_tensor& t, std::initializer_list<Dim> dims) {
  expect_shape(name, t, dims.begin(), dims.size());
}
inline void expect_shape(const char* name, const kvattn_tensor& t, const std::vector<Dim>& dims) {
  expect_shape(name, t, dims.data(), dims.size());
}
// "q: hq (dim 2) must be >= 1, got 0"
void expect_dim_at_least(const char* name, const kvattn_tensor& t, int32_t dim, const char* symbol,
                         int64_t min);

// "cache_seqlens: expected dtype int32, got int64"
void expect_dtype(const char* name, const kvattn_tensor& t, kvattn_dtype dtype);
// "k_cache: dtype bfloat16 does not match q (float16)"
void expect_dtype_as(const char* name, const kvattn_tensor& t, const char* other, kvattn_dtype dtype);
// "q: expected dtype float32, float16, bfloat16 or float8_e4m3fn, got int32" (each dtype named once).
// Dtypes are named as numpy and torch name them (float32, bfloat16, float8_e4m3fn, int32, ...).
void expect_dtype_in(const char* name, const kvattn_tensor& t, std::initializer_list<kvattn_dtype> dtypes);

// "<what> = <value> is outside [lo, hi) (<bound>)", e.g. "page_table[2, 5] = 99 is outside [0, 64)
// (num_pages of k_cache)". expect_in_closed checks [lo, hi].
void expect_in_range(std::string_view what, int64_t value, int64_t lo, int64_t hi, std::string_view bound);
void expect_in_closed(std::string_view what, int64_t value, int64_t lo, int64_t hi, std::string_view bound);

// Values the problem stores as int32, both bounds checked: "q: hq = 3000000000 does not fit in int32 ...".
int32_t to_int32(std::string_view what, int64_t value);

// ---- implementation of the template
kvattn_status fail_with(const Rejection& rejection);

template <class Checks>
kvattn_status run_checks(Checks&& checks) {
  try {
    checks();
    return KVATTN_OK;
  } catch (const Rejection& rejection) {
    return fail_with(rejection);
  }
}

}  // namespace kvattn
