// cpu_fwd: CONTRACT.md steps 1-8 with plain loops. Scores, softmax and P V in double; each output
// element is rounded once, to the out dtype. Parallel over (sequence, query head).
// fp8 tensors are dequantized on read: q and qv by q_descale, k by k_descale, v by v_descale (each at
// (sequence, kv head); the products are exact in double).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <vector>

#include "api/backend.hpp"
#include "cpu/append.hpp"
#include "cpu/merge.hpp"
#include "cpu/numeric.hpp"
#include "cpu/parallel.hpp"
#include "cpu/rotary.hpp"
#include "cpu/sequence.hpp"

namespace kvattn {
namespace {

using cpu::Sequence;

constexpr double kInf = std::numeric_limits<double>::infinity();

int64_t floor_div(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

// A half-open interval [lo, hi) of logical key positions; empty when hi <= lo.
struct KeyRange {
  int64_t lo = 0;
  int64_t hi = 0;
};

// The keys a query at logical position qp sees (step 6). Validity, the window (causal is window_right 0)
// and the attention chunk each bound kp to an interval, so together they leave one interval.
KeyRange visible_keys(const FwdProblem& p, int64_t qp, int64_t kv_len) {
  KeyRange keys{0, kv_len};
  if (p.window_left >= 0) keys.lo = std::max(keys.lo, qp - p.window_left);
  if (p.window_right >= 0) keys.hi = std::min(keys.hi, qp + p.window_right + 1);
  if (p.attention_chunk > 0) {
    // qp < 0 (more queries than keys) lands in a chunk of negative positions, which holds no key.
    const int64_t chunk_start = floor_div(qp, p.attention_chunk) * p.attention_chunk;
    keys.lo = std::max(keys.lo, chunk_start);
    keys.hi = std::min(keys.hi, chunk_start + p.attention_chunk);
  }
  return keys;
}

// Key positions per split. num_splits: 0 = choose, 1 = none, n = at most n. The CPU backend already runs
// (sequence, head) pairs in parallel, so "choose" means no split. A requested n cuts [0, kv_len) into at
// most n equal chunks, as a split-KV kernel does: a chunk may hold none of a row's visible keys.
int64_t split_length(const FwdProblem& p, int64_t kv_len) {
  const int64_t n = p.num_splits > 1 ? std::min<int64_t>(p.num_splits, kv_len) : 1;
  return n > 1 ? (kv_len + n - 1) / n : kv_len;
}

// Descale (i, kv_head) of an fp8 tensor (problem.hpp), 1 when absent.
double descale(const float* ptr, const int64_t (&strides)[2], int i, int kv_head) {
  return ptr ? double(ptr[i * strides[0] + kv_head * strides[1]]) : 1.0;
}

// One query head h of one sequence i: all its query rows.
class HeadAttention {
 public:
  HeadAttention(const FwdProblem& p, int i, int h)
      : p_(p),
        i_(i),
        h_(h),
        kv_head_(h / (p.num_q_heads / p.num_kv_heads)),
        seq_(cpu::sequence_of(p, i)),
        split_len_(split_length(p, seq_.kv_len)),
        num_chunks_(split_len_ > 0 ? (seq_.kv_len + split_len_ - 1) / split_len_ : 0),
        sink_(p.sinks ? p.sinks[h] : 0.0),
        slope_(p.alibi_slopes ? p.alibi_slopes[i * p.alibi_batch_stride + h] : 0.0),
        q_descale_(descale(p.q_descale, p.q_descale_strides, i, kv_head_)),
        k_descale_(descale(p.k_descale, p.k_descale_strides, i, kv_head_)),
        v_descale_(descale(p.v_descale, p.v_descale_strides, i, kv_head_)),
        q_(p.head_dim),
        qv_(p.qv.ptr ? p.head_dim_v : 0),
        k_(p.head_dim),
        v_(p.head_dim_v),
        o_parts_(num_chunks_ * p.head_dim_v),
        max_parts_(num_chunks_),
        sum_parts_(num_chunks_),
        o_(p.head_dim_v) {}

  void run() {
    const int d = p_.head_dim;
    const int dv = p_.head_dim_v;
    for (int64_t t = 0; t < seq_.q_len; ++t) {
      if (t >= seq_.q_used) {  // past seqused_q: nothing is read, out 0, lse -inf
        std::fill(o_.begin(), o_.end(), 0.0);
        write_row(t, -kInf);
        continue;
      }
      const int64_t q_row = cpu::token_offset(p_.q, p_.cu_seqlens_q, i_, t) + h_ * p_.q.head_stride;
      cpu::load_row(p_.q_dtype, p_.q.ptr, q_row, d, q_.data());
      for (int c = 0; c < d; ++c) q_[c] *= q_descale_;
      // q stays in double after rotary: it is never stored.
      if (p_.rotary_dim > 0) cpu::rotate(p_, seq_.rotary_pos + (p_.rotary_q_per_token ? t : 0), q_.data());
      if (p_.qv.ptr) {
        const int64_t qv_row = cpu::token_offset(p_.qv, p_.cu_seqlens_q, i_, t) + h_ * p_.qv.head_stride;
        cpu::load_row(p_.q_dtype, p_.qv.ptr, qv_row, dv, qv_.data());
        for (int c = 0; c < dv; ++c) qv_[c] *= q_descale_;  // qv is in q's dtype, with q's descale
      }

      const int64_t qp = t + seq_.kv_len - seq_.q_used;  // bottom-right aligned (step 4)
      const KeyRange visible = visible_keys(p_, qp, seq_.kv_len);
      // One (O, LSE) partial per split chunk, then the merge of step 7 (the sink enters only there).
      for (int64_t c = 0; c < num_chunks_; ++c) {
        const KeyRange keys{std::max(visible.lo, c * split_len_), std::min(visible.hi, (c + 1) * split_len_)};
        max_parts_[c] = attend_keys(qp, keys, &o_parts_[c * dv], &sum_parts_[c]);
      }
      const double lse = cpu::merge_partials(int(num_chunks_), dv, max_parts_.data(), o_parts_.data(),
                                             p_.sinks ? &sink_ : nullptr, o_.data(), sum_parts_.data());
      write_row(t, lse);
    }
  }

 private:
  // Step 5 for the current q row (q_, qv_): x = scale (q.k + qv.v), softcap, ALiBi.
  double score(int64_t qp, int64_t kp) {
    const int64_t slot = seq_.leftpad + kp;
    const int64_t k_row = cpu::slot_offset(p_, p_.k_cache, i_, slot) + kv_head_ * p_.k_cache.head_stride;
    cpu::load_row(p_.kv_dtype, p_.k_cache.ptr, k_row, p_.head_dim, k_.data());
    for (int c = 0; c < p_.head_dim; ++c) k_[c] *= k_descale_;
    double dot = 0.0;
    for (int c = 0; c < p_.head_dim; ++c) dot += q_[c] * k_[c];
    if (p_.qv.ptr) {
      load_v(kp);
      for (int c = 0; c < p_.head_dim_v; ++c) dot += qv_[c] * v_[c];
    }
    double x = double(p_.softmax_scale) * dot;
    if (p_.softcap > 0.f) x = double(p_.softcap) * std::tanh(x / double(p_.softcap));
    if (p_.alibi_slopes) x -= slope_ * double(std::llabs(qp - kp));
    return x;
  }

  void load_v(int64_t kp) {
    const int64_t slot = seq_.leftpad + kp;
    const int64_t v_row = cpu::slot_offset(p_, p_.v_cache, i_, slot) + kv_head_ * p_.v_cache.head_stride;
    cpu::load_row(p_.kv_dtype, p_.v_cache.ptr, v_row, p_.head_dim_v, v_.data());
    for (int c = 0; c < p_.head_dim_v; ++c) v_[c] *= v_descale_;
  }

  // Softmax over the keys alone, without the sink: o = sum_s exp(x_s - m) v_s / sum_s exp(x_s - m) (dv);
  // returns m = max_s x_s and sets *sum = sum_s exp(x_s - m) (the partial's lse is m + log(*sum)); -inf
  // and 0 (o = 0) when there are no keys. Non-finite scores (docs/DESIGN.md): -inf keys weigh 0 (all of
  // them -inf: as no key); any NaN gives o = NaN, m = NaN; with m = +inf the +inf keys weigh 1 each and
  // the others 0 (*sum counts them).
  double attend_keys(int64_t qp, KeyRange keys, double* o, double* sum) {
    const int dv = p_.head_dim_v;
    std::fill(o, o + dv, 0.0);
    *sum = 0.0;
    if (keys.hi <= keys.lo) return -kInf;
    x_.resize(keys.hi - keys.lo);  // (keys) scores
    double m = -kInf;              // pass 1: scores and their max
    bool nan = false;
    for (int64_t kp = keys.lo; kp < keys.hi; ++kp) {
      const double x = x_[kp - keys.lo] = score(qp, kp);
      nan = nan || std::isnan(x);
      m = std::max(m, x);
    }
    if (nan) {
      std::fill(o, o + dv, std::numeric_limits<double>::quiet_NaN());
      return std::numeric_limits<double>::quiet_NaN();
    }
    if (m == -kInf) return -kInf;
    for (int64_t kp = keys.lo; kp < keys.hi; ++kp) {  // pass 2: P = exp(x - m), sum P and P V
      const double x = x_[kp - keys.lo];
      const double prob = x == m ? 1.0 : std::exp(x - m);  // x == m: exp(0), also when both are +inf
      if (prob == 0.0) continue;  // as the merge does: a zero weight never multiplies a value (NaN, inf)
      *sum += prob;
      load_v(kp);
      for (int c = 0; c < dv; ++c) o[c] += prob * v_[c];
    }
    for (int c = 0; c < dv; ++c) o[c] /= *sum;
    return m;
  }

  // out(i, t, h, :) = o_ rounded once to the out dtype; lse(i, h, t) = lse when requested.
  void write_row(int64_t t, double lse) {
    const int64_t out_row = cpu::token_offset(p_.out, p_.cu_seqlens_q, i_, t) + h_ * p_.out.head_stride;
    cpu::store_row(p_.out_dtype, p_.out.ptr, out_row, p_.head_dim_v, o_.data());
    if (p_.lse) {
      const int64_t row = (p_.cu_seqlens_q ? p_.cu_seqlens_q[i_] : 0) + t;
      p_.lse[i_ * p_.lse_batch_stride + h_ * p_.lse_head_stride + row * p_.lse_token_stride] = float(lse);
    }
  }

  const FwdProblem& p_;
  const int i_;
  const int h_;
  const int kv_head_;  // h / (hq / hk)
  const Sequence seq_;
  const int64_t split_len_;
  const int64_t num_chunks_;
  const double sink_;
  const double slope_;
  const double q_descale_;  // 1 unless q (and qv) are fp8 with q_descale
  const double k_descale_;  // 1 unless k_cache is fp8 with k_descale
  const double v_descale_;
  std::vector<double> q_;          // (d) rotated query row
  std::vector<double> qv_;         // (dv) or empty without qv
  std::vector<double> k_;          // (d) one key row
  std::vector<double> v_;          // (dv) one value row
  std::vector<double> x_;          // (keys of one chunk) scores
  std::vector<double> o_parts_;    // (num_chunks, dv)
  std::vector<double> max_parts_;  // (num_chunks) max score m_j of each chunk
  std::vector<double> sum_parts_;  // (num_chunks) sum of exp(x - m_j): lse_j = m_j + log(s_j)
  std::vector<double> o_;          // (dv) merged output row
};

// Varlen q rows that no sequence owns (before cu_seqlens_q[0] or from cu_seqlens_q[b] on) get out 0 and
// lse -inf, so that every element of out and lse is defined.
void clear_unowned_rows(const FwdProblem& p) {
  if (!p.cu_seqlens_q) return;
  const std::vector<double> zeros(p.head_dim_v, 0.0);
  auto clear = [&](int64_t row) {
    for (int h = 0; h < p.num_q_heads; ++h) {
      cpu::store_row(p.out_dtype, p.out.ptr, row * p.out.token_stride + h * p.out.head_stride, p.head_dim_v,
                     zeros.data());
      if (p.lse)
        p.lse[h * p.lse_head_stride + row * p.lse_token_stride] = -std::numeric_limits<float>::infinity();
    }
  };
  for (int64_t row = 0; row < p.cu_seqlens_q[0]; ++row) clear(row);
  for (int64_t row = p.cu_seqlens_q[p.batch]; row < p.total_q; ++row) clear(row);
}

}  // namespace

kvattn_status cpu_fwd(const FwdProblem& p) {
  if (!cpu::is_cpu_storage_dtype(p.q_dtype)) return cpu::unsupported_dtype("q", p.q_dtype);
  if (!cpu::is_cpu_storage_dtype(p.kv_dtype)) return cpu::unsupported_dtype("k_cache", p.kv_dtype);
  if (!cpu::is_cpu_storage_dtype(p.out_dtype)) return cpu::unsupported_dtype("out", p.out_dtype);
  if (p.rotary_dim > 0 && !cpu::is_cpu_storage_dtype(p.rotary_dtype)) {
    return cpu::unsupported_dtype("rotary_cos", p.rotary_dtype);
  }
  // Every append lands before any attention reads the cache.
  cpu::append_new_tokens(p);
  clear_unowned_rows(p);
  const int64_t num_heads = p.num_q_heads;
  cpu::parallel_for(int64_t(p.batch) * num_heads, [&](int64_t item) {
    HeadAttention(p, int(item / num_heads), int(item % num_heads)).run();
  });
  return KVATTN_OK;
}

}  // namespace kvattn
