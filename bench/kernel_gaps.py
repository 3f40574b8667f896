"""Where a call's time goes on the GPU (GPU): a CUDA graph of 10 calls of a bench case replayed under the
torch profiler; for each kernel of a call its median duration and the median gap from the previous
kernel's end to its start. A diagnostic for bench/NOTES.md (short decodes: kernel time or gaps?).

    PYTHONPATH=python:. python3 -m bench.kernel_gaps "W1 32/8 b1 1k p16 short" ...
"""
import json
import os
import statistics
import sys
import tempfile

from bench import layouts as L
from bench import suites as S


def main(names):
    import torch
    import kvattn
    cases = {c.name: c for suite in S.SUITES.values() for c in suite()}
    for name in names:
        plan = L.make_plan(cases[name])
        kw = L.materialize(plan, L.TorchBackend("cuda", "bf16", 0, kv=cases[name].kv), 0)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                kvattn.flash_attn_with_kvcache(**kw)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(10):
                kvattn.flash_attn_with_kvcache(**kw)
        for _ in range(3):
            graph.replay()
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                graph.replay()
            torch.cuda.synchronize()
        path = os.path.join(tempfile.mkdtemp(), "trace.json")
        prof.export_chrome_trace(path)
        events = json.load(open(path))["traceEvents"]
        kernels = sorted((e for e in events if e.get("cat") == "kernel"), key=lambda e: e["ts"])
        per = {}
        for prev, cur in zip(kernels, kernels[1:]):
            # The kernel's name without its template arguments and parameter list ("(anonymous namespace)::"
            # dropped first: most of kvattn's kernels live in one, and the cut at "(" left only the namespace).
            key = cur["name"].replace("(anonymous namespace)::", "").split("<")[0].split("(")[0][:48]
            per.setdefault(key, {"dur": [], "gap": []})
            per[key]["dur"].append(cur["dur"])
            per[key]["gap"].append(cur["ts"] - (prev["ts"] + prev["dur"]))
        span = (kernels[-1]["ts"] + kernels[-1]["dur"] - kernels[0]["ts"]) / max(1, len(kernels))
        print(f"== {name}: {len(kernels)} kernels")
        for key, v in per.items():
            print(f"   {key:48} n={len(v['dur']):3d} dur {statistics.median(v['dur']):8.2f} us  "
                  f"gap before {statistics.median(v['gap']):7.2f} us (min {min(v['gap']):.2f})", flush=True)
        del graph
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
