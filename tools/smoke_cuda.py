"""A few small kvattn calls on CUDA, for compute-sanitizer (memcheck, racecheck): tools/gpu_check.sh runs it.

Covers paged caches with page size 1, scattered cache_batch_idx, left padding, append + rotary, split-KV
(with the combine it needs), the standalone combine and append_kv, and ADVERSARIAL device data: page ids
and batch indices out of range, lengths past the capacity. Those must be reported by kvattn.device_errors()
naming the argument, with nothing written out of bounds (that is what memcheck checks) and no crash.

Inputs are made with numpy on the host and copied to the GPU, so that almost every kernel the sanitizer
sees is kvattn's. Good calls are compared with the float64 oracle. Exit status 0 when every case passes.

Usage (repo root): PYTHONPATH=python KVATTN_LIBRARY=build-cuda/libkvattn.so python3 tools/smoke_cuda.py
"""
import os
import sys
import traceback

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "tests", "python"))
from inputs import DTYPES, nan_fill_invalid, randn, rotary_tables, scrambled_page_table, to_paged  # noqa: E402
from reference import reference_attention, reference_combine  # noqa: E402

import torch  # noqa: E402

import kvattn  # noqa: E402

# KVATTN_SMOKE_DEVICE=cpu runs the same cases on the CPU backend (a dry run of this script without a GPU).
DEVICE = os.environ.get("KVATTN_SMOKE_DEVICE", "cuda")
TOL_OUT = {"fp16": 4e-3, "bf16": 3e-2}
TOL_LSE = {"fp16": 1e-3, "bf16": 1e-2}
HQ, HK = 4, 2


def to_dev(x):
    if x is None or not isinstance(x, np.ndarray):
        return x
    x = np.ascontiguousarray(x)
    if x.dtype.name == "bfloat16":
        return torch.from_numpy(x.view(np.int16)).view(torch.bfloat16).to(DEVICE)
    return torch.from_numpy(x).to(DEVICE)


def synchronize():
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def to_f64(t):
    return t.detach().float().cpu().numpy().astype(np.float64)


def close(name, got, ref, tol):
    got, ref = to_f64(got) if isinstance(got, torch.Tensor) else got, np.asarray(ref, np.float64)
    assert got.shape == ref.shape, f"{name}: shape {got.shape} != {ref.shape}"
    assert not np.isnan(got).any(), f"{name}: NaN"
    fin = np.isfinite(ref)
    assert np.array_equal(got[~fin], ref[~fin]), f"{name}: empty rows differ"
    if fin.any():
        err = np.abs(got[fin] - ref[fin]).max()
        assert err <= tol * max(1.0, np.abs(ref[fin]).max()), f"{name}: max abs error {err:.3g}"


def build(seed, dtype="fp16", b=3, rows=5, d=64, cap=40, page_size=None, sq=1, new=0, rotary=False,
          leftpad=False, lens=None):
    """numpy kwargs of one call: contiguous (rows, cap, hk, d) or paged caches, NaN outside valid slots."""
    rng = np.random.default_rng(seed)
    dt = DTYPES[dtype]
    if page_size:
        cap = -(-cap // page_size) * page_size
    if lens is None:
        lens = rng.integers(0, cap - new + 1, b)
        lens[0] = cap - new
    lens = np.asarray(lens, np.int32)
    idx = rng.permutation(rows)[:b].astype(np.int32)
    lp = (rng.integers(0, lens + 1) if leftpad else np.zeros(b)).astype(np.int32)
    kw = dict(q=randn(rng, (b, sq, HQ, d), dt), cache_seqlens=lens, cache_batch_idx=idx)
    caches = [nan_fill_invalid(randn(rng, (rows, cap, HK, d), dt), lens, lp, rows=idx) for _ in range(2)]
    if page_size:
        table, num_pages = scrambled_page_table(rng, rows, cap // page_size, extra_pages=2)
        caches = [to_paged(c, table, num_pages, page_size) for c in caches]
        kw["page_table"] = table
    kw["k_cache"], kw["v_cache"] = caches
    if leftpad:
        kw["cache_leftpad"] = lp
    if new:
        kw["k"], kw["v"] = randn(rng, (b, new, HK, d), dt), randn(rng, (b, new, HK, d), dt)
    if rotary:
        kw["rotary_cos"], kw["rotary_sin"] = rotary_tables(rng, cap + sq + new, d // 2)
    return kw


def run_good(dtype, flags, **kw):
    t = {name: to_dev(x) for name, x in kw.items()}
    out, lse = kvattn.flash_attn_with_kvcache(**t, **flags, return_softmax_lse=True)
    kvattn.device_errors(DEVICE)
    ref = reference_attention(**kw, **{k: v for k, v in flags.items() if k not in ("num_splits", "pack_gqa")})
    close("out", out, ref["out"], TOL_OUT[dtype])
    close("lse", lse, ref["lse"], TOL_LSE[dtype])
    if "k" in kw:  # appended (with rotary: within one ulp, which the tolerance covers)
        for name in ("k_cache", "v_cache"):
            got, want = to_f64(t[name]), ref[name].astype(np.float64)
            assert np.array_equal(np.isnan(got), np.isnan(want)), f"{name}: NaN pattern differs"
            m = ~np.isnan(want)
            assert np.abs(got[m] - want[m]).max(initial=0) <= 1e-2 * max(1, np.abs(want[m]).max(initial=0)), name


def run_bad(argument, flags, **kw):
    """An adversarial call: the error must be reported (by the call or by device_errors), naming `argument`."""
    t = {name: to_dev(x) for name, x in kw.items()}
    try:
        kvattn.flash_attn_with_kvcache(**t, **flags)
        kvattn.device_errors(DEVICE)
    except kvattn.KvattnError as e:
        assert argument in str(e), f"the message does not name {argument}: {e}"
        kvattn.device_errors(DEVICE)  # the record was cleared: nothing more to report
        synchronize()  # and the context is alive
        return
    raise AssertionError(f"an out-of-range {argument} was not reported")


def cases():
    def bad_pages(value, **build_kw):
        kw = build(**build_kw)
        kw["page_table"] = kw["page_table"].copy()
        kw["page_table"][kw["cache_batch_idx"][0], 0] = value(kw["k_cache"].shape[0])
        return kw

    def bad_idx(value, **build_kw):
        kw = build(**build_kw)
        kw["cache_batch_idx"] = kw["cache_batch_idx"].copy()
        kw["cache_batch_idx"][1] = value
        return kw

    def too_long(**build_kw):
        kw = build(**build_kw)
        kw["cache_seqlens"] = kw["cache_seqlens"].copy()
        kw["cache_seqlens"][2] = kw["k_cache"].shape[1] * (kw["page_table"].shape[1] if "page_table" in kw else 1)
        return kw

    append_rotary = dict(causal=True, rotary_interleaved=True)
    yield "paged page 1, scattered idx, append + rotary", lambda: run_good(
        "fp16", append_rotary, **build(1, page_size=1, sq=2, new=2, rotary=True))
    yield "paged page 16, bf16, window, append", lambda: run_good(
        "bf16", dict(window_size=(7, 0)), **build(2, "bf16", page_size=16, sq=3, new=3))
    yield "contiguous, leftpad, scattered idx, 4 splits", lambda: run_good(
        "fp16", dict(num_splits=4), **build(3, cap=300, leftpad=True))
    yield "contiguous, leftpad, append + rotary (neox), auto splits", lambda: run_good(
        "fp16", dict(causal=True, rotary_interleaved=False), **build(4, cap=200, leftpad=True, new=1, rotary=True))
    yield "paged page 1, long, auto splits", lambda: run_good(
        "bf16", dict(), **build(5, "bf16", cap=257, page_size=1, lens=[257, 100, 0]))

    def combine():
        rng = np.random.default_rng(6)
        o = rng.standard_normal((3, 2, HQ, 64), dtype=np.float32)
        lse = rng.standard_normal((3, 2, HQ), dtype=np.float32)
        lse[:, 1, 0] = -np.inf  # an empty row
        out, got_lse = kvattn.flash_attn_combine(to_dev(o), to_dev(lse))
        ref_out, ref_lse = reference_combine(o, lse)
        close("combine out", out, ref_out, 1e-5)
        close("combine lse", got_lse, ref_lse, 1e-5)

    yield "combine", combine

    def append():
        rng = np.random.default_rng(7)
        kc = torch.zeros(6, 4, HK, 64, dtype=torch.float16, device=DEVICE)
        vc = torch.zeros_like(kc)
        key = randn(rng, (5, HK, 64), np.float16)
        slots = np.array([0, 23, -1, 5, 6], np.int64)
        kvattn.append_kv(to_dev(key), to_dev(key), kc, vc, to_dev(slots))
        kvattn.device_errors(DEVICE)
        flat = kc.reshape(24, HK, 64).cpu().numpy()
        for t, s in enumerate(slots):
            if s >= 0:
                assert np.array_equal(flat[s], key[t]), f"slot {s}"

    yield "append_kv, one skipped slot", append

    yield "ADVERSARIAL page id past the pages, with append", lambda: run_bad(
        "page_table", append_rotary, **bad_pages(lambda n: n + 1000, seed=8, page_size=1, sq=2, new=2, rotary=True))
    yield "ADVERSARIAL negative page id", lambda: run_bad(
        "page_table", dict(), **bad_pages(lambda n: -1, seed=9, page_size=16))
    yield "ADVERSARIAL huge page id, splits", lambda: run_bad(
        "page_table", dict(num_splits=3), **bad_pages(lambda n: 2**31 - 1, seed=10, page_size=4, cap=120))
    yield "ADVERSARIAL cache_batch_idx past the rows, paged, append", lambda: run_bad(
        "cache_batch_idx", dict(causal=True), **bad_idx(99, seed=11, page_size=16, new=1))
    yield "ADVERSARIAL negative cache_batch_idx, contiguous, append", lambda: run_bad(
        "cache_batch_idx", dict(), **bad_idx(-2, seed=12, new=2))
    yield "ADVERSARIAL cache_batch_idx past the rows, contiguous, splits", lambda: run_bad(
        "cache_batch_idx", dict(num_splits=4), **bad_idx(5, seed=13, cap=300))
    yield "ADVERSARIAL cache_seqlens + new past the capacity", lambda: run_bad(
        "cache_seqlens", dict(), **too_long(seed=14, page_size=8, new=1))
    yield "good call after the adversarial ones", lambda: run_good(
        "fp16", append_rotary, **build(15, page_size=1, sq=2, new=2, rotary=True))


def main():
    if DEVICE == "cuda" and not (torch.cuda.is_available() and kvattn.has_backend("cuda")):
        print("smoke_cuda: no GPU or no CUDA build of kvattn", flush=True)
        return 2
    failed = 0
    for name, fn in cases():
        try:
            fn()
            print(f"ok    {name}", flush=True)
        except Exception:  # noqa: BLE001 - report every case, then fail
            failed += 1
            print(f"FAIL  {name}\n{traceback.format_exc()}", flush=True)
    synchronize()
    print(f"smoke_cuda: {failed} failed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
