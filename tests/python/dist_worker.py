"""One rank of test_distributed.py: `python dist_worker.py RANK WORLD INIT_FILE OUT_DIR SEED...`.

Joins a gloo group (file rendezvous, loopback only), builds each seed's case (shard_cases.py, the same in
every process), runs kvattn.distributed.flash_attn_with_kvcache on this rank's pool with torch CPU tensors,
and saves what it got (out, lse, its pool after the append) for the parent test to check."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import harness as H  # noqa: E402
import shard_cases as S  # noqa: E402
from kvattn import distributed as kd  # noqa: E402


def main(rank, world, init_file, out_dir, seeds):
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    for seed in seeds:
        case = S.random_case(seed, world)
        info = case["ranks"][rank]
        k_pool, v_pool = H.to_device(info["k_cache"], "torch-cpu"), H.to_device(info["v_cache"], "torch-cpu")
        args = {name: H.to_device(x, "torch-cpu") for name, x in case["args"].items()}
        dst = S.destination(seed, world)
        with H.poisoned_outputs():
            out, lse = kd.flash_attn_with_kvcache(k_cache=k_pool, v_cache=v_pool,
                                                  page_table=torch.from_numpy(info["page_table"]),
                                                  layout=case["layout"], dst=dst, **args)
        got = dict(k_pool=H.to_numpy(k_pool).astype(np.float32), v_pool=H.to_numpy(v_pool).astype(np.float32),
                   returned=np.array(out is not None))
        if out is not None:
            got.update(out=H.to_numpy(out).astype(np.float32), lse=H.to_numpy(lse))
        np.savez(os.path.join(out_dir, f"{seed}-{rank}.npz"), **got)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], [int(s) for s in sys.argv[5:]])
