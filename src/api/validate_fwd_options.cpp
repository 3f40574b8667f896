// The second half of validate_fwd: rotary, scores and mask, biases and descales, speed options, once the
// tensor shapes have fixed the sizes in `p` (b, hq, hk, d, dv).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>

#include "api/backend.hpp"
#include "api/checks.hpp"
#include "api/status.hpp"
#include "api/validate.hpp"

namespace kvattn {
namespace {

const float* floats(const kvattn_tensor& t) {
  return static_cast<const float*>(t.data);
}

void expect_at_least(const char* name, int64_t value, int64_t min, const char* meaning) {
  if (value < min) {
    invalid(std::string(name) + ": must be >= " + std::to_string(min) + meaning + ", got " +
            std::to_string(value));
  }
}

// rotary_cos, rotary_sin: (seqlen_ro, rotary_dim / 2), rotary_dim <= d, fp32 or q's dtype.
void check_rotary(const kvattn_fwd_params& a, FwdProblem& p) {
  const kvattn_tensor& cos = a.rotary_cos;
  const kvattn_tensor& sin = a.rotary_sin;
  expect_together("rotary_cos", cos, "rotary_sin", sin);
  if (!given(cos)) {
    expect_absent("rotary_seqlens", a.rotary_seqlens, "without rotary_cos and rotary_sin");
    return;
  }
  expect_ndim("rotary_cos", cos, 2, "(seqlen_ro, rotary_dim / 2)");
  expect_dim_at_least("rotary_cos", cos, 1, "rotary_dim / 2", 1);
  expect_shape("rotary_sin", sin, {{cos.shape[0], "seqlen_ro"}, {cos.shape[1], "rotary_dim / 2"}});
  const int64_t rotary_dim = 2 * cos.shape[1];
  if (rotary_dim > p.head_dim) {
    invalid("rotary_cos: rotary_dim = 2 * " + std::to_string(cos.shape[1]) + " = " +
            std::to_string(rotary_dim) + " exceeds the head dim d = " + std::to_string(p.head_dim) + " of q");
  }
  expect_dtype_in("rotary_cos", cos, {kF32, a.q.dtype});
  expect_dtype_as("rotary_sin", sin, "rotary_cos", cos.dtype);
  p.rotary_cos = cos.data;
  p.rotary_sin = sin.data;
  p.rotary_dtype = static_cast<DType>(cos.dtype);
  p.rotary_cos_stride = cos.strides[0];
  p.rotary_sin_stride = sin.strides[0];
  p.rotary_dim = to_int32("rotary_cos: rotary_dim", rotary_dim);
  p.seqlen_ro = to_int32("rotary_cos: seqlen_ro", cos.shape[0]);
  p.rotary_interleaved = a.rotary_interleaved != 0;
  p.rotary_seqlens = static_cast<const int32_t*>(a.rotary_seqlens.data);
}

// softmax_scale (<= 0: 1/sqrt(d), or 1/sqrt(d + dv) with qv), softcap, causal, window, attention_chunk.
void check_scores_and_mask(const kvattn_fwd_params& a, FwdProblem& p) {
  // The kernels compute scores in float32 (both backends): a positive scale or softcap outside float32's
  // normal range would be inf or 0 there, and the answer would not be the contract's.
  constexpr double kMin = std::numeric_limits<float>::min(), kMax = std::numeric_limits<float>::max();
  auto shown = [](double x) {  // std::to_string would print 1e-308 as 0.000000
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.9g", x);
    return std::string(buf);
  };
  const bool scale_ok = a.softmax_scale <= 0 || (a.softmax_scale >= kMin && a.softmax_scale <= kMax);
  if (!std::isfinite(a.softmax_scale) || !scale_ok) {
    invalid(
        "softmax_scale: must be finite: <= 0 (the default) or a normal float32 in [1.17549435e-38, "
        "3.40282347e38], got " +
        shown(a.softmax_scale));
  }
  const bool softcap_ok = a.softcap == 0 || (a.softcap >= kMin && a.softcap <= kMax);
  if (!(a.softcap >= 0) || !std::isfinite(a.softcap) || !softcap_ok) {
    invalid(
        "softcap: must be finite and >= 0: 0 (off) or a normal float32 in [1.17549435e-38, 3.40282347e38], "
        "got " +
        shown(a.softcap));
  }
  expect_at_least("window_left", a.window_left, -1, " (-1 = unbounded)");
  expect_at_least("window_right", a.window_right, -1, " (-1 = unbounded)");
  expect_at_least("attention_chunk", a.attention_chunk, 0, " (0 = off)");
  const bool causal = a.causal != 0;
  const int64_t scale_dim = given(a.qv) ? int64_t{p.head_dim} + p.head_dim_v : int64_t{p.head_dim};
  const double scale =
      a.softmax_scale > 0 ? a.softmax_scale : 1.0 / std::sqrt(static_cast<double>(scale_dim));
  p.softmax_scale = scale;
  p.softcap = a.softcap;
  // The caller's causal/window decide the q rotary positions, before causal is folded into the window.
  p.rotary_q_per_token = causal || a.window_left >= 0 || a.window_right >= 0;
  p.causal = causal;
  p.window_left = a.window_left;
  p.window_right = causal ? 0 : a.window_right;  // FA3: causal overrides the right window
  p.attention_chunk = a.attention_chunk;
}

void check_descale(const char* name, const kvattn_tensor& t, const char* of, kvattn_dtype dtype,
                   const FwdProblem& p, const float** ptr, int64_t strides[2]) {
  if (!given(t)) return;
  if (dtype != kFP8) {
    expect_absent(name, t,
                  std::string("with ") + of + " of dtype " + dtype_name(dtype) +
                      " (descales apply to float8_e4m3fn tensors only)");
  }
  expect_dtype(name, t, kF32);
  expect_shape(name, t, {{p.batch, "b"}, {p.num_kv_heads, "hk"}});
  *ptr = floats(t);
  strides[0] = t.strides[0];
  strides[1] = t.strides[1];
}

// alibi_slopes (hq,) or (b, hq) fp32; sinks (hq,) fp32; descales (b, hk) fp32, with fp8 tensors only.
void check_bias_and_descales(const kvattn_fwd_params& a, FwdProblem& p) {
  const kvattn_tensor& alibi = a.alibi_slopes;
  if (given(alibi)) {
    expect_dtype("alibi_slopes", alibi, kF32);
    if (alibi.ndim == 2) {
      expect_shape("alibi_slopes", alibi, {{p.batch, "b"}, {p.num_q_heads, "hq"}});
      p.alibi_batch_stride = alibi.strides[0];
    } else {
      expect_shape("alibi_slopes", alibi, {{p.num_q_heads, "hq"}});
    }
    p.alibi_slopes = floats(alibi);
  }
  if (given(a.sinks)) {
    expect_dtype("sinks", a.sinks, kF32);
    expect_shape("sinks", a.sinks, {{p.num_q_heads, "hq"}});
    p.sinks = floats(a.sinks);
  }
  check_descale("q_descale", a.q_descale, "q", a.q.dtype, p, &p.q_descale, p.q_descale_strides);
  check_descale("k_descale", a.k_descale, "k_cache", a.k_cache.dtype, p, &p.k_descale, p.k_descale_strides);
  check_descale("v_descale", a.v_descale, "v_cache", a.v_cache.dtype, p, &p.v_descale, p.v_descale_strides);
}

void check_speed_options(const kvattn_fwd_params& a, FwdProblem& p) {
  expect_at_least("num_splits", a.num_splits, 0, " (0 = choose)");
  if (a.pack_gqa < -1 || a.pack_gqa > 1) {
    invalid("pack_gqa: expected -1 (choose), 0 or 1, got " + std::to_string(a.pack_gqa));
  }
  expect_at_least("sm_margin", a.sm_margin, 0, "");
  p.num_splits = a.num_splits;
  p.pack_gqa = a.pack_gqa;
  p.sm_margin = a.sm_margin;
  p.deterministic = a.deterministic != 0;
  if (a.force_portable != 0 && a.force_portable != 1) {
    invalid("force_portable: expected 0 or 1, got " + std::to_string(a.force_portable));
  }
  p.force_portable = a.force_portable == 1;
  p.workspace = a.workspace;
  p.workspace_bytes = a.workspace_bytes;
}

}  // namespace

void check_fwd_options(const kvattn_fwd_params& args, FwdProblem& p) {
  check_rotary(args, p);
  check_scores_and_mask(args, p);
  check_bias_and_descales(args, p);
  check_speed_options(args, p);
}

}  // namespace kvattn
