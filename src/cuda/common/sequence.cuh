// Per-sequence geometry on the device (CONTRACT.md steps 1-4) and the one KV-cache addressing rule of
// problem.hpp, shared by the append and attention kernels. Every value read from device memory is
// checked here before it is used as an index; a failed check records an error and marks the sequence
// offending (its output is NaN and nothing of it is written to the cache).
#pragma once

#include <cstdint>

#include "api/problem.hpp"
#include "cuda/common/device_error.cuh"

namespace kvattn::cuda {

// What the kernels need to locate sequence i's rows; built once from a FwdProblem on the host.
struct SeqParams {
  int32_t batch;
  // queries
  int32_t max_seqlen_q;
  int64_t total_q;
  const int32_t* cu_seqlens_q;  // optional
  const int32_t* seqused_q;     // optional
  // new tokens
  bool has_new;
  int32_t max_seqlen_k_new;
  int64_t total_k_new;
  const int32_t* cu_seqlens_k_new;  // optional
  // cache
  int64_t num_pages;  // rows, pages or total_k (packed)
  int64_t page_size;  // 0 when packed
  int64_t capacity;
  const int32_t* page_table;  // optional (b_pt, pages_per_row), or kv_indices with kv_indptr
  int64_t page_table_stride;
  int64_t page_table_rows;
  const int32_t* kv_indptr;        // optional (b_pt + 1): the ragged index, row r starts at kv_indptr[r]
  int64_t page_table_entries;      // nnz of kv_indices
  const int32_t* cu_seqlens_k;     // optional: packed cache
  const int32_t* cache_batch_idx;  // optional
  const int32_t* cache_leftpad;    // optional
  const int32_t* cache_seqlens;    // optional
  int64_t cache_seqlens_value;     // < 0: capacity
  // rotary positions
  bool has_rotary;
  bool rotary_q_per_token;
  int32_t seqlen_ro;
  const int32_t* rotary_seqlens;  // optional
};

SeqParams make_seq_params(const FwdProblem& p);

struct Sequence {
  bool ok;              // false: an index of this sequence is out of range (error recorded)
  bool rows_known;      // false: cu_seqlens_q is broken, so no row of q/out belongs to i for sure
  int32_t q_len;        // rows of i in q / out / lse
  int32_t q_used;       // rows that attend (seqused_q)
  int64_t q_row0;       // row of token 0 in a varlen q (0 when fixed)
  int32_t new_len;      // n_i
  int64_t new_row0;     // row of new token 0 in a varlen k/v (0 when fixed)
  int64_t cache_row;    // cache row / page-table row (unused when packed)
  int64_t page_row0;    // paged: the row's first page-table entry (kv_indptr[row], or row * stride)
  int64_t packed_row0;  // packed: cu_seqlens_k[i]
  int64_t cache_len;    // cache_seqlens[i] (absolute slot)
  int64_t end;          // L_i = cache_len + new_len: valid slots are [leftpad, end)
  int64_t leftpad;
  int64_t rotary_pos;  // p_i
};

// Checks an offset array's entries i and i + 1: 0 <= cu[i] <= cu[i+1] <= total, and the difference
// <= max_len when max_len >= 0.
__device__ __forceinline__ bool check_cu(const int32_t* cu, int i, int64_t total, int64_t max_len,
                                         ErrorArg arg, DeviceErrorRecord* err, bool record) {
  const int64_t a = cu[i], b = cu[i + 1];
  bool ok = true;
  if (a < 0) {
    ok = false;
    if (record) record_error(err, arg, ErrorKind::out_of_range, i, a, total);
  } else if (b < a) {
    ok = false;
    if (record) record_error(err, arg, ErrorKind::decreasing, i + 1, b, a);
  } else if (b > total) {
    ok = false;
    if (record) record_error(err, arg, ErrorKind::above_bound, i + 1, b, total);
  } else if (max_len >= 0 && b - a > max_len) {
    ok = false;
    if (record) record_error(err, arg, ErrorKind::above_bound, i + 1, b - a, max_len, 1);
  }
  return ok;
}

// Sequence i, every scalar index checked. `record` is true for one thread of a block (the others compute
// the same values without touching the record).
__device__ inline Sequence load_sequence(const SeqParams& p, int i, DeviceErrorRecord* err, bool record) {
  Sequence s{};
  s.ok = true;
  s.rows_known = true;
  if (p.cu_seqlens_q) {
    if (!check_cu(p.cu_seqlens_q, i, p.total_q, p.max_seqlen_q, ErrorArg::cu_seqlens_q, err, record)) {
      s.ok = s.rows_known = false;
    } else {
      s.q_row0 = p.cu_seqlens_q[i];
      s.q_len = p.cu_seqlens_q[i + 1] - p.cu_seqlens_q[i];
    }
  } else {
    s.q_len = p.max_seqlen_q;
  }
  s.q_used = s.q_len;
  if (p.seqused_q && s.rows_known) {
    const int32_t u = p.seqused_q[i];
    if (u < 0 || u > s.q_len) {
      s.ok = false;
      if (record) record_error(err, ErrorArg::seqused_q, ErrorKind::above_bound, i, u, s.q_len);
    } else {
      s.q_used = u;
    }
  }
  if (p.has_new) {
    if (p.cu_seqlens_k_new) {
      if (check_cu(p.cu_seqlens_k_new, i, p.total_k_new, p.max_seqlen_k_new, ErrorArg::cu_seqlens_k_new, err,
                   record)) {
        s.new_row0 = p.cu_seqlens_k_new[i];
        s.new_len = p.cu_seqlens_k_new[i + 1] - p.cu_seqlens_k_new[i];
      } else {
        s.ok = false;
      }
    } else {
      s.new_len = p.max_seqlen_k_new;
    }
  }
  int64_t capacity = p.capacity;
  if (p.cu_seqlens_k) {
    if (check_cu(p.cu_seqlens_k, i, p.num_pages, -1, ErrorArg::cu_seqlens_k, err, record)) {
      s.packed_row0 = p.cu_seqlens_k[i];
      capacity = p.cu_seqlens_k[i + 1] - p.cu_seqlens_k[i];
    } else {
      s.ok = false;
      capacity = 0;
    }
  } else {
    s.cache_row = p.cache_batch_idx ? p.cache_batch_idx[i] : i;
    const int64_t rows = p.page_table ? p.page_table_rows : p.num_pages;
    if (s.cache_row < 0 || s.cache_row >= rows) {
      s.ok = false;
      if (record) record_error(err, ErrorArg::cache_batch_idx, ErrorKind::out_of_range, i, s.cache_row, rows);
      s.cache_row = 0;
    }
    if (p.kv_indptr && !s.ok) {
      capacity = 0;  // the row is unknown: kv_indptr is not read
    } else if (p.kv_indptr) {
      const int64_t first = p.kv_indptr[s.cache_row], last = p.kv_indptr[s.cache_row + 1];
      if (first < 0 || last < first || last > p.page_table_entries) {
        if (record) {
          const bool bad_first = first < 0 || first > p.page_table_entries;
          record_error(err, ErrorArg::kv_indptr, ErrorKind::out_of_range, s.cache_row + (bad_first ? 0 : 1),
                       bad_first ? first : last, p.page_table_entries, bad_first ? 0 : first);
        }
        s.ok = false;
        capacity = 0;
      } else {
        s.page_row0 = first;
        capacity = (last - first) * p.page_size;
      }
    } else {
      s.page_row0 = s.cache_row * p.page_table_stride;
    }
  }
  s.cache_len =
      p.cache_seqlens ? p.cache_seqlens[i] : (p.cache_seqlens_value >= 0 ? p.cache_seqlens_value : capacity);
  s.end = s.cache_len + s.new_len;
  // The capacity, or the most keys a sequence may hold (problem.hpp: key positions are int32) when less.
  const int64_t bound = min(capacity, kMaxSequenceKeys);
  if (s.cache_len < 0 || s.end > bound) {
    if (s.ok && record) {
      record_error(err, ErrorArg::cache_seqlens, ErrorKind::above_bound, i, s.cache_len, bound, s.new_len);
    }
    s.ok = false;
  }
  s.leftpad = p.cache_leftpad ? p.cache_leftpad[i] : 0;
  if (s.leftpad < 0 || s.leftpad > s.cache_len) {
    if (s.ok && record) {
      record_error(err, ErrorArg::cache_leftpad, ErrorKind::above_bound, i, s.leftpad, s.cache_len);
    }
    s.ok = false;
  }
  s.rotary_pos = p.rotary_seqlens ? p.rotary_seqlens[i] : s.cache_len;
  if (p.has_rotary && s.ok) {
    // Largest position used: new key n_i - 1, and query token q_used - 1 when rotated per token.
    int64_t last = s.rotary_pos;
    if (s.new_len > 0) last = max(last, s.rotary_pos + s.new_len - 1);
    if (p.rotary_q_per_token && s.q_used > 0) last = max(last, s.rotary_pos + s.q_used - 1);
    const bool any_use = s.new_len > 0 || s.q_used > 0;
    if (any_use && (s.rotary_pos < 0 || last >= p.seqlen_ro)) {
      s.ok = false;
      if (record) {
        record_error(err, ErrorArg::rotary_seqlens, ErrorKind::out_of_range, i,
                     s.rotary_pos < 0 ? s.rotary_pos : last, p.seqlen_ro, p.rotary_seqlens ? 0 : 1);
      }
    }
  }
  if (!s.ok) s.end = s.leftpad = 0;  // nothing of an offending sequence is ever addressed
  return s;
}

// A slot's place in the cache as (page, in-page slot): element offset = page * page_stride +
// in_page * slot_stride (+ head and channel). Packed caches use page 0 and in_page = the packed row.
struct SlotAddress {
  int32_t page;  // -1: the page-table entry is out of range
  int32_t in_page;
};

// The raw page-table entry holding slot s (paged caches only; unchecked: slot_address_at checks it). The
// attention kernel loads it a tile ahead so that its latency hides behind the tile being computed.
__device__ __forceinline__ int32_t page_entry(const SeqParams& p, const Sequence& seq, int64_t s) {
  // Slots and page sizes fit 32 bits (int32 page tables and lengths): 32-bit division, not a 64-bit call.
  const uint32_t column = static_cast<uint32_t>(s) / static_cast<uint32_t>(p.page_size);
  return p.page_table[seq.page_row0 + column];
}

// The one addressing rule, per slot, so page size 1 and scattered pages work. `s` must be a valid slot of
// a sequence with ok == true; `entry` is page_entry(p, seq, s) when the cache is paged (unused otherwise).
__device__ __forceinline__ SlotAddress slot_address_at(const SeqParams& p, const Sequence& seq, int64_t s,
                                                       int32_t entry) {
  if (p.cu_seqlens_k) return {0, static_cast<int32_t>(seq.packed_row0 + s)};
  if (!p.page_table) return {static_cast<int32_t>(seq.cache_row), static_cast<int32_t>(s)};
  if (entry < 0 || entry >= p.num_pages) return {-1, 0};
  const uint32_t page_size = static_cast<uint32_t>(p.page_size);
  return {entry, static_cast<int32_t>(static_cast<uint32_t>(s) % page_size)};
}

__device__ __forceinline__ SlotAddress slot_address(const SeqParams& p, const Sequence& seq, int64_t s) {
  return slot_address_at(p, seq, s, p.page_table && !p.cu_seqlens_k ? page_entry(p, seq, s) : 0);
}

// Records a page-table entry out of range: entry `column` of the sequence's row, holding `page`.
__device__ __forceinline__ void record_page_error(const SeqParams& p, const Sequence& seq,
                                                  DeviceErrorRecord* err, int64_t column, int64_t page) {
  if (p.kv_indptr) {
    record_error(err, ErrorArg::kv_indices, ErrorKind::out_of_range, seq.page_row0 + column, page,
                 p.num_pages, seq.cache_row);
  } else {
    record_error(err, ErrorArg::page_table, ErrorKind::out_of_range, column, page, p.num_pages,
                 seq.cache_row);
  }
}

// The threads that run a check together and how they agree: the whole block, or threads [0, kThreads) on
// named barrier kBarrier (a warp-specialized CTA's producer warpgroup, while the others compute).
struct BlockWide {
  __device__ static unsigned rank() { return threadIdx.x; }
  __device__ static unsigned size() { return blockDim.x; }
  __device__ static bool any(bool b) { return __syncthreads_or(b); }
};
template <int kBarrier, int kThreads>
struct LeadingThreads {
  __device__ static unsigned rank() { return threadIdx.x; }
  __device__ static unsigned size() { return kThreads; }
  __device__ static bool any(bool b) {
    uint32_t r;
    asm volatile(
        "{\n.reg .pred in, out;\nsetp.ne.u32 in, %1, 0;\nbar.red.or.pred out, %2, %3, in;\n"
        "selp.u32 %0, 1, 0, out;\n}\n"
        : "=r"(r)
        : "r"(static_cast<uint32_t>(b)), "n"(kBarrier), "n"(kThreads)
        : "memory");
    return r != 0;
  }
};

// Check of the page-table entries holding slots [slot_begin, slot_end) of a sequence; records the first
// bad entry. Returns true when all are in range. Call from all threads of the Group (default: the block).
template <class Group = BlockWide>
__device__ inline bool check_pages(const SeqParams& p, const Sequence& seq, int64_t slot_begin,
                                   int64_t slot_end, DeviceErrorRecord* err) {
  bool bad = false;
  if (p.page_table && slot_end > slot_begin) {
    const int64_t first = slot_begin / p.page_size, last = (slot_end - 1) / p.page_size;
    const int32_t* row = p.page_table + seq.page_row0;
    for (int64_t c = first + Group::rank(); c <= last; c += Group::size()) {
      const int64_t page = row[c];
      if (page < 0 || page >= p.num_pages) {
        bad = true;
        record_page_error(p, seq, err, c, page);
      }
    }
  }
  return !Group::any(bad);
}

// With an append, two sequences may not share a cache row (both would write it). All threads of the Group.
template <class Group = BlockWide>
__device__ inline bool check_unique_row(const SeqParams& p, int i, DeviceErrorRecord* err) {
  bool dup = false;
  if (p.has_new && p.cache_batch_idx) {
    const int32_t mine = p.cache_batch_idx[i];
    for (int j = Group::rank(); j < p.batch; j += Group::size()) {
      if (j != i && p.cache_batch_idx[j] == mine) {
        dup = true;
        if (j > i) record_error(err, ErrorArg::cache_batch_idx, ErrorKind::duplicate, j, mine, 0, i);
      }
    }
  }
  return !Group::any(dup);
}

// ---- the line of a varlen batch (kernels whose grid covers the work of sequences of different sizes)
//
// Sequence i owns count(i) >= 1 consecutive positions of a line, in sequence order; CTA x takes position
// x, so a grid sized from totals (total_q, total_k_new) rather than from max lengths x batch has no CTA
// that only loads its sequence and exits. The launcher's grid is at least the line when the offsets are
// valid (varlen_line_bound); a broken offset array can make the line longer: then the grid's last CTA,
// which always scans the whole line, records every sequence's index errors (some have no CTA).

__host__ __device__ constexpr int64_t varlen_line_bound(int64_t total, int64_t batch, int64_t per_position) {
  return (total + per_position - 1) / per_position + batch;  // sum of ceil(n_i / per) + 1 at most
}

// Every sequence's index errors, recorded: a cold path (never taken on valid input), out of line so that
// the kernels that scan the line do not carry another inlined copy of load_sequence's checks.
static __device__ __noinline__ void record_sequence_errors(const SeqParams& p, DeviceErrorRecord* err) {
  for (int i = threadIdx.x; i < p.batch; i += blockDim.x) load_sequence(p, i, err, true);
}

struct LinePos {
  int i;           // the sequence holding position blockIdx.x; batch: past the line's end
  int64_t offset;  // blockIdx.x - the sequence's first position
  int64_t count;   // the sequence's positions
};

// The batch in chunks of kThreads sequences, a block-wide exclusive scan of count(i) each (warp scans,
// then the warp totals), until the chunk that holds blockIdx.x. Call from all threads, with batch >= 1
// (the first chunk's barrier publishes s_found's initial value; the launchers return before launching an
// empty batch).
template <int kThreads, class Count>
__device__ inline LinePos find_on_line(const SeqParams& p, DeviceErrorRecord* err, Count count) {
  static_assert(kThreads % 32 == 0 && kThreads <= 1024, "whole warps");
  __shared__ int64_t s_warp_sums[kThreads / 32];
  __shared__ LinePos s_found;
  const int64_t x = blockIdx.x;
  const bool last_cta = blockIdx.x == gridDim.x - 1;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (threadIdx.x == 0) s_found = {p.batch, 0, 0};
  int64_t base = 0;  // line positions before this chunk
  for (int c0 = 0; c0 < p.batch; c0 += kThreads) {
    const int i = c0 + static_cast<int>(threadIdx.x);
    const int64_t mine = i < p.batch ? count(i) : 0;
    int64_t incl = mine;
#pragma unroll
    for (int off = 1; off < 32; off *= 2) {
      const int64_t up = __shfl_up_sync(0xffffffffu, incl, off);
      if (lane >= off) incl += up;
    }
    if (lane == 31) s_warp_sums[warp] = incl;
    __syncthreads();
    int64_t before = 0, chunk = 0;
#pragma unroll
    for (int w = 0; w < kThreads / 32; ++w) {
      if (w < warp) before += s_warp_sums[w];
      chunk += s_warp_sums[w];
    }
    const int64_t start = base + before + incl - mine;
    if (start <= x && x < start + mine) s_found = {i, x - start, mine};
    base += chunk;
    __syncthreads();  // s_found is published, s_warp_sums free again
    if (s_found.i < p.batch && !last_cta) break;
  }
  if (last_cta && base > gridDim.x) record_sequence_errors(p, err);
  return s_found;
}

}  // namespace kvattn::cuda
