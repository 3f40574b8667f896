"""A decode loop with numpy arrays on the CPU backend: a contiguous bf16 KV cache (bf16 through ml_dtypes),
a prompt written into it by one call, then one token per step appended (k, v) and attended to with rotary
embeddings, each step checked against a float64 numpy computation.

    PYTHONPATH=python python3 examples/numpy_decode.py      # from a source checkout (or after pip install .)
"""
import time

import ml_dtypes
import numpy as np

import kvattn

B, HQ, HK, D = 2, 8, 2, 64  # batch, query heads, kv heads, head dim
CAPACITY, PROMPT, STEPS = 128, 24, 16
BF16 = ml_dtypes.bfloat16
rng = np.random.default_rng(0)


def rotate(x, pos, cos, sin):
    """Interleaved rotary (the default, rotary_interleaved=True) of x (..., D) at position pos, in float64."""
    c, s = cos[pos].astype(np.float64), sin[pos].astype(np.float64)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    y = np.empty_like(x)
    y[..., 0::2], y[..., 1::2] = x0 * c - x1 * s, x0 * s + x1 * c
    return y


def reference(q, k_cache, v_cache, seqlens, pos):
    """softmax(q k^T / sqrt(D)) v per sequence over its first seqlens[i] slots (float64); q rotated at pos."""
    out = np.zeros((B, HQ, D))
    for i in range(B):
        k = k_cache[i, : seqlens[i]].astype(np.float64)  # (s, HK, D), already rotated when appended
        v = v_cache[i, : seqlens[i]].astype(np.float64)
        for h in range(HQ):
            qh = rotate(q[i, 0, h].astype(np.float64), pos[i], cos, sin)
            scores = k[:, h // (HQ // HK)] @ qh / np.sqrt(D)
            p = np.exp(scores - scores.max())
            out[i, h] = p @ v[:, h // (HQ // HK)] / p.sum()
    return out


angles = rng.uniform(0, 2 * np.pi, (CAPACITY, D // 2))
cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
k_cache = np.zeros((B, CAPACITY, HK, D), BF16)
v_cache = np.zeros((B, CAPACITY, HK, D), BF16)
seqlens = np.zeros(B, np.int32)

# The prompt: PROMPT tokens appended (and rotated) in one call; its output is not needed here.
prompt_k = rng.standard_normal((B, PROMPT, HK, D)).astype(BF16)
prompt_v = rng.standard_normal((B, PROMPT, HK, D)).astype(BF16)
q = rng.standard_normal((B, PROMPT, HQ, D)).astype(BF16)
kvattn.flash_attn_with_kvcache(q, k_cache, v_cache, k=prompt_k, v=prompt_v, rotary_cos=cos, rotary_sin=sin,
                               cache_seqlens=seqlens, causal=True)
seqlens += PROMPT

worst, times = 0.0, []
for step in range(STEPS):
    q = rng.standard_normal((B, 1, HQ, D)).astype(BF16)
    k = rng.standard_normal((B, 1, HK, D)).astype(BF16)
    v = rng.standard_normal((B, 1, HK, D)).astype(BF16)
    t0 = time.perf_counter()
    out = kvattn.flash_attn_with_kvcache(q, k_cache, v_cache, k=k, v=v, rotary_cos=cos, rotary_sin=sin,
                                         cache_seqlens=seqlens, causal=True)
    times.append(time.perf_counter() - t0)
    pos = seqlens.copy()  # the new token's position: q and k are rotated there
    seqlens += 1
    ref = reference(q, k_cache, v_cache, seqlens, pos)
    worst = max(worst, float(np.max(np.abs(out[:, 0].astype(np.float64) - ref))))

print(f"numpy_decode.py: {STEPS} steps of b={B}, hq={HQ}, hk={HK}, d={D} (bf16, rotary): "
      f"max |out - reference| = {worst:.2e}, median step {1e3 * np.median(times):.2f} ms")
# TESTING.md's bf16 tolerance (3e-2 of max |reference|, at least 1); NaN fails too.
assert worst < 3e-2, "output differs from the reference beyond bf16's tolerance"
