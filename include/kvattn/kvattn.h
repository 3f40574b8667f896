/* kvattn: attention over a KV cache. The C ABI.
 *
 * Every entry point takes one params struct, validates it completely (src/api), then runs on the
 * backend named by `device_type`. Nothing crosses this boundary as an exception, an abort or a print:
 * each call returns a kvattn_status and, on failure, kvattn_last_error() holds a message that names the
 * argument, the expected and the given value. The library never allocates device memory, never
 * synchronizes and never reads device data on the host (see kvattn_device_errors for the checks that
 * need device data).
 *
 * Versioning: fields are only ever appended to the params structs. A caller's struct_size may be smaller
 * than this header's, down to the size of the struct's first release: the fields it lacks take their
 * kvattn_*_params_init defaults. abi_version changes only with an incompatible change.
 *
 * Semantics: CONTRACT.md (shipped as docs/CONTRACT.md). Tensors are strided views: strides are in
 * ELEMENTS, the last dimension must be contiguous (stride 1). An absent optional tensor has data == NULL.
 */
#ifndef KVATTN_KVATTN_H_
#define KVATTN_KVATTN_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define KVATTN_API __declspec(dllexport)
#else
#define KVATTN_API __attribute__((visibility("default")))
#endif

#define KVATTN_ABI_VERSION 1
#define KVATTN_MAX_DIMS 5

typedef enum kvattn_status {
  KVATTN_OK = 0,
  KVATTN_ERROR_INVALID_ARGUMENT = 1, /* a rule of the contract is violated; nothing was written */
  KVATTN_ERROR_UNSUPPORTED = 2,      /* valid, but this build/backend lacks it (e.g. no CUDA) */
  KVATTN_ERROR_DEVICE_INDEX = 3,     /* a device-side index was out of range (kvattn_device_errors) */
  KVATTN_ERROR_CUDA = 4,             /* the CUDA runtime reported an error */
  KVATTN_ERROR_INTERNAL = 5,
  KVATTN_ERROR_INTERRUPTED = 6 /* a CPU call stopped by kvattn_interrupt(); its outputs are incomplete */
} kvattn_status;

typedef enum kvattn_dtype {
  KVATTN_DTYPE_NONE = 0,
  KVATTN_DTYPE_F32 = 1,
  KVATTN_DTYPE_F16 = 2,
  KVATTN_DTYPE_BF16 = 3,
  KVATTN_DTYPE_FP8_E4M3 = 4,
  KVATTN_DTYPE_I32 = 5,
  KVATTN_DTYPE_I64 = 6
} kvattn_dtype;

typedef enum kvattn_device_type { KVATTN_DEVICE_CPU = 0, KVATTN_DEVICE_CUDA = 1 } kvattn_device_type;

/* A strided view of memory. data == NULL means "absent". shape/strides beyond ndim are ignored. */
typedef struct kvattn_tensor {
  void* data;
  kvattn_dtype dtype;
  int32_t ndim;
  int64_t shape[KVATTN_MAX_DIMS];
  int64_t strides[KVATTN_MAX_DIMS]; /* in elements */
} kvattn_tensor;

/* Attention over a KV cache with optional in-place append and rotary: CONTRACT.md, all of it.
 * Initialize with kvattn_fwd_params_init(), then set what you use. */
typedef struct kvattn_fwd_params {
  uint32_t struct_size; /* sizeof(kvattn_fwd_params) of the caller */
  uint32_t abi_version; /* KVATTN_ABI_VERSION of the caller */

  kvattn_device_type device_type;
  int32_t device_id;
  void* stream; /* cudaStream_t; NULL = default stream. Ignored on the CPU backend. */

  kvattn_tensor q;       /* (b, sq, hq, d), or (total_q, hq, d) with cu_seqlens_q */
  kvattn_tensor k_cache; /* (b_cache, s_cache, hk, d) | paged (num_pages, page_size, hk, d) | (total_k, hk, d)
                            with cu_seqlens_k */
  kvattn_tensor v_cache; /* as k_cache with dv */
  kvattn_tensor k;  /* optional new keys (b, s_new, hk, d), or (total_new, hk, d) with cu_seqlens_k_new */
  kvattn_tensor v;  /* optional new values, as k with dv */
  kvattn_tensor qv; /* optional (b, sq, hq, dv) / (total_q, hq, dv) */

  kvattn_tensor rotary_cos;     /* optional (seqlen_ro, rotary_dim / 2), fp32 or q's dtype */
  kvattn_tensor rotary_sin;     /* same shape and dtype as rotary_cos */
  kvattn_tensor rotary_seqlens; /* optional (b,) int32 */

  /* A sequence holds at most 2^31 - 2^16 keys, cache_seqlens[i] plus its new tokens, whatever the cache's
     capacity (pages_per_row * page_size may be larger): more is an error (key positions are int32). */
  kvattn_tensor cache_seqlens;   /* optional (b,) int32; when absent, cache_seqlens_value applies */
  int64_t cache_seqlens_value;   /* used when cache_seqlens is absent; < 0 = full capacity */
  kvattn_tensor cache_batch_idx; /* optional (b,) int32 */
  kvattn_tensor cache_leftpad;   /* optional (b,) int32 */
  kvattn_tensor page_table;      /* optional (b_pt, pages_per_row) int32 */

  kvattn_tensor cu_seqlens_q;     /* optional (b + 1,) int32 */
  int64_t max_seqlen_q;           /* required with cu_seqlens_q */
  kvattn_tensor seqused_q;        /* optional (b,) int32 */
  kvattn_tensor cu_seqlens_k_new; /* optional (b + 1,) int32 */
  kvattn_tensor cu_seqlens_k;     /* optional (b + 1,) int32: packed varlen KV cache */

  kvattn_tensor alibi_slopes; /* optional (hq,) or (b, hq) fp32 */
  kvattn_tensor sinks;        /* optional (hq,) fp32 */
  kvattn_tensor q_descale;    /* optional (b, hk) fp32, fp8 only */
  kvattn_tensor k_descale;
  kvattn_tensor v_descale;

  double softmax_scale; /* <= 0: default 1/sqrt(d) (1/sqrt(d + dv) with qv) */
  int32_t causal;
  int32_t window_left;     /* -1 = unbounded */
  int32_t window_right;    /* -1 = unbounded */
  int32_t attention_chunk; /* 0 = off */
  double softcap;          /* 0 = off */
  int32_t rotary_interleaved;

  int32_t num_splits;    /* 0 = choose, 1 = none, n = at most n */
  int32_t pack_gqa;      /* -1 = choose, 0/1 = hint (speed only) */
  int32_t sm_margin;     /* SMs to leave free (speed only) */
  int32_t deterministic; /* split decision independent of batch composition (fixed split size) */

  kvattn_tensor out; /* required: as q with dv, q's dtype (bf16 when q is fp8) */
  kvattn_tensor lse; /* optional fp32 (b, hq, sq), or (hq, total_q) with cu_seqlens_q */

  void* workspace; /* kvattn_fwd_workspace_size() bytes on the device, 256-byte aligned; may be NULL if 0 */
  size_t workspace_bytes;

  /* Appended after the first release (absent from a smaller struct_size: 0). */
  int32_t force_portable; /* 1: CUDA runs the portable sm_80 kernels even where newer ones exist (as does
                             the environment variable KVATTN_FORCE_PORTABLE=1); 0: the newest the device
                             runs. Results agree within the kernels' tolerance; for testing. */

  /* A ragged page index in place of page_table (FlashInfer's paged_kv_indptr / paged_kv_indices): row r
   * owns the pages kv_indices[kv_indptr[r] .. kv_indptr[r+1]), so slot s of row r lives in page
   * kv_indices[kv_indptr[r] + s / page_size] at offset s % page_size, and the row holds
   * (kv_indptr[r+1] - kv_indptr[r]) * page_size slots. Rows are chosen as with page_table (cache_batch_idx,
   * else row i). k_cache is paged (num_pages, page_size, hk, d), or a slot pool (num_slots, hk, d) that is
   * the same thing with page_size 1 (kv_indices are then per-token slots). Both or neither; an error
   * together with page_table or cu_seqlens_k. Sequence lengths still come from cache_seqlens. */
  kvattn_tensor kv_indptr;  /* optional (b_pt + 1,) int32, non-decreasing, entries in [0, nnz] */
  kvattn_tensor kv_indices; /* optional (nnz,) int32 page ids (slot ids when page_size is 1) */
} kvattn_fwd_params;

/* vLLM reshape_and_cache_flash: token t is written to slot slot_mapping[t] (negative = skip) of a paged
 * cache, page = slot / page_size, offset = slot % page_size. */
typedef struct kvattn_append_params {
  uint32_t struct_size;
  uint32_t abi_version;
  kvattn_device_type device_type;
  int32_t device_id;
  void* stream;
  kvattn_tensor key;          /* (num_tokens, hk, d) */
  kvattn_tensor value;        /* (num_tokens, hk, dv) */
  kvattn_tensor k_cache;      /* (num_pages, page_size, hk, d), any strides with the head dim contiguous */
  kvattn_tensor v_cache;      /* (num_pages, page_size, hk, dv) */
  kvattn_tensor slot_mapping; /* (num_tokens,) int64 */
  kvattn_tensor k_scale;      /* optional, fp8 caches: () or (hk,) fp32 */
  kvattn_tensor v_scale;
} kvattn_append_params;

/* Merge split partials: out_partials (n, ..., dv) fp32, lse_partials (n, ...) fp32 with the same "...".
 * With sinks (hq,), the last axis of "..." is the head axis and each sink is counted once. */
typedef struct kvattn_combine_params {
  uint32_t struct_size;
  uint32_t abi_version;
  kvattn_device_type device_type;
  int32_t device_id;
  void* stream;
  kvattn_tensor out_partials;
  kvattn_tensor lse_partials;
  kvattn_tensor sinks; /* optional */
  kvattn_tensor out;   /* (..., dv), fp32, f16 or bf16 */
  kvattn_tensor lse;   /* optional (...) fp32 */
} kvattn_combine_params;

KVATTN_API int32_t kvattn_abi_version(void);
/* The message of this thread's last failed call ("" if none). Valid until the next call on this thread. */
KVATTN_API const char* kvattn_last_error(void);
/* 1 if this build has the backend for device_type (and, for CUDA, a usable device). */
KVATTN_API int32_t kvattn_has_backend(kvattn_device_type device_type);

KVATTN_API void kvattn_fwd_params_init(kvattn_fwd_params* params);
KVATTN_API void kvattn_append_params_init(kvattn_append_params* params);
KVATTN_API void kvattn_combine_params_init(kvattn_combine_params* params);

/* Validate without running. Same checks, same messages as kvattn_fwd. */
KVATTN_API kvattn_status kvattn_check(const kvattn_fwd_params* params);
/* Device workspace the call needs; depends on static shapes only (graph-safe). */
KVATTN_API kvattn_status kvattn_fwd_workspace_size(const kvattn_fwd_params* params, size_t* bytes);
KVATTN_API kvattn_status kvattn_fwd(const kvattn_fwd_params* params);
/* kvattn_fwd_workspace_size and kvattn_fwd in one call (one validation): *workspace_bytes_needed receives
 * the size; if params->workspace_bytes is at least that (a persistent workspace, say), the call runs as
 * kvattn_fwd. Else nothing runs and it returns KVATTN_ERROR_INVALID_ARGUMENT naming workspace(_bytes):
 * grow the workspace to *workspace_bytes_needed and call again. A workspace must not be shared by calls
 * that may run at the same time (different streams), nor overlap the call's tensors (an error). */
KVATTN_API kvattn_status kvattn_fwd_sized(const kvattn_fwd_params* params, size_t* workspace_bytes_needed);

KVATTN_API kvattn_status kvattn_append_kv(const kvattn_append_params* params);
KVATTN_API kvattn_status kvattn_combine(const kvattn_combine_params* params);

/* Checks that need device data (page ids, batch indices, slots, positions) are made in the kernels: an
 * offending sequence writes nothing out of bounds and its output is NaN. This call synchronizes `stream`,
 * reads and clears the device's error record, and returns KVATTN_ERROR_DEVICE_INDEX with a message naming
 * the argument, index and value if one was recorded. On the CPU backend such errors are reported at once. */
KVATTN_API kvattn_status kvattn_device_errors(int32_t device_id, void* stream);

/* CPU backend threads: one pool per process, sized by the environment variable KVATTN_NUM_THREADS, else
 * OMP_NUM_THREADS, else the CPUs the process may run on; read at the first CPU call. The calling thread is
 * one of them; small calls run on it alone. Returns the pool size (>= 1). */
KVATTN_API int32_t kvattn_cpu_num_threads(void);
/* Asks every CPU-backend call running now, on any thread, to stop: each returns KVATTN_ERROR_INTERRUPTED
 * within about a millisecond (it checks between tiles of 64 keys), its out and lse incomplete. Calls that
 * start afterwards are not affected. Safe to call from any thread (not from a signal handler). The
 * Python package calls it on Ctrl-C during a long CPU call. CUDA calls are asynchronous and not affected. */
KVATTN_API void kvattn_interrupt(void);

#ifdef __cplusplus
}
#endif
#endif /* KVATTN_KVATTN_H_ */
