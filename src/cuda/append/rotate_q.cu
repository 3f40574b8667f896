// q rotated once ahead of the sm_90a prefill kernel (KVATTN_SM90_QROT=1, prefill_sm90/launch.hpp): one pass
// over q into the workspace, so that the kernel's Q load (and the persistent kernel's next-unit Q load
// under the last P V) is a plain copy instead of a rotation channel by channel. Same arithmetic as the
// kernels' Q loads (rotary.cuh, in fp32, rounded to q's dtype once), so the attention sees the same bits.
#include <algorithm>
#include <string>

#include "cuda/append/append.hpp"
#include "cuda/append/token_grid.hpp"
#include "cuda/attention/params.cuh"
#include "cuda/common/dtype.cuh"
#include "cuda/common/host.hpp"
#include "cuda/common/rotary.cuh"
#include "cuda/common/sequence.cuh"

namespace kvattn::cuda {
namespace {

constexpr int kRotateThreads = 128;
constexpr int kRotateTokens = 4;  // a CTA's token block: each thread's loads of 4 tokens in flight at once

struct RotateQParams {
  SeqParams seq;
  int32_t num_q_heads;
  int32_t head_dim;
  TokenTensor q;      // (i, t, h, 0..d), the caller's
  TokenTensor q_rot;  // the same rows in the workspace
  RotaryParams rotary;
  DeviceErrorRecord* errors;
  // d a multiple of 8 and rotary_dim of 16: whole 16-byte chunks (no chunk straddles rotary_dim).
  bool chunks;
  bool line;  // varlen q: a 1-D grid over the token-block line of the batch (find_on_line)
};

// Token blocks of sequence i on the line (1 when cu_seqlens_q is broken at i: nothing of it is read).
__device__ __forceinline__ int64_t q_token_blocks(const SeqParams& p, int i) {
  const int64_t a = p.cu_seqlens_q[i], b = p.cu_seqlens_q[i + 1];
  if (a < 0 || b < a || b > p.total_q || b - a > p.max_seqlen_q) return 1;
  return max(int64_t{1}, (b - a + kRotateTokens - 1) / kRotateTokens);
}

__device__ __forceinline__ int64_t q_position(const RotateQParams& p, const Sequence& seq, int64_t t) {
  return seq.rotary_pos + (p.seq.rotary_q_per_token ? t : 0);
}

// Tokens [t0, t0 + kRotateTokens) (those < n) by 16-byte chunks, as the append's chunk path: thread x takes
// chunk x (x + blockDim.x, ...) of each token's heads; the loads of the 4 tokens before their stores.
template <typename T>
__device__ __forceinline__ void rotate_chunks(const RotateQParams& p, const Sequence& seq, int i, int64_t t0,
                                              int64_t n) {
  const int tokens = static_cast<int>(min(n - t0, int64_t{kRotateTokens}));
  const int chunks = p.head_dim / 8, total = p.num_q_heads * chunks;
  for (int idx = threadIdx.x; idx < total; idx += blockDim.x) {
    const int h = idx / chunks, c8 = idx % chunks * 8;
    const bool rotated = c8 < p.rotary.rotary_dim;
    RotaryChunk<T> x[kRotateTokens];
#pragma unroll
    for (int k = 0; k < kRotateTokens; ++k) {
      if (k >= tokens) continue;
      const T* row = token_row<const T>(p.q, seq, i, t0 + k, h);
      if (rotated) {
        load_rotary_chunk(row, c8, q_position(p, seq, t0 + k), p.rotary, x[k]);
      } else {
        load8(row + c8, x[k].x);
      }
    }
#pragma unroll
    for (int k = 0; k < kRotateTokens; ++k) {
      if (k >= tokens) continue;
      T* dst = token_row<T>(p.q_rot, seq, i, t0 + k, h) + c8;
      if (rotated) {
        float r[8];
        rotate_chunk(x[k], c8, p.rotary, r);
        alignas(16) T out[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) out[e] = from_float<T>(r[e]);
        store8(dst, out);
      } else {
        store8(dst, x[k].x);
      }
    }
  }
}

// The same tokens element by element (any d and rotary_dim): the prefill kernel's scalar Q path.
template <typename T>
__device__ __forceinline__ void rotate_elements(const RotateQParams& p, const Sequence& seq, int i,
                                                int64_t t0, int64_t n) {
  const int64_t t_end = min(n, t0 + kRotateTokens);
  for (int64_t t = t0; t < t_end; ++t) {
    const int64_t pos = q_position(p, seq, t);
    for (int idx = threadIdx.x; idx < p.num_q_heads * p.head_dim; idx += blockDim.x) {
      const int h = idx / p.head_dim, c = idx % p.head_dim;
      const T* row = token_row<const T>(p.q, seq, i, t, h);
      token_row<T>(p.q_rot, seq, i, t, h)[c] =
          c < p.rotary.rotary_dim ? from_float<T>(rotated_channel(row, c, pos, p.rotary)) : row[c];
    }
  }
}

// grid (batch, token blocks): block y rotates tokens [t0, t0 + kRotateTokens) of sequence x for
// t0 = y * kRotateTokens, y + gridDim.y, ... (gridDim.y capped at 65535); varlen q (p.line): a 1-D grid,
// CTA x the token block of line position x. Only the rows the attention reads: t < seqused_q of a sequence
// without index errors (load_sequence, the attention's own checks, rotary positions included; the attention
// kernel records them, so this kernel does not).
// Four CTAs an SM (128 registers, no spill; unbounded it took 156, three CTAs): a streaming kernel wants the
// loads of more threads in flight.
template <typename T>
__global__ void __launch_bounds__(kRotateThreads, 4)
    rotate_q_kernel(const __grid_constant__ RotateQParams p) {
  int i = blockIdx.x;
  int64_t block = blockIdx.y, blocks_stride = gridDim.y;
  if (p.line) {
    const LinePos at =
        find_on_line<kRotateThreads>(p.seq, p.errors, [&](int s) { return q_token_blocks(p.seq, s); });
    if (at.i >= p.seq.batch) return;
    i = at.i;
    block = at.offset;
    blocks_stride = at.count;  // one block: the next one is past the sequence's tokens
  }
  const Sequence seq = load_sequence(p.seq, i, p.errors, false);
  if (!seq.ok) return;
  const int64_t n = seq.q_used;
  for (int64_t t0 = block * kRotateTokens; t0 < n; t0 += blocks_stride * kRotateTokens) {
    if (p.chunks) {
      rotate_chunks<T>(p, seq, i, t0, n);
    } else {
      rotate_elements<T>(p, seq, i, t0, n);
    }
  }
}

}  // namespace

kvattn_status launch_rotate_q(const FwdProblem& p, const TokenTensor& q_rot, DeviceErrorRecord* errors,
                              cudaStream_t stream) {
  if (p.batch == 0 || p.max_seqlen_q == 0 || p.rotary_dim == 0) return KVATTN_OK;
  RotateQParams a{};
  a.seq = make_seq_params(p);
  a.num_q_heads = p.num_q_heads;
  a.head_dim = p.head_dim;
  a.q = p.q;
  a.q_rot = q_rot;
  a.rotary = make_rotary_params(p);
  a.errors = errors;
  a.chunks = p.head_dim % 8 == 0 && p.rotary_dim % 16 == 0;
  TokenGrid tg;
  if (const kvattn_status st =
          token_grid(p.batch, p.max_seqlen_q, a.seq.cu_seqlens_q != nullptr, a.seq.total_q, kRotateTokens,
                     "q", "tokens", "q rotation kernel", tg);
      st != KVATTN_OK) {
    return st;
  }
  a.line = tg.line;
  const dim3 grid = tg.grid;
  if (p.q_dtype == DType::bf16) {
    rotate_q_kernel<__nv_bfloat16><<<grid, kRotateThreads, 0, stream>>>(a);
  } else if (p.q_dtype == DType::f16) {
    rotate_q_kernel<half><<<grid, kRotateThreads, 0, stream>>>(a);
  } else {
    return fail(KVATTN_ERROR_UNSUPPORTED, "q: the q rotation kernel takes float16 / bfloat16 q only");
  }
  return check_launch("rotate_q_kernel");
}

}  // namespace kvattn::cuda
