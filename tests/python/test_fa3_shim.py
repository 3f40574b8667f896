"""tools/fa3_shim: the reference rotary it gives FA3's kvcache tests agrees with the oracle's rotary
(CONTRACT.md step 2), so that a rotary failure in those tests is kvattn's, not the shim's. Needs torch."""
import importlib.util
import os

import numpy as np
import pytest

from inputs import randn, rotary_tables
from reference import _rotate

torch = pytest.importorskip("torch", reason="the shim's rotary is torch code")
# By file, not through sys.path: the shim's package name (flash_attn) must not shadow a real one elsewhere.
_SPEC = importlib.util.spec_from_file_location("kvattn_fa3_shim_rotary", os.path.join(
    os.path.dirname(__file__), os.pardir, os.pardir, "tools", "fa3_shim", "flash_attn", "layers", "rotary.py"))
_ROTARY = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(_ROTARY)
apply_rotary_emb = _ROTARY.apply_rotary_emb


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("offsets", ["int", "per_sequence"])
def test_shim_rotary_matches_the_oracle(interleaved, offsets):
    rng = np.random.default_rng(21)
    b, s, h, d, rotary_dim = 3, 4, 2, 16, 8
    x = randn(rng, (b, s, h, d), np.float32)
    cos, sin = rotary_tables(rng, 20, rotary_dim)
    starts = np.array([0, 5, 11]) if offsets == "per_sequence" else np.array([7, 7, 7])
    seqlen_offsets = torch.from_numpy(starts) if offsets == "per_sequence" else 7
    got = apply_rotary_emb(torch.from_numpy(x), torch.from_numpy(cos), torch.from_numpy(sin),
                           interleaved=interleaved, seqlen_offsets=seqlen_offsets).numpy()
    for i in range(b):
        positions = starts[i] + np.arange(s)
        want = _rotate(x[i].astype(np.float64), positions, cos.astype(np.float64), sin.astype(np.float64),
                       interleaved)
        np.testing.assert_allclose(got[i], want, rtol=0, atol=1e-5)
    assert not np.allclose(got, x)  # something was rotated
