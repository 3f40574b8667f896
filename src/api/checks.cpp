// The checks of checks.hpp and the formatting of their messages.
#include "api/checks.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <sstream>

#include "api/extent.hpp"
#include "api/status.hpp"

namespace kvattn {

void reject(kvattn_status status, const std::string& message) {
  throw Rejection{status, message};
}

kvattn_status fail_with(const Rejection& rejection) {
  return fail(rejection.status, rejection.message);
}

const char* dtype_name(kvattn_dtype dtype) {
  switch (dtype) {
    case KVATTN_DTYPE_NONE:
      return "none";
    case KVATTN_DTYPE_F32:
      return "float32";
    case KVATTN_DTYPE_F16:
      return "float16";
    case KVATTN_DTYPE_BF16:
      return "bfloat16";
    case KVATTN_DTYPE_FP8_E4M3:
      return "float8_e4m3fn";
    case KVATTN_DTYPE_I32:
      return "int32";
    case KVATTN_DTYPE_I64:
      return "int64";
  }
  return "unknown";
}

const char* device_name(kvattn_device_type device) {
  switch (device) {
    case KVATTN_DEVICE_CPU:
      return "CPU";
    case KVATTN_DEVICE_CUDA:
      return "CUDA";
  }
  return "unknown";
}

namespace {

std::string join_dims(const int64_t* sizes, int32_t n) {
  std::ostringstream s;
  s << "(";
  for (int32_t i = 0; i < n; ++i) s << (i ? ", " : "") << sizes[i];
  s << (n == 1 ? ",)" : ")");
  return s.str();
}

std::string got_shape(const kvattn_tensor& t) {
  return std::to_string(t.ndim) + (t.ndim == 1 ? " dim" : " dims") + ", shape " + shape_str(t);
}

}  // namespace

kvattn_tensor with_used_strides(kvattn_tensor t) {
  const int n = t.ndim < 0 ? 0 : (t.ndim < KVATTN_MAX_DIMS ? t.ndim : KVATTN_MAX_DIMS);
  for (int d = n - 1; d >= 0; --d) {
    if (t.shape[d] != 1) continue;
    int64_t inner = 1;
    if (d + 1 < n) {
      const int64_t s = t.strides[d + 1];
      const int64_t magnitude = s == INT64_MIN ? INT64_MAX : (s < 0 ? -s : s);
      if (__builtin_mul_overflow(magnitude, t.shape[d + 1] > 0 ? t.shape[d + 1] : 0, &inner)) inner = 0;
    }
    t.strides[d] = inner;
  }
  return t;
}

std::string shape_str(const kvattn_tensor& t) {
  return join_dims(t.shape, t.ndim);
}

void expect_device(const kvattn_device_type& device_type, int32_t device_id) {
  const int32_t raw = raw_enum(device_type);
  if (raw != KVATTN_DEVICE_CPU && raw != KVATTN_DEVICE_CUDA) {
    invalid("device_type: expected CPU (0) or CUDA (1), got " + std::to_string(raw));
  }
  if (raw == KVATTN_DEVICE_CUDA && device_id < 0) {
    invalid("device_id: must be >= 0 with device_type=CUDA, got " + std::to_string(device_id));
  }
}

void expect_well_formed(const char* name, const kvattn_tensor& t, bool last_dim_free) {
  if (!given(t)) return;
  if (t.ndim < 0 || t.ndim > KVATTN_MAX_DIMS) {
    invalid(std::string(name) + ": ndim must be in [0, " + std::to_string(KVATTN_MAX_DIMS) + "], got " +
            std::to_string(t.ndim));
  }
  const int32_t dtype = raw_enum(t.dtype);
  if (dtype < KVATTN_DTYPE_F32 || dtype > KVATTN_DTYPE_I64) {
    invalid(std::string(name) + ": unknown dtype " + std::to_string(dtype));
  }
  // Sizes up to 2^31 - 1 keep every product of two sizes (b * sq, pages * page_size) inside int64.
  constexpr int64_t kMaxSize = std::numeric_limits<int32_t>::max();
  for (int32_t i = 0; i < t.ndim; ++i) {
    if (t.shape[i] < 0) invalid(std::string(name) + ": negative size in shape " + shape_str(t));
    if (t.shape[i] > kMaxSize) {
      invalid(std::string(name) + ": size " + std::to_string(t.shape[i]) + " of dim " + std::to_string(i) +
              " exceeds 2^31 - 1");
    }
  }
  const int32_t last = t.ndim - 1;
  // A last dimension of size 1 has no stride that matters.
  if (!last_dim_free && t.ndim > 0 && t.shape[last] > 1 && t.strides[last] != 1) {
    invalid(std::string(name) + ": last dimension must be contiguous (stride 1), got stride " +
            std::to_string(t.strides[last]));
  }
  expect_extent(name, t);  // offsets inside int64, data aligned: backends compute offsets unchecked
}

void expect_given(const char* name, const kvattn_tensor& t) {
  if (!given(t)) invalid(std::string(name) + ": required, got NULL data");
}

void expect_together(const char* name_a, const kvattn_tensor& a, const char* name_b, const kvattn_tensor& b) {
  if (given(a) == given(b)) return;
  const char* missing = given(a) ? name_b : name_a;
  const char* other = given(a) ? name_a : name_b;
  invalid(std::string(missing) + ": must be given together with " + other + " (" + other + " is given, " +
          missing + " is not)");
}

void expect_absent(const char* name, const kvattn_tensor& t, std::string_view because) {
  if (given(t)) invalid(std::string(name) + ": must not be given " + std::string(because));
}

void expect_ndim(const char* name, const kvattn_tensor& t, int32_t ndim, const char* layout) {
  if (t.ndim != ndim) {
    invalid(std::string(name) + ": expected " + std::to_string(ndim) + (ndim == 1 ? " dim " : " dims ") +
            layout + ", got " + got_shape(t));
  }
}

void expect_shape(const char* name, const kvattn_tensor& t, const Dim* dims_begin, size_t n) {
  const Dim* dims_end = dims_begin + n;
  bool ok = t.ndim == static_cast<int32_t>(n);
  int32_t i = 0;
  for (const Dim* d = dims_begin; d != dims_end; ++d) {
    const Dim& dim = *d;
    if (ok && dim.size != kAny && t.shape[i] != dim.size) ok = false;
    ++i;
  }
  if (ok) return;
  std::ostringstream symbols, sizes;
  i = 0;
  for (const Dim* d = dims_begin; d != dims_end; ++d) {
    const Dim& dim = *d;
    symbols << (i ? ", " : "") << dim.symbol;
    sizes << (i ? ", " : "");
    if (dim.size == kAny) {
      sizes << "*";
    } else {
      sizes << dim.size;
    }
    ++i;
  }
  const char* close = n == 1 ? ",)" : ")";
  invalid(std::string(name) + ": expected shape (" + symbols.str() + close + " = (" + sizes.str() + close +
          ", got " + shape_str(t));
}

void expect_dim_at_least(const char* name, const kvattn_tensor& t, int32_t dim, const char* symbol,
                         int64_t min) {
  if (t.shape[dim] < min) {
    invalid(std::string(name) + ": " + symbol + " (dim " + std::to_string(dim) +
            ") must be >= " + std::to_string(min) + ", got " + std::to_string(t.shape[dim]));
  }
}

void expect_dtype(const char* name, const kvattn_tensor& t, kvattn_dtype dtype) {
  if (t.dtype != dtype) {
    invalid(std::string(name) + ": expected dtype " + dtype_name(dtype) + ", got " + dtype_name(t.dtype));
  }
}

void expect_dtype_as(const char* name, const kvattn_tensor& t, const char* other, kvattn_dtype dtype) {
  if (t.dtype != dtype) {
    invalid(std::string(name) + ": dtype " + dtype_name(t.dtype) + " does not match " + other + " (" +
            dtype_name(dtype) + ")");
  }
}

void expect_dtype_in(const char* name, const kvattn_tensor& t, std::initializer_list<kvattn_dtype> dtypes) {
  std::vector<kvattn_dtype> allowed;  // each once: {f32, q's dtype} may name f32 twice
  for (kvattn_dtype dtype : dtypes) {
    if (t.dtype == dtype) return;
    if (std::find(allowed.begin(), allowed.end(), dtype) == allowed.end()) allowed.push_back(dtype);
  }
  std::string list;
  for (size_t i = 0; i < allowed.size(); ++i) {
    list += (i == 0 ? "" : (i + 1 == allowed.size() ? " or " : ", "));
    list += dtype_name(allowed[i]);
  }
  invalid(std::string(name) + ": expected dtype " + list + ", got " + dtype_name(t.dtype));
}

void expect_in_range(std::string_view what, int64_t value, int64_t lo, int64_t hi, std::string_view bound) {
  if (value < lo || value >= hi) {
    invalid(std::string(what) + " = " + std::to_string(value) + " is outside [" + std::to_string(lo) + ", " +
            std::to_string(hi) + ") (" + std::string(bound) + ")");
  }
}

void expect_in_closed(std::string_view what, int64_t value, int64_t lo, int64_t hi, std::string_view bound) {
  if (value < lo || value > hi) {
    invalid(std::string(what) + " = " + std::to_string(value) + " is outside [" + std::to_string(lo) + ", " +
            std::to_string(hi) + "] (" + std::string(bound) + ")");
  }
}

int32_t to_int32(std::string_view what, int64_t value) {
  if (value < std::numeric_limits<int32_t>::min() || value > std::numeric_limits<int32_t>::max()) {
    invalid(std::string(what) + " = " + std::to_string(value) + " does not fit in int32 [-2^31, 2^31 - 1]");
  }
  return static_cast<int32_t>(value);
}

}  // namespace kvattn
