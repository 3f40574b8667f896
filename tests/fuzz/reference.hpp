// The fuzzer's float64 reference of CONTRACT.md, independent of src/cpu: its own decoders, its own reading
// of the params struct, its own validity rules for index values. It reads inputs through Memory, which
// knows every buffer the fuzzer allocated: an access outside them is reported (the library accepted a call
// that reaches memory the caller does not own), never made.
#pragma once

#include <kvattn/kvattn.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace fuzz {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// ---- storage decoders (written from the formats' definitions, not from src/cpu/numeric.hpp)
inline double half_bits(uint32_t h, int exp_bits, int mant_bits) {
  const uint32_t mant = h & ((1u << mant_bits) - 1);
  const uint32_t e = (h >> mant_bits) & ((1u << exp_bits) - 1);
  const double sign = (h >> (exp_bits + mant_bits)) & 1 ? -1.0 : 1.0;
  const int bias = (1 << (exp_bits - 1)) - 1;
  if (e == (1u << exp_bits) - 1) return mant ? kNaN : sign * kInf;
  if (e == 0) return sign * std::ldexp(double(mant), 1 - bias - mant_bits);
  return sign * std::ldexp(double(mant + (1u << mant_bits)), int(e) - bias - mant_bits);
}
inline double fp8_bits(uint8_t b) {
  const int e = (b >> 3) & 15, m = b & 7;
  const double sign = b & 0x80 ? -1.0 : 1.0;
  if (e == 15 && m == 7) return kNaN;
  if (e == 0) return sign * std::ldexp(double(m), -9);
  return sign * std::ldexp(double(8 + m), e - 10);
}
// The spacing of representable values of `dtype` near x (an upper bound of one rounding error * 2).
inline double ulp(kvattn_dtype dtype, double x) {
  const int mant = dtype == KVATTN_DTYPE_F16        ? 10
                   : dtype == KVATTN_DTYPE_BF16     ? 7
                   : dtype == KVATTN_DTYPE_FP8_E4M3 ? 3
                                                    : 23;
  const int min_exp = dtype == KVATTN_DTYPE_F16 ? -14 : dtype == KVATTN_DTYPE_FP8_E4M3 ? -6 : -126;
  int e;
  std::frexp(std::fabs(x), &e);
  return std::ldexp(1.0, std::max(e - 1, min_exp) - mant);
}

// TESTING.md's tolerances (max abs error relative to the row's magnitude, at least 1), by the dtype of
// out (that of q and the cache, but for fp8 inputs, whose out is bf16): the CPU backend computes scores
// and P V in float32 (with double running sums), so float32 rounding is what it may differ by.
inline double out_tolerance(kvattn_dtype out) {
  return out == KVATTN_DTYPE_F32 ? 2e-5 : out == KVATTN_DTYPE_F16 ? 4e-3 : 3e-2;
}
inline double lse_tolerance(kvattn_dtype out) {
  return out == KVATTN_DTYPE_F32 ? 1e-5 : out == KVATTN_DTYPE_F16 ? 1e-3 : 1e-2;
}

// The buffers of one case: [begin, end) byte ranges the fuzzer owns.
struct Memory {
  std::vector<std::pair<uintptr_t, uintptr_t>> ranges;
  bool owns(const void* p, size_t bytes) const {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    for (auto [b, e] : ranges) {
      if (a >= b && a + bytes <= e && a + bytes >= a) return true;
    }
    return false;
  }
};

struct OutOfBounds {
  std::string what;
};

// The dtype code as stored (a mutated code may be outside the enum: never load it as the enum).
inline int32_t code(const kvattn_dtype& t) {
  int32_t raw;
  std::memcpy(&raw, &t, sizeof raw);
  return raw;
}

inline int64_t esize(const kvattn_dtype& t) {
  switch (code(t)) {
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

// A checked element reader/writer over a tensor descriptor.
struct View {
  const kvattn_tensor* t;
  const Memory* mem;
  const char* name;
  const void* at(std::initializer_list<int64_t> idx) const {
    __int128 off = 0;
    int d = 0;
    for (int64_t i : idx) {
      if (d >= t->ndim || i < 0 || i >= t->shape[d])
        throw OutOfBounds{std::string(name) + ": index outside shape"};
      off += __int128(i) * t->strides[d++];
    }
    const __int128 byte = off * esize(t->dtype);
    const char* p = static_cast<const char*>(t->data) + int64_t(byte);
    if (byte > (__int128(1) << 62) || byte < -(__int128(1) << 62) || !mem->owns(p, esize(t->dtype))) {
      throw OutOfBounds{std::string(name) + ": accepted, but an element lies outside the caller's buffer"};
    }
    return p;
  }
  double get(std::initializer_list<int64_t> idx) const {
    const void* p = at(idx);
    uint32_t u32 = 0;
    uint16_t u16 = 0;
    switch (code(t->dtype)) {
      case KVATTN_DTYPE_F32: {
        float f;
        std::memcpy(&f, p, 4);
        return f;
      }
      case KVATTN_DTYPE_F16:
        std::memcpy(&u16, p, 2);
        return half_bits(u16, 5, 10);
      case KVATTN_DTYPE_BF16:
        std::memcpy(&u16, p, 2);
        return half_bits(u16, 8, 7);
      case KVATTN_DTYPE_FP8_E4M3:
        return fp8_bits(*static_cast<const uint8_t*>(p));
      case KVATTN_DTYPE_I32: {
        int32_t i;
        std::memcpy(&i, p, 4);
        return i;
      }
      case KVATTN_DTYPE_I64: {
        int64_t i;
        std::memcpy(&i, p, 8);
        return double(i);
      }
      default:
        (void)u32;
        return kNaN;
    }
  }
  int64_t geti(std::initializer_list<int64_t> idx) const {
    const void* p = at(idx);
    if (code(t->dtype) == KVATTN_DTYPE_I64) {
      int64_t i;
      std::memcpy(&i, p, 8);
      return i;
    }
    int32_t i;
    std::memcpy(&i, p, 4);
    return i;
  }
};

// What the reference expects of one call.
struct Expected {
  bool valid = false;  // false: the call must be rejected
  std::string why;     // why it is invalid (for reports)
  // Expected values of written elements: (address, dtype, value). NaN matches NaN; infinities match.
  struct Element {
    const void* address;
    kvattn_dtype dtype;
    double value;
    double tolerance;
  };
  std::vector<Element> elements;
};

}  // namespace fuzz

namespace fuzz {

inline bool given(const kvattn_tensor& t) {
  return t.data != nullptr;
}

// Index-value rules of CONTRACT.md ("Errors"), judged by the reference; throws Invalid.
struct Invalid {
  std::string why;
};

// Everything kvattn_fwd must do to memory for `a` (read after the call: inputs are unchanged when the
// library behaves, and appended cache slots are checked against their expected values, then used).
inline Expected fwd_expected(const kvattn_fwd_params& a, const Memory& mem) {
  Expected ex;
  auto view = [&](const kvattn_tensor& t, const char* name) { return View{&t, &mem, name}; };
  try {
    const bool varlen = given(a.cu_seqlens_q), packed = given(a.cu_seqlens_k), ragged = given(a.kv_indptr);
    const bool paged = given(a.page_table) || ragged;
    if (ragged != given(a.kv_indices)) throw Invalid{"kv_indptr and kv_indices not together"};
    if (ragged && (given(a.page_table) || packed)) throw Invalid{"kv_indptr with page_table or cu_seqlens_k"};
    const bool slot_pool = ragged && a.k_cache.ndim == 3;  // (num_slots, hk, d): pages of one slot
    const View q = view(a.q, "q"), kc = view(a.k_cache, "k_cache"), vc = view(a.v_cache, "v_cache");
    const View out = view(a.out, "out");
    const int64_t b = varlen ? a.cu_seqlens_q.shape[0] - 1 : a.q.shape[0];
    const int64_t sq = varlen ? a.max_seqlen_q : a.q.shape[1];
    const int64_t hq = a.q.shape[a.q.ndim - 2], d = a.q.shape[a.q.ndim - 1];
    const int64_t hk = a.k_cache.shape[a.k_cache.ndim - 2], dv = a.v_cache.shape[a.v_cache.ndim - 1];
    const int64_t total_q = varlen ? a.q.shape[0] : b * sq;
    const int64_t page_size = packed ? 0 : slot_pool ? 1 : a.k_cache.shape[1];
    const int64_t num_pages = a.k_cache.shape[0];
    auto ival = [&](const kvattn_tensor& t, const char* name, int64_t i) { return view(t, name).geti({i}); };
    auto cu = [&](const kvattn_tensor& t, const char* name, int64_t i) {
      return ival(t, name, i + 1) - ival(t, name, i);
    };
    // cu_seqlens rules.
    auto check_cu = [&](const kvattn_tensor& t, const char* name, int64_t rows) {
      if (!given(t)) return;
      if (ival(t, name, 0) != 0) throw Invalid{std::string(name) + "[0] != 0"};
      for (int64_t i = 0; i < b; ++i) {
        if (cu(t, name, i) < 0) throw Invalid{std::string(name) + " decreases"};
      }
      if (ival(t, name, b) != rows) throw Invalid{std::string(name) + "[b] != rows"};
    };
    check_cu(a.cu_seqlens_q, "cu_seqlens_q", total_q);
    const bool append = given(a.k);
    if (append) check_cu(a.cu_seqlens_k_new, "cu_seqlens_k_new", a.k.shape[0]);
    check_cu(a.cu_seqlens_k, "cu_seqlens_k", num_pages);
    const bool causal = a.causal != 0;
    const int64_t wl = a.window_left, wr = causal ? 0 : a.window_right;
    const bool per_token = causal || a.window_left >= 0 || a.window_right >= 0;
    const int64_t scale_dim = given(a.qv) ? d + dv : d;
    const double scale = a.softmax_scale > 0 ? a.softmax_scale : 1.0 / std::sqrt(double(scale_dim));
    const bool rotary = given(a.rotary_cos);
    const int64_t rot_half = rotary ? a.rotary_cos.shape[1] : 0,
                  seqlen_ro = rotary ? a.rotary_cos.shape[0] : 0;
    const kvattn_dtype qd = a.q.dtype, kd = a.k_cache.dtype;
    auto descale = [&](const kvattn_tensor& t, const char* name, int64_t i, int64_t h) {
      return given(t) ? view(t, name).get({i, h}) : 1.0;
    };
    auto rotate = [&](std::vector<double>& x, int64_t pos) {
      const View c = view(a.rotary_cos, "rotary_cos"), s = view(a.rotary_sin, "rotary_sin");
      for (int64_t m = 0; m < rot_half; ++m) {
        const int64_t i0 = a.rotary_interleaved ? 2 * m : m,
                      i1 = a.rotary_interleaved ? 2 * m + 1 : m + rot_half;
        const double co = c.get({pos, m}), si = s.get({pos, m}), x0 = x[i0], x1 = x[i1];
        x[i0] = x0 * co - x1 * si;
        x[i1] = x0 * si + x1 * co;
      }
    };

    struct Seq {
      int64_t q_len, used, n_new, cache_len, leftpad, kv_len, row, base, first;  // first: ragged row start
    };
    std::vector<Seq> seqs(b);
    std::set<int64_t> rows_with_append;
    for (int64_t i = 0; i < b; ++i) {
      Seq& s = seqs[i];
      s.q_len = varlen ? cu(a.cu_seqlens_q, "cu_seqlens_q", i) : sq;
      if (s.q_len > sq) throw Invalid{"q_len > max_seqlen_q"};
      s.used = given(a.seqused_q) ? ival(a.seqused_q, "seqused_q", i) : s.q_len;
      if (s.used < 0 || s.used > s.q_len) throw Invalid{"seqused_q out of range"};
      s.n_new = !append                     ? 0
                : given(a.cu_seqlens_k_new) ? cu(a.cu_seqlens_k_new, "cu_seqlens_k_new", i)
                                            : a.k.shape[1];
      s.row = packed ? -1 : given(a.cache_batch_idx) ? ival(a.cache_batch_idx, "cache_batch_idx", i) : i;
      const int64_t rows = ragged ? a.kv_indptr.shape[0] - 1 : paged ? a.page_table.shape[0] : num_pages;
      if (!packed && (s.row < 0 || s.row >= rows)) throw Invalid{"row"};
      s.first = 0;
      int64_t ragged_pages = 0;
      if (ragged) {
        s.first = ival(a.kv_indptr, "kv_indptr", s.row);
        const int64_t last = ival(a.kv_indptr, "kv_indptr", s.row + 1);
        if (s.first < 0 || last < s.first || last > a.kv_indices.shape[0]) throw Invalid{"kv_indptr"};
        ragged_pages = last - s.first;
      }
      const int64_t capacity = packed   ? cu(a.cu_seqlens_k, "cu_seqlens_k", i)
                               : ragged ? ragged_pages * page_size
                               : paged  ? a.page_table.shape[1] * page_size
                                        : page_size;
      if (append && given(a.cache_batch_idx) && !rows_with_append.insert(s.row).second)
        throw Invalid{"dup row"};
      s.cache_len = given(a.cache_seqlens)       ? ival(a.cache_seqlens, "cache_seqlens", i)
                    : a.cache_seqlens_value >= 0 ? a.cache_seqlens_value
                                                 : capacity;
      if (s.cache_len < 0 || s.cache_len + s.n_new > capacity) throw Invalid{"cache_seqlens beyond capacity"};
      // A sequence holds at most 2^31 - 2^16 keys (kvattn.h), whatever its capacity.
      if (s.cache_len + s.n_new > (int64_t{1} << 31) - (int64_t{1} << 16)) throw Invalid{"sequence too long"};
      s.leftpad = given(a.cache_leftpad) ? ival(a.cache_leftpad, "cache_leftpad", i) : 0;
      if (s.leftpad < 0 || s.leftpad > s.cache_len) throw Invalid{"leftpad"};
      s.kv_len = s.cache_len + s.n_new - s.leftpad;
      if (paged && s.cache_len + s.n_new > s.leftpad) {
        for (int64_t pg = s.leftpad / page_size; pg <= (s.cache_len + s.n_new - 1) / page_size; ++pg) {
          const int64_t id = ragged ? ival(a.kv_indices, "kv_indices", s.first + pg)
                                    : view(a.page_table, "page_table").geti({s.row, pg});
          if (id < 0 || id >= num_pages) throw Invalid{"page id"};
        }
      }
      s.base = given(a.rotary_seqlens) ? ival(a.rotary_seqlens, "rotary_seqlens", i) : s.cache_len;
      if (rotary) {
        if (s.base < 0) throw Invalid{"rotary_seqlens negative"};
        if (s.n_new > 0 && s.base + s.n_new - 1 >= seqlen_ro) throw Invalid{"rotary k position"};
        if (s.used > 0 && s.base + (per_token ? s.used - 1 : 0) >= seqlen_ro)
          throw Invalid{"rotary q position"};
      }
    }
    // Cache element (sequence i, slot s, head h, channel c).
    auto cache_at = [&](const View& cache, int64_t i, int64_t s, int64_t h, int64_t c) -> const void* {
      if (packed) return cache.at({ival(a.cu_seqlens_k, "cu_seqlens_k", i) + s, h, c});
      const int64_t page = ragged  ? ival(a.kv_indices, "kv_indices", seqs[i].first + s / page_size)
                           : paged ? view(a.page_table, "page_table").geti({seqs[i].row, s / page_size})
                                   : seqs[i].row;
      if (slot_pool) return cache.at({page, h, c});
      return cache.at({page, s % page_size, h, c});
    };
    auto decode = [&](kvattn_dtype t, const void* p) {
      kvattn_tensor one{const_cast<void*>(p), t, 1, {1}, {1}};
      return View{&one, &mem, "cache"}.get({0});
    };
    // 1. Append: expected stored values, later writes win.
    std::map<const void*, Expected::Element> appended;
    for (int64_t i = 0; i < b && append; ++i) {
      const bool varlen_new = given(a.cu_seqlens_k_new);
      const int64_t row0 = varlen_new ? ival(a.cu_seqlens_k_new, "cu_seqlens_k_new", i) : 0;
      for (int64_t j = 0; j < seqs[i].n_new; ++j) {
        for (int64_t h = 0; h < hk; ++h) {
          std::vector<double> k(d), v(dv);
          for (int64_t c = 0; c < d; ++c)
            k[c] = varlen_new ? view(a.k, "k").get({row0 + j, h, c}) : view(a.k, "k").get({i, j, h, c});
          for (int64_t c = 0; c < dv; ++c)
            v[c] = varlen_new ? view(a.v, "v").get({row0 + j, h, c}) : view(a.v, "v").get({i, j, h, c});
          if (rotary) rotate(k, seqs[i].base + j);
          const bool quantize = kd == KVATTN_DTYPE_FP8_E4M3 && qd != KVATTN_DTYPE_FP8_E4M3;
          const double ks = quantize ? descale(a.k_descale, "k_descale", i, h) : 1.0;
          const double vs = quantize ? descale(a.v_descale, "v_descale", i, h) : 1.0;
          auto stored = [&](double x) {
            return kd == KVATTN_DTYPE_FP8_E4M3 && !std::isnan(x) ? std::max(-448.0, std::min(448.0, x)) : x;
          };
          for (int64_t c = 0; c < d; ++c) {
            const double x = stored(k[c] / ks);
            const void* p = cache_at(kc, i, seqs[i].cache_len + j, h, c);
            appended[p] = {p, kd, x, ulp(kd, x)};
          }
          for (int64_t c = 0; c < dv; ++c) {
            const double x = stored(v[c] / vs);
            const void* p = cache_at(vc, i, seqs[i].cache_len + j, h, c);
            appended[p] = {p, kd, x, ulp(kd, x)};
          }
        }
      }
    }
    for (auto& [p, e] : appended) ex.elements.push_back(e);
    // 2-8. Attention, from the cache as the library left it (appended elements are checked separately).
    const kvattn_dtype out_dtype = a.out.dtype;
    auto put_out = [&](std::initializer_list<int64_t> idx, double value, double scale_of_values) {
      const void* p = out.at(idx);
      const double tol =
          std::isfinite(value) ? ulp(out_dtype, value) + out_tolerance(out_dtype) * (scale_of_values + 1) : 0;
      ex.elements.push_back({p, out_dtype, value, tol});
    };
    auto unchecked = [&](std::initializer_list<int64_t> idx) {
      ex.elements.push_back({out.at(idx), out_dtype, 0.0, kInf});  // written, any value
    };
    auto unchecked_lse = [&](int64_t i, int64_t h, int64_t row) {
      if (!given(a.lse)) return;
      const void* p = varlen ? view(a.lse, "lse").at({h, row}) : view(a.lse, "lse").at({i, h, row});
      ex.elements.push_back({p, KVATTN_DTYPE_F32, 0.0, kInf});
    };
    auto put_lse = [&](int64_t i, int64_t h, int64_t row, double value, double magnitude) {
      if (!given(a.lse)) return;
      const void* p = varlen ? view(a.lse, "lse").at({h, row}) : view(a.lse, "lse").at({i, h, row});
      const double tol = std::isfinite(value)
                             ? ulp(KVATTN_DTYPE_F32, value) + lse_tolerance(out_dtype) * (magnitude + 1)
                             : 0;
      ex.elements.push_back({p, KVATTN_DTYPE_F32, value, tol});
    };
    auto out_idx = [&](int64_t i, int64_t row, int64_t h, int64_t c) {
      return varlen ? out.at({row, h, c}) : out.at({i, row, h, c});
    };
    (void)out_idx;
    const int64_t g = hq / hk;
    for (int64_t i = 0; i < b; ++i) {
      const Seq& s = seqs[i];
      const int64_t row0 = varlen ? ival(a.cu_seqlens_q, "cu_seqlens_q", i) : 0;
      for (int64_t h = 0; h < hq; ++h) {
        const int64_t kh = h / g;
        const double sink = given(a.sinks) ? view(a.sinks, "sinks").get({h}) : 0;
        const double slope = !given(a.alibi_slopes)     ? 0
                             : a.alibi_slopes.ndim == 2 ? view(a.alibi_slopes, "alibi_slopes").get({i, h})
                                                        : view(a.alibi_slopes, "alibi_slopes").get({h});
        const double qds = descale(a.q_descale, "q_descale", i, kh);
        const double kds = descale(a.k_descale, "k_descale", i, kh),
                     vds = descale(a.v_descale, "v_descale", i, kh);
        for (int64_t t = 0; t < s.q_len; ++t) {
          const int64_t row = row0 + t;
          auto qidx = [&](const View& x, int64_t c) {
            return varlen ? x.get({row, h, c}) : x.get({i, t, h, c});
          };
          // score_err: the float32 rounding a kernel's scores may carry (a dot product of d terms in
          // float32: about d 2^-24 sum |q_c k_c|, times the scale): it moves lse by as much and the
          // weights by a factor up to exp(score_err), so out by up to that fraction of max |v|.
          double score_err = 0, vmax = 0;
          // Values within ~2^7 of float32's max (a folded q, a descaled v, a score error past 1): the
          // kernels' float32 intermediates may overflow there (docs/DESIGN.md), so the row is not compared
          // (the call must still run, stay in bounds and write only its outputs).
          bool near_overflow = false;
          // A key whose weight float32 may flush to 0 (< 2^-100: a CPU vector exp, an ftz exp2, a split's
          // rescale) while float64 keeps it: a non-finite V channel of that key may or may not show (the
          // library never multiplies a zero weight, docs/DESIGN.md), so that out channel is not judged.
          std::vector<char> either(size_t(dv), 0);
          bool tiny_times_inf = false;
          auto emit = [&](const std::vector<double>& o, double lse, double mag) {
            if (near_overflow || tiny_times_inf || score_err > 1 || vmax > 1e36) {
              for (int64_t c = 0; c < dv; ++c)
                unchecked(varlen ? std::initializer_list<int64_t>{row, h, c}
                                 : std::initializer_list<int64_t>{i, t, h, c});
              unchecked_lse(i, h, varlen ? row : t);
              return;
            }
            const double o_slack = std::isfinite(score_err) ? std::min(1.0, 2 * score_err) : 1.0;
            for (int64_t c = 0; c < dv; ++c) {
              if (either[size_t(c)]) {
                unchecked(varlen ? std::initializer_list<int64_t>{row, h, c}
                                 : std::initializer_list<int64_t>{i, t, h, c});
              } else {
                put_out(varlen ? std::initializer_list<int64_t>{row, h, c}
                               : std::initializer_list<int64_t>{i, t, h, c},
                        o[c], mag * (1 + o_slack / out_tolerance(out_dtype)));
              }
            }
            put_lse(i, h, varlen ? row : t, lse,
                    std::fabs(lse) + (std::isfinite(score_err) ? score_err / lse_tolerance(out_dtype) : 0));
          };
          if (t >= s.used) {
            emit(std::vector<double>(dv, 0.0), -kInf, 0);
            continue;
          }
          std::vector<double> qr(d), qv(dv);
          for (int64_t c = 0; c < d; ++c) qr[c] = qidx(q, c) * qds;
          if (rotary) rotate(qr, s.base + (per_token ? t : 0));
          for (int64_t c = 0; c < d; ++c) near_overflow = near_overflow || std::fabs(qr[c] * kds) > 1e36;
          if (given(a.qv))
            for (int64_t c = 0; c < dv; ++c) {
              qv[c] = qidx(view(a.qv, "qv"), c) * qds;
              near_overflow = near_overflow || std::fabs(qv[c] * vds) > 1e36;
            }
          const int64_t qp = t + s.kv_len - s.used;
          std::vector<double> xs;
          std::vector<std::vector<double>> vs;
          for (int64_t kp = 0; kp < s.kv_len; ++kp) {
            if (wl >= 0 && kp < qp - wl) continue;
            if (wr >= 0 && kp > qp + wr) continue;
            if (a.attention_chunk > 0) {
              auto fdiv = [](int64_t x, int64_t y) { return x >= 0 ? x / y : -((-x + y - 1) / y); };
              if (fdiv(kp, a.attention_chunk) != fdiv(qp, a.attention_chunk)) continue;
            }
            const int64_t slot = s.leftpad + kp;
            std::vector<double> v(dv);
            // abs_dot: the finite terms' magnitudes. An infinite term leaves the others' float32 rounding
            // in play: a finite term past float32's range is +-inf there, and against an infinite term of
            // the other sign the kernels' sum is NaN where float64's is +-inf (seed 2026120538).
            double dot = 0, abs_dot = 0;
            for (int64_t c = 0; c < d; ++c) {
              const double kv = decode(kd, cache_at(kc, i, slot, kh, c)) * kds;
              // A q channel below float32's normal range (a rotated or descaled q) may round or flush to 0
              // in the kernels: times an infinite K it is +-inf or NaN there, so the row is not judged.
              tiny_times_inf =
                  tiny_times_inf || (!std::isfinite(kv) && qr[c] != 0 && std::fabs(qr[c]) < 0x1p-126);
              const double term = qr[c] * kv;
              dot += term;
              if (std::isfinite(term)) abs_dot += std::fabs(term);
            }
            for (int64_t c = 0; c < dv; ++c) {
              const double raw = decode(kd, cache_at(vc, i, slot, kh, c));
              v[c] = raw * vds;
              if (std::isfinite(v[c])) vmax = std::max(vmax, std::fabs(v[c]));
              // A finite V that the descale makes infinite (v_descale inf, or overflowing): the kernels
              // apply the descale after P V's sum, so its order with the sum's signs is not defined.
              if (std::isfinite(raw) && raw != 0 && !std::isfinite(v[c])) near_overflow = true;
            }
            if (given(a.qv))
              for (int64_t c = 0; c < dv; ++c) {
                dot += qv[c] * v[c];
                if (std::isfinite(qv[c] * v[c])) abs_dot += std::fabs(qv[c] * v[c]);
              }
            double x = scale * dot;
            if (std::isfinite(abs_dot))
              score_err = std::max(score_err, scale * abs_dot * double(d + dv) * 0x1p-24);
            // Scores are float32 in the kernels (docs/DESIGN.md): beyond its range they are +-inf.
            if (std::fabs(x) > std::numeric_limits<float>::max()) x = std::copysign(kInf, x);
            if (a.softcap > 0) x = a.softcap * std::tanh(x / a.softcap);
            if (given(a.alibi_slopes)) {
              const double bias = slope * double(std::llabs(qp - kp));
              x -= bias;
              // float32 rounds the bias and the sum too (a slope of -7.5e8 makes scores ~1e9, 64 apart).
              score_err = std::max(score_err, (std::fabs(bias) + std::fabs(x)) * 0x1p-23);
            }
            xs.push_back(x);
            vs.push_back(std::move(v));
          }
          // Step 7 with the non-finite rules of docs/DESIGN.md.
          bool nan = given(a.sinks) && std::isnan(sink);
          double m = given(a.sinks) ? sink : -kInf;
          for (double x : xs) {
            nan = nan || std::isnan(x);
            if (!std::isnan(x)) m = std::max(m, x);
          }
          std::vector<double> o(dv, 0.0);
          if (nan) {
            emit(std::vector<double>(dv, kNaN), kNaN, 0);
            continue;
          }
          if (m == -kInf) {
            emit(o, -kInf, 0);
            continue;
          }
          auto w_of = [&](double x) { return x == m ? 1.0 : std::exp(x - m); };
          double denom = given(a.sinks) ? w_of(sink) : 0.0;
          for (size_t k = 0; k < xs.size(); ++k) {
            const double w = w_of(xs[k]);
            if (w == 0) continue;
            denom += w;
            for (int64_t c = 0; c < dv; ++c) {
              if (w < 0x1p-100 && !std::isfinite(vs[k][c])) {
                either[size_t(c)] = 1;
              } else {
                o[c] += w * vs[k][c];
              }
            }
          }
          for (int64_t c = 0; c < dv; ++c) o[c] /= denom;
          const double lse = m + std::log(denom);
          emit(o, lse, vmax);
        }
      }
    }
    // Varlen rows no sequence owns: out 0, lse -inf.
    if (varlen) {
      const int64_t first = ival(a.cu_seqlens_q, "cu_seqlens_q", 0),
                    last = ival(a.cu_seqlens_q, "cu_seqlens_q", b);
      for (int64_t row = 0; row < total_q; ++row) {
        if (row >= first && row < last) continue;
        for (int64_t h = 0; h < hq; ++h) {
          for (int64_t c = 0; c < dv; ++c) put_out({row, h, c}, 0.0, 0);
          put_lse(0, h, row, -kInf, 0);
        }
      }
    }
    ex.valid = true;
  } catch (const Invalid& e) {
    ex.valid = false;
    ex.why = e.why;
    ex.elements.clear();
  }
  return ex;
}

// kvattn_combine: out_partials (n, r..., dv), lse_partials (n, r...), sinks on the last row axis.
inline Expected combine_expected(const kvattn_combine_params& a, const Memory& mem) {
  Expected ex;
  const View op{&a.out_partials, &mem, "out_partials"}, lp{&a.lse_partials, &mem, "lse_partials"};
  const View out{&a.out, &mem, "out"}, lse{&a.lse, &mem, "lse"}, sinks{&a.sinks, &mem, "sinks"};
  const int rank = a.out_partials.ndim - 2;
  const int64_t n = a.out_partials.shape[0], dv = a.out_partials.shape[rank + 1];
  int64_t r[3] = {1, 1, 1};
  for (int j = 0; j < rank; ++j) r[3 - rank + j] = a.out_partials.shape[1 + j];
  for (int64_t r0 = 0; r0 < r[0]; ++r0)
    for (int64_t r1 = 0; r1 < r[1]; ++r1)
      for (int64_t r2 = 0; r2 < r[2]; ++r2) {
        const int64_t full[3] = {r0, r1, r2};
        auto idx = [&](std::vector<int64_t> pre, std::vector<int64_t> post) {
          for (int j = 0; j < rank; ++j) pre.push_back(full[3 - rank + j]);
          pre.insert(pre.end(), post.begin(), post.end());
          return pre;
        };
        auto get = [&](const View& v, std::vector<int64_t> i) {
          switch (i.size()) {
            case 1:
              return v.at({i[0]});
            case 2:
              return v.at({i[0], i[1]});
            case 3:
              return v.at({i[0], i[1], i[2]});
            case 4:
              return v.at({i[0], i[1], i[2], i[3]});
            default:
              return v.at({i[0], i[1], i[2], i[3], i[4]});
          }
        };
        auto val = [&](const View& v, std::vector<int64_t> i) {
          kvattn_tensor one{const_cast<void*>(get(v, i)), v.t->dtype, 1, {1}, {1}};
          return View{&one, &mem, v.name}.get({0});
        };
        const bool has_sink = given(a.sinks);
        const double sink = has_sink ? val(sinks, {full[2]}) : 0;
        bool nan = has_sink && std::isnan(sink);
        double m = has_sink ? sink : -kInf;
        std::vector<double> l(n);
        for (int64_t j = 0; j < n; ++j) {
          l[j] = val(lp, idx({j}, {}));
          nan = nan || std::isnan(l[j]);
          if (!std::isnan(l[j])) m = std::max(m, l[j]);
        }
        std::vector<double> o(dv, nan ? kNaN : 0.0);
        double total = nan ? kNaN : -kInf, mag = 0;
        if (!nan && m != -kInf) {
          auto w_of = [&](double x) { return x == kInf ? 1.0 : std::exp(x - m); };
          double denom = has_sink ? w_of(sink) : 0;
          for (int64_t j = 0; j < n; ++j) {
            const double w = w_of(l[j]);
            if (w == 0) continue;
            denom += w;
            for (int64_t c = 0; c < dv; ++c) {
              const double x = val(op, idx({j}, {c}));
              if (std::isfinite(x)) mag = std::max(mag, std::fabs(x));
              o[c] += w * x;
            }
          }
          for (auto& x : o) x /= denom;
          total = m + std::log(denom);
        }
        for (int64_t c = 0; c < dv; ++c) {
          const double tol = std::isfinite(o[c]) ? ulp(a.out.dtype, o[c]) + 1e-12 * (mag + 1) : 0;
          ex.elements.push_back({get(out, idx({}, {c})), a.out.dtype, o[c], tol});
        }
        if (given(a.lse)) {
          const double tol =
              std::isfinite(total) ? ulp(KVATTN_DTYPE_F32, total) + 1e-12 * (std::fabs(total) + 1) : 0;
          ex.elements.push_back({get(lse, idx({}, {})), KVATTN_DTYPE_F32, total, tol});
        }
      }
  ex.valid = true;
  return ex;
}

// kvattn_append_kv: token t to slot slot_mapping[t] (negative: skipped); later tokens win.
inline Expected append_expected(const kvattn_append_params& a, const Memory& mem) {
  Expected ex;
  const View key{&a.key, &mem, "key"}, value{&a.value, &mem, "value"},
      sm{&a.slot_mapping, &mem, "slot_mapping"};
  const View kc{&a.k_cache, &mem, "k_cache"}, vc{&a.v_cache, &mem, "v_cache"};
  const int64_t T = a.key.shape[0], hk = a.key.shape[1], d = a.key.shape[2], dv = a.value.shape[2];
  const int64_t ps = a.k_cache.shape[1], slots = a.k_cache.shape[0] * ps;
  const bool fp8 = a.k_cache.dtype == KVATTN_DTYPE_FP8_E4M3;
  std::map<const void*, Expected::Element> w;
  for (int64_t t = 0; t < T; ++t) {
    const int64_t slot = sm.geti({t});
    if (slot < 0) continue;
    if (slot >= slots) {
      ex.valid = false;
      ex.why = "slot beyond the cache";
      return ex;
    }
    for (int64_t h = 0; h < hk; ++h) {
      const double ks = !given(a.k_scale) ? 1
                        : a.k_scale.ndim  ? View{&a.k_scale, &mem, "k_scale"}.get({h})
                                          : *static_cast<const float*>(a.k_scale.data);
      const double vs = !given(a.v_scale) ? 1
                        : a.v_scale.ndim  ? View{&a.v_scale, &mem, "v_scale"}.get({h})
                                          : *static_cast<const float*>(a.v_scale.data);
      auto stored = [&](double x) {
        return fp8 && !std::isnan(x) ? std::max(-448.0, std::min(448.0, x)) : x;
      };
      for (int64_t c = 0; c < d; ++c) {
        const void* p = kc.at({slot / ps, slot % ps, h, c});
        const double x = stored(key.get({t, h, c}) / ks);
        w[p] = {p, a.k_cache.dtype, x, ulp(a.k_cache.dtype, x)};
      }
      for (int64_t c = 0; c < dv; ++c) {
        const void* p = vc.at({slot / ps, slot % ps, h, c});
        const double x = stored(value.get({t, h, c}) / vs);
        w[p] = {p, a.k_cache.dtype, x, ulp(a.k_cache.dtype, x)};
      }
    }
  }
  for (auto& [p, e] : w) ex.elements.push_back(e);
  ex.valid = true;
  return ex;
}

}  // namespace fuzz
