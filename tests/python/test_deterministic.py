"""deterministic=True: a sequence's output is bitwise independent of the batch it is computed in (the split
points depend only on the sequence and the static cache capacity, never on the batch size), and it still
matches the oracle."""
import numpy as np
import pytest

import harness as H
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
    run = H.deterministic_rows(q, k_cache, v_cache, LENGTHS, device)
    full_out, full_lse = run([0, 1, 2, 3])
    ref = reference_attention(q, k_cache, v_cache, cache_seqlens=LENGTHS, causal=True)
    H.assert_close("out", full_out, ref["out"], H.TOL_OUT[dtype])
    H.assert_close("lse", full_lse, ref["lse"], H.TOL_LSE[dtype])
    for rows in ([0], [2, 0], [3, 1, 0], [1, 1, 2]):
        out, lse = run(rows)
        H.assert_rows_bitwise(out, lse, rows, full_out, full_lse, len(LENGTHS))
