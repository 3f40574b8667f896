"""deterministic=True: a sequence's output is bitwise independent of the batch it is computed in (the split
points depend only on the sequence and the static cache capacity, never on the batch size), and it still
matches the oracle."""
import numpy as np
import pytest

import harness as H
import kvattn
from inputs import DTYPES, randn
from reference import reference_attention

CAPACITY = 12000  # > 2 deterministic splits of 4096 keys, for the long sequences
LENGTHS = np.array([11000, 300, 7000, 4097], np.int32)


@H.on_devices
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("sq", [1, 3])
def test_deterministic_is_independent_of_the_batch(device, dtype, sq):
    rng = np.random.default_rng(1000 + sq)
    hq, hk, d = 8, 2, 64
    dt = DTYPES[dtype]
    k_cache = randn(rng, (len(LENGTHS), CAPACITY, hk, d), dt)
    v_cache = randn(rng, (len(LENGTHS), CAPACITY, hk, d), dt)
    q = randn(rng, (len(LENGTHS), sq, hq, d), dt)
    dev = lambda x: H.to_device(x, device)  # noqa: E731
    kc, vc = dev(k_cache), dev(v_cache)

    def run(rows):
        rows = np.asarray(rows, np.int32)
        out, lse = kvattn.flash_attn_with_kvcache(
            dev(np.ascontiguousarray(q[rows])), kc, vc, cache_seqlens=dev(LENGTHS[rows]),
            cache_batch_idx=dev(rows), causal=True, deterministic=True, return_softmax_lse=True)
        H.sync_device_errors(device)
        return H.to_numpy(out), H.to_numpy(lse)

    full_out, full_lse = run([0, 1, 2, 3])
    ref = reference_attention(q, k_cache, v_cache, cache_seqlens=LENGTHS, causal=True)
    H.assert_close("out", full_out, ref["out"], H.TOL_OUT[dtype])
    H.assert_close("lse", full_lse, ref["lse"], H.TOL_LSE[dtype])
    for rows in ([0], [2, 0], [3, 1, 0], [1, 1, 2]):
        out, lse = run(rows)
        for j, i in enumerate(rows):
            np.testing.assert_array_equal(H.f64(out[j]), H.f64(full_out[i]), err_msg=f"out of sequence {i} in {rows}")
            np.testing.assert_array_equal(lse[j], full_lse[i], err_msg=f"lse of sequence {i} in {rows}")
