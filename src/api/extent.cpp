// Extents, alignment and overlap of tensor arguments (extent.hpp). Linear in the number of tensors for
// the extents, quadratic in it (at most 24 x 24 pairs) for the overlaps; nothing depends on sizes.
#include "api/extent.hpp"

#include <limits>
#include <stdexcept>
#include <string>

#include "api/checks.hpp"

namespace kvattn {
namespace {

std::string strides_str(const kvattn_tensor& t) {
  std::string s = "(";
  for (int32_t i = 0; i < t.ndim; ++i) s += (i ? ", " : "") + std::to_string(t.strides[i]);
  return s + (t.ndim == 1 ? ",)" : ")");
}

[[noreturn]] void overflow(const char* name, const kvattn_tensor& t, const char* what) {
  invalid(std::string(name) + ": shape " + shape_str(t) + " with strides " + strides_str(t) + " " + what);
}

}  // namespace

int64_t dtype_size(kvattn_dtype dtype) {
  switch (raw_enum(dtype)) {
    case KVATTN_DTYPE_F32:
    case KVATTN_DTYPE_I32:
      return 4;
    case KVATTN_DTYPE_F16:
    case KVATTN_DTYPE_BF16:
      return 2;
    case KVATTN_DTYPE_FP8_E4M3:
      return 1;
    case KVATTN_DTYPE_I64:
      return 8;
    default:
      return 0;
  }
}

Extent expect_extent(const char* name, const kvattn_tensor& t) {
  Extent e;
  e.numel = 1;
  for (int32_t i = 0; i < t.ndim; ++i) {
    const int64_t size = t.shape[i];
    if (__builtin_mul_overflow(e.numel, size, &e.numel)) overflow(name, t, "has more than 2^63 - 1 elements");
    if (size <= 1) continue;
    int64_t reach;  // (size - 1) * stride, the farthest offset this dim adds
    int64_t* bound = t.strides[i] < 0 ? &e.lo : &e.hi;
    if (__builtin_mul_overflow(size - 1, t.strides[i], &reach) ||
        __builtin_add_overflow(*bound, reach, bound)) {
      overflow(name, t, "reach element offsets beyond int64");
    }
  }
  const int64_t size = dtype_size(t.dtype);
  const uintptr_t data = reinterpret_cast<uintptr_t>(t.data);
  if (size > 1 && data % size != 0) {
    invalid(std::string(name) + ": data pointer " + std::to_string(data) + " is not aligned to the " +
            std::to_string(size) + "-byte elements of dtype " + dtype_name(t.dtype));
  }
  // Byte offsets: [lo * size, (hi + 1) * size) from data, inside int64 and inside the address space.
  int64_t lo_bytes, hi_bytes;
  if (__builtin_mul_overflow(e.lo, size, &lo_bytes) || __builtin_add_overflow(e.hi, 1, &hi_bytes) ||
      __builtin_mul_overflow(hi_bytes, size, &hi_bytes)) {
    overflow(name, t, "reach byte offsets beyond int64");
  }
  if (e.numel == 0) {
    e.begin = e.end = data;
    return e;
  }
  const uintptr_t below = uintptr_t(0) - uintptr_t(lo_bytes);  // lo_bytes <= 0, INT64_MIN included
  if (data < below || std::numeric_limits<uintptr_t>::max() - data < uintptr_t(hi_bytes)) {
    overflow(name, t, "reach bytes outside the address space from its data pointer");
  }
  e.begin = data - below;
  e.end = data + uintptr_t(hi_bytes);
  return e;
}

namespace {

// Distinct indices reach distinct elements when, with the dims of size > 1 sorted by |stride|, each
// stride exceeds the span of the dims inside it (sufficient; exotic interleavings are rejected).
void expect_no_self_overlap(const char* name, const kvattn_tensor& t) {
  int32_t dims[KVATTN_MAX_DIMS];
  int32_t n = 0;
  for (int32_t i = 0; i < t.ndim && i < KVATTN_MAX_DIMS; ++i) {
    if (t.shape[i] > 1) dims[n++] = i;
  }
  auto magnitude = [&](int32_t i) {
    return t.strides[i] < 0 ? -uint64_t(t.strides[i]) : uint64_t(t.strides[i]);
  };
  // Insertion sort of at most KVATTN_MAX_DIMS dims (std::sort's >16-element path made GCC 12 warn).
  for (int32_t k = 1; k < n; ++k) {
    const int32_t d = dims[k];
    int32_t j = k;
    for (; j > 0 && magnitude(d) < magnitude(dims[j - 1]); --j) dims[j] = dims[j - 1];
    dims[j] = d;
  }
  uint64_t span = 0;  // largest |offset| the inner dims reach; fits: the extent was checked
  for (int32_t k = 0; k < n; ++k) {
    const int32_t i = dims[k];
    if (magnitude(i) <= span) {
      invalid(std::string(name) + ": is written, but its shape " + shape_str(t) + " and strides " +
              strides_str(t) + " reach some elements more than once (stride " + std::to_string(t.strides[i]) +
              " of dim " + std::to_string(i) + ")");
    }
    span += magnitude(i) * uint64_t(t.shape[i] - 1);
  }
}

}  // namespace

bool overlap(const Extent& a, const Extent& b) {
  return a.numel > 0 && b.numel > 0 && a.begin < b.end && b.begin < a.end;
}

void expect_disjoint_outputs(const Access* written, size_t n_written, const Access* read, size_t n_read) {
  if (n_written > kMaxAccesses || n_read > kMaxAccesses) throw std::length_error("expect_disjoint_outputs");
  Extent w[kMaxAccesses], r[kMaxAccesses];
  for (size_t i = 0; i < n_written; ++i) {
    if (!given(*written[i].tensor)) continue;
    w[i] = expect_extent(written[i].name, *written[i].tensor);
    expect_no_self_overlap(written[i].name, *written[i].tensor);
  }
  for (size_t j = 0; j < n_read; ++j) {
    if (given(*read[j].tensor)) r[j] = expect_extent(read[j].name, *read[j].tensor);
  }
  auto reject_overlap = [](const Access& x, const Access& y, const char* role) {
    invalid(std::string(x.name) + ": is written, and its memory overlaps " + y.name + " (" + role +
            "); outputs must not alias other arguments");
  };
  for (size_t i = 0; i < n_written; ++i) {
    for (size_t k = i + 1; k < n_written; ++k) {
      if (written[i].shared_state && written[k].shared_state) continue;
      if (overlap(w[i], w[k])) reject_overlap(written[i], written[k], "also written");
    }
    for (size_t j = 0; j < n_read; ++j) {
      if (overlap(w[i], r[j])) reject_overlap(written[i], read[j], "an input");
    }
  }
}

}  // namespace kvattn
