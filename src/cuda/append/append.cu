// The append kernels. Both write through the one addressing rule (append_kernel by 16-byte chunks where the
// dtypes and dims allow, see append_chunks; else, and slot_append_kernel always, element by element); every
// index read from device memory is checked first, and an offending token or sequence writes nothing.
// fp8 caches: fp16/bf16 tokens are quantized on write, stored = e4m3(x / descale) (x after rotary for k),
// rounded to nearest even and saturated to +-448 (dtype.cuh). fp8 tokens (under fp8 q) carry the cache's
// descale already and are written as they are (re-rounded after rotary).
#include <algorithm>
#include <string>
#include <type_traits>

#include "api/backend.hpp"
#include "cuda/append/append.hpp"
#include "cuda/append/token_grid.hpp"
#include "cuda/attention/params.cuh"
#include "cuda/common/dtype.cuh"
#include "cuda/common/host.hpp"
#include "cuda/common/pdl.cuh"
#include "cuda/common/rotary.cuh"
#include "cuda/common/sequence.cuh"

namespace kvattn::cuda {
namespace {

constexpr int kAppendThreads = 128;
constexpr int kTokensPerBlock = 4;

struct AppendParams {
  SeqParams seq;
  int32_t num_kv_heads;
  int32_t head_dim;
  int32_t head_dim_v;
  TokenTensor k_new;  // (i, j, h, 0..d)
  TokenTensor v_new;  // (i, j, h, 0..dv)
  CacheTensor k_cache;
  CacheTensor v_cache;
  RotaryParams rotary;
  const float* k_descale;  // fp8 cache under fp16/bf16 tokens: (b, hk), nullptr = 1
  const float* v_descale;
  int64_t k_descale_strides[2];
  int64_t v_descale_strides[2];
  DeviceErrorRecord* errors;
  int32_t* zero_word;  // launch_append's: set to 0 by the first thread of the grid, or nullptr
  bool line;           // varlen new tokens: a 1-D grid over the token-block line of the batch (find_on_line)
};

// Token blocks of sequence i on the line (1 when cu_seqlens_k_new is broken at i: its CTA records it).
__device__ __forceinline__ int64_t new_token_blocks(const SeqParams& p, int i) {
  const int64_t a = p.cu_seqlens_k_new[i], b = p.cu_seqlens_k_new[i + 1];
  if (a < 0 || b < a || b > p.total_k_new || b - a > p.max_seqlen_k_new) return 1;
  return max(int64_t{1}, (b - a + kTokensPerBlock - 1) / kTokensPerBlock);
}

// Quantizes (a cache of fp8 written from fp16/bf16 tokens) or just rounds x into the cache's dtype.
template <typename TSrc, typename TCache>
__device__ __forceinline__ TCache to_cache(float x, float descale) {
  if constexpr (std::is_same_v<TCache, __nv_fp8_e4m3> && !std::is_same_v<TSrc, __nv_fp8_e4m3>) {
    return from_float<TCache>(x / descale);
  } else {
    return from_float<TCache>(x);
  }
}

__device__ __forceinline__ float descale_of(const float* ptr, const int64_t (&strides)[2], int i, int h) {
  return ptr ? ptr[i * strides[0] + h * strides[1]] : 1.f;
}

// The chunked path: fp16/bf16 tokens into a cache of their dtype, rows in 16-byte chunks of 8 channels and
// rotary_dim a multiple of 16 (no chunk straddles it or the GPT-NeoX half; 0 = no rotary).
template <typename T, typename TCache>
constexpr bool kChunked = std::is_same_v<T, TCache> && sizeof(T) == 2;

__device__ __forceinline__ bool whole_chunks(const AppendParams& p) {
  return p.head_dim % 8 == 0 && p.head_dim_v % 8 == 0 && p.rotary.rotary_dim % 16 == 0;
}

// New tokens [j0, j0 + kTokensPerBlock) of sequence i (those < n), by 16-byte chunks: thread t takes
// chunk t (and t + blockDim.x, ...) of each token's k and v rows. All loads of the group (page-table
// entries, k with its rotary inputs, v) are issued before any store or error record, so the CTA pays one
// memory latency for them, not one a token and element. A token whose page-table entry is bad records it
// (as the element path does) and writes nothing.
template <typename T>
__device__ __forceinline__ void append_chunks(const AppendParams& p, const Sequence& seq, int i, int64_t j0,
                                              int64_t n) {
  const int tokens = static_cast<int>(min(n - j0, int64_t{kTokensPerBlock}));
  const bool paged = p.seq.page_table && !p.seq.cu_seqlens_k;
  int32_t entry[kTokensPerBlock];
#pragma unroll
  for (int t = 0; t < kTokensPerBlock; ++t) {
    entry[t] = paged && t < tokens ? page_entry(p.seq, seq, seq.cache_len + j0 + t) : 0;
  }
  const T* k_src = static_cast<const T*>(p.k_new.ptr) + i * p.k_new.batch_stride +
                   (seq.new_row0 + j0) * p.k_new.token_stride;  // token j0 + t: + t * token_stride
  const T* v_src = static_cast<const T*>(p.v_new.ptr) + i * p.v_new.batch_stride +
                   (seq.new_row0 + j0) * p.v_new.token_stride;
  const int k_chunks = p.head_dim / 8, v_chunks = p.head_dim_v / 8;
  const int k_total = p.num_kv_heads * k_chunks, v_total = p.num_kv_heads * v_chunks;
  for (int idx = threadIdx.x; idx < max(k_total, v_total); idx += blockDim.x) {
    const bool has_k = idx < k_total, has_v = idx < v_total;
    const int hk = idx / k_chunks, ck = idx % k_chunks * 8;
    const int hv = idx / v_chunks, cv = idx % v_chunks * 8;
    const bool rotated = ck < p.rotary.rotary_dim;
    RotaryChunk<T> k[kTokensPerBlock];
    alignas(16) T v[kTokensPerBlock][8];
#pragma unroll
    for (int t = 0; t < kTokensPerBlock; ++t) {
      if (t >= tokens) continue;
      if (has_k) {
        const T* row = k_src + t * p.k_new.token_stride + hk * p.k_new.head_stride;
        if (rotated) {
          load_rotary_chunk(row, ck, seq.rotary_pos + j0 + t, p.rotary, k[t]);
        } else {
          load8(row + ck, k[t].x);
        }
      }
      if (has_v) load8(v_src + t * p.v_new.token_stride + hv * p.v_new.head_stride + cv, v[t]);
    }
#pragma unroll
    for (int t = 0; t < kTokensPerBlock; ++t) {
      if (t >= tokens) continue;
      const int64_t slot = seq.cache_len + j0 + t;
      const SlotAddress a = slot_address_at(p.seq, seq, slot, entry[t]);
      if (a.page < 0) {
        if (idx == 0) {  // thread 0, once
          record_page_error(p.seq, seq, p.errors, slot / p.seq.page_size, entry[t]);
        }
        continue;
      }
      if (has_k) {
        T* dst = static_cast<T*>(p.k_cache.ptr) + a.page * p.k_cache.page_stride +
                 a.in_page * p.k_cache.slot_stride + hk * p.k_cache.head_stride + ck;
        if (rotated) {  // rotated and rounded once, as the element path
          float x[8];
          rotate_chunk(k[t], ck, p.rotary, x);
          alignas(16) T out[8];
#pragma unroll
          for (int e = 0; e < 8; ++e) out[e] = from_float<T>(x[e]);
          store8(dst, out);
        } else {
          store8(dst, k[t].x);
        }
      }
      if (has_v) {
        store8(static_cast<T*>(p.v_cache.ptr) + a.page * p.v_cache.page_stride +
                   a.in_page * p.v_cache.slot_stride + hv * p.v_cache.head_stride + cv,
               v[t]);
      }
    }
  }
}

// grid (batch, token blocks): block y writes new tokens [j0, j0 + kTokensPerBlock) of sequence x for
// j0 = y * kTokensPerBlock, y + gridDim.y, ... (gridDim.y is capped at 65535). Varlen new tokens (p.line):
// a 1-D grid, CTA x writes the token block of line position x (a batch of one long chunk and many
// one-token decodes would otherwise be a max-length grid for every sequence, nearly all CTAs empty).
template <typename T, typename TCache>
__global__ void __launch_bounds__(kAppendThreads) append_kernel(const __grid_constant__ AppendParams p) {
  allow_dependent_launch();  // the attention may be scheduled now; it waits for this grid before K/V
  if (p.zero_word != nullptr && blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) *p.zero_word = 0;
  int i = blockIdx.x;
  int64_t block = blockIdx.y, blocks_stride = gridDim.y;
  if (p.line) {
    const LinePos at =
        find_on_line<kAppendThreads>(p.seq, p.errors, [&](int s) { return new_token_blocks(p.seq, s); });
    if (at.i >= p.seq.batch) return;
    i = at.i;
    block = at.offset;
    blocks_stride = at.count;  // one block: the next one is past the sequence's tokens
  }
  const Sequence seq = load_sequence(p.seq, i, p.errors, threadIdx.x == 0);
  const bool ok = check_unique_row(p.seq, i, p.errors) && seq.ok;
  if (!ok) return;
  const int64_t n = seq.new_len;
  if constexpr (kChunked<T, TCache>) {
    if (whole_chunks(p)) {
      for (int64_t j0 = block * kTokensPerBlock; j0 < n; j0 += blocks_stride * kTokensPerBlock) {
        append_chunks<T>(p, seq, i, j0, n);
      }
      return;
    }
  }
  for (int64_t j = block * kTokensPerBlock; j < n;
       j += (j + 1) % kTokensPerBlock == 0 ? (blocks_stride - 1) * kTokensPerBlock + 1 : 1) {
    const int64_t slot = seq.cache_len + j;
    const SlotAddress a = slot_address(p.seq, seq, slot);
    if (a.page < 0) {
      if (threadIdx.x == 0) {
        const int64_t column = slot / p.seq.page_size;
        record_page_error(p.seq, seq, p.errors, column, page_entry(p.seq, seq, slot));
      }
      continue;
    }
    const int64_t pos = seq.rotary_pos + j;
    const T* k_src = static_cast<const T*>(p.k_new.ptr) + i * p.k_new.batch_stride +
                     (seq.new_row0 + j) * p.k_new.token_stride;
    const T* v_src = static_cast<const T*>(p.v_new.ptr) + i * p.v_new.batch_stride +
                     (seq.new_row0 + j) * p.v_new.token_stride;
    TCache* k_dst = static_cast<TCache*>(p.k_cache.ptr) + a.page * p.k_cache.page_stride +
                    a.in_page * p.k_cache.slot_stride;
    TCache* v_dst = static_cast<TCache*>(p.v_cache.ptr) + a.page * p.v_cache.page_stride +
                    a.in_page * p.v_cache.slot_stride;
    for (int idx = threadIdx.x; idx < p.num_kv_heads * p.head_dim; idx += blockDim.x) {
      const int h = idx / p.head_dim, c = idx % p.head_dim;
      const T* row = k_src + h * p.k_new.head_stride;
      if constexpr (std::is_same_v<T, TCache>) {  // a copy, or rotated and rounded once
        k_dst[h * p.k_cache.head_stride + c] =
            c < p.rotary.rotary_dim ? from_float<T>(rotated_channel(row, c, pos, p.rotary)) : row[c];
      } else {
        const float x = c < p.rotary.rotary_dim ? rotated_channel(row, c, pos, p.rotary) : to_float(row[c]);
        k_dst[h * p.k_cache.head_stride + c] =
            to_cache<T, TCache>(x, descale_of(p.k_descale, p.k_descale_strides, i, h));
      }
    }
    for (int idx = threadIdx.x; idx < p.num_kv_heads * p.head_dim_v; idx += blockDim.x) {
      const int h = idx / p.head_dim_v, c = idx % p.head_dim_v;
      if constexpr (std::is_same_v<T, TCache>) {
        v_dst[h * p.v_cache.head_stride + c] = v_src[h * p.v_new.head_stride + c];
      } else {
        v_dst[h * p.v_cache.head_stride + c] = to_cache<T, TCache>(
            to_float(v_src[h * p.v_new.head_stride + c]), descale_of(p.v_descale, p.v_descale_strides, i, h));
      }
    }
  }
}

// vLLM reshape_and_cache_flash: token t goes to slot slot_mapping[t] (negative = skip). One block a token.
struct SlotAppendParams {
  int32_t num_kv_heads, head_dim, head_dim_v;
  int64_t num_pages, page_size;
  TokenTensor key, value;
  CacheTensor k_cache, v_cache;
  const int64_t* slot_mapping;
  const float* k_scale;  // fp8 caches: stored = e4m3(key / k_scale); nullptr = 1
  const float* v_scale;
  bool scale_per_head;  // (hk,) scales, else ()
  DeviceErrorRecord* errors;
};

// Same-dtype caches copy 16-bit words (TSrc = TCache = uint16_t); fp8 caches quantize (TCache fp8).
template <typename TSrc, typename TCache>
__global__ void __launch_bounds__(kAppendThreads)
    slot_append_kernel(const __grid_constant__ SlotAppendParams p) {
  const int64_t t = blockIdx.x;
  const int64_t slot = p.slot_mapping[t];
  if (slot < 0) return;
  const int64_t page = slot / p.page_size;
  if (page >= p.num_pages) {
    if (threadIdx.x == 0) {
      record_error(p.errors, ErrorArg::slot_mapping, ErrorKind::out_of_range, t, slot,
                   p.num_pages * p.page_size);
    }
    return;
  }
  const int64_t in_page = slot % p.page_size;
  const TSrc* k_src = static_cast<const TSrc*>(p.key.ptr) + t * p.key.token_stride;
  const TSrc* v_src = static_cast<const TSrc*>(p.value.ptr) + t * p.value.token_stride;
  TCache* k_dst =
      static_cast<TCache*>(p.k_cache.ptr) + page * p.k_cache.page_stride + in_page * p.k_cache.slot_stride;
  TCache* v_dst =
      static_cast<TCache*>(p.v_cache.ptr) + page * p.v_cache.page_stride + in_page * p.v_cache.slot_stride;
  for (int idx = threadIdx.x; idx < p.num_kv_heads * p.head_dim; idx += blockDim.x) {
    const int h = idx / p.head_dim, c = idx % p.head_dim;
    if constexpr (std::is_same_v<TSrc, TCache>) {
      k_dst[h * p.k_cache.head_stride + c] = k_src[h * p.key.head_stride + c];
    } else {
      const float scale = p.k_scale ? p.k_scale[p.scale_per_head ? h : 0] : 1.f;
      k_dst[h * p.k_cache.head_stride + c] =
          from_float<TCache>(to_float(k_src[h * p.key.head_stride + c]) / scale);
    }
  }
  for (int idx = threadIdx.x; idx < p.num_kv_heads * p.head_dim_v; idx += blockDim.x) {
    const int h = idx / p.head_dim_v, c = idx % p.head_dim_v;
    if constexpr (std::is_same_v<TSrc, TCache>) {
      v_dst[h * p.v_cache.head_stride + c] = v_src[h * p.value.head_stride + c];
    } else {
      const float scale = p.v_scale ? p.v_scale[p.scale_per_head ? h : 0] : 1.f;
      v_dst[h * p.v_cache.head_stride + c] =
          from_float<TCache>(to_float(v_src[h * p.value.head_stride + c]) / scale);
    }
  }
}

}  // namespace

kvattn_status launch_append(const FwdProblem& p, DeviceErrorRecord* errors, cudaStream_t stream,
                            int32_t* zero_word) {
  if (p.batch == 0 || p.max_seqlen_k_new == 0) return KVATTN_OK;
  AppendParams a{};
  a.seq = make_seq_params(p);
  a.num_kv_heads = p.num_kv_heads;
  a.head_dim = p.head_dim;
  a.head_dim_v = p.head_dim_v;
  a.k_new = p.k_new;
  a.v_new = p.v_new;
  a.k_cache = p.k_cache;
  a.v_cache = p.v_cache;
  a.rotary = make_rotary_params(p);
  a.k_descale = p.k_descale;
  a.v_descale = p.v_descale;
  for (int k = 0; k < 2; ++k) {
    a.k_descale_strides[k] = p.k_descale_strides[k];
    a.v_descale_strides[k] = p.v_descale_strides[k];
  }
  a.errors = errors;
  a.zero_word = zero_word;
  TokenGrid tg;
  if (const kvattn_status st =
          token_grid(p.batch, p.max_seqlen_k_new, a.seq.cu_seqlens_k_new != nullptr, a.seq.total_k_new,
                     kTokensPerBlock, "k", "new tokens", "append kernel", tg);
      st != KVATTN_OK) {
    return st;
  }
  a.line = tg.line;
  const dim3 grid = tg.grid;
  const bool fp8_cache = p.kv_dtype == DType::fp8_e4m3;
  if (p.q_dtype == DType::fp8_e4m3) {  // validation: fp8 q has an fp8 cache, and k, v are fp8
    append_kernel<__nv_fp8_e4m3, __nv_fp8_e4m3><<<grid, kAppendThreads, 0, stream>>>(a);
  } else if (p.q_dtype == DType::bf16) {
    if (fp8_cache) {
      append_kernel<__nv_bfloat16, __nv_fp8_e4m3><<<grid, kAppendThreads, 0, stream>>>(a);
    } else {
      append_kernel<__nv_bfloat16, __nv_bfloat16><<<grid, kAppendThreads, 0, stream>>>(a);
    }
  } else {
    if (fp8_cache) {
      append_kernel<half, __nv_fp8_e4m3><<<grid, kAppendThreads, 0, stream>>>(a);
    } else {
      append_kernel<half, half><<<grid, kAppendThreads, 0, stream>>>(a);
    }
  }
  return check_launch("append_kernel");
}

}  // namespace kvattn::cuda

namespace kvattn {
using namespace cuda;

kvattn_status cuda_append(const AppendProblem& p) {
  const bool fp8_cache = p.cache_dtype == DType::fp8_e4m3;
  if ((p.src_dtype != DType::f16 && p.src_dtype != DType::bf16) ||
      (p.cache_dtype != p.src_dtype && !fp8_cache)) {
    return fail(KVATTN_ERROR_UNSUPPORTED,
                "key: the CUDA backend appends f16 or bf16 into a cache of the same dtype or of fp8_e4m3");
  }
  DeviceGuard guard(p.device_id);
  if (const kvattn_status s = device_status(guard, p.device_id); s != KVATTN_OK) return s;
  if (p.num_tokens == 0) return KVATTN_OK;
  if (p.num_tokens > 0x7fffffff) {
    return fail(KVATTN_ERROR_UNSUPPORTED, "slot_mapping: more than 2^31 - 1 tokens");
  }
  SlotAppendParams a{};
  a.num_kv_heads = p.num_kv_heads;
  a.head_dim = p.head_dim;
  a.head_dim_v = p.head_dim_v;
  a.num_pages = p.num_pages;
  a.page_size = p.page_size;
  a.key = p.key;
  a.value = p.value;
  a.k_cache = p.k_cache;
  a.v_cache = p.v_cache;
  a.slot_mapping = p.slot_mapping;
  a.k_scale = p.k_scale;
  a.v_scale = p.v_scale;
  a.scale_per_head = p.scale_per_head;
  const DeviceInfo* device = nullptr;
  if (const kvattn_status st = device_info(p.device_id, &device); st != KVATTN_OK) return st;
  a.errors = device->errors;
  const dim3 grid(static_cast<unsigned>(p.num_tokens));
  const cudaStream_t stream = static_cast<cudaStream_t>(p.stream);
  if (!fp8_cache) {  // fp16 and bf16 are both copied as 16-bit words
    slot_append_kernel<uint16_t, uint16_t><<<grid, kAppendThreads, 0, stream>>>(a);
  } else if (p.src_dtype == DType::bf16) {
    slot_append_kernel<__nv_bfloat16, __nv_fp8_e4m3><<<grid, kAppendThreads, 0, stream>>>(a);
  } else {
    slot_append_kernel<half, __nv_fp8_e4m3><<<grid, kAppendThreads, 0, stream>>>(a);
  }
  return check_launch("slot_append_kernel");
}

}  // namespace kvattn
