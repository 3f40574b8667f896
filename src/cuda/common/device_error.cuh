// The device error record: checks that need device data (page ids, batch indices, slots, positions,
// cu_seqlens) are made inside the kernels; the first failing check of any kernel writes this record and
// later ones leave it alone. cuda_device_errors (device_errors.cu) reads, clears and formats it.
#pragma once

#include <cstdint>

namespace kvattn::cuda {

// The argument a device-side check names. The host turns (arg, index, value, bound) into the message.
enum class ErrorArg : int32_t {
  none = 0,
  cu_seqlens_q,      // index i + 1, value cu[i + 1], bound: the previous entry / total_q / max_seqlen_q
  seqused_q,         // index i, value, bound = q length of i
  cu_seqlens_k_new,  // like cu_seqlens_q, bound total_k_new / max_seqlen_k_new
  cu_seqlens_k,      // like cu_seqlens_q, bound total_k
  cache_batch_idx,   // index i, value, bound = rows of the cache (or of page_table); or a duplicate (aux = j)
  cache_seqlens,     // index i, value, aux = n_i, bound = capacity of i (or kMaxSequenceKeys when less)
  cache_leftpad,     // index i, value, bound = cache_seqlens[i]
  page_table,        // index (row, column) = (aux, index), value, bound = num_pages
  rotary_seqlens,    // index i, value = the position, bound = seqlen_ro (aux = 1 when p_i is cache_seqlens)
  slot_mapping,      // index t, value, bound = num_pages * page_size
  kv_indptr,         // index r (a row, or r + 1), value, bound = nnz; aux = kv_indptr[r] when r + 1
  kv_indices,        // index = the entry, value, bound = num_pages, aux = the kv_indptr row
};

// Why a check failed, for the wording of the message.
enum class ErrorKind : int32_t {
  out_of_range = 0,  // value not in [0, bound)
  decreasing,        // cu_seqlens: value < previous entry (bound)
  above_bound,       // value > bound (for limits that are inclusive)
  duplicate,         // cache_batch_idx[index] == cache_batch_idx[aux] with an append
};

struct DeviceErrorRecord {
  int32_t set;  // 0 = empty; the first writer flips it to 1 with atomicCAS
  ErrorArg arg;
  ErrorKind kind;
  int32_t pad;
  int64_t index;
  int64_t aux;
  int64_t value;
  int64_t bound;
};

// First error wins. The fields are written after the flag, then fenced; the host reads them only after a
// stream synchronization, so no reader sees a half-written record.
__device__ __forceinline__ void record_error(DeviceErrorRecord* rec, ErrorArg arg, ErrorKind kind,
                                             int64_t index, int64_t value, int64_t bound, int64_t aux = 0) {
  if (rec == nullptr) return;
  if (atomicCAS(&rec->set, 0, 1) != 0) return;
  rec->arg = arg;
  rec->kind = kind;
  rec->index = index;
  rec->aux = aux;
  rec->value = value;
  rec->bound = bound;
  __threadfence();
}

}  // namespace kvattn::cuda
