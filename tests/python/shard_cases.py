"""Random context-parallel problems: one global paged KV cache spread over `world` ranks by a ShardLayout.

Shared by the in-process suite (test_sharded.py: every rank simulated in one process) and the gloo workers
(dist_worker.py). A case is built from its seed alone, so every process builds the same one.
"""
import numpy as np

import harness as H

from inputs import DTYPES, cu_from_lengths, randn, rotary_tables
from kvattn.shard_layout import ShardLayout
from reference import reference_attention

GARBAGE_PAGE = 987654  # unused page-table entries: reading one would be an out-of-range page error


def random_case(seed, world=None):
    """A dict describing one problem: layout, the global caches, the call's global arguments, each rank's pool."""
    r = np.random.default_rng([seed, 13])
    pick = lambda xs: xs[r.integers(len(xs))]  # noqa: E731
    world = world or int(pick([1, 2, 3, 4]))
    dtype = pick(["fp32", "bf16"])
    page_size = int(pick([1, 2, 3, 8]))
    pages_per_row = int(r.integers(1, 9))
    capacity = pages_per_row * page_size
    b = int(r.integers(1, 4))
    rows = b + int(r.integers(0, 3))
    hk = int(pick([1, 2]))
    hq = hk * int(pick([1, 2, 3]))
    d = int(pick([8, 16]))
    dv = int(pick([d, 8]))
    policy = pick(["contiguous", "round_robin", "random"])
    if policy == "contiguous":
        layout = ShardLayout.contiguous(rows, pages_per_row, world)
    elif policy == "round_robin":
        layout = ShardLayout.round_robin(rows, pages_per_row, world)
    else:
        layout = ShardLayout(r.integers(0, world, (rows, pages_per_row)), world)

    n_new = int(pick([0, 0, 1, 2, 5])) if capacity > 5 else 0
    varlen_new = n_new > 0 and r.random() < 0.4
    new_lens = r.integers(0, n_new + 1, b) if varlen_new else np.full(b, n_new)
    seqlens = np.array([r.integers(0, capacity - new_lens[i] + 1) for i in range(b)], np.int64)
    leftpad = np.array([r.integers(0, s + 1) for s in seqlens]) if r.random() < 0.3 else None
    batch_idx = r.permutation(rows)[:b] if (rows > b or r.random() < 0.5) else None

    sq = int(pick([1, 1, 2, 3, 5]))
    varlen_q = r.random() < 0.25
    q_lens = r.integers(0, sq + 1, b) if varlen_q else np.full(b, sq)
    seqused = np.array([r.integers(0, n + 1) for n in q_lens], np.int32) if r.random() < 0.2 else None
    causal = bool(r.random() < 0.5)
    window = (int(pick([-1, 0, 2, 7])), int(pick([-1, 0, 1, 4]))) if r.random() < 0.35 else (-1, -1)
    chunk = int(pick([3, 8])) if r.random() < 0.2 else 0
    rotary = r.random() < 0.4
    sinks = r.random() < 0.4
    softcap = float(pick([0.0, 0.0, 5.0]))
    qv = r.random() < 0.15
    kv_fp8 = dtype == "bf16" and r.random() < 0.25  # e4m3 caches: appends quantize with the descales

    dt = DTYPES[dtype]
    cache_dt = DTYPES["fp8"] if kv_fp8 else dt
    logical_k = randn(r, (rows, capacity, hk, d), cache_dt)
    logical_v = randn(r, (rows, capacity, hk, dv), cache_dt)
    for x in (logical_k, logical_v):  # slots outside [leftpad, seqlens) are NaN: no output may change
        row_of = np.arange(b) if batch_idx is None else batch_idx
        valid = np.zeros((rows, capacity), bool)
        for i in range(b):
            valid[row_of[i], (0 if leftpad is None else leftpad[i]): seqlens[i]] = True
        x[~valid] = np.nan

    args = dict(cache_seqlens=seqlens.astype(np.int32), causal=causal, window_size=window, attention_chunk=chunk,
                softcap=softcap, return_softmax_lse=True)
    if varlen_q:
        args["q"] = randn(r, (int(q_lens.sum()), hq, d), dt)
        args["cu_seqlens_q"] = cu_from_lengths(q_lens)
        args["max_seqlen_q"] = max(1, int(q_lens.max(initial=0)))
    else:
        args["q"] = randn(r, (b, sq, hq, d), dt)
    if seqused is not None:
        args["seqused_q"] = seqused
    if leftpad is not None:
        args["cache_leftpad"] = leftpad.astype(np.int32)
    if batch_idx is not None:
        args["cache_batch_idx"] = batch_idx.astype(np.int32)
    if n_new:
        if varlen_new:
            args["k"] = randn(r, (int(new_lens.sum()), hk, d), dt)
            args["v"] = randn(r, (int(new_lens.sum()), hk, dv), dt)
            args["cu_seqlens_k_new"] = cu_from_lengths(new_lens)
        else:
            args["k"] = randn(r, (b, n_new, hk, d), dt)
            args["v"] = randn(r, (b, n_new, hk, dv), dt)
    if rotary:
        rd = int(pick([d // 2, d]))
        args["rotary_cos"], args["rotary_sin"] = rotary_tables(r, capacity + 8, rd, dt)
        args["rotary_interleaved"] = bool(r.random() < 0.5)
    if sinks:
        args["sinks"] = randn(r, (hq,), np.float32, 2.0)
    # ALiBi across shards needs every visible key at or before its query
    if r.random() < 0.25 and (causal or window[1] == 0 or int(q_lens.max(initial=0)) <= 1):
        shape = (hq,) if r.random() < 0.5 else (b, hq)
        args["alibi_slopes"] = r.uniform(0.01, 0.6, shape).astype(np.float32)
    if qv:
        args["qv"] = randn(r, args["q"].shape[:-1] + (dv,), dt)
    if kv_fp8:
        args["k_descale"] = r.uniform(0.5, 2.0, (b, hk)).astype(np.float32)
        args["v_descale"] = r.uniform(0.5, 2.0, (b, hk)).astype(np.float32)

    ranks = [_rank_pool(r, layout, rank, logical_k, logical_v, page_size) for rank in range(world)]
    return dict(seed=seed, world=world, dtype=dtype, kv_fp8=kv_fp8, layout=layout, page_size=page_size,
                logical_k=logical_k, logical_v=logical_v, args=args, ranks=ranks)


def destination(seed, world):
    """Where the gloo test gathers a case's partials: odd seeds to one rank (the query's owner), even seeds
    to every rank (all-gather)."""
    return None if seed % 2 == 0 else seed % world


def _rank_pool(r, layout, rank, logical_k, logical_v, page_size):
    """A rank's page pool (scrambled physical pages, NaN where unused) and its page table (garbage past its pages)."""
    local = layout.local_pages(rank)  # (rows, width) logical page ids, -1 past each row's last
    owned = local >= 0
    n_owned = int(owned.sum())
    num_pages = n_owned + int(r.integers(0, 3))
    physical = r.permutation(num_pages)[:n_owned]
    table = np.full((layout.rows, local.shape[1] + int(r.integers(0, 2))), GARBAGE_PAGE, np.int32)
    table[:, : local.shape[1]][owned] = physical
    k_pool = np.full((num_pages, page_size) + logical_k.shape[2:], np.nan, logical_k.dtype)
    v_pool = np.full((num_pages, page_size) + logical_v.shape[2:], np.nan, logical_v.dtype)
    for (row, n), page in zip(np.argwhere(owned), physical):
        span = slice(local[row, n] * page_size, (local[row, n] + 1) * page_size)
        k_pool[page], v_pool[page] = logical_k[row, span], logical_v[row, span]
    return dict(k_cache=k_pool, v_cache=v_pool, page_table=table, local=local)


def gather_pool(case, rank, k_pool, v_pool):
    """A rank's pools read back as logical (rows, capacity, hk, .) caches, NaN where the rank owns nothing."""
    info = case["ranks"][rank]
    ps = case["page_size"]
    k = np.full_like(case["logical_k"], np.nan)
    v = np.full_like(case["logical_v"], np.nan)
    for row, n in np.argwhere(info["local"] >= 0):
        span = slice(info["local"][row, n] * ps, (info["local"][row, n] + 1) * ps)
        k[row, span] = k_pool[info["page_table"][row, n]]
        v[row, span] = v_pool[info["page_table"][row, n]]
    return k, v


def owned_mask(case, rank):
    """(rows, capacity) bool: the logical slots `rank` stores."""
    layout, ps = case["layout"], case["page_size"]
    return np.repeat(layout.owner == rank, ps, axis=1)


def oracle(case):
    a = dict(case["args"])
    a.pop("return_softmax_lse")
    return reference_attention(k_cache=case["logical_k"], v_cache=case["logical_v"], **a)


def single_process(case):
    """kvattn over the whole cache in one process: the logical cache as pages of an identity table."""
    layout, ps = case["layout"], case["page_size"]
    k = case["logical_k"].reshape((-1, ps) + case["logical_k"].shape[2:]).copy()
    v = case["logical_v"].reshape((-1, ps) + case["logical_v"].shape[2:]).copy()
    table = np.arange(layout.rows * layout.pages_per_row, dtype=np.int32).reshape(layout.rows, -1)
    return H.kvattn.flash_attn_with_kvcache(k_cache=k, v_cache=v, page_table=table, **case["args"])


def check_result(case, out, lse, ref=None):
    """The merged answer against the oracle under TESTING.md's tolerances (empty rows exact)."""
    ref = ref or oracle(case)
    name = f"seed{case['seed']} world{case['world']}"
    H.assert_close(f"out {name}", out, ref["out"], H.TOL_OUT[case["dtype"]])
    H.assert_close(f"lse {name}", lse, ref["lse"], H.TOL_LSE[case["dtype"]])
    H.assert_empty_rows_exact(out, lse, ref["out"], ref["lse"])


def check_pools(case, pools, ref=None):
    """Each rank's (k_pool, v_pool) after the call: the oracle's cache on the slots it owns, unchanged (NaN)
    elsewhere."""
    ref = ref or oracle(case)
    name = f"seed{case['seed']} world{case['world']}"
    # rotary re-rounds an appended key; an fp8 cache rounds x / descale (exact on the CPU backend, which
    # rounds the float64 quotient once, as the oracle; one fp8 ulp where a backend divides in fp32 first)
    rounded = "rotary_cos" in case["args"] or case["kv_fp8"]
    for rank, (k_pool, v_pool) in enumerate(pools):
        k, v = gather_pool(case, rank, k_pool, v_pool)
        mine = owned_mask(case, rank)
        for what, got, want in (("k", k, ref["k_cache"]), ("v", v, ref["v_cache"])):
            want = np.where(mine[..., None, None], want, np.nan).astype(got.dtype)
            H.assert_cache_equal(f"rank {rank} {what}_cache {name}", got, want,
                                 rounded and (what == "k" or case["kv_fp8"]), case["dtype"])
