// The per-sequence index values of kvattn_fwd against the sizes of the problem: the "outside the cache"
// rules of CONTRACT.md. On the CPU backend the index tensors are host memory and every value is read. On
// CUDA a value held in a device tensor is unknown here (the kernels check it, see kvattn_device_errors);
// what shapes and scalars fix is still checked, e.g. cache_seqlens_value + s_new against the capacity.
#include <algorithm>
#include <optional>
#include <string>
#include <unordered_map>

#include "api/checks.hpp"
#include "api/validate.hpp"

namespace kvattn {
namespace {

using Known = std::optional<int64_t>;  // nullopt: held in a device tensor that the host does not read

std::string at(const char* name, int64_t i) {
  return std::string(name) + "[" + std::to_string(i) + "]";
}
std::string str(int64_t value) {
  return std::to_string(value);
}

class SequenceChecker {
 public:
  SequenceChecker(const FwdProblem& p, bool host_data) : p_(p), host_(host_data) {}

  void run() {
    if (host_) {
      check_cu_seqlens("cu_seqlens_q", p_.cu_seqlens_q, p_.total_q, "the total_q rows of q");
      check_cu_seqlens("cu_seqlens_k_new", p_.cu_seqlens_k_new, p_.total_k_new, "the total_new rows of k");
      check_cu_seqlens("cu_seqlens_k", p_.cu_seqlens_k, p_.num_pages, "the total_k rows of k_cache");
    }
    for (int64_t i = 0; i < p_.batch; ++i) check_sequence(i);
  }

 private:
  // Entry i of an optional index tensor: `fallback` when absent, unknown when it is device data.
  Known read(const int32_t* ptr, int64_t i, Known fallback) const {
    if (ptr == nullptr) return fallback;
    if (!host_) return std::nullopt;
    return ptr[i];
  }
  // Length of sequence i under optional cumulative lengths `cu`; `fixed` when absent.
  Known length(const int32_t* cu, int64_t i, Known fixed) const {
    if (cu == nullptr) return fixed;
    if (!host_) return std::nullopt;
    return int64_t{cu[i + 1]} - cu[i];
  }

  // cu[0] == 0, non-decreasing, cu[b] == rows.
  void check_cu_seqlens(const char* name, const int32_t* cu, int64_t rows, const char* what) const {
    if (cu == nullptr) return;
    if (cu[0] != 0) invalid(at(name, 0) + " = " + str(cu[0]) + ", expected 0");
    for (int64_t i = 1; i <= p_.batch; ++i) {
      if (cu[i] < cu[i - 1]) {
        invalid(at(name, i) + " = " + str(cu[i]) + " is less than " + at(name, i - 1) + " = " +
                str(cu[i - 1]) + " (must be non-decreasing)");
      }
    }
    if (cu[p_.batch] != rows) {
      invalid(at(name, p_.batch) + " = " + str(cu[p_.batch]) + " does not match " + what + " (" + str(rows) +
              ")");
    }
  }

  void check_sequence(int64_t i) {
    const Known q_len = length(p_.cu_seqlens_q, i, p_.max_seqlen_q);
    if (p_.cu_seqlens_q != nullptr && q_len && *q_len > p_.max_seqlen_q) {
      invalid("cu_seqlens_q: sequence " + str(i) + " has " + str(*q_len) +
              " query tokens, more than max_seqlen_q = " + str(p_.max_seqlen_q));
    }
    const Known used = read(p_.seqused_q, i, q_len);
    if (p_.seqused_q != nullptr && used && q_len && (*used < 0 || *used > *q_len)) {
      expect_in_closed(at("seqused_q", i), *used, 0, *q_len, "the query length of sequence " + str(i));
    }
    const Known n_new =
        p_.k_new.ptr != nullptr ? length(p_.cu_seqlens_k_new, i, p_.max_seqlen_k_new) : Known{0};
    const Known row = check_row(i);
    const Known capacity = p_.cu_seqlens_k != nullptr ? length(p_.cu_seqlens_k, i, {})
                           : p_.kv_indptr != nullptr  ? check_ragged_row(row)
                                                      : Known{p_.capacity};
    const Known cache_len = check_cache_len(i, n_new, capacity);
    const Known leftpad = read(p_.cache_leftpad, i, 0);
    if (p_.cache_leftpad != nullptr && leftpad && cache_len && (*leftpad < 0 || *leftpad > *cache_len)) {
      expect_in_closed(at("cache_leftpad", i), *leftpad, 0, *cache_len, cache_len_source(i, *cache_len));
    }
    check_pages(row, leftpad, cache_len, n_new);
    check_rotary(i, cache_len, n_new, used);
  }

  // The cache row of sequence i (contiguous or paged): cache_batch_idx[i], else i.
  Known check_row(int64_t i) {
    if (p_.cu_seqlens_k != nullptr) return std::nullopt;  // packed: rows belong to sequences
    const Known row = read(p_.cache_batch_idx, i, i);
    if (p_.cache_batch_idx == nullptr || !row) return row;
    const bool paged = p_.page_table != nullptr;
    const int64_t rows = paged ? p_.page_table_rows : p_.num_pages;
    if (*row < 0 || *row >= rows) {
      expect_in_range(at("cache_batch_idx", i), *row, 0, rows,
                      p_.kv_indptr != nullptr ? "rows b_pt of kv_indptr (its length - 1)"
                      : paged                 ? "rows b_pt of page_table"
                                              : "rows b_cache of k_cache");
    }
    if (p_.k_new.ptr != nullptr) {
      const auto [first, inserted] = first_user_of_row_.emplace(*row, i);
      if (!inserted) {
        invalid(at("cache_batch_idx", i) + " = " + str(*row) + " repeats " +
                at("cache_batch_idx", first->second) +
                " (duplicate cache rows are an error with an append of k, v)");
      }
    }
    return row;
  }

  // The ragged index's row: 0 <= kv_indptr[row] <= kv_indptr[row + 1] <= nnz. Returns its capacity.
  Known check_ragged_row(Known row) const {
    if (!host_ || !row) return std::nullopt;
    const int64_t first = p_.kv_indptr[*row], end = p_.kv_indptr[*row + 1];
    if (first < 0 || first > p_.page_table_entries) {
      expect_in_closed(at("kv_indptr", *row), first, 0, p_.page_table_entries,
                       "nnz, the length of kv_indices");
    }
    if (end < first || end > p_.page_table_entries) {
      expect_in_closed(at("kv_indptr", *row + 1), end, first, p_.page_table_entries,
                       at("kv_indptr", *row) + " .. nnz, the length of kv_indices (non-decreasing)");
    }
    return (end - first) * p_.page_size;
  }

  // Offset of the first page-table entry of a row (the ragged index: kv_indptr[row]).
  int64_t first_entry(int64_t row) const {
    return p_.kv_indptr != nullptr ? int64_t{p_.kv_indptr[row]} : row * p_.page_table_stride;
  }

  std::string cache_len_source(int64_t i, int64_t value) const {
    if (p_.cache_seqlens != nullptr) return at("cache_seqlens", i) + " = " + str(value);
    if (p_.cache_seqlens_value >= 0) return "cache_seqlens_value = " + str(value);
    return "the default cache_seqlens (full capacity) = " + str(value);
  }

  std::string capacity_source(int64_t i) const {
    if (p_.cu_seqlens_k != nullptr) return at("cu_seqlens_k", i + 1) + " - " + at("cu_seqlens_k", i);
    if (p_.kv_indptr != nullptr) {
      const int64_t row = p_.cache_batch_idx != nullptr ? p_.cache_batch_idx[i] : i;
      return "(" + at("kv_indptr", row + 1) + " - " + at("kv_indptr", row) + ") * page_size " +
             str(p_.page_size);
    }
    if (p_.page_table != nullptr)
      return "pages_per_row * page_size = " + str(p_.pages_per_row) + " * " + str(p_.page_size);
    return "s_cache of k_cache";
  }

  // Tokens in the cache of sequence i; with the n_new appended ones they must fit the capacity.
  Known check_cache_len(int64_t i, Known n_new, Known capacity) const {
    Known fallback = p_.cache_seqlens_value >= 0 ? Known{p_.cache_seqlens_value} : capacity;
    const Known cache_len = read(p_.cache_seqlens, i, fallback);
    if (p_.cache_seqlens != nullptr && cache_len && *cache_len < 0) {
      invalid(at("cache_seqlens", i) + " = " + str(*cache_len) + " is negative");
    }
    if (!cache_len || !capacity) return cache_len;
    // The capacity, or the most keys a sequence may hold (problem.hpp: key positions are int32) when less.
    const int64_t bound = std::min(*capacity, kMaxSequenceKeys);
    if (!n_new || *cache_len <= bound - *n_new) return cache_len;
    const std::string where =
        bound < *capacity && *cache_len <= *capacity - *n_new
            ? "the most keys a sequence may hold, " + str(kMaxSequenceKeys) + " (key positions are int32)"
            : "the capacity " + str(*capacity) + " of sequence " + str(i) + " (" + capacity_source(i) + ")";
    if (*n_new > 0 && p_.cache_seqlens == nullptr && p_.cache_seqlens_value < 0) {
      invalid("k: " + str(*n_new) + " new tokens of sequence " + str(i) +
              " do not fit: without cache_seqlens the cache is full, " + where);
    }
    std::string message = cache_len_source(i, *cache_len);
    if (*n_new > 0) message += " plus " + str(*n_new) + " new tokens of k";
    invalid(message + " exceeds " + where);
  }

  // Every page that a valid slot [leftpad, L) or an appended slot touches must exist. Entries of unused
  // pages are not read: engines leave garbage there.
  void check_pages(Known row, Known leftpad, Known cache_len, Known n_new) const {
    if (p_.page_table == nullptr || !host_ || !row || !leftpad || !cache_len || !n_new) return;
    const int64_t end = *cache_len + *n_new;
    if (end <= *leftpad) return;
    for (int64_t page = *leftpad / p_.page_size; page <= (end - 1) / p_.page_size; ++page) {
      const int64_t entry = first_entry(*row) + page;
      const int64_t id = p_.page_table[entry];
      if (id >= 0 && id < p_.num_pages) continue;  // the message is built only for the offending entry
      const std::string name = p_.kv_indptr != nullptr ? at("kv_indices", entry) + " (page " + str(page) +
                                                             " of kv_indptr row " + str(*row) + ")"
                                                       : "page_table[" + str(*row) + ", " + str(page) + "]";
      expect_in_range(
          name, id, 0, p_.num_pages,
          p_.page_size == 1 && p_.kv_indptr != nullptr ? "slots of k_cache" : "num_pages of k_cache");
    }
  }

  // New key j is rotated at p_i + j; query token t at p_i + t (per token) or p_i. All < seqlen_ro.
  void check_rotary(int64_t i, Known cache_len, Known n_new, Known used) const {
    if (p_.rotary_dim == 0) return;
    const Known base = read(p_.rotary_seqlens, i, cache_len);
    if (!base) return;
    if (p_.rotary_seqlens != nullptr && *base < 0) {
      invalid(at("rotary_seqlens", i) + " = " + str(*base) + " is negative");
    }
    // Messages are built only on failure: this runs once per sequence.
    auto expect_position = [&](int64_t position, const char* what, int64_t index) {
      if (position < p_.seqlen_ro) return;
      const std::string base_source = p_.rotary_seqlens != nullptr
                                          ? at("rotary_seqlens", i) + " = " + str(*base)
                                          : cache_len_source(i, *base);
      invalid("rotary_cos: position " + str(position) + " of " + what + " " + str(index) + " of sequence " +
              str(i) + " (base " + base_source + ") is beyond seqlen_ro = " + str(p_.seqlen_ro));
    };
    if (n_new && *n_new > 0) expect_position(*base + *n_new - 1, "new key", *n_new - 1);
    if (used && *used > 0) {
      const int64_t t = p_.rotary_q_per_token ? *used - 1 : 0;
      expect_position(*base + t, "query token", t);
    }
  }

  const FwdProblem& p_;
  const bool host_;
  std::unordered_map<int64_t, int64_t> first_user_of_row_;  // cache row -> first sequence using it
};

}  // namespace

void check_fwd_sequences(const FwdProblem& p, bool host_data) {
  SequenceChecker(p, host_data).run();
}

}  // namespace kvattn
