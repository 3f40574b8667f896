"""Where a call's time goes on the GPU (GPU): a CUDA graph of 10 calls of a bench case replayed under the
torch profiler; for each kernel of a call its median duration and the median gap from the previous
kernel's end to its start. A diagnostic for bench/NOTES.md (short decodes: kernel time or gaps?).

    PYTHONPATH=python:. python3 -m bench.kernel_gaps "W1 32/8 b1 1k p16 short" ...

A name outside the suites of the form "W5 MLA <hq>/1 b<batch> <n>k p64" is W5's MLA case at that length (a
sweep over lengths: where a call's fixed cost is, session 58).
"""
import dataclasses
import json
import os
import re
import statistics
import sys
import tempfile

from bench import layouts as L
from bench import suites as S


def case_by_name(name, cases=None):
    """The suites' case of that name, else W5's MLA case at another head count, batch or length."""
    cases = cases if cases is not None else {c.name: c for suite in S.SUITES.values() for c in suite()}
    if name in cases:
        return cases[name]
    m = re.fullmatch(r"W5 MLA (\d+)/1 b(\d+) (\d+)k p64", name)
    if m is None:
        raise SystemExit(f"{name}: not a case of the suites (nor W5 MLA <hq>/1 b<batch> <n>k p64)")
    base = next(c for c in cases.values() if c.suite == "W5")
    return dataclasses.replace(base, name=name, hq=int(m[1]), batch=int(m[2]), cached=int(m[3]) * S.K)


def main(names):
    import torch
    import kvattn
    cases = {c.name: c for suite in S.SUITES.values() for c in suite()}
    for name in names:
        case = case_by_name(name, cases)
        plan = L.make_plan(case)
        kw = L.materialize(plan, L.TorchBackend("cuda", "bf16", 0, kv=case.kv), 0)
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
