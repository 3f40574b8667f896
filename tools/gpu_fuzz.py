"""Adversarial device-side cases for compute-sanitizer memcheck (issue 14): tools/gpu_check.sh runs it.

On CUDA, index values live in device memory: the kernels check page ids, cache_batch_idx, cache_seqlens,
cache_leftpad, rotary positions and append bounds, write nothing out of bounds for an offending sequence
(its output is NaN) and record the first error for kvattn.device_errors(). Each case here is a random small
call (contiguous or paged cache, page sizes 1..16, append, rotary, splits) with one corrupted device value,
or none (then it is compared with the float64 oracle). Checks: a corrupted call is reported naming the
argument (by the call or by device_errors), no other sequence's output is NaN, a valid call matches the
oracle; memcheck (run by gpu_check.sh) sees every out-of-bounds access. Seeded: case k of --seed S replays.

Usage: PYTHONPATH=python KVATTN_LIBRARY=build-cuda/libkvattn.so \
    compute-sanitizer --tool memcheck --error-exitcode 86 python3 tools/gpu_fuzz.py --cases 10000 --seconds 110
"""
import argparse
import os
import sys
import time
import traceback

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import smoke_cuda  # noqa: E402  (build(), run_good(), to_dev(): the helpers of the smoke list)
from smoke_cuda import build, run_good, to_dev  # noqa: E402

import kvattn  # noqa: E402

BIG = [2**31 - 1, -2**31, -1, -2]
# d 64: the portable kernels; d 128 also the sm_90a decode kernel (2-4 packed rows, num_splits 0), whose
# device-side error paths no other case reached (session 33's audit: an offending sequence's Q was rotated
# with its unchecked position). KVATTN_GPU_FUZZ_HEAD_DIMS for a developer build of one head dim.
HEAD_DIMS = [int(x) for x in os.environ.get("KVATTN_GPU_FUZZ_HEAD_DIMS", "64,128").split(",")]


def corrupt(rng, kw, kind):
    """Corrupts one device value of sequence i of `kw` (numpy arrays); returns (the argument the error must
    name, i), or (None, None) when nothing was corrupted."""
    b = len(kw["cache_seqlens"])
    i = int(rng.integers(0, b))
    paged = "page_table" in kw
    capacity = kw["k_cache"].shape[1] * (kw["page_table"].shape[1] if paged else 1)
    new = kw["k"].shape[1] if "k" in kw else 0
    if kind == "page_table":
        if not paged:
            return None, None
        t = kw["page_table"] = kw["page_table"].copy()
        row = kw["cache_batch_idx"][i]
        used = max(1, -(-(int(kw["cache_seqlens"][i]) + new) // kw["k_cache"].shape[1]))
        n = kw["k_cache"].shape[0]
        first = int(kw["cache_leftpad"][i]) // kw["k_cache"].shape[1] if "cache_leftpad" in kw else 0
        lp = int(kw["cache_leftpad"][i]) if "cache_leftpad" in kw else 0
        if first >= used or int(kw["cache_seqlens"][i]) + new - lp <= 0:
            return None, None  # no key of the sequence is visible (left padding covers it): nothing is read
        t[row, int(rng.integers(first, used))] = rng.choice([n, n + int(rng.integers(0, 1000))] + BIG)
        return "page_table", i
    if kind == "cache_batch_idx":
        x = kw["cache_batch_idx"] = kw["cache_batch_idx"].copy()
        rows = kw["page_table"].shape[0] if paged else kw["k_cache"].shape[0]
        x[i] = rng.choice([rows, rows + int(rng.integers(0, 50))] + BIG)
        return "cache_batch_idx", i
    if kind == "cache_seqlens":
        x = kw["cache_seqlens"] = kw["cache_seqlens"].copy()
        x[i] = rng.choice([capacity - new + 1, capacity + int(rng.integers(1, 100))] + BIG)
        return "cache_seqlens", i
    if kind == "cache_leftpad":
        lp = kw.get("cache_leftpad")
        lp = np.zeros(b, np.int32) if lp is None else lp.copy()
        lp[i] = rng.choice([int(kw["cache_seqlens"][i]) + 1, -1, 2**31 - 1])
        kw["cache_leftpad"] = lp
        return "cache_leftpad", i
    if kind == "rotary":
        if "rotary_cos" not in kw or int(kw["cache_seqlens"].max()) < 1:
            return None, None
        # seqlen_ro 1: the sequences with a cache length >= 1 rotate q at a position beyond it.
        kw["rotary_cos"] = kw["rotary_cos"][:1].copy()
        kw["rotary_sin"] = kw["rotary_sin"][:1].copy()
        return "rotary", None
    return None, None


def one_case(seed):
    rng = np.random.default_rng(seed)
    page_size = int(rng.choice([0, 1, 2, 3, 8, 16]))
    new = int(rng.choice([0, 0, 1, 2]))
    rotary = bool(rng.random() < 0.3)
    d = int(rng.choice(HEAD_DIMS))
    kw = build(seed, str(rng.choice(["fp16", "bf16"])), b=3, rows=int(rng.integers(3, 6)), d=d,
               cap=int(rng.integers(max(new, 1), 48)), page_size=page_size or None, sq=int(rng.integers(1, 3)),
               new=new, rotary=rotary, leftpad=bool(rng.random() < 0.3))
    flags = dict(num_splits=int(rng.integers(0, 5)), causal=bool(rng.random() < 0.5))
    if rotary:
        flags["rotary_interleaved"] = bool(rng.random() < 0.5)
    kind = str(rng.choice(["none", "page_table", "cache_batch_idx", "cache_seqlens", "cache_leftpad", "rotary"]))
    argument, bad = (None, None) if kind == "none" else corrupt(rng, kw, kind)
    if argument is None:
        run_good({"float16": "fp16", "bfloat16": "bf16"}[str(kw["q"].dtype.name)], flags, **kw)
        return "valid"
    t = {name: to_dev(x) for name, x in kw.items()}
    out = None
    try:
        out = kvattn.flash_attn_with_kvcache(**t, **flags)
        kvattn.device_errors(smoke_cuda.DEVICE)
    except kvattn.KvattnError as e:
        assert argument in str(e), f"the message does not name {argument}: {e}"
        kvattn.device_errors(smoke_cuda.DEVICE)  # cleared: nothing more to report
        if out is not None and bad is not None:  # reported by the kernels: the other sequences ran
            others = [j for j in range(out.shape[0]) if j != bad]
            assert not out[others].isnan().any().item(), "a sequence other than the offending one is NaN"
        return kind
    raise AssertionError(f"a corrupted {argument} was not reported")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cases", type=int, default=10000)
    ap.add_argument("--seconds", type=float, default=0, help="stop after this long (0: no limit)")
    args = ap.parse_args()
    if smoke_cuda.DEVICE == "cuda" and not kvattn.has_backend("cuda"):
        print("gpu_fuzz: no GPU or no CUDA build of kvattn", flush=True)
        return 2
    start, counts, failed, k = time.time(), {}, 0, 0
    for k in range(args.cases):
        if args.seconds and time.time() - start > args.seconds:
            break
        seed = args.seed * 1_000_003 + k
        try:
            kind = one_case(seed)
            counts[kind] = counts.get(kind, 0) + 1
        except Exception:  # noqa: BLE001 - report, then go on: memcheck sees the rest
            failed += 1
            print(f"FAIL case {k} (seed {seed})\n{traceback.format_exc()}", flush=True)
            if failed >= 5:
                break
    else:
        k = args.cases
    smoke_cuda.synchronize()
    print(f"gpu_fuzz: {k} cases in {time.time() - start:.0f} s, {counts}, {failed} failed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
