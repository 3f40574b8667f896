"""A benchmark case checked against the float64 oracle of the tests (tests/python/reference.py): one kvattn call
on a poisoned input set of the case (NaN in every cache slot outside the valid range), its output compared on
the first and the last sequence, the first and the last KV head group and the last 32 query rows.

The oracle reads what the call read: q in its dtype, an fp8 cache's stored e4m3 values with their descales
(the oracle dequantizes them), the cache after the call's own append (so an appended key is checked as stored,
its rounding included). Only the selected sequences' slots and heads are copied to the host.
"""
import importlib.util
import os
import time

import numpy as np

from . import layouts as L

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# TESTING.md: max abs error of out relative to max |reference| (at least 1), by q's dtype. TESTING.md has no fp8
# row: an fp8 cache is held to q's tolerance on its stored values, as tests/python/harness.py holds it.
TOL_OUT = {"fp32": 2e-5, "fp16": 4e-3, "bf16": 3e-2}
CHECK_ROWS = 32  # query rows checked a sequence (the last ones)


def load_oracle():
    path = os.path.join(REPO, "tests", "python", "reference.py")
    if not os.path.exists(path):  # installed (pip): the wheel carries a copy beside this file
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "reference.py")
    spec = importlib.util.spec_from_file_location("kvattn_reference_oracle", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.reference_attention


def host(x, be):
    """numpy in the storage dtype (bf16 and e4m3 through ml_dtypes) of a numpy array or a torch tensor."""
    if x is None or isinstance(x, np.ndarray):
        return x
    t = be.torch
    x = x.detach().contiguous()
    if x.dtype in (t.bfloat16, t.float8_e4m3fn):
        import ml_dtypes
        bits, dtype = ((t.int16, ml_dtypes.bfloat16) if x.dtype == t.bfloat16 else (t.uint8, ml_dtypes.float8_e4m3fn))
        return x.view(bits).cpu().numpy().view(dtype)
    return x.cpu().numpy()


def take(x, be, *index):
    """x[index[0]][:, index[1]][:, :, index[2]] ... (numpy int arrays, one per leading axis), gathered where x
    lives, then on the host."""
    if isinstance(x, np.ndarray):
        for axis, ix in enumerate(index):
            x = np.take(x, ix, axis=axis)
        return x
    t = be.torch
    fp8 = x.dtype == t.float8_e4m3fn
    y = x.view(t.uint8) if fp8 else x  # through the bytes: not every torch op takes e4m3
    for axis, ix in enumerate(index):
        y = y.index_select(axis, t.from_numpy(np.asarray(ix, np.int64)).to(x.device))
    return host(y.view(t.float8_e4m3fn) if fp8 else y, be)


def slots(x, be, plan, i, heads):
    """(end_i, len(heads), d): slots [0, end_i) of sequence i's row of the cache x, heads `heads`."""
    i0, i1 = L.slot_index(plan, i, start=0)
    flat = x.reshape((-1,) + tuple(x.shape[2:]))  # (rows or pages * slots, hk, d): the caches are contiguous
    return take(flat, be, i0 * x.shape[1] + i1, heads)


def check_case(case, ctx, seed):
    """(ok, lines): ok is None when the case is not checked (the reason in lines)."""
    plan = L.make_plan(case)
    if plan.varlen:
        return None, ["not checked: varlen q (the mixed batch)"]
    try:
        oracle = load_oracle()
    except Exception as exc:  # noqa: BLE001
        return None, [f"NOT CHECKED: the oracle tests/python/reference.py failed to import "
                      f"({exc.__class__.__name__}: {exc})"]
    be = ctx.backend(seed, case)
    kw = L.materialize(plan, be, 0, poison=True)
    if isinstance(kw["out"], np.ndarray):
        kw["out"][...] = np.nan
    else:
        kw["out"].fill_(float("nan"))
    ctx.kvattn.flash_attn_with_kvcache(**kw)
    be.sync()
    if ctx.device == "cuda":
        ctx.kvattn.device_errors()
    t0 = time.perf_counter()
    out_all = be.numpy(kw["out"])
    finite = bool(np.isfinite(out_all).all())  # every element written, no NaN slot read, in every sequence
    seqs = np.unique([0, plan.b - 1])
    g = case.hq // case.hk
    heads = np.unique([0, case.hk - 1])
    qheads = np.concatenate([np.arange(h * g, (h + 1) * g) for h in heads])
    ends = plan.end[seqs]
    caches = {}
    for name in ("k_cache", "v_cache"):
        x = kw[name]
        parts = [slots(x, be, plan, i, heads) for i in seqs]
        dense = np.full((len(seqs), int(ends.max()), len(heads), x.shape[-1]), np.nan, parts[0].dtype)
        for j, p in enumerate(parts):
            dense[j, :len(p)] = p
        caches[name] = dense  # contiguous rows: no page table, no batch index
    # The last query rows only (a prefill chunk's oracle over every row is minutes of float64 einsum): the
    # oracle aligns causal rows bottom-right, so these keep their positions; rotary's start moves with them.
    sq = kw["q"].shape[1]
    rows = np.arange(max(0, sq - CHECK_ROWS), sq)
    ref_kw = dict(q=take(kw["q"], be, seqs, rows, qheads), cache_seqlens=ends.astype(np.int32),
                  causal=case.causal, rotary_interleaved=L.ROTARY_INTERLEAVED, **caches)
    if case.qv:
        ref_kw["qv"] = take(kw["qv"], be, seqs, rows, qheads)
    if case.leftpad:
        ref_kw["cache_leftpad"] = plan.leftpad[seqs].astype(np.int32)
    if case.rotary:  # q rotated where the call rotated it: at the lengths before its append
        ref_kw.update(rotary_cos=host(kw["rotary_cos"], be), rotary_sin=host(kw["rotary_sin"], be),
                      rotary_seqlens=(plan.seqlens[seqs] + rows[0]).astype(np.int32))
    for name in ("k_descale", "v_descale"):
        if kw.get(name) is not None:
            ref_kw[name] = take(kw[name], be, seqs, heads)
    ref = oracle(**ref_kw)["out"]
    got = np.take(np.take(np.take(out_all, seqs, axis=0), rows, axis=1), qheads, axis=2).astype(np.float64)
    scale = max(1.0, float(np.abs(ref).max()))
    err = float(np.abs(got - ref).max()) / scale
    tol = TOL_OUT[be.dtype_name]
    ok = finite and err <= tol
    what = f"{be.dtype_name} q" + (f", {case.kv} e4m3 cache read as stored x descale" if case.kv else "")
    lines = [f"sequences {', '.join(map(str, seqs))} of {plan.b}, KV heads {', '.join(map(str, heads))} of "
             f"{case.hk}, query rows {rows[0]}-{rows[-1]} of {sq} against the float64 oracle ({what})",
             f"out: max abs err {err:.2e} of max(1, max |ref|) (tol {tol:.0e}); "
             f"{'no NaN in any sequence' if finite else 'NaN present'}: {'PASS' if ok else 'FAIL'} "
             f"(oracle {time.perf_counter() - t0:.1f} s)"]
    del kw
    return ok, lines
