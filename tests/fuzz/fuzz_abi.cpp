// kvattn_fuzz: the project's fuzzer of the C ABI on the CPU backend (docs/DESIGN.md, "Fuzzing").
//
// A seeded, structure-aware generator: case k of seed S is a valid call (random sizes, layouts and
// features) plus 0-2 recorded mutations (index values, sizes, strides, NULL data, enum and scalar values,
// aliasing, misalignment, bit flips of shape/stride fields, non-finite data). Each call is checked:
//   - kvattn_check and kvattn_fwd agree (status and message);
//   - a rejected call wrote nothing (every buffer byte compared with a snapshot) and named something;
//   - an accepted call is valid for the independent float64 reference (reference.hpp), reaches only the
//     caller's buffers, matches the reference on every written element, and wrote no other byte;
//   - an unmutated (valid) call is accepted.
// Built with ASan + UBSan (tools/test.sh), so a memory error or UB in the library stops the run.
// On a failure the case is minimized (mutations dropped while it still fails) and printed with
// `--seed S --case K` to replay it.
//
//   kvattn_fuzz [--seed S] [--cases N] [--seconds T] [--case K] [--quiet] [--dump]
// (--dump: a failure also prints every argument's values as they were before the call, row-major.)
#include <kvattn/kvattn.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <list>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "reference.hpp"

namespace fuzz {
namespace {

using Rng = std::mt19937_64;

int64_t pick(Rng& rng, int64_t lo, int64_t hi) {  // uniform in [lo, hi]
  return lo + int64_t(rng() % uint64_t(hi - lo + 1));
}
bool chance(Rng& rng, double p) {
  return std::uniform_real_distribution<double>(0, 1)(rng) < p;
}

// ---- buffers
constexpr int64_t kCapBytes = int64_t(1) << 24;  // a mutated tensor needing more is not allocated

struct Buffer {
  std::vector<uint64_t> words;  // 8-byte aligned storage
  uintptr_t begin() const { return reinterpret_cast<uintptr_t>(words.data()); }
  uintptr_t end() const { return begin() + words.size() * 8; }
};

enum Kind { kFloat, kIndex };

// Element-offset extent of a descriptor in 128-bit arithmetic; false when ndim is invalid. Every value
// saturates at +-2^100: far past any int64 extent, so the callers' overflow checks (x 8-byte elements)
// decide as before, and 8 mutated dims of ~2^63 no longer overflow __int128 itself.
bool extent128(const kvattn_tensor& t, __int128* lo, __int128* hi, __int128* numel) {
  constexpr __int128 kSat = __int128(1) << 100;
  const auto sat = [](__int128 x) { return x > kSat ? kSat : x < -kSat ? -kSat : x; };
  if (t.ndim < 0 || t.ndim > KVATTN_MAX_DIMS) return false;
  *lo = *hi = 0;
  *numel = 1;
  for (int i = 0; i < t.ndim; ++i) {
    if (t.shape[i] < 0) return false;
    *numel = t.shape[i] != 0 && *numel > kSat / t.shape[i] ? kSat : *numel * t.shape[i];
    if (t.shape[i] <= 1) continue;
    const __int128 reach = sat(__int128(t.shape[i] - 1) * t.strides[i]);  // |.| < 2^126 before sat
    (reach < 0 ? *lo : *hi) = sat((reach < 0 ? *lo : *hi) + reach);
  }
  return true;
}

struct Case;

// One tensor argument of a call.
struct Arg {
  const char* name;
  kvattn_tensor* field;
  Kind kind;
};

struct Mutation {
  int kind = 0;
  int arg = 0;  // index into Case::args
  int dim = 0;
  int64_t value = 0;
  double real = 0;
  std::string describe(const std::vector<Arg>& args) const;
};

struct Case {
  int op = 0;  // 0 fwd, 1 combine, 2 append
  kvattn_fwd_params fwd{};
  kvattn_combine_params comb{};
  kvattn_append_params app{};
  std::vector<Arg> args;
  std::list<Buffer> buffers;
  std::vector<Mutation> mutations;
  int klass = 0;  // feature class of the valid base (for the run's summary)

  Memory memory() const {
    Memory m;
    for (const Buffer& b : buffers) m.ranges.push_back({b.begin(), b.end()});
    return m;
  }
  Buffer* owner(const void* p) {
    for (Buffer& b : buffers) {
      if (reinterpret_cast<uintptr_t>(p) >= b.begin() && reinterpret_cast<uintptr_t>(p) < b.end()) return &b;
    }
    return nullptr;
  }
};

// Contiguous strides of `shape` (row-major), then a buffer covering the extent with random contents.
void fill(Rng& rng, kvattn_tensor& t, Kind kind, void* base, int64_t count) {
  (void)t;
  if (kind == kIndex) {
    int32_t* x = static_cast<int32_t*>(base);
    for (int64_t i = 0; i < count * 2; ++i) x[i] = int32_t(pick(rng, 0, 3));
    return;
  }
  uint16_t* h = static_cast<uint16_t*>(base);
  for (int64_t i = 0; i < count * 4; ++i) h[i] = uint16_t(rng());
  switch (code(t.dtype)) {
    case KVATTN_DTYPE_F32: {
      float* f = static_cast<float*>(base);
      for (int64_t i = 0; i < count * 2; ++i)
        f[i] = float(std::uniform_real_distribution<double>(-2, 2)(rng));
      return;
    }
    case KVATTN_DTYPE_F16:  // |x| in [2^-5, 2^3)
      for (int64_t i = 0; i < count * 4; ++i)
        h[i] = uint16_t((rng() & 0x8000) | (pick(rng, 10, 17) << 10) | (rng() & 0x3ff));
      return;
    case KVATTN_DTYPE_BF16:
      for (int64_t i = 0; i < count * 4; ++i)
        h[i] = uint16_t((rng() & 0x8000) | (pick(rng, 122, 129) << 7) | (rng() & 0x7f));
      return;
    default: {  // fp8: |x| in [2^-3, 2^2]
      uint8_t* b = static_cast<uint8_t*>(base);
      for (int64_t i = 0; i < count * 8; ++i)
        b[i] = uint8_t((rng() & 0x80) | (pick(rng, 4, 9) << 3) | (rng() & 7));
    }
  }
}

// Allocates storage for `t` as it stands (any strides, negative too) and points t.data into it.
// Returns false when the extent overflows or exceeds kCapBytes (t.data then points at a small buffer).
bool allocate(Case& c, Rng& rng, kvattn_tensor& t, Kind kind) {
  __int128 lo, hi, numel;
  const bool sane = extent128(t, &lo, &hi, &numel);
  const __int128 elems = sane ? hi - lo + 1 : 1;
  const bool fits = sane && elems <= kCapBytes / 8 - 8;
  Buffer& b = c.buffers.emplace_back();
  const int64_t words = fits ? int64_t(elems) + 8 : 8;
  b.words.assign(size_t(words), 0);
  fill(rng, t, kind, b.words.data(), words);
  // Element size up to 8: the buffer holds 8 bytes per element, so a later dtype mutation stays inside.
  t.data = reinterpret_cast<char*>(b.words.data()) + (fits ? int64_t(-lo) * 8 : 0);
  return fits;
}

// A fresh tensor: shape, row-major strides (optionally padded), storage.
kvattn_tensor make(Case& c, Rng& rng, const char* name, kvattn_tensor* field, kvattn_dtype dtype,
                   std::vector<int64_t> shape, Kind kind = kFloat, bool padded = false) {
  kvattn_tensor t{};
  t.dtype = dtype;
  t.ndim = int32_t(shape.size());
  int64_t stride = 1;
  for (int i = t.ndim - 1; i >= 0; --i) {
    t.shape[i] = shape[i];
    t.strides[i] = stride;
    stride *= std::max<int64_t>(shape[i], 1) + (padded && i == t.ndim - 1 ? pick(rng, 0, 2) : 0);
  }
  for (int i = t.ndim; i < KVATTN_MAX_DIMS; ++i) t.shape[i] = pick(rng, 0, 3), t.strides[i] = pick(rng, 0, 9);
  allocate(c, rng, t, kind);
  *field = t;
  c.args.push_back({name, field, kind});
  return t;
}

int32_t* ints(const kvattn_tensor& t) {
  return static_cast<int32_t*>(t.data);
}

// ---- the valid base of a kvattn_fwd case
void gen_fwd(Case& c, Rng& rng) {
  kvattn_fwd_params& p = c.fwd;
  kvattn_fwd_params_init(&p);
  const kvattn_dtype dtypes[] = {KVATTN_DTYPE_F32, KVATTN_DTYPE_F32, KVATTN_DTYPE_BF16, KVATTN_DTYPE_F16};
  const kvattn_dtype qd = dtypes[pick(rng, 0, 3)];
  const bool fp8_cache = qd != KVATTN_DTYPE_F32 && chance(rng, 0.15);
  const kvattn_dtype kd = fp8_cache ? KVATTN_DTYPE_FP8_E4M3 : qd;
  const int64_t b = pick(rng, 1, 3), hk = pick(rng, 1, 2), hq = hk * pick(rng, 1, 2);
  const int64_t d = 2 * pick(rng, 1, 4), dv = pick(rng, 1, 6);
  const bool varlen = chance(rng, 0.25), append = chance(rng, 0.4), varlen_new = append && chance(rng, 0.3);
  const int layout = int(pick(rng, 0, 2));  // contiguous, paged, packed
  c.klass = layout * 4 + varlen * 2 + append;
  const bool padded = chance(rng, 0.3);

  // Lengths per sequence.
  std::vector<int64_t> qlen(b), nnew(b), clen(b);
  int64_t total_q = 0, total_new = 0;
  const int64_t sq = pick(rng, 1, 3), s_new = append ? pick(rng, 0, 2) : 0;
  for (int64_t i = 0; i < b; ++i) {
    qlen[i] = varlen ? pick(rng, 0, sq) : sq;
    nnew[i] = varlen_new ? pick(rng, 0, 2) : s_new;
    total_q += qlen[i];
    total_new += nnew[i];
  }
  if (varlen) {
    make(c, rng, "q", &p.q, qd, {total_q, hq, d}, kFloat, padded);
    const kvattn_tensor cu = make(c, rng, "cu_seqlens_q", &p.cu_seqlens_q, KVATTN_DTYPE_I32, {b + 1}, kIndex);
    ints(cu)[0] = 0;
    for (int64_t i = 0; i < b; ++i) ints(cu)[i + 1] = int32_t(ints(cu)[i] + qlen[i]);
    p.max_seqlen_q = sq;
  } else {
    make(c, rng, "q", &p.q, qd, {b, sq, hq, d}, kFloat, padded);
  }
  // Cache.
  std::vector<int64_t> capacity(b);
  std::vector<int64_t> rows(b);
  for (int64_t i = 0; i < b; ++i) rows[i] = i;
  if (layout == 2) {
    std::vector<int64_t> cap(b);
    int64_t total_k = 0;
    for (int64_t i = 0; i < b; ++i) total_k += (capacity[i] = nnew[i] + pick(rng, 0, 4));
    make(c, rng, "k_cache", &p.k_cache, kd, {total_k, hk, d}, kFloat, padded);
    make(c, rng, "v_cache", &p.v_cache, kd, {total_k, hk, dv}, kFloat, padded);
    const kvattn_tensor cu = make(c, rng, "cu_seqlens_k", &p.cu_seqlens_k, KVATTN_DTYPE_I32, {b + 1}, kIndex);
    ints(cu)[0] = 0;
    for (int64_t i = 0; i < b; ++i) ints(cu)[i + 1] = int32_t(ints(cu)[i] + capacity[i]);
  } else {
    const bool paged = layout == 1;
    const int64_t page_size = paged ? pick(rng, 1, 4) : 0;
    const int64_t ppr = paged ? std::max(pick(rng, 1, 4), 3 - page_size) : 0;  // room for 2 new tokens
    const int64_t slots = paged ? page_size * ppr : pick(rng, 2, 6);
    for (int64_t i = 0; i < b; ++i) capacity[i] = slots;
    const int64_t rows_total = b + pick(rng, 0, 2);
    const int64_t num_pages = paged ? pick(rng, 1, 8) : rows_total;
    const int64_t dim1 = paged ? page_size : slots;
    if (chance(rng, 0.2)) {  // HND: (pages, hk, slots, d) memory order, seen through strides
      for (auto [name, field, width] :
           {std::tuple{"k_cache", &p.k_cache, d}, std::tuple{"v_cache", &p.v_cache, dv}}) {
        kvattn_tensor t = make(c, rng, name, field, kd, {num_pages, hk, dim1, width});
        std::swap(t.shape[1], t.shape[2]);
        std::swap(t.strides[1], t.strides[2]);
        *field = t;
      }
    } else {
      make(c, rng, "k_cache", &p.k_cache, kd, {num_pages, dim1, hk, d}, kFloat, padded);
      make(c, rng, "v_cache", &p.v_cache, kd, {num_pages, dim1, hk, dv}, kFloat, padded);
    }
    if (paged && chance(rng, 0.3)) {  // the ragged index: ppr entries a row, then 0-2 that no row owns
      const int64_t nnz = rows_total * ppr + pick(rng, 0, 2);
      const kvattn_tensor ip =
          make(c, rng, "kv_indptr", &p.kv_indptr, KVATTN_DTYPE_I32, {rows_total + 1}, kIndex);
      const kvattn_tensor ix = make(c, rng, "kv_indices", &p.kv_indices, KVATTN_DTYPE_I32, {nnz}, kIndex);
      for (int64_t r = 0; r <= rows_total; ++r) ints(ip)[r] = int32_t(r * ppr);
      for (int64_t e = 0; e < nnz; ++e) ints(ix)[e] = int32_t(pick(rng, 0, num_pages - 1));
    } else if (paged) {
      const kvattn_tensor pt =
          make(c, rng, "page_table", &p.page_table, KVATTN_DTYPE_I32, {rows_total, ppr}, kIndex);
      for (int64_t e = 0; e < rows_total * ppr; ++e) ints(pt)[e] = int32_t(pick(rng, 0, num_pages - 1));
    }
    if (chance(rng, 0.3)) {
      const kvattn_tensor bi =
          make(c, rng, "cache_batch_idx", &p.cache_batch_idx, KVATTN_DTYPE_I32, {b}, kIndex);
      std::vector<int64_t> perm(rows_total);
      for (int64_t r = 0; r < rows_total; ++r) perm[r] = r;
      std::shuffle(perm.begin(), perm.end(), rng);
      for (int64_t i = 0; i < b; ++i) ints(bi)[i] = int32_t(rows[i] = perm[i]);
    }
  }
  for (int64_t i = 0; i < b; ++i) clen[i] = pick(rng, 0, capacity[i] - nnew[i]);
  const int cl_mode = int(pick(rng, 0, 2));
  if (cl_mode == 0) {
    const kvattn_tensor cs = make(c, rng, "cache_seqlens", &p.cache_seqlens, KVATTN_DTYPE_I32, {b}, kIndex);
    for (int64_t i = 0; i < b; ++i) ints(cs)[i] = int32_t(clen[i]);
  } else if (cl_mode == 1) {
    int64_t v = capacity[0];
    for (int64_t i = 0; i < b; ++i) v = std::min(v, capacity[i] - nnew[i]);
    p.cache_seqlens_value = pick(rng, 0, v);
    for (int64_t i = 0; i < b; ++i) clen[i] = p.cache_seqlens_value;
  } else {
    for (int64_t i = 0; i < b; ++i) clen[i] = capacity[i];
    if (append) {  // the default is the full capacity: no room to append
      const kvattn_tensor cs = make(c, rng, "cache_seqlens", &p.cache_seqlens, KVATTN_DTYPE_I32, {b}, kIndex);
      for (int64_t i = 0; i < b; ++i) ints(cs)[i] = int32_t(clen[i] = capacity[i] - nnew[i]);
    }
  }
  if (chance(rng, 0.2)) {
    const kvattn_tensor lp = make(c, rng, "cache_leftpad", &p.cache_leftpad, KVATTN_DTYPE_I32, {b}, kIndex);
    for (int64_t i = 0; i < b; ++i) ints(lp)[i] = int32_t(pick(rng, 0, clen[i]));
  }
  if (chance(rng, 0.15)) {
    const kvattn_tensor su = make(c, rng, "seqused_q", &p.seqused_q, KVATTN_DTYPE_I32, {b}, kIndex);
    for (int64_t i = 0; i < b; ++i) ints(su)[i] = int32_t(pick(rng, 0, qlen[i]));
  }
  if (append) {
    if (varlen_new) {
      make(c, rng, "k", &p.k, qd, {total_new, hk, d});
      make(c, rng, "v", &p.v, qd, {total_new, hk, dv});
      const kvattn_tensor cu =
          make(c, rng, "cu_seqlens_k_new", &p.cu_seqlens_k_new, KVATTN_DTYPE_I32, {b + 1}, kIndex);
      ints(cu)[0] = 0;
      for (int64_t i = 0; i < b; ++i) ints(cu)[i + 1] = int32_t(ints(cu)[i] + nnew[i]);
    } else {
      make(c, rng, "k", &p.k, qd, {b, s_new, hk, d}, kFloat, padded);
      make(c, rng, "v", &p.v, qd, {b, s_new, hk, dv}, kFloat, padded);
    }
  }
  if (fp8_cache) {
    for (auto [name, field] : {std::pair{"k_descale", &p.k_descale}, std::pair{"v_descale", &p.v_descale}}) {
      if (!chance(rng, 0.5)) continue;
      kvattn_tensor t = make(c, rng, name, field, KVATTN_DTYPE_F32, {b, hk});
      for (int64_t e = 0; e < b * hk; ++e) static_cast<float*>(t.data)[e] = float(pick(rng, 1, 8)) / 4;
    }
  }
  const bool causal = chance(rng, 0.25);
  p.causal = causal;
  if (chance(rng, 0.15))
    p.window_left = int32_t(pick(rng, -1, 3)), p.window_right = int32_t(pick(rng, -1, 2));
  if (chance(rng, 0.1)) p.attention_chunk = int32_t(pick(rng, 1, 4));
  if (chance(rng, 0.2)) {
    int64_t ro = 1;
    for (int64_t i = 0; i < b; ++i) ro = std::max(ro, clen[i] + std::max<int64_t>(nnew[i], qlen[i]) + 1);
    const int64_t half = pick(rng, 1, d / 2);
    const kvattn_dtype rd = chance(rng, 0.5) ? KVATTN_DTYPE_F32 : qd;
    make(c, rng, "rotary_cos", &p.rotary_cos, rd, {ro, half});
    make(c, rng, "rotary_sin", &p.rotary_sin, rd, {ro, half});
    p.rotary_interleaved = chance(rng, 0.5);
  }
  if (chance(rng, 0.1)) p.softcap = double(pick(rng, 1, 30)) / 10;
  if (chance(rng, 0.1)) p.softmax_scale = double(pick(rng, 1, 20)) / 10;
  if (chance(rng, 0.1)) {
    kvattn_tensor t = chance(rng, 0.5)
                          ? make(c, rng, "alibi_slopes", &p.alibi_slopes, KVATTN_DTYPE_F32, {hq})
                          : make(c, rng, "alibi_slopes", &p.alibi_slopes, KVATTN_DTYPE_F32, {b, hq});
    (void)t;
  }
  if (chance(rng, 0.2)) make(c, rng, "sinks", &p.sinks, KVATTN_DTYPE_F32, {hq});
  if (chance(rng, 0.1))
    make(c, rng, "qv", &p.qv, qd,
         varlen ? std::vector<int64_t>{total_q, hq, dv} : std::vector<int64_t>{b, sq, hq, dv});
  p.num_splits = int32_t(pick(rng, 0, 4));
  const kvattn_dtype od = qd;
  make(c, rng, "out", &p.out, od,
       varlen ? std::vector<int64_t>{total_q, hq, dv} : std::vector<int64_t>{b, sq, hq, dv}, kFloat, padded);
  if (chance(rng, 0.7)) {
    if (varlen) {
      make(c, rng, "lse", &p.lse, KVATTN_DTYPE_F32, {hq, total_q});
    } else if (chance(rng, 0.5)) {
      make(c, rng, "lse", &p.lse, KVATTN_DTYPE_F32, {b, hq, sq});
    } else {  // FA3's transposed lse: (b, hq, sq) over (b, sq, hq) memory
      kvattn_tensor t = make(c, rng, "lse", &p.lse, KVATTN_DTYPE_F32, {b, sq, hq});
      std::swap(t.shape[1], t.shape[2]);
      std::swap(t.strides[1], t.strides[2]);
      p.lse = t;
    }
  }
  (void)rows;
  // Non-finite scores now and then: inf / -inf / NaN in q or k, a huge scale, inf sinks.
  if (chance(rng, 0.1)) {
    const double specials[] = {kInf, -kInf, kNaN, 1e308};
    const double s = specials[pick(rng, 0, 3)];
    const int where = int(pick(rng, 0, 3));
    if (where == 3) {
      p.softmax_scale = chance(rng, 0.5) ? 3e38 : 1e30;  // scores beyond float32's range: +-inf
    } else if (where == 2 && given(p.sinks)) {
      static_cast<float*>(p.sinks.data)[0] = float(s);
    } else if (p.q.dtype == KVATTN_DTYPE_F32) {
      kvattn_tensor& t = where == 0 ? p.q : p.k_cache;
      if (t.dtype == KVATTN_DTYPE_F32) static_cast<float*>(t.data)[0] = float(s);
    }
  }
}

void gen_combine(Case& c, Rng& rng) {
  kvattn_combine_params& p = c.comb;
  kvattn_combine_params_init(&p);
  const int rank = int(pick(rng, 1, 3));
  const int64_t n = pick(rng, 1, 4), dv = pick(rng, 1, 6);
  std::vector<int64_t> rows;
  for (int j = 0; j < rank; ++j) rows.push_back(pick(rng, 1, 3));
  std::vector<int64_t> op{n}, lp{n}, out = rows;
  op.insert(op.end(), rows.begin(), rows.end());
  op.push_back(dv);
  lp.insert(lp.end(), rows.begin(), rows.end());
  out.push_back(dv);
  c.klass = 12 + rank;
  make(c, rng, "out_partials", &p.out_partials, KVATTN_DTYPE_F32, op);
  kvattn_tensor l = make(c, rng, "lse_partials", &p.lse_partials, KVATTN_DTYPE_F32, lp);
  float* lf = static_cast<float*>(l.data);
  int64_t count = 1;
  for (int64_t x : lp) count *= x;
  const double specials[] = {-kInf, -kInf, kInf, kNaN, 1e30, -1e30};
  for (int64_t e = 0; e < count; ++e) {
    if (chance(rng, 0.1)) lf[e] = float(specials[pick(rng, 0, 5)]);
  }
  const kvattn_dtype od[] = {KVATTN_DTYPE_F32, KVATTN_DTYPE_F16, KVATTN_DTYPE_BF16};
  make(c, rng, "out", &p.out, od[pick(rng, 0, 2)], out);
  if (chance(rng, 0.6)) make(c, rng, "lse", &p.lse, KVATTN_DTYPE_F32, rows);
  if (chance(rng, 0.3)) make(c, rng, "sinks", &p.sinks, KVATTN_DTYPE_F32, {rows.back()});
}

void gen_append(Case& c, Rng& rng) {
  kvattn_append_params& p = c.app;
  kvattn_append_params_init(&p);
  const kvattn_dtype dtypes[] = {KVATTN_DTYPE_F32, KVATTN_DTYPE_BF16, KVATTN_DTYPE_F16};
  const kvattn_dtype sd = dtypes[pick(rng, 0, 2)];
  const bool fp8 = sd != KVATTN_DTYPE_F32 && chance(rng, 0.3);
  const int64_t T = pick(rng, 0, 4), hk = pick(rng, 1, 2), d = pick(rng, 1, 4), dv = pick(rng, 1, 4);
  const int64_t pages = pick(rng, 1, 4), ps = pick(rng, 1, 3);
  c.klass = 16 + fp8;
  make(c, rng, "key", &p.key, sd, {T, hk, d});
  make(c, rng, "value", &p.value, sd, {T, hk, dv});
  make(c, rng, "k_cache", &p.k_cache, fp8 ? KVATTN_DTYPE_FP8_E4M3 : sd, {pages, ps, hk, d});
  make(c, rng, "v_cache", &p.v_cache, fp8 ? KVATTN_DTYPE_FP8_E4M3 : sd, {pages, ps, hk, dv});
  kvattn_tensor sm = make(c, rng, "slot_mapping", &p.slot_mapping, KVATTN_DTYPE_I64, {T}, kIndex);
  for (int64_t t = 0; t < T; ++t) static_cast<int64_t*>(sm.data)[t] = pick(rng, -1, pages * ps - 1);
  if (fp8 && chance(rng, 0.5)) {
    kvattn_tensor s = make(c, rng, "k_scale", &p.k_scale, KVATTN_DTYPE_F32, {hk});
    for (int64_t h = 0; h < hk; ++h) static_cast<float*>(s.data)[h] = float(pick(rng, 1, 8)) / 4;
  }
}

// ---- mutations
const int64_t kInts[] = {-1,
                         0,
                         1,
                         2,
                         3,
                         7,
                         8,
                         int64_t(1) << 31,
                         (int64_t(1) << 31) - 1,
                         -(int64_t(1) << 31),
                         -(int64_t(1) << 31) - 1,
                         int64_t(1) << 32,
                         -(int64_t(1) << 32),
                         -(int64_t(1) << 32) + 1,
                         int64_t(1) << 40,
                         int64_t(1) << 62,
                         INT64_MAX,
                         INT64_MIN,
                         -(int64_t(1) << 62)};
constexpr int kNumInts = sizeof(kInts) / sizeof(kInts[0]);
enum MutKind {
  kIndexValue,
  kSize,
  kStride,
  kNull,
  kScalar,
  kAlias,
  kMisalign,
  kBitFlip,
  kDtype,
  kNdim,
  kNumKinds
};
const char* const kKindNames[] = {"index value", "size",       "stride",   "NULL data", "scalar",
                                  "alias",       "misaligned", "bit flip", "dtype",     "ndim"};

std::string Mutation::describe(const std::vector<Arg>& args) const {
  char buf[200];
  std::snprintf(buf, sizeof buf, "%s of %s dim %d value %lld real %g", kKindNames[kind],
                arg < int(args.size()) ? args[arg].name : "?", dim, (long long)value, real);
  return buf;
}

Mutation random_mutation(Case& c, Rng& rng) {
  Mutation m;
  m.kind = int(pick(rng, 0, kNumKinds - 1));
  m.arg = int(pick(rng, 0, int64_t(c.args.size()) - 1));
  m.dim = int(pick(rng, 0, 4));
  m.value = chance(rng, 0.6) ? kInts[pick(rng, 0, kNumInts - 1)] : pick(rng, -4, 9);
  m.real = std::uniform_real_distribution<double>(0, 1)(rng);
  if (m.kind == kIndexValue) {  // aim at an index tensor
    std::vector<int> idx;
    for (int i = 0; i < int(c.args.size()); ++i) {
      if (c.args[i].kind == kIndex) idx.push_back(i);
    }
    if (!idx.empty()) m.arg = idx[pick(rng, 0, int64_t(idx.size()) - 1)];
  }
  if (m.kind == kAlias) m.dim = int(pick(rng, 0, int64_t(c.args.size()) - 1));  // the other argument
  return m;
}

// The scalars of each op that kScalar mutates: (field, as int32 or double).
void mutate_scalar(Case& c, const Mutation& m) {
  const int32_t v32 = int32_t(m.value);
  const double reals[] = {kNaN, kInf, -kInf, -1, 0, 1e308, 1e-308, 1e300};
  const double r = reals[int(m.real * 8) % 8];
  if (c.op == 0) {
    kvattn_fwd_params& p = c.fwd;
    switch (m.dim * 3 + int(m.real * 3) % 3) {
      case 0:
        p.cache_seqlens_value = m.value;
        break;
      case 1:
        p.max_seqlen_q = m.value;
        break;
      case 2:
        p.softmax_scale = r;
        break;
      case 3:
        p.softcap = r;
        break;
      case 4:
        p.window_left = v32;
        break;
      case 5:
        p.window_right = v32;
        break;
      case 6:
        p.attention_chunk = v32;
        break;
      case 7:
        p.num_splits = v32;
        break;
      case 8:
        p.pack_gqa = v32;
        break;
      case 9:
        p.sm_margin = v32;
        break;
      case 10:
        std::memcpy(&p.device_type, &v32, 4);
        break;
      case 11:
        p.causal = v32;
        break;
      case 12:
        p.device_id = v32;
        break;
      case 13:
        p.rotary_interleaved = v32;
        break;
      default:
        p.struct_size = uint32_t(v32);
        break;
    }
  } else if (c.op == 1) {
    std::memcpy(&c.comb.device_type, &v32, 4);
  } else {
    std::memcpy(&c.app.device_type, &v32, 4);
  }
}

void apply(Case& c, Rng& rng, const Mutation& m) {
  if (c.args.empty()) return;
  kvattn_tensor& t = *c.args[m.arg].field;
  const int dim = t.ndim > 0 ? m.dim % t.ndim : 0;
  switch (m.kind) {
    case kIndexValue: {
      if (!given(t) || t.ndim < 1) return;
      __int128 lo, hi, numel;
      if (!extent128(t, &lo, &hi, &numel) || numel == 0 || numel > INT64_MAX) return;
      const double scaled = m.real * double(numel);  // < numel, but double rounding may reach 2^63
      const int64_t e = scaled >= 9.2e18 ? int64_t(numel) - 1 : int64_t(scaled);  // row-major element e
      __int128 off = 0;
      int64_t rest = e;
      for (int i = t.ndim - 1; i >= 0; --i) {
        off += __int128(rest % t.shape[i]) * t.strides[i];
        rest /= t.shape[i];
      }
      const int64_t width = code(t.dtype) == KVATTN_DTYPE_I64 ? 8 : 4;
      const __int128 at = __int128(reinterpret_cast<uintptr_t>(t.data)) + off * width;
      Buffer* b = c.owner(t.data);
      if (!b || at < __int128(b->begin()) || at + 8 > __int128(b->end())) return;
      char* p = reinterpret_cast<char*>(uintptr_t(at));
      // memcpy: an earlier mutation may have misaligned the pointer.
      if (width == 8) {
        std::memcpy(p, &m.value, 8);
      } else {
        const int32_t v = int32_t(m.value);
        std::memcpy(p, &v, 4);
      }
      return;
    }
    case kSize:
      if (t.ndim > 0) t.shape[dim] = m.value;
      break;
    case kStride:
      if (t.ndim > 0) t.strides[dim] = m.value;
      break;
    case kNull:
      t.data = nullptr;
      return;
    case kScalar:
      mutate_scalar(c, m);
      return;
    case kAlias: {
      const kvattn_tensor& other = *c.args[m.dim % c.args.size()].field;
      if (m.real < 0.2 && t.ndim > 1) {
        t.strides[dim] = 0;  // self-aliasing: two indices, one element
        break;
      }
      t.data = other.data;
      return;
    }
    case kMisalign:
      if (given(t)) t.data = static_cast<char*>(t.data) + 1 + int(m.real * 3);
      return;
    case kBitFlip: {
      int64_t* fields = m.real < 0.5 ? t.shape : t.strides;
      fields[m.dim] ^= int64_t(1) << (m.value & 63);
      break;
    }
    case kDtype: {
      const int32_t code = int32_t(m.value % 9);
      std::memcpy(&t.dtype, &code, 4);
      return;
    }
    case kNdim:
      t.ndim = int32_t(m.value % 8);
      break;
  }
  // A size or stride changed: give the tensor storage covering its new extent when that is sane and
  // small (the library cannot know a caller's buffer sizes); otherwise it keeps a small buffer, and the
  // library must reject the call before reading it (an extent beyond int64, or a rule the shape breaks).
  if (given(t) && c.owner(t.data)) allocate(c, rng, t, c.args[m.arg].kind);
}

// Whether every given tensor's extent lies inside the buffer its data points into (else the case is not
// a caller-valid one whenever the library could accept it: skipped unless the extent overflows int64).
enum class Reach { kInside, kOverflows, kOutside };
Reach reach(Case& c) {
  Reach r = Reach::kInside;
  for (const Arg& a : c.args) {
    const kvattn_tensor& t = *a.field;
    if (!given(t)) continue;
    __int128 lo, hi, numel;
    if (!extent128(t, &lo, &hi, &numel)) return Reach::kOverflows;  // invalid ndim / negative size
    const int64_t es = esize(t.dtype);
    if (es == 0) return Reach::kOverflows;  // unknown dtype: rejected before anything is read
    const __int128 lim = __int128(INT64_MAX);
    // Byte offsets [lo * es, (hi + 1) * es) must fit int64 (lo * es = -2^63 does).
    if ((hi + 1) * es > lim || lo * es < -lim - 1 || numel > lim) return Reach::kOverflows;
    if (numel == 0) continue;
    Buffer* b = c.owner(t.data);
    const __int128 begin = __int128(reinterpret_cast<uintptr_t>(t.data)) + lo * es;
    const __int128 end = __int128(reinterpret_cast<uintptr_t>(t.data)) + (hi + 1) * es;
    if (!b || begin < __int128(b->begin()) || end > __int128(b->end())) r = Reach::kOutside;
  }
  return r;
}

// ---- running and judging one case
struct Stats {
  int64_t cases = 0, accepted = 0, rejected = 0, skipped = 0, compared_elements = 0;
  std::map<int, int64_t> by_class, by_mutation;
};

struct Failure {
  std::string what;
};

kvattn_status call(Case& c, std::string* message) {
  kvattn_status s;
  if (c.op == 0) {
    const kvattn_status checked = kvattn_check(&c.fwd);
    const std::string checked_message = kvattn_last_error();
    s = kvattn_fwd(&c.fwd);
    *message = kvattn_last_error();
    if (s != checked || *message != checked_message) {
      throw Failure{"kvattn_check (" + std::to_string(checked) + ": " + checked_message +
                    ") and kvattn_fwd (" + std::to_string(s) + ": " + *message + ") disagree"};
    }
  } else if (c.op == 1) {
    s = kvattn_combine(&c.comb);
    *message = kvattn_last_error();
  } else {
    s = kvattn_append_kv(&c.app);
    *message = kvattn_last_error();
  }
  return s;
}

double decode_at(const void* p, kvattn_dtype t, const Memory& mem) {
  kvattn_tensor one{const_cast<void*>(p), t, 1, {1}, {1}};
  return View{&one, &mem, "output"}.get({0});
}

// Which argument's buffer holds `p` (the first whose data lies in the same buffer), for failure messages.
const char* owner_name(Case& c, const void* p) {
  const Buffer* b = c.owner(p);
  for (const Arg& a : c.args) {
    if (b != nullptr && a.field->data != nullptr && c.owner(a.field->data) == b) return a.name;
  }
  return "?";
}
int64_t byte_offset(Case& c, const void* p) {  // from the start of its buffer
  const Buffer* b = c.owner(p);
  return b ? int64_t(reinterpret_cast<uintptr_t>(p) - b->begin()) : -1;
}

// Runs case `c` and throws Failure on any violation. Returns false when skipped.
bool judge(Case& c, Stats& stats) {
  const Reach r = reach(c);
  if (r == Reach::kOutside) return false;
  std::vector<std::vector<uint64_t>> snapshot;
  for (const Buffer& b : c.buffers) snapshot.push_back(b.words);
  std::string message;
  const kvattn_status s = call(c, &message);
  const Memory mem = c.memory();
  if (s != KVATTN_OK) {
    if (message.empty()) throw Failure{"rejected with an empty message"};
    size_t k = 0;
    for (const Buffer& b : c.buffers) {
      if (b.words != snapshot[k++]) throw Failure{"rejected (" + message + ") but wrote to a buffer"};
    }
    if (c.mutations.empty()) throw Failure{"rejected a valid call: " + message};
    ++stats.rejected;
    return true;
  }
  ++stats.accepted;
  if (r == Reach::kOverflows)
    throw Failure{"accepted a tensor with an invalid ndim, size or dtype, or an extent beyond int64"};
  Expected ex;
  try {
    ex = c.op == 0   ? fwd_expected(c.fwd, mem)
         : c.op == 1 ? combine_expected(c.comb, mem)
                     : append_expected(c.app, mem);
  } catch (const OutOfBounds& e) {
    throw Failure{"accepted, but " + e.what};
  }
  if (!ex.valid) throw Failure{"accepted an invalid call (" + ex.why + ")"};
  // Written elements match; every other byte is unchanged.
  std::map<uintptr_t, uintptr_t> written;  // byte ranges
  for (Expected::Element e : ex.elements) {
    const double got = decode_at(e.address, e.dtype, mem);
    // A finite value beyond the dtype's range is stored as inf (round to nearest; fp8 saturates).
    const double overflow = code(e.dtype) == KVATTN_DTYPE_F32    ? 3.4028235677973366e38
                            : code(e.dtype) == KVATTN_DTYPE_F16  ? 65520.0
                            : code(e.dtype) == KVATTN_DTYPE_BF16 ? 3.3961775292304696e38
                                                                 : kInf;
    if (std::isfinite(e.value) && std::fabs(e.value) >= overflow) e.value = std::copysign(kInf, e.value);
    const bool same = std::isinf(e.tolerance) ? true  // written, any value (reference.hpp: near overflow)
                      : std::isnan(e.value)   ? std::isnan(got)
                      : !std::isfinite(e.value)
                          ? got == e.value
                          : std::isfinite(got) && std::fabs(got - e.value) <= e.tolerance;
    if (!same) {
      char buf[300];
      std::snprintf(buf, sizeof buf, "element of %s at byte %lld: got %.17g, expected %.17g (tolerance %g)",
                    owner_name(c, e.address), (long long)byte_offset(c, e.address), got, e.value,
                    e.tolerance);
      throw Failure{buf};
    }
    const uintptr_t a = reinterpret_cast<uintptr_t>(e.address);
    written[a] = a + esize(e.dtype);
  }
  stats.compared_elements += int64_t(ex.elements.size());
  size_t k = 0;
  for (const Buffer& b : c.buffers) {
    const uint8_t* now = reinterpret_cast<const uint8_t*>(b.words.data());
    const uint8_t* before = reinterpret_cast<const uint8_t*>(snapshot[k++].data());
    for (size_t i = 0; i < b.words.size() * 8; ++i) {
      if (now[i] == before[i]) continue;
      const uintptr_t a = b.begin() + i;
      auto it = written.upper_bound(a);
      if (it != written.begin() && a < std::prev(it)->second) continue;
      throw Failure{"accepted, and wrote a byte that is no output element"};
    }
  }
  return true;
}

// Case k of `seed`, with `keep` selecting which of its mutations apply (all when empty).
Case build(uint64_t seed, int64_t k, const std::vector<bool>& keep, std::vector<Mutation>* all) {
  Rng rng(seed * 0x9E3779B97F4A7C15ull + uint64_t(k));
  Case c;
  c.op = chance(rng, 0.8) ? 0 : chance(rng, 0.5) ? 1 : 2;
  if (c.op == 0) gen_fwd(c, rng);
  if (c.op == 1) gen_combine(c, rng);
  if (c.op == 2) gen_append(c, rng);
  const int n = chance(rng, 0.35) ? 0 : chance(rng, 0.8) ? 1 : 2;
  std::vector<Mutation> muts;
  for (int i = 0; i < n; ++i) muts.push_back(random_mutation(c, rng));
  if (all) *all = muts;
  for (size_t i = 0; i < muts.size(); ++i) {
    if (!keep.empty() && !keep[i]) continue;
    Rng alloc_rng(seed ^ (uint64_t(k) << 8) ^ i);
    apply(c, alloc_rng, muts[i]);
    c.mutations.push_back(muts[i]);
  }
  return c;
}

// Every given argument's elements (row-major, at most 512 each), as the call was about to see them.
void dump_args(Case& c) {
  const Memory mem = c.memory();
  for (const Arg& a : c.args) {
    const kvattn_tensor& t = *a.field;
    if (!given(t) || t.ndim < 1 || t.ndim > KVATTN_MAX_DIMS) continue;
    int64_t numel = 1;  // only the first 512 elements are printed: saturate; a negative size prints none
    for (int i = 0; i < t.ndim && numel > 0; ++i) {
      if (t.shape[i] <= 0) {
        numel = 0;
      } else if (__builtin_mul_overflow(numel, t.shape[i], &numel)) {
        numel = INT64_MAX;
      }
    }
    std::printf("  %s =", a.name);
    for (int64_t e = 0; e < numel && e < 512; ++e) {
      int64_t off = 0, rest = e;
      for (int i = t.ndim - 1; i >= 0; --i) {
        off += rest % t.shape[i] * t.strides[i];
        rest /= t.shape[i];
      }
      const char* p = static_cast<const char*>(t.data) + off * int64_t(esize(t.dtype));
      if (!mem.owns(p, esize(t.dtype))) {
        std::printf(" <outside>");
        break;
      }
      std::printf(" %.9g", decode_at(p, t.dtype, mem));
    }
    std::printf("\n");
  }
}

std::string run_one(uint64_t seed, int64_t k, const std::vector<bool>& keep, Stats& stats, bool* skipped) {
  Case c = build(seed, k, keep, nullptr);
  try {
    *skipped = !judge(c, stats);
    if (!*skipped) {
      ++stats.by_class[c.klass];
      for (const Mutation& m : c.mutations) ++stats.by_mutation[m.kind];
    }
    return "";
  } catch (const Failure& f) {
    return f.what;
  }
}

int main_impl(int argc, char** argv) {
  uint64_t seed = 1;
  int64_t cases = 1000, only = -1;
  double seconds = 0;
  bool quiet = false, dump = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? argv[++i] : "0"; };
    if (a == "--seed")
      seed = std::strtoull(next(), nullptr, 10);
    else if (a == "--cases")
      cases = std::strtoll(next(), nullptr, 10);
    else if (a == "--seconds")
      seconds = std::strtod(next(), nullptr);
    else if (a == "--case")
      only = std::strtoll(next(), nullptr, 10);
    else if (a == "--quiet")
      quiet = true;
    else if (a == "--dump")
      dump = true;
    else {
      std::fprintf(stderr,
                   "usage: kvattn_fuzz [--seed S] [--cases N] [--seconds T] [--case K] [--quiet] [--dump]\n");
      return 2;
    }
  }
  // Cases that once failed (seed, case): replayed first on every run. Add each new finding here (and,
  // where it names a rule, as a GoogleTest in tests/cpp/test_robust.cpp).
  const std::pair<uint64_t, int64_t> kRegressions[] = {
      {2,
       50887},  // 1e300-scale scores split in 3: chunk lse absorbed log(count) (merge now carries max, sum)
      // A NaN V under a weight of ~e^-100: float32 flushes it to 0 (never multiplied), float64 did not
      // (the reference now leaves such a channel unjudged).
      {20261201, 4649433},
      // A rotated q channel of ~1e-45 times an infinite K: +inf in float64, 0 x inf = NaN in float32.
      {20261202, 7577143},
      // v_descale = inf: (sum of P V) x inf, as the kernels do, against the sum of P (V x inf).
      {20261203, 16600921},
      // An ALiBi slope of -7.5e8: float32 scores ~1e9 carry rounding the reference did not allow for.
      {20261205, 2410189},
      // An appended K (aliasing fp32 rotary data) with an infinite channel and a finite one whose product
      // with q overflows float32: NaN (inf - inf) in the kernels, -inf in float64 (the reference now counts
      // the finite terms' rounding beside an infinite one).
      {2026120538, 1202183},
      // Mutated sizes of ~2^62 in several dims: the fuzzer's own 128-bit extent overflowed (UBSan), now
      // saturated.
      {5005, 55975},
      // A size-1 dim's stride of -2^63 + 4 (v_cache's head dim, hk = 1): the CPU backend's prefetch
      // multiplied it by the element size; the validators now read size-1 dims' strides as a contiguous
      // tensor's.
      {2026120540, 4501152},
  };
  Stats stats;
  for (auto [s, k] : kRegressions) {
    bool skipped = false;
    const std::string failure = run_one(s, k, {}, stats, &skipped);
    if (!failure.empty()) {
      std::printf("FAIL regression case: kvattn_fuzz --seed %llu --case %lld: %s\n", (unsigned long long)s,
                  (long long)k, failure.c_str());
      return 1;
    }
  }
  stats = Stats{};
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  int64_t k = only >= 0 ? only : 0;
  const int64_t end = only >= 0 ? only + 1 : cases;
  for (; k < end; ++k) {
    if (seconds > 0 && elapsed() > seconds) break;
    bool skipped = false;
    const std::string failure = run_one(seed, k, {}, stats, &skipped);
    ++stats.cases;
    if (skipped) ++stats.skipped;
    if (!failure.empty()) {
      // Minimize: drop mutations one at a time while the case still fails.
      std::vector<Mutation> muts;
      build(seed, k, {}, &muts);
      std::vector<bool> keep(muts.size(), true);
      for (size_t i = 0; i < muts.size(); ++i) {
        keep[i] = false;
        Stats scratch;
        bool s2 = false;
        if (run_one(seed, k, keep, scratch, &s2).empty()) keep[i] = true;
      }
      Case c = build(seed, k, keep, nullptr);
      std::printf("FAIL seed %llu case %lld: %s\n", (unsigned long long)seed, (long long)k, failure.c_str());
      for (size_t i = 0; i < muts.size(); ++i) {
        std::printf("  mutation %zu%s: %s\n", i, keep[i] ? "" : " (not needed)",
                    muts[i].describe(c.args).c_str());
      }
      for (const Arg& a : c.args) {
        const kvattn_tensor& t = *a.field;
        if (!given(t)) continue;
        std::printf("  %s: dtype %d shape (", a.name, code(t.dtype));
        for (int i = 0; i < t.ndim && i < KVATTN_MAX_DIMS; ++i) std::printf("%lld,", (long long)t.shape[i]);
        std::printf(") strides (");
        for (int i = 0; i < t.ndim && i < KVATTN_MAX_DIMS; ++i) std::printf("%lld,", (long long)t.strides[i]);
        std::printf(")\n");
      }
      if (c.op == 0) {
        const kvattn_fwd_params& f = c.fwd;
        std::printf(
            "  fwd: causal %d window (%d, %d) chunk %d softcap %g scale %g splits %d cache_seqlens_value "
            "%lld "
            "max_seqlen_q %lld rotary_interleaved %d\n",
            f.causal, f.window_left, f.window_right, f.attention_chunk, f.softcap, f.softmax_scale,
            f.num_splits, (long long)f.cache_seqlens_value, (long long)f.max_seqlen_q, f.rotary_interleaved);
      }
      if (dump) dump_args(c);
      std::printf("  replay: kvattn_fuzz --seed %llu --case %lld\n", (unsigned long long)seed, (long long)k);
      return 1;
    }
    if (!quiet && (k + 1) % 100000 == 0) {
      std::printf("%lld cases, %.0f s\n", (long long)(k + 1), elapsed());
      std::fflush(stdout);
    }
  }
  std::printf(
      "kvattn_fuzz seed %llu: %lld cases in %.1f s: %lld accepted and compared (%lld elements), %lld "
      "rejected, %lld skipped (a mutated extent larger than the fuzzer allocates); 0 failures\n",
      (unsigned long long)seed, (long long)stats.cases, elapsed(), (long long)stats.accepted,
      (long long)stats.compared_elements, (long long)stats.rejected, (long long)stats.skipped);
  std::printf("  classes (op/layout/varlen/append):");
  for (auto [klass, n] : stats.by_class) std::printf(" %d:%lld", klass, (long long)n);
  std::printf("\n  mutations:");
  for (auto [kind, n] : stats.by_mutation) std::printf(" %s:%lld", kKindNames[kind], (long long)n);
  std::printf("\n");
  return 0;
}

}  // namespace
}  // namespace fuzz

int main(int argc, char** argv) {
  return fuzz::main_impl(argc, argv);
}
