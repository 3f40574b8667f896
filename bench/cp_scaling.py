"""Context-parallel decode scaling (issue 13): batch 1, a 1M-4M-token cache spread over the GPUs.

    torchrun --nproc-per-node 4 -m bench.cp_scaling                   # 1M, 2M, 4M tokens on 4 GPUs
    torchrun --nproc-per-node 2 -m bench.cp_scaling --tokens 1M --out bench/results/cp
    python3 -m bench.cp_scaling --quick                               # world size 1: a smoke test

Each rank holds its round-robin shard (32 query / 8 KV heads, d 128, bf16, page 64 unless told). Per
cache size it measures, every figure the slowest rank's median of CUDA-graph replays (CUDA events):
  shard    kvattn over one rank's shard with the LSE (the single-GPU work of one shard)
  combine  kvattn's combine of world_size partials
  cp       one context-parallel step as an engine runs it (its metadata built once, ahead): the shard's
           partial, one all_gather_into_tensor of (out, lse), the combine; a graph with the NCCL collective
  eager    kvattn.distributed.flash_attn_with_kvcache as it is (host metadata per call), CUDA events
  full     (rank 0) the whole cache on one GPU, unsharded, when it fits
and prints cp / (shard + combine) (the target is <= 1.1) and full / cp (the scaling). The answer of the
cp step is checked against the unsharded one (bf16 tolerance). Without a GPU it runs on the CPU backend
with gloo and small shapes (wall clock), which only checks that the script works.
"""
import argparse
import json
import os
import sys
import time

import numpy as np


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", default="1M,2M,4M", help="cached tokens per case, comma-separated (K/M suffixes)")
    ap.add_argument("--heads", default="32/8", help="query/KV heads")
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--page-size", type=int, default=64)
    ap.add_argument("--policy", default="round_robin", choices=["round_robin", "contiguous"])
    ap.add_argument("--replays", type=int, default=30, help="graph replays per measurement (the same on every rank)")
    ap.add_argument("--quick", action="store_true", help="small caches (a smoke test)")
    ap.add_argument("--out", help="directory for cp_scaling.jsonl (rank 0)")
    return ap.parse_args(argv)


def tokens_of(text):
    scale = {"K": 1 << 10, "M": 1 << 20}
    return [int(float(t[:-1]) * scale[t[-1].upper()]) if t[-1].upper() in scale else int(t)
            for t in text.split(",")]


def init(torch, dist):
    """The process group: torchrun's environment, or a world of one (a plain `python -m`)."""
    if "RANK" not in os.environ:
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=os.environ.get("MASTER_PORT", "29517"))
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("nccl" if cuda else "gloo")
    return torch.device("cuda") if cuda else torch.device("cpu")


class Timer:
    """A fixed number of replays on every rank (a collective inside must run equally often everywhere)."""

    def __init__(self, torch, dist, device, replays):
        self.torch, self.dist, self.device, self.replays = torch, dist, device, replays
        self.notes = []

    def __call__(self, fn, graph=True):
        torch, dist = self.torch, self.dist
        dist.barrier()
        if self.device.type != "cuda":
            fn()
            samples = []
            for _ in range(self.replays):
                t0 = time.perf_counter()
                fn()
                samples.append((time.perf_counter() - t0) * 1e6)
            return self._slowest(float(np.median(samples)))
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        run = fn
        if graph:
            try:
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    fn()
                run = g.replay
            except Exception as exc:  # noqa: BLE001 - said, then timed eagerly (every rank fails alike)
                torch.cuda.synchronize()
                self.notes.append(f"graph capture failed ({str(exc).splitlines()[0][:100]}): eager calls timed")
        torch.cuda.synchronize()
        dist.barrier()
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(self.replays)]
        for start, end in events:
            start.record()
            run()
            end.record()
        torch.cuda.synchronize()
        return self._slowest(float(np.median([s.elapsed_time(e) * 1e3 for s, e in events])))

    def _slowest(self, us):
        t = self.torch.tensor([us], dtype=self.torch.float64, device=self.device)
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX)
        return float(t.item())


def run_case(torch, dist, kvattn, kd, args, device, total_tokens, timer):
    rank, world = dist.get_rank(), dist.get_world_size()
    hq, hk = (int(x) for x in args.heads.split("/"))
    d, ps = args.head_dim, args.page_size
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    pages = -(-total_tokens // ps)
    layout = getattr(kd.ShardLayout, args.policy)(1, pages, world)
    width = max(layout.local_width(rank), 1)
    gen = torch.Generator(device=device).manual_seed(1234)
    q = torch.randn((1, 1, hq, d), generator=gen, device=device, dtype=dtype)  # first: the same on every rank

    # This rank's pool: its pages of one sequence, in logical order (page n of the pool = local page n).
    k_pool = torch.randn((width, ps, hk, d), generator=gen, device=device, dtype=dtype)
    v_pool = torch.randn((width, ps, hk, d), generator=gen, device=device, dtype=dtype)
    table = torch.arange(width, dtype=torch.int32, device=device).reshape(1, width)
    local_len = int(layout.local_slots(rank, 0, total_tokens, ps))
    local_seqlens = torch.tensor([local_len], dtype=torch.int32, device=device)

    # The engine's step, metadata ready: partial, one collective, combine.
    packed = torch.empty((1, hq, d + 1), dtype=torch.float32, device=device)
    gathered = torch.empty((world, 1, hq, d + 1), dtype=torch.float32, device=device)
    result = {}

    def shard():
        return kvattn.flash_attn_with_kvcache(q, k_pool, v_pool, cache_seqlens=local_seqlens, page_table=table,
                                              return_softmax_lse=True)

    def combine():
        result["out"], _ = kvattn.flash_attn_combine(gathered[..., :d], gathered[..., d], out_dtype=dtype)

    def cp_step():
        out, lse = shard()
        packed[..., :d].copy_(out[0, 0])
        packed[..., d].copy_(lse[0, :, 0])
        if device.type == "cuda":
            dist.all_gather_into_tensor(gathered.view(world, -1), packed.view(-1))
        else:
            dist.all_gather(list(gathered.unbind(0)), packed)
        combine()

    def eager():
        return kd.flash_attn_with_kvcache(q, k_pool, v_pool, cache_seqlens=total_tokens, page_table=table,
                                          layout=layout)

    rec = dict(tokens=total_tokens, world=world, heads=args.heads, head_dim=d, page_size=ps, policy=args.policy,
               shard_tokens=local_len, dtype=str(dtype).replace("torch.", ""))
    rec["shard_us"] = timer(shard)
    rec["combine_us"] = timer(combine)
    rec["cp_us"] = timer(cp_step)
    rec["eager_us"] = timer(eager, graph=False)
    cp_out = result["out"].float().clone()
    if timer.notes:
        rec["notes"] = sorted(set(timer.notes))
        timer.notes.clear()

    # The unsharded answer on rank 0: every rank's pages gathered there, put back in logical order.
    full_kv = [_gather_pages(torch, dist, layout, pool, pages) for pool in (k_pool, v_pool)]
    full_table = torch.arange(pages, dtype=torch.int32, device=device).reshape(1, pages)
    if rank == 0:
        ref = kvattn.flash_attn_with_kvcache(q, full_kv[0], full_kv[1], cache_seqlens=total_tokens,
                                             page_table=full_table)
        err = float((cp_out - ref.float()).abs().max() / max(1.0, float(ref.float().abs().max())))
        rec["max_rel_err_vs_unsharded"] = err
        rec["check"] = "ok" if err <= 3e-2 else "FAILED"

        def full():
            kvattn.flash_attn_with_kvcache(q, full_kv[0], full_kv[1], cache_seqlens=total_tokens,
                                           page_table=full_table)
        rec["full_us"] = _time_local(torch, device, full, args.replays)
    del full_kv
    rec["cp_over_shard_plus_combine"] = rec["cp_us"] / (rec["shard_us"] + rec["combine_us"])
    if rank == 0:
        rec["full_over_cp"] = rec["full_us"] / rec["cp_us"]
        kv_bytes = 2 * total_tokens * hk * d * (2 if dtype == torch.bfloat16 else 4)
        rec["cp_TBps"] = kv_bytes / (rec["cp_us"] * 1e-6) / 1e12
    return rec


def _gather_pages(torch, dist, layout, pool, pages):
    """The whole cache (pages, page_size, hk, d) in logical page order on rank 0 (None elsewhere)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    if world == 1:
        return pool[:pages]
    most = max(max(layout.local_width(r), 1) for r in range(world))
    padded = torch.zeros((most,) + tuple(pool.shape[1:]), dtype=pool.dtype, device=pool.device)
    padded[: pool.shape[0]] = pool
    bufs = [torch.empty_like(padded) for _ in range(world)] if rank == 0 else None
    dist.gather(padded, bufs, dst=0)
    if rank != 0:
        return None
    owner = layout.owner[0]
    local = [int(layout.owned_before(int(owner[j]))[0, j]) for j in range(pages)]
    return torch.stack([bufs[int(owner[j])][local[j]] for j in range(pages)])


def _time_local(torch, device, fn, replays):
    """One rank alone (no collective inside): graph replays with CUDA events, or wall clock."""
    fn()
    if device.type != "cuda":
        samples = []
        for _ in range(replays):
            t0 = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - t0) * 1e6)
        return float(np.median(samples))
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(replays)]
    for start, end in events:
        start.record()
        g.replay()
        end.record()
    torch.cuda.synchronize()
    return float(np.median([s.elapsed_time(e) * 1e3 for s, e in events]))


def main(argv=None):
    args = parse(sys.argv[1:] if argv is None else argv)
    import torch
    import torch.distributed as dist

    import kvattn
    from kvattn import distributed as kd  # sets NCCL_NVLS_ENABLE=0 before the first collective

    device = init(torch, dist)
    rank, world = dist.get_rank(), dist.get_world_size()
    tokens = tokens_of(args.tokens)
    if args.quick or device.type != "cuda":
        tokens = [4096, 65536] if device.type == "cuda" else [256, 2048]
        args.replays = min(args.replays, 10 if device.type == "cuda" else 3)
    timer = Timer(torch, dist, device, args.replays)
    records = []
    for total in tokens:
        rec = run_case(torch, dist, kvattn, kd, args, device, total, timer)
        records.append(rec)
        if rank == 0:
            print(json.dumps(rec), flush=True)
    if rank == 0:
        name = torch.cuda.get_device_name() if device.type == "cuda" else "CPU backend"
        print(f"\ncontext-parallel decode, {world} x {name}, heads {args.heads}, d {args.head_dim}, "
              f"page {args.page_size}, {args.policy}; slowest rank's median, us")
        print("| tokens | per rank | shard | combine | cp | cp/(shard+combine) | eager | 1 GPU full | full/cp "
              "| check |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for r in records:
            print(f"| {r['tokens']:,} | {r['shard_tokens']:,} | {r['shard_us']:.1f} | {r['combine_us']:.1f} | "
                  f"{r['cp_us']:.1f} | {r['cp_over_shard_plus_combine']:.3f} | {r['eager_us']:.1f} | "
                  f"{r['full_us']:.1f} | {r['full_over_cp']:.2f} | {r['check']} |")
        if args.out:
            os.makedirs(args.out, exist_ok=True)
            with open(os.path.join(args.out, "cp_scaling.jsonl"), "a") as f:
                for r in records:
                    f.write(json.dumps(r) + "\n")
    dist.destroy_process_group()
    return 0 if all(r.get("check", "ok") == "ok" for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
