"""kvattn.distributed over torch.distributed (gloo, CPU) in 2-4 processes: the cases of shard_cases.py
(random layouts, pools, page tables, appends, masks, sinks), each rank's answer against the float64 oracle
and the single-process kvattn answer, each rank's pool after the append against the oracle's cache, and
the gather to one rank (the others get None). Needs torch: `bash tools/deps.sh torch` installs it into a
venv, and tools/test.sh runs this suite there."""
import os
import re
import socket
import subprocess
import sys

import numpy as np
import pytest

import harness as H
import shard_cases as S

pytestmark = pytest.mark.skipif(not H._torch_ready(), reason="needs torch (bash tools/deps.sh torch; tools/test.sh "
                                                             "runs this suite in that venv)")
SEEDS = int(os.environ.get("KVATTN_DIST_CASES", "16"))
WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "dist_worker.py")


def launch(world, seeds, tmp_path):
    """Runs the ranks to completion; returns each (seed, rank)'s saved results."""
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), os.path.dirname(WORKER)) if p)
    init = tmp_path / "rendezvous"
    procs = [subprocess.Popen([sys.executable, WORKER, str(rank), str(world), str(init), str(tmp_path)]
                              + [str(s) for s in seeds], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
             for rank in range(world)]
    logs = []
    try:
        for p in procs:
            logs.append(p.communicate(timeout=600)[0].decode(errors="replace"))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for rank, (p, log) in enumerate(zip(procs, logs)):
        assert p.returncode == 0, f"rank {rank} of {world} exited with {p.returncode}:\n{log[-4000:]}"
    return {(s, r): dict(np.load(tmp_path / f"{s}-{r}.npz")) for s in seeds for r in range(world)}


@pytest.mark.parametrize("world", [2, 3, 4])
def test_distributed_gloo(world, tmp_path):
    seeds = [1000 * world + i for i in range(SEEDS)]
    results = launch(world, seeds, tmp_path)
    for seed in seeds:
        case = S.random_case(seed, world)
        ref = S.oracle(case)
        one_out, one_lse = S.single_process(case)
        dtype = np.dtype(case["logical_k"].dtype)
        dst = S.destination(seed, world)
        pools = []
        for rank in range(world):
            got = results[(seed, rank)]
            pools.append((got["k_pool"].astype(dtype), got["v_pool"].astype(dtype)))
            returned = bool(got["returned"])
            assert returned == (dst is None or dst == rank), f"seed{seed}: rank {rank} returned={returned}, dst={dst}"
            if not returned:
                continue
            out, lse = got["out"].astype(one_out.dtype), got["lse"]
            S.check_result(case, out, lse, ref)
            H.assert_close(f"out vs single process seed{seed} rank {rank}", out, one_out, H.TOL_OUT[case["dtype"]])
            H.assert_close(f"lse vs single process seed{seed} rank {rank}", lse, one_lse, H.TOL_LSE[case["dtype"]])
        S.check_pools(case, pools, ref)


def test_cp_scaling_bench_smoke():
    """bench/cp_scaling.py at world size 1 (what the GPU run does per GPU count): it runs and its check passes."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with socket.socket() as probe:  # a free loopback port for the script's TCP rendezvous
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), root) if p)
    p = subprocess.run([sys.executable, "-m", "bench.cp_scaling", "--quick"], env=env, cwd=root,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    # --quick's two token counts are the device's (256, 2,048 on the CPU backend; 4,096, 65,536 on a GPU, where
    # NCCL runs it): one table row each, every one checked.
    rows = [line for line in p.stdout.splitlines() if re.match(r"\| [\d,]+ \|", line)]
    assert len(rows) == 2 and all(row.endswith("| ok |") for row in rows), p.stdout[-3000:]
