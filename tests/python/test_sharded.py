"""Context-parallel pieces (kvattn.shard_layout, kvattn.sharded) with every rank simulated in one process:
random layouts (contiguous, round-robin, random owners), scrambled page pools and tables, appends, masks,
rotary, sinks; the merged answer against the float64 oracle and the single-process kvattn answer, and
each rank's pool after the append against the oracle's cache. numpy on the CPU backend (no torch needed);
test_distributed.py runs the same cases over torch.distributed (gloo) in several processes."""
import os

import numpy as np
import pytest

import harness as H
import shard_cases as S
from kvattn import sharded
from kvattn.errors import KvattnError
from kvattn.shard_layout import ShardLayout

kvattn = H.kvattn
CASES = int(os.environ.get("KVATTN_SHARD_CASES", "300"))


def shard_args(case):
    a = dict(case["args"])
    a.pop("return_softmax_lse")
    return a, a.pop("sinks", None)


def run_ranks(case):
    """Each rank's attend_shard on copies of its pool, then merge_partials: (out, lse, [(k_pool, v_pool)])."""
    args, sinks = shard_args(case)
    parts, pools = [], []
    for rank, info in enumerate(case["ranks"]):
        k_pool, v_pool = info["k_cache"].copy(), info["v_cache"].copy()
        with H.poisoned_outputs():
            parts.append(sharded.attend_shard(case["layout"], rank, k_cache=k_pool, v_cache=v_pool,
                                              page_table=info["page_table"], **args))
        pools.append((k_pool, v_pool))
    with H.poisoned_outputs():
        out, lse = sharded.merge_partials(np.stack([p.out for p in parts]), np.stack([p.lse for p in parts]),
                                          parts[0], sinks=sinks)
    return out, lse, pools


@pytest.mark.parametrize("seed", range(CASES), ids=lambda s: f"seed{s}")
def test_sharded_equals_oracle_and_single_process(seed):
    case = S.random_case(seed)
    out, lse, pools = run_ranks(case)
    S.check_result(case, out, lse)
    S.check_pools(case, pools)
    one_out, one_lse = S.single_process(case)
    tol = H.TOL_OUT[case["dtype"]]
    H.assert_close(f"out vs single process seed{seed}", out, one_out, tol)
    H.assert_close(f"lse vs single process seed{seed}", lse, one_lse, H.TOL_LSE[case["dtype"]])


@pytest.mark.parametrize("policy", ["contiguous", "round_robin"])
def test_every_rank_owns_a_disjoint_part(policy):
    """The layouts cover every page once; round-robin balances every length, contiguous fills rank by rank."""
    make = getattr(ShardLayout, policy)
    layout = make(3, 10, 4)
    owners = layout.owner
    assert owners.shape == (3, 10)
    counts = [int((owners[0] == r).sum()) for r in range(4)]
    assert sum(counts) == 10
    if policy == "round_robin":
        assert counts == [3, 3, 2, 2]
        assert owners[0].tolist() == [0, 1, 2, 3, 0, 1, 2, 3, 0, 1]
    else:
        assert counts == [3, 3, 3, 1]
        assert owners[0].tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3]
    for r in range(4):
        local = layout.local_pages(r)
        assert layout.local_width(r) == counts[r]
        assert np.array_equal(local[0, : counts[r]], np.flatnonzero(owners[0] == r))
        # local_slots counts this rank's slots of [0, s): monotone, +1 exactly on owned slots
        slots = np.arange(10 * 4 + 1)
        n = layout.local_slots(r, 0, slots, 4)
        steps = np.diff(n)
        assert n[0] == 0 and np.array_equal(steps, np.repeat(owners[0] == r, 4).astype(int))


def test_sinks_count_once():
    """With sinks, the merged lse is logaddexp(lse without sinks, sink) whatever the world size."""
    for world in (1, 2, 4):
        case = S.random_case(5, world)
        case["args"]["sinks"] = np.full(case["args"]["q"].shape[-2], 1.5, np.float32)
        out, lse, pools = run_ranks(case)
        S.check_result(case, out, lse)
        S.check_pools(case, pools)


def _small_case():
    case = S.random_case(1, 2)
    return case, shard_args(case)[0]


@pytest.mark.parametrize("bad,message", [
    (dict(alibi_slopes=np.ones(4, np.float32), q=np.ones((1, 2, 4, 8), np.float32)), "alibi_slopes: across"),
    (dict(page_table=None), "page_table: required"),
    (dict(cache_batch_idx=np.array([99], np.int32)), "cache_batch_idx"),
    (dict(cache_seqlens=np.array([10**6], np.int32)), "sharded capacity"),
    (dict(cache_leftpad=np.array([10**6], np.int32)), "cache_leftpad"),
    (dict(seqused_q=np.array([99], np.int32)), "seqused_q"),
])
def test_errors_name_the_argument(bad, message):
    layout = ShardLayout.round_robin(1, 4, 2)
    q = np.ones((1, 1, 4, 8), np.float32)
    pool = np.zeros((2, 2, 2, 8), np.float32)
    args = dict(q=q, k_cache=pool, v_cache=pool, page_table=np.array([[0, 1]], np.int32),
                cache_seqlens=np.array([3], np.int32))
    args.update(bad)
    with pytest.raises(KvattnError, match=message):
        sharded.attend_shard(layout, 0, **args)


def test_layout_errors():
    with pytest.raises(KvattnError, match=r"owner\[0, 1\]: expected a rank in \[0, 2\), got 2"):
        ShardLayout(np.array([[0, 2]]), 2)
    with pytest.raises(KvattnError, match="world_size"):
        ShardLayout(np.array([[0]]), 0)
    with pytest.raises(KvattnError, match="rank"):
        ShardLayout.round_robin(1, 2, 2).local_pages(2)
    with pytest.raises(KvattnError, match="page_table: rank 0's table has 1 columns"):
        layout = ShardLayout.round_robin(1, 4, 2)
        pool = np.zeros((2, 2, 1, 8), np.float32)
        sharded.attend_shard(layout, 0, np.ones((1, 1, 1, 8), np.float32), pool, pool,
                             page_table=np.array([[0]], np.int32), cache_seqlens=8)


def test_distributed_turns_nvlink_multicast_off():
    """Importing kvattn.distributed sets NCCL_NVLS_ENABLE=0 (NVLS can take a host's GPUs out of service); it
    needs no torch to import."""
    import importlib
    import sys

    saved = os.environ.pop("NCCL_NVLS_ENABLE", None)
    try:
        sys.modules.pop("kvattn.distributed", None)
        importlib.import_module("kvattn.distributed")
        assert os.environ.get("NCCL_NVLS_ENABLE") == "0"
    finally:
        if saved is not None:
            os.environ["NCCL_NVLS_ENABLE"] = saved
