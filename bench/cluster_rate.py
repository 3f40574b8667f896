"""The decode cluster form's streaming rate per CTA (GPU): batch 1 at 16k / 32k / 128k keys (page 16) over 8,
4, 2 and 1 kv heads, clusters of 16 or 8 CTAs a unit (KVATTN_DECODE_CLUSTER, the capacity bound lifted), the
persistent kernel on the same inputs, and what the plan's own rule picks ("default"; launch.cu,
cluster_faster). If the rate per CTA stays flat as the CTAs halve, the cluster form is limited per SM (a card
with more bandwidth needs more CTAs); if the whole call's rate stays flat, by the memory. A diagnostic for
bench/NOTES.md (sessions 45-46), not a suite.

    PYTHONPATH=python:. python3 -m bench.cluster_rate [FORM ...]   # e.g. persistent default (all: every form)
    CLUSTER_RATE_HEADS=8 CLUSTER_RATE_KEYS=32768 ...                 # a subset of the kv heads / keys
"""
import contextlib
import functools
import json
import os
import re
import sys

from bench import timing as T
from bench.short_decode import make_set

HEADS = (8, 4, 2, 1)
KEYS = (16384, 32768, 131072)
# KVATTN_DECODE_CLUSTER with the capacity bound lifted; "default": neither set, the plan's own rule.
FORMS = (("persistent", "0"), ("C16", "16"), ("C8", "8"), ("default", None))


@contextlib.contextmanager
def _stderr_into(path):
    """fd 2 (where the library's KVATTN_DEBUG_DISPATCH lines go) into `path` meanwhile."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(path, "w") as f:
        os.dup2(f.fileno(), 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def _ctas_a_unit(path):
    """The cluster size and the clusters a unit the library printed last ("cluster kernel, N CTAs a unit, K/V
    by ..., clusters a unit: S"; S 1 in libraries that do not print it), or (None, None)."""
    found = re.findall(r"cluster kernel, (\d+) CTAs a unit(?:, K/V by [\w.]+, clusters a unit: (\d+))?",
                       open(path).read())
    return (int(found[-1][0]), int(found[-1][1] or 1)) if found else (None, None)


def main(forms=()):
    forms = [f for f in FORMS if not forms or f[0] in forms]
    heads = [int(h) for h in os.environ.get("CLUSTER_RATE_HEADS", "").split(",") if h] or HEADS
    keys_list = [int(k) for k in os.environ.get("CLUSTER_RATE_KEYS", "").split(",") if k] or KEYS
    os.environ["KVATTN_DEBUG_DISPATCH"] = "1"  # read once, at the library's first launch: C as it ran
    import torch
    import kvattn
    gen = torch.Generator(device="cuda")
    gen.manual_seed(0)
    for keys in keys_list:
        for hk in heads:
            nbytes = 2 * keys * hk * 128 * 2
            sets = [make_set(torch, 4 * hk, hk, 1, keys, 16, gen) for _ in range(T.n_sets_for(nbytes, 4 << 30))]
            ref = kvattn.flash_attn_with_kvcache(**sets[0]).float()
            for label, clusters in forms:
                for name, value in (("KVATTN_DECODE_CLUSTER", clusters),
                                    ("KVATTN_DECODE_CLUSTER_MAX_KEYS", None if clusters is None else str(1 << 30))):
                    if value is None:
                        os.environ.pop(name, None)
                    else:
                        os.environ[name] = value
                fns = [functools.partial(kvattn.flash_attn_with_kvcache, **kw) for kw in sets]
                log = f"/tmp/cluster_rate_{os.getpid()}.log"
                with _stderr_into(log):
                    err = float((kvattn.flash_attn_with_kvcache(**sets[0]).float() - ref).abs().max())
                    timing, _ = T.time_cuda(fns, torch)
                us = timing["median_us"]
                c, s = _ctas_a_unit(log) if clusters != "0" else (None, None)  # (None: persistent)
                ctas = hk * c * s if c else None
                print(json.dumps(dict(keys=keys, hk=hk, form=label, c=c, s=s, ctas=ctas, us=round(us, 2),
                                      tbps=round(nbytes / us / 1e6, 3),
                                      gbps_a_cta=round(nbytes / us / 1e3 / ctas, 1) if ctas else None,
                                      max_diff_vs_first=err)), flush=True)
            del sets
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
