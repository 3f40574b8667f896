"""Writes wgmma.cuh: the wgmma.mma_async m64nNk16 wrappers the sm_90a prefill kernel uses.

    python3 src/cuda/prefill_sm90/gen_wgmma.py | clang-format --assume-filename=x.cuh \\
        > src/cuda/prefill_sm90/wgmma.cuh

Each accumulator register is its own asm operand ("+f"), so the wrappers are long; generating them keeps
the operand numbering right. SS: A and B from shared memory (descriptors), both K-major. SS_MN: the same
with B MN-major (transposed: P V with P in shared memory). RS: A from registers (four packed 16-bit pairs a
thread), B from shared memory, MN-major. e4m3 (k32): SS and RS, both K-major (no transpose for 8-bit).
SS_AMN (N = 16 only: the MLA kernel for <= 16 rows): A MN-major (transposed: V^T of O^T = V^T P^T,
channels along M), B K-major. RS_K (N = 8 only: the rows' sums, P times ones): A from registers, B K-major.
"""
NS = (16, 48, 64, 80, 128, 256)
NS_E4M3 = (128,)  # the fp8 kernel's S (128 keys) and O (dv 128)
NS_AMN = (16,)
NS_RS_K = (8,)  # the rows' sums
DTYPES = (("half", "f16"), ("__nv_bfloat16", "bf16"))


def regs(lo, n):
    return ", ".join(f"%{i}" for i in range(lo, lo + n))


def outs(n):
    return ", ".join(f'"+f"(d[{i}])' for i in range(n))


def emit(n):
    acc = n // 2  # fp32 accumulators a thread holds: 64 x n / 128
    lines = []
    for ctype, ptx in DTYPES:
        lines.append(f"""
// D (64 x {n}) {{+}}= A (64 x 16, smem, K-major) B^T (B: {n} x 16, smem, K-major).
template <>
__device__ __forceinline__ void wgmma_ss<{ctype}, {n}>(float (&d)[{acc}], uint64_t a, uint64_t b, int accumulate) {{
  asm volatile(
      "{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{acc + 2}, 0;\\n"
      "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ptx}.{ptx} {{{regs(0, acc)}}}, %{acc}, %{acc + 1}, p, 1, 1, 0, 0;\\n}}\\n"
      : {outs(acc)}
      : "l"(a), "l"(b), "r"(accumulate));
}}

// D (64 x {n}) {{+}}= A (64 x 16, smem, K-major) B (16 x {n}, smem, MN-major).
template <>
__device__ __forceinline__ void wgmma_ss_mn<{ctype}, {n}>(float (&d)[{acc}], uint64_t a, uint64_t b, int accumulate) {{
  asm volatile(
      "{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{acc + 2}, 0;\\n"
      "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ptx}.{ptx} {{{regs(0, acc)}}}, %{acc}, %{acc + 1}, p, 1, 1, 0, 1;\\n}}\\n"
      : {outs(acc)}
      : "l"(a), "l"(b), "r"(accumulate));
}}
""" + rs(ctype, ptx, n, "wgmma_rs", f"B (16 x {n}, smem, MN-major)", 1))
    return "\n".join(lines)


def emit_e4m3(n):
    """fp8 e4m3 (k32): both operands K-major (wgmma takes no transpose for 8-bit types)."""
    acc = n // 2
    return f"""
// D (64 x {n}) {{+}}= A (64 x 32, smem, K-major) B^T (B: {n} x 32, smem, K-major), e4m3.
template <>
__device__ __forceinline__ void wgmma_ss<__nv_fp8_e4m3, {n}>(float (&d)[{acc}], uint64_t a, uint64_t b, int accumulate) {{
  asm volatile(
      "{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{acc + 2}, 0;\\n"
      "wgmma.mma_async.sync.aligned.m64n{n}k32.f32.e4m3.e4m3 {{{regs(0, acc)}}}, %{acc}, %{acc + 1}, p, 1, 1;\\n}}\\n"
      : {outs(acc)}
      : "l"(a), "l"(b), "r"(accumulate));
}}

// D (64 x {n}) {{+}}= A (64 x 32, registers: four e4m3 quads a thread) B^T (B: {n} x 32, smem, K-major), e4m3.
template <>
__device__ __forceinline__ void wgmma_rs<__nv_fp8_e4m3, {n}>(float (&d)[{acc}], const uint32_t (&a)[4], uint64_t b, int accumulate) {{
  asm volatile(
      "{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{acc + 5}, 0;\\n"
      "wgmma.mma_async.sync.aligned.m64n{n}k32.f32.e4m3.e4m3 {{{regs(0, acc)}}}, {{{regs(acc, 4)}}}, %{acc + 4}, p, 1, 1;\\n}}\\n"
      : {outs(acc)}
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate));
}}"""


def rs(ctype, ptx, n, name, b_text, trans_b):
    """A from registers (four packed 16-bit pairs a thread), B from shared memory; trans_b 1: B MN-major."""
    acc = n // 2
    return f"""
// D (64 x {n}) {{+}}= A (64 x 16, registers) {b_text}.
template <>
__device__ __forceinline__ void {name}<{ctype}, {n}>(float (&d)[{acc}], const uint32_t (&a)[4], uint64_t b, int accumulate) {{
  asm volatile(
      "{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{acc + 5}, 0;\\n"
      "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ptx}.{ptx} {{{regs(0, acc)}}}, {{{regs(acc, 4)}}}, %{acc + 4}, p, 1, 1, {trans_b};\\n}}\\n"
      : {outs(acc)}
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate));
}}"""


def emit_rs_k(n):
    """A from registers, B K-major (the rows' sums: P times a block of ones, consumer.cuh kMmaSums)."""
    return "\n".join(rs(ctype, ptx, n, "wgmma_rs_k", f"B^T (B: {n} x 16, smem, K-major)", 0) for ctype, ptx in DTYPES)


def emit_amn(n):
    acc = n // 2
    lines = []
    for ctype, ptx in DTYPES:
        lines.append(f"""
// D (64 x {n}) {{+}}= A (64 x 16, smem, MN-major) B^T (B: {n} x 16, smem, K-major).
template <>
__device__ __forceinline__ void wgmma_ss_amn<{ctype}, {n}>(float (&d)[{acc}], uint64_t a, uint64_t b, int accumulate) {{
  asm volatile(
      "{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{acc + 2}, 0;\\n"
      "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ptx}.{ptx} {{{regs(0, acc)}}}, %{acc}, %{acc + 1}, p, 1, 1, 1, 0;\\n}}\\n"
      : {outs(acc)}
      : "l"(a), "l"(b), "r"(accumulate));
}}""")
    return "\n".join(lines)


print("""// GENERATED by gen_wgmma.py beside this file; do not edit by hand.
// wgmma.mma_async m64nNk16 (fp32 accumulate) for fp16/bf16, N in {16, 48, 64, 80, 128, 256} (and 8 for the rows' sums), and
// m64nNk32 for fp8 e4m3, N = 128 (both operands K-major); sm_90a only.
// Accumulator layout (d[4j + e], j = 8-column block): row 16 * warp + lane / 4 + 8 * (e / 2), column
// 8 j + 2 (lane % 4) + e % 2 -- the mma.sync m16n8 C layout, one 16-row slab per warp of the warpgroup.
// accumulate == 0: D = A B (the old D is ignored); else D += A B.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace kvattn::cuda::sm90 {

template <typename T, int N>
__device__ void wgmma_ss(float (&d)[N / 2], uint64_t a, uint64_t b, int accumulate);
template <typename T, int N>
__device__ void wgmma_ss_mn(float (&d)[N / 2], uint64_t a, uint64_t b, int accumulate);
template <typename T, int N>
__device__ void wgmma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t b, int accumulate);
template <typename T, int N>
__device__ void wgmma_ss_amn(float (&d)[N / 2], uint64_t a, uint64_t b, int accumulate);
template <typename T, int N>
__device__ void wgmma_rs_k(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t b, int accumulate);

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)""")
for n in NS:
    print(emit(n))
for n in NS_E4M3:
    print(emit_e4m3(n))
for n in NS_AMN:
    print(emit_amn(n))
for n in NS_RS_K:
    print(emit_rs_k(n))
print("""
#endif  // sm_90a

}  // namespace kvattn::cuda::sm90""")
