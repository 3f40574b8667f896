// cpu_fwd: CONTRACT.md steps 1-8 on the CPU, vectorized.
//
// Work items are (sequence i, kv head g, a chunk of query rows, a range of keys). A row is (query token
// t, query head h of the group of g): the hq / hk heads that share a kv head read each key and value row
// once (GQA packing), and a key row is loaded once for every row of the item. Keys go in tiles of
// 32 or 64: S = Q K^T in fp32, the mask, softcap and ALiBi, an online softmax whose running max m, sum l
// and output rows are kept in double, P V of the tile in fp32 (64 terms) folded into the double rows.
// So fp32 rounding errors do not grow with the sequence length. fp16, bf16 and fp8 rows are widened to
// fp32 exactly, a tile at a time; fp8 descales and the softmax scale are folded into q (and qv).
// When there are fewer (sequence, kv head, row chunk) items than threads, long sequences are also cut
// into key ranges whose (O, LSE) partials are merged by the rule of step 7 (cpu/merge.hpp), the sink
// counted there once. num_splits is a speed knob of the CUDA kernels; the answer does not depend on it.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <vector>

#include "api/backend.hpp"
#include "api/status.hpp"
#include "cpu/append.hpp"
#include "cpu/merge.hpp"
#include "cpu/numeric.hpp"
#include "cpu/parallel.hpp"
#include "cpu/rotary.hpp"
#include "cpu/sequence.hpp"
#include "cpu/vector_math.hpp"

namespace kvattn {
namespace {

using cpu::Sequence;

constexpr double kInf = std::numeric_limits<double>::infinity();
// Keys per tile: 64 for rows read in place (fp32, bf16), 32 when fp16 / fp8 rows are widened into a tile
// buffer first (which then stays in L1/L2). At most 64 terms in any fp32 sum.
constexpr int kMaxKeyTile = 64;
constexpr int kWidenedKeyTile = 32;
constexpr int kRowChunk = 64;            // query rows per work item at most
constexpr int64_t kMinSplitKeys = 1024;  // a key range shorter than this costs more to merge than it saves
constexpr int64_t kDeterministicSplitKeys = 4096;  // as the CUDA backend's deterministic mode
constexpr int64_t kInlinePairs = 1 << 12;  // below this many (row, key) pairs in all, no thread is woken

// Thrown by a work item that saw kvattn_interrupt(); parallel_for stops the other items.
struct Interrupted {};

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

// Descale (i, kv_head) of an fp8 tensor (problem.hpp), 1 when absent.
double descale(const float* ptr, const int64_t (&strides)[2], int i, int kv_head) {
  return ptr ? double(ptr[i * strides[0] + kv_head * strides[1]]) : 1.0;
}

// Kv heads [g0, g0 + heads) of sequence i, rows [row0, row1) of each head's group, against the keys
// [key0, key1). Row lr of a group is query token lr / group and query head g * group + lr % group; the
// item's row r is group row row0 + r % (row1 - row0) of kv head g0 + r / (row1 - row0). Decode items take
// all kv heads of a sequence at once, so that the tile's key rows are read in the order they are stored
// (slot by slot, heads side by side). split: which of the rows' `splits` key ranges this is.
struct Item {
  int i = 0;
  int g0 = 0;
  int heads = 1;
  int row0 = 0;
  int row1 = 0;
  int64_t key0 = 0;
  int64_t key1 = 0;
  int split = 0;
  int splits = 1;
  int64_t partial = -1;  // with splits > 1: first element of its (rows, dv + 2) block of partials

  int rows() const { return heads * (row1 - row0); }
  // (query token, query head) of row r
  void token_and_head(int r, int group, int64_t* t, int* h) const {
    const int per_head = row1 - row0;
    const int lr = row0 + r % per_head;
    *t = lr / group;
    *h = (g0 + r / per_head) * group + lr % group;
  }
};

// The rows of out and lse that one (O, m, l) partial per row finalizes: merged with the sink, rounded once.
// o_parts: (splits, rows of the item, dv + 2), each row's O followed by its max score m and its sum l of
// exp(x - m) (merge.hpp: carrying (m, l), not m + log(l), keeps the merge exact for any score magnitude).
void write_rows(const FwdProblem& p, const Item& item, const double* o_parts, int splits) {
  const int group = p.num_q_heads / p.num_kv_heads;
  const int dv = p.head_dim_v;
  std::vector<double> m_j(splits), l_j(splits), o_j(size_t(splits) * dv), o(dv);
  const int64_t stride = int64_t(item.rows()) * (dv + 2);  // between splits in the buffer
  for (int r = 0; r < item.rows(); ++r) {
    int64_t t;
    int h;
    item.token_and_head(r, group, &t, &h);
    for (int s = 0; s < splits; ++s) {
      const double* part = o_parts + s * stride + int64_t(r) * (dv + 2);
      m_j[s] = part[dv];
      l_j[s] = part[dv + 1];
      std::copy(part, part + dv, &o_j[size_t(s) * dv]);
    }
    const double sink = p.sinks ? double(p.sinks[h]) : 0.0;
    const double lse = cpu::merge_partials(splits, dv, m_j.data(), o_j.data(), p.sinks ? &sink : nullptr,
                                           o.data(), l_j.data());
    const int64_t out_row = cpu::token_offset(p.out, p.cu_seqlens_q, item.i, t) + h * p.out.head_stride;
    cpu::store_row(p.out_dtype, p.out.ptr, out_row, dv, o.data());
    if (p.lse) {
      const int64_t row = (p.cu_seqlens_q ? p.cu_seqlens_q[item.i] : 0) + t;
      p.lse[item.i * p.lse_batch_stride + h * p.lse_head_stride + row * p.lse_token_stride] = float(lse);
    }
  }
}

// One work item: the online softmax of its rows over its keys, tile by tile.
class ItemAttention {
 public:
  ItemAttention(const FwdProblem& p, const Item& item)
      : p_(p),
        item_(item),
        seq_(cpu::sequence_of(p, item.i)),
        rows_(item.rows()),
        per_head_(item.row1 - item.row0) {}

  // Writes the (O, LSE) of each row: to out/lse when the item is its rows' only key range, else to
  // partials (rows, dv + 2) = O, m, l.
  void run(double* partials, const cpu::InterruptTicket& ticket) {
    load_queries();
    const int d = p_.head_dim;
    const int dv = p_.head_dim_v;
    m_.assign(rows_, -kInf);
    l_.assign(rows_, 0.0);
    o_.assign(size_t(rows_) * dv, 0.0);
    KeyRange all{item_.key1, item_.key0};  // the union of the rows' visible keys in this item
    for (const KeyRange& k : visible_) {
      if (k.hi <= k.lo) continue;
      all.lo = std::min(all.lo, k.lo);
      all.hi = std::max(all.hi, k.hi);
    }
    // fp32 rows are read in place and bf16 rows widened in registers; fp16 and fp8 tiles are widened first.
    const bool widen = p_.kv_dtype == DType::f16 || p_.kv_dtype == DType::fp8_e4m3;
    const int heads = item_.heads;
    tile_ = widen ? kWidenedKeyTile : kMaxKeyTile;
    if (widen) {
      k_tile_.resize(size_t(heads) * tile_ * d);
      v_tile_.resize(size_t(heads) * tile_ * dv);
    }
    k_raw_.resize(size_t(heads) * tile_);
    v_raw_.resize(size_t(heads) * tile_);
    k_rows_.resize(size_t(heads) * tile_);
    v_rows_.resize(size_t(heads) * tile_);
    s_.resize(size_t(rows_) * tile_);
    s_qv_.resize(p_.qv.ptr ? size_t(per_head_) * tile_ : 0);
    o_tile_.resize(size_t(rows_) * dv);
    for (int64_t key0 = all.lo; key0 < all.hi; key0 += tile_) {
      if (ticket.raised()) throw Interrupted{};
      const int n = int(std::min<int64_t>(tile_, all.hi - key0));
      gather_rows(key0, n, widen);
      if (key0 + tile_ < all.hi) {
        prefetch_rows(key0 + tile_, int(std::min<int64_t>(tile_, all.hi - key0 - tile_)));
      }
      std::fill(o_tile_.begin(), o_tile_.end(), 0.f);
      for (int gg = 0; gg < heads; ++gg) {
        // S = scale (Q K^T (+ QV V^T)) of this head's rows (descales folded into q and qv)
        const size_t r0 = size_t(gg) * per_head_;
        float* s = &s_[r0 * n];
        const size_t key_rows = size_t(gg) * tile_;
        dot_rows(&q_[r0 * d], per_head_, d, &k_raw_[key_rows], &k_rows_[key_rows], n, s);
        if (p_.qv.ptr) {
          dot_rows(&qv_[r0 * dv], per_head_, dv, &v_raw_[key_rows], &v_rows_[key_rows], n, s_qv_.data());
          for (size_t e = 0; e < size_t(per_head_) * n; ++e) s[e] += s_qv_[e];
        }
        const float scale = float(p_.softmax_scale);
        for (size_t e = 0; e < size_t(per_head_) * n; ++e) s[e] *= scale;
        for (int r = 0; r < per_head_; ++r) softmax_tile(int(r0) + r, key0, n);
        if (p_.kv_dtype == DType::bf16) {  // s holds P now
          cpu::accumulate_pv_bf16(s, per_head_, n, bf16_rows(&v_raw_[key_rows]), dv, &o_tile_[r0 * dv]);
        } else {
          cpu::accumulate_pv(s, per_head_, n, &v_rows_[key_rows], dv, &o_tile_[r0 * dv]);
        }
        for (int r = 0; r < per_head_; ++r)
          keep_zero_weights_out(s + size_t(r) * n, n, key_rows, &o_tile_[(r0 + r) * dv]);
      }
      cpu::add_rows(o_.data(), o_tile_.data(), rows_ * dv);
    }
    finish(partials);
  }

 private:
  // q (rows, d) and qv (rows, dv) in fp32: descaled, rotated (in double), times the k (v) descale, so that
  // a dot product with a stored key row, times softmax_scale, is the score x of step 5 before softcap. The
  // scale is applied after the dot product, as the GPU kernels do: a score overflows to +-inf only when
  // it is beyond float32's range itself (docs/DESIGN.md, non-finite scores).
  void load_queries() {
    const int group = p_.num_q_heads / p_.num_kv_heads;
    const int d = p_.head_dim;
    const int dv = p_.head_dim_v;
    v_descale_.resize(item_.heads);
    q_.resize(size_t(rows_) * d);
    qv_.resize(p_.qv.ptr ? size_t(rows_) * dv : 0);
    qp_.resize(rows_);
    visible_.resize(rows_);
    slope_.resize(rows_);
    std::vector<double> row(std::max(d, dv));
    for (int r = 0; r < rows_; ++r) {
      int64_t t;
      int h;
      item_.token_and_head(r, group, &t, &h);
      const int g = h / group;
      const double q_descale = descale(p_.q_descale, p_.q_descale_strides, item_.i, g);
      const double k_scale = q_descale * descale(p_.k_descale, p_.k_descale_strides, item_.i, g);
      v_descale_[g - item_.g0] = descale(p_.v_descale, p_.v_descale_strides, item_.i, g);
      const double v_scale = q_descale * v_descale_[g - item_.g0];
      qp_[r] = t + seq_.kv_len - seq_.q_used;  // bottom-right aligned (step 4)
      KeyRange keys = visible_keys(p_, qp_[r], seq_.kv_len);
      keys.lo = std::max(keys.lo, item_.key0);
      keys.hi = std::min(keys.hi, item_.key1);
      visible_[r] = keys;
      slope_[r] = p_.alibi_slopes ? p_.alibi_slopes[item_.i * p_.alibi_batch_stride + h] : 0.f;
      const int64_t q_row = cpu::token_offset(p_.q, p_.cu_seqlens_q, item_.i, t) + h * p_.q.head_stride;
      cpu::load_row(p_.q_dtype, p_.q.ptr, q_row, d, row.data());
      if (p_.rotary_dim > 0) cpu::rotate(p_, seq_.rotary_pos + (p_.rotary_q_per_token ? t : 0), row.data());
      for (int c = 0; c < d; ++c) q_[size_t(r) * d + c] = float(row[c] * k_scale);
      if (p_.kv_dtype == DType::bf16) cpu::to_pair_order(&q_[size_t(r) * d], d);
      if (p_.qv.ptr) {
        const int64_t qv_row = cpu::token_offset(p_.qv, p_.cu_seqlens_q, item_.i, t) + h * p_.qv.head_stride;
        cpu::load_row(p_.q_dtype, p_.qv.ptr, qv_row, dv, row.data());
        for (int c = 0; c < dv; ++c) qv_[size_t(r) * dv + c] = float(row[c] * v_scale);
        if (p_.kv_dtype == DType::bf16) cpu::to_pair_order(&qv_[size_t(r) * dv], dv);
      }
    }
  }

  static const uint16_t* const* bf16_rows(const void* const* raw) {
    return reinterpret_cast<const uint16_t* const*>(raw);
  }

  // s (rows_, n) = x (rows_, width) times the n key (or value) rows of the tile.
  void dot_rows(const float* x, int num_x, int width, const void* const* raw, const float* const* rows, int n,
                float* s) {
    if (p_.kv_dtype == DType::bf16) {
      cpu::dot_rows_bf16(x, num_x, width, bf16_rows(raw), n, s);
    } else {
      cpu::dot_rows(x, num_x, width, rows, n, s);
    }
  }

  // k_raw_ / v_raw_ [j] = key / value row of logical key position key0 + j as stored; k_rows_ / v_rows_
  // [j] = the same in fp32 for fp32 (the row itself), fp16 and fp8 (its widened copy in k_tile_ / v_tile_).
  void gather_rows(int64_t key0, int n, bool widen) {
    const size_t size = dtype_size(p_.kv_dtype);
    slot_offsets(seq_.leftpad + key0, n);
    for (int gg = 0; gg < item_.heads; ++gg) {
      const int64_t kh = int64_t(item_.g0 + gg) * p_.k_cache.head_stride;
      const int64_t vh = int64_t(item_.g0 + gg) * p_.v_cache.head_stride;
      const void** k_raw = &k_raw_[size_t(gg) * tile_];
      const void** v_raw = &v_raw_[size_t(gg) * tile_];
      for (int j = 0; j < n; ++j) {
        k_raw[j] = static_cast<const char*>(p_.k_cache.ptr) + (k_offset_[j] + kh) * size;
        v_raw[j] = static_cast<const char*>(p_.v_cache.ptr) + (v_offset_[j] + vh) * size;
      }
      if (p_.kv_dtype == DType::bf16) continue;
      const float** k_rows = &k_rows_[size_t(gg) * tile_];
      const float** v_rows = &v_rows_[size_t(gg) * tile_];
      if (!widen) {
        for (int j = 0; j < n; ++j) {
          k_rows[j] = static_cast<const float*>(k_raw[j]);
          v_rows[j] = static_cast<const float*>(v_raw[j]);
        }
        continue;
      }
      float* k_tile = &k_tile_[size_t(gg) * tile_ * p_.head_dim];
      float* v_tile = &v_tile_[size_t(gg) * tile_ * p_.head_dim_v];
      widen_rows(k_raw, n, p_.head_dim, k_tile);
      widen_rows(v_raw, n, p_.head_dim_v, v_tile);
      for (int j = 0; j < n; ++j) {
        k_rows[j] = &k_tile[size_t(j) * p_.head_dim];
        v_rows[j] = &v_tile[size_t(j) * p_.head_dim_v];
      }
    }
  }

  // k_offset_ / v_offset_ [j] = cpu::slot_offset of slot s0 + j: one page-table read and one division
  // per page, not per key.
  void slot_offsets(int64_t s0, int n) {
    if (p_.cu_seqlens_k) {
      for (int j = 0; j < n; ++j) {
        k_offset_[j] = cpu::slot_offset(p_, p_.k_cache, item_.i, s0 + j);
        v_offset_[j] = cpu::slot_offset(p_, p_.v_cache, item_.i, s0 + j);
      }
      return;
    }
    for (int j = 0; j < n;) {
      const int64_t s = s0 + j;
      const int64_t in_page = s % p_.page_size;
      const int run = int(std::min<int64_t>(n - j, p_.page_size - in_page));
      const int64_t k0 = cpu::slot_offset(p_, p_.k_cache, item_.i, s);
      const int64_t v0 = cpu::slot_offset(p_, p_.v_cache, item_.i, s);
      for (int t = 0; t < run; ++t) {
        k_offset_[j + t] = k0 + t * p_.k_cache.slot_stride;
        v_offset_[j + t] = v0 + t * p_.v_cache.slot_stride;
      }
      j += run;
    }
  }

  // Asks for the next tile's rows while this one computes. A row of one kv head is a few cache lines, and
  // consecutive rows are hk heads apart (or in another page): too far apart for the hardware prefetcher.
  void prefetch_rows(int64_t key0, int n) {
    const int64_t size = int64_t(dtype_size(p_.kv_dtype));
    slot_offsets(seq_.leftpad + key0, n);
    prefetch_cache(p_.k_cache, k_offset_, n, p_.head_dim * size);
    prefetch_cache(p_.v_cache, v_offset_, n, p_.head_dim_v * size);
  }

  void prefetch_cache(const CacheTensor& cache, const int64_t* offsets, int n, int64_t row_bytes) const {
    const int64_t size = int64_t(dtype_size(p_.kv_dtype));
    const char* base = static_cast<const char*>(cache.ptr) + int64_t(item_.g0) * cache.head_stride * size;
    // Heads side by side (NHD): one span per slot; otherwise one per head.
    const bool adjacent = cache.head_stride * size == row_bytes;
    const int spans = adjacent ? 1 : item_.heads;
    const int64_t span_bytes = adjacent ? row_bytes * item_.heads : row_bytes;
    for (int j = 0; j < n; ++j) {
      for (int h = 0; h < spans; ++h) {
        const char* x = base + (offsets[j] + h * cache.head_stride) * size;
        for (int64_t b = 0; b < span_bytes; b += 64) __builtin_prefetch(x + b, 0, 3);
      }
    }
  }

  void widen_rows(const void* const* raw, int n, int width, float* dst) const {
    switch (p_.kv_dtype) {
      case DType::f16:
        cpu::widen_f16_rows(reinterpret_cast<const uint16_t* const*>(raw), n, width, dst);
        return;
      default:  // fp8_e4m3; cpu_fwd admits no other dtype
        cpu::widen_fp8_rows(reinterpret_cast<const uint8_t* const*>(raw), n, width, dst);
        return;
    }
  }

  static size_t dtype_size(DType t) { return t == DType::f32 ? 4 : t == DType::fp8_e4m3 ? 1 : 2; }

  // Row r of the tile [key0, key0 + n): softcap and ALiBi on the scores, the mask, then the online
  // softmax: s_ becomes P = exp(x - m_new) and the row's m, l and o are rescaled to m_new.
  void softmax_tile(int r, int64_t key0, int n) {
    float* x = &s_[size_t(r) * n];
    const KeyRange keys = visible_[r];
    const int lo = int(std::clamp<int64_t>(keys.lo - key0, 0, n));
    const int hi = int(std::clamp<int64_t>(keys.hi - key0, lo, n));
    if (lo >= hi || std::isnan(m_[r])) {  // no visible key here, or the row is NaN already
      std::fill(x, x + n, 0.f);
      return;
    }
    if (p_.softcap > 0.f) {
      const float cap = float(p_.softcap);
      for (int j = lo; j < hi; ++j) x[j] = cap * std::tanh(x[j] / cap);
    }
    if (p_.alibi_slopes) {
      for (int j = lo; j < hi; ++j) x[j] -= slope_[r] * float(std::llabs(qp_[r] - (key0 + j)));
    }
    std::fill(x, x + lo, -std::numeric_limits<float>::infinity());
    std::fill(x + hi, x + n, -std::numeric_limits<float>::infinity());
    // A NaN score poisons the row (docs/DESIGN.md): l becomes NaN. Checked here, not left to max and exp,
    // since the vector max drops NaN and the vector exp clamps its argument.
    bool nan = false;
    for (int j = lo; j < hi; ++j) nan = nan || std::isnan(x[j]);
    if (nan) {
      m_[r] = l_[r] = std::numeric_limits<double>::quiet_NaN();  // NaN through every later tile and the merge
      std::fill(x, x + n, 0.f);
      return;
    }
    const float tile_max = cpu::max_of(x + lo, hi - lo);
    const double m_new = std::max(m_[r], double(tile_max));
    if (m_new == -kInf) {  // every visible score is -inf (ALiBi or softcap cannot make one; data can)
      std::fill(x, x + n, 0.f);
      return;
    }
    // m = +inf (docs/DESIGN.md, non-finite scores): the +inf keys weigh 1 each, the others 0 (exp(x - m)
    // would make inf - inf = NaN); l counts them.
    const double tile_sum = m_new == kInf ? inf_keys_as_ones(x, n) : cpu::exp_shifted(x, n, float(m_new));
    if (m_new > m_[r]) {
      const double alpha = std::exp(m_[r] - m_new);  // 0 on the first tile
      l_[r] *= alpha;
      double* o = &o_[size_t(r) * p_.head_dim_v];
      cpu::scale_rows(o, alpha, p_.head_dim_v);
      m_[r] = m_new;
    }
    l_[r] += tile_sum;
  }

  // A zero weight never multiplies a value (docs/DESIGN.md): 0 x inf is NaN. The vector P V multiplies
  // every key, so a row that came out non-finite (only a non-finite V can do that) is summed again here,
  // skipping the zero weights. p: (n) the row's P; o: (dv) its P V, in the pair order for bf16 caches.
  void keep_zero_weights_out(const float* p, int n, size_t key_rows, float* o) {
    const int dv = p_.head_dim_v;
    bool finite = true;
    for (int c = 0; c < dv; ++c) finite = finite && std::isfinite(o[c]);
    if (finite) return;
    std::vector<double> sum(dv, 0.0), v(dv);
    for (int j = 0; j < n; ++j) {
      if (p[j] == 0.f) continue;
      if (p_.kv_dtype == DType::bf16) {
        cpu::load_row(DType::bf16, v_raw_[key_rows + j], 0, dv, v.data());
      } else {
        for (int c = 0; c < dv; ++c) v[c] = v_rows_[key_rows + j][c];
      }
      for (int c = 0; c < dv; ++c) sum[c] += double(p[j]) * v[c];
    }
    for (int c = 0; c < dv; ++c) o[c] = float(sum[c]);
    if (p_.kv_dtype == DType::bf16) cpu::to_pair_order(o, dv);
  }

  static double inf_keys_as_ones(float* x, int n) {
    double count = 0.0;
    for (int j = 0; j < n; ++j) {
      const bool inf = x[j] == std::numeric_limits<float>::infinity();
      if (std::isnan(x[j]))
        count = std::numeric_limits<double>::quiet_NaN();  // poisons the row, as exp would
      x[j] = std::isnan(x[j]) ? x[j] : inf ? 1.f : 0.f;
      count += inf ? 1.0 : 0.0;
    }
    return count;
  }

  // O = o / l, m and l per row (0, -inf, 0 without keys), as (rows, dv + 2).
  void finish(double* partials) {
    const int dv = p_.head_dim_v;
    std::vector<double> own;  // the item is its rows' only key range: its rows are final
    if (item_.splits == 1) own.resize(size_t(rows_) * (dv + 2));
    double* part = item_.splits == 1 ? own.data() : partials + item_.partial;
    for (int r = 0; r < rows_; ++r) {
      double* o = &o_[size_t(r) * dv];
      if (p_.kv_dtype == DType::bf16) cpu::from_pair_order(o, dv);  // P V came in pair order
      double* row = part + size_t(r) * (dv + 2);
      if (l_[r] > 0.0 || std::isnan(l_[r])) {
        const double v_descale = v_descale_[r / per_head_];
        for (int c = 0; c < dv; ++c) row[c] = o[c] * v_descale / l_[r];  // P (v_descale V)
        row[dv] = m_[r];
        row[dv + 1] = l_[r];
      } else {
        std::fill(row, row + dv, 0.0);
        row[dv] = -kInf;
        row[dv + 1] = 0.0;
      }
    }
    if (item_.splits == 1) write_rows(p_, item_, part, 1);
  }

  const FwdProblem& p_;
  const Item& item_;
  const Sequence seq_;
  const int rows_;                 // heads x per_head_
  const int per_head_;             // rows of each kv head
  std::vector<double> v_descale_;  // (heads) 1 unless v_cache is fp8 with v_descale
  std::vector<float> q_;           // (rows, d) scaled, rotated queries
  std::vector<float> qv_;          // (rows, dv) scaled qv, or empty
  std::vector<int64_t> qp_;        // (rows) logical query positions
  std::vector<KeyRange> visible_;  // (rows) visible keys within the item's range
  std::vector<float> slope_;       // (rows) ALiBi slopes
  std::vector<double> m_;          // (rows) running max of the scores
  std::vector<double> l_;          // (rows) running sum of exp(x - m)
  std::vector<double> o_;          // (rows, dv) running sum of exp(x - m) v
  std::vector<float> s_;           // (rows, n) scores, then P, of one tile
  std::vector<float> s_qv_;        // (per_head_, n) qv . v of one head of one tile
  std::vector<float> o_tile_;      // (rows, dv) P V of one tile
  int tile_ = kMaxKeyTile;         // keys per tile
  std::vector<float> k_tile_;      // (heads, tile_, d) widened key rows
  std::vector<float> v_tile_;      // (heads, tile_, dv) widened value rows
  int64_t k_offset_[kMaxKeyTile];
  int64_t v_offset_[kMaxKeyTile];
  std::vector<const void*> k_raw_;  // (heads, tile_) rows as stored
  std::vector<const void*> v_raw_;
  std::vector<const float*> k_rows_;  // (heads, tile_) rows in fp32 (not for bf16)
  std::vector<const float*> v_rows_;
};

// Out 0 and lse -inf for the rows no key reaches: varlen q rows that no sequence owns (before
// cu_seqlens_q[0] or from cu_seqlens_q[b] on) and tokens past seqused_q.
void clear_rows_without_queries(const FwdProblem& p) {
  const std::vector<double> zeros(p.head_dim_v, 0.0);
  auto clear = [&](int64_t i, int64_t row) {  // row: cu_seqlens_q[i] + t when varlen (batch strides 0)
    for (int h = 0; h < p.num_q_heads; ++h) {
      cpu::store_row(p.out_dtype, p.out.ptr,
                     i * p.out.batch_stride + row * p.out.token_stride + h * p.out.head_stride, p.head_dim_v,
                     zeros.data());
      if (p.lse) {
        p.lse[i * p.lse_batch_stride + h * p.lse_head_stride + row * p.lse_token_stride] =
            -std::numeric_limits<float>::infinity();
      }
    }
  };
  if (p.cu_seqlens_q) {
    for (int64_t row = 0; row < p.cu_seqlens_q[0]; ++row) clear(0, row);
    for (int64_t row = p.cu_seqlens_q[p.batch]; row < p.total_q; ++row) clear(0, row);
  }
  for (int i = 0; i < p.batch; ++i) {
    const Sequence seq = cpu::sequence_of(p, i);
    const int64_t first = p.cu_seqlens_q ? p.cu_seqlens_q[i] : 0;
    for (int64_t t = seq.q_used; t < seq.q_len; ++t) {
      clear(i, first + t);
    }
  }
}

// The work items, and how many threads they deserve.
struct Plan {
  std::vector<Item> items;
  int64_t partial_elements = 0;
  int threads = 1;
};

Plan plan(const FwdProblem& p) {
  Plan plan;
  const int group = p.num_q_heads / p.num_kv_heads;
  const int dv = p.head_dim_v;
  int64_t pairs = 0;  // (row, key) pairs in all: the work
  int64_t longest = 0;
  std::vector<Sequence> seqs(p.batch);
  for (int i = 0; i < p.batch; ++i) {
    seqs[i] = cpu::sequence_of(p, i);
    pairs += seqs[i].q_used * group * p.num_kv_heads * std::max<int64_t>(seqs[i].kv_len, 0);
    longest = std::max(longest, seqs[i].kv_len);
  }
  const int pool = pairs >= kInlinePairs ? cpu::pool_size() : 1;
  plan.threads = pool;
  // Units of work before any key split: a sequence's rows in chunks of kRowChunk, with as many kv heads
  // in one unit as fit (all of them in decode).
  auto heads_per_unit = [&](int64_t rows) {
    return int(std::clamp<int64_t>(kRowChunk / std::max<int64_t>(rows, 1), 1, p.num_kv_heads));
  };
  int64_t units = 0;
  for (int i = 0; i < p.batch; ++i) {
    const int64_t rows = seqs[i].q_used * group;
    const int heads = heads_per_unit(rows);
    units += (p.num_kv_heads + heads - 1) / heads * ((rows + kRowChunk - 1) / kRowChunk);
  }
  // Cut keys only when the units leave threads idle, into ranges of at least kMinSplitKeys.
  int want_splits = 1;
  if (pool > 1 && units < 2 * pool && longest >= 2 * kMinSplitKeys) {
    want_splits = int((2 * pool + units - 1) / std::max<int64_t>(units, 1));
  }
  for (int i = 0; i < p.batch; ++i) {
    const Sequence& seq = seqs[i];
    const int64_t rows = seq.q_used * group;
    if (rows == 0) continue;
    const int64_t kv_len = std::max<int64_t>(seq.kv_len, 0);
    // Deterministic mode: a fixed split length, so that a sequence's answer depends on itself alone (not
    // on the batch or the threads), bit for bit.
    const int splits =
        p.deterministic
            ? int(std::max<int64_t>(1, (kv_len + kDeterministicSplitKeys - 1) / kDeterministicSplitKeys))
            : int(std::max<int64_t>(1, std::min<int64_t>(want_splits, kv_len / kMinSplitKeys)));
    const int64_t split_len = p.deterministic ? kDeterministicSplitKeys : (kv_len + splits - 1) / splits;
    const int heads = heads_per_unit(rows);
    for (int g0 = 0; g0 < p.num_kv_heads; g0 += heads) {
      for (int64_t row0 = 0; row0 < rows; row0 += kRowChunk) {
        for (int s = 0; s < splits; ++s) {
          Item item;
          item.i = i;
          item.g0 = g0;
          item.heads = std::min(heads, p.num_kv_heads - g0);
          item.row0 = int(row0);
          item.row1 = int(std::min<int64_t>(rows, row0 + kRowChunk));
          item.key0 = std::min(kv_len, s * split_len);
          item.key1 = std::min(kv_len, (s + 1) * split_len);
          item.split = s;
          item.splits = splits;
          if (splits > 1) {
            item.partial = plan.partial_elements;
            plan.partial_elements += int64_t(item.rows()) * (dv + 2);
          }
          plan.items.push_back(item);
        }
      }
    }
  }
  return plan;
}

}  // namespace

kvattn_status cpu_fwd(const FwdProblem& p) {
  if (!cpu::is_cpu_storage_dtype(p.q_dtype)) return cpu::unsupported_dtype("q", p.q_dtype);
  if (!cpu::is_cpu_storage_dtype(p.kv_dtype)) return cpu::unsupported_dtype("k_cache", p.kv_dtype);
  if (!cpu::is_cpu_storage_dtype(p.out_dtype)) return cpu::unsupported_dtype("out", p.out_dtype);
  if (p.rotary_dim > 0 && !cpu::is_cpu_storage_dtype(p.rotary_dtype)) {
    return cpu::unsupported_dtype("rotary_cos", p.rotary_dtype);
  }
  if (!cpu::pool_config_error().empty()) return fail(KVATTN_ERROR_INVALID_ARGUMENT, cpu::pool_config_error());
  const cpu::InterruptTicket ticket;
  // Every append lands before any attention reads the cache.
  cpu::append_new_tokens(p);
  clear_rows_without_queries(p);
  const Plan work = plan(p);
  std::vector<double> partials(work.partial_elements);  // (items with splits > 1, rows, dv + 2)
  try {
    cpu::parallel_for(int64_t(work.items.size()), work.threads,
                      [&](int64_t k) { ItemAttention(p, work.items[k]).run(partials.data(), ticket); });
    // The merge of each row's key ranges: the items of one (i, g, row chunk) are consecutive.
    std::vector<int64_t> firsts;
    for (size_t k = 0; k < work.items.size(); ++k) {
      if (work.items[k].splits > 1 && work.items[k].split == 0) firsts.push_back(int64_t(k));
    }
    cpu::parallel_for(int64_t(firsts.size()), work.threads, [&](int64_t f) {
      const Item& item = work.items[firsts[f]];
      write_rows(p, item, partials.data() + item.partial, item.splits);
    });
  } catch (const Interrupted&) {
    return fail(
        KVATTN_ERROR_INTERRUPTED,
        "interrupted by kvattn_interrupt(): out and softmax_lse are incomplete (the append of k and v, "
        "if any, was done)");
  }
  return KVATTN_OK;
}

}  // namespace kvattn
