"""kvattn benchmark driver: the suites W1-W6 (--list shows their cases) and the MAIN JOB (one checked decode step).

    python3 -m bench.run --main                 # the MAIN JOB (also kvattn-bench with no arguments)
    python3 -m bench.run --suite W1,W2 --quick  # a few cases per suite
    python3 -m bench.run --out DIR              # every suite (W1, W2, W4, W6, then W3, W5)
    python3 -m bench.run --list                 # the cases, their bytes, FLOPs and floor times

Runs on the GPU with torch (bf16) or, without one, on the CPU backend with numpy (fp32, small shapes); the fp8kv
cases take bf16 q over an fp8 e4m3 cache on both.
"""
import argparse
import dataclasses
import datetime
import functools
import importlib
import math
import os
import platform
import subprocess
import sys
import time

import numpy as np

from . import case_check as CC
from . import layouts as L
from . import paged_peers as PP
from . import peerkit as PK
from . import peers as P
from . import report as R
from . import suites as S
from . import timing as T

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def log(msg):
    print(msg, file=sys.stderr, flush=True)


# ---- environment

def _cmd(args):
    try:
        return subprocess.run(args, capture_output=True, text=True, timeout=20, cwd=REPO).stdout.strip()
    except Exception:  # noqa: BLE001
        return ""


def environment(device, torch):
    env = dict(date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), device=device,
               python=platform.python_version(), numpy=np.__version__)
    commit = _cmd(["git", "rev-parse", "HEAD"])
    dirty = bool(_cmd(["git", "status", "--porcelain", "--untracked-files=no"]))
    env["git"] = (commit[:12] + ("+dirty" if dirty else "")) if commit else "none (not a git checkout, or no commit yet)"
    env["torch"] = getattr(torch, "__version__", None) if torch else None
    env["peer_kit"] = PK.versions() or None  # FlashInfer / FA4 versions of the kit, when there is one
    if device == "cuda":
        env["card"] = torch.cuda.get_device_name()
        env["driver"] = _cmd(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]).split("\n")[0]
        env["cuda_runtime"] = torch.version.cuda
        env["cudnn"] = torch.backends.cudnn.version()
        props = torch.cuda.get_device_properties(0)
        env["sms"] = props.multi_processor_count
    else:
        model = ""
        try:
            with open("/proc/cpuinfo") as f:
                model = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
        except OSError:
            pass
        env["card"] = f"CPU {model or platform.processor()} x{os.cpu_count()}"
        env["driver"] = None
    try:
        from kvattn import _lib
        env["library"] = getattr(_lib.load(), "_name", None)
    except Exception as exc:  # noqa: BLE001
        env["library"] = f"not loaded ({exc})"
    return env


def pick_device(requested):
    """('cuda' | 'cpu', torch or None, message)."""
    torch, why = None, ""
    if requested != "cpu":
        try:
            import torch as _t
            torch = _t
            if not torch.cuda.is_available():
                why = "torch sees no CUDA device"
        except Exception as exc:  # noqa: BLE001
            why = f"torch not importable ({exc.__class__.__name__}: {exc})"
        if not why:
            try:
                import kvattn
                if not kvattn.has_backend("cuda"):
                    why = "libkvattn has no CUDA backend (built with -DKVATTN_CUDA=OFF?)"
            except Exception as exc:  # noqa: BLE001
                why = f"kvattn not usable ({exc})"
        if not why:
            return "cuda", torch, ""
        if requested == "cuda":
            raise SystemExit(f"--device cuda: {why}")
    return "cpu", torch, (f"no GPU: {why}; " if why else "") + "running the CPU backend (fp32) on small shapes"


class Ctx:
    def __init__(self, device, torch, args):
        self.device, self.torch, self.args = device, torch, args
        self.dry = bool(getattr(args, "torch_cpu", False))
        import kvattn
        self.kvattn = kvattn
        self.flex_state = {"budget_s": args.flex_budget}
        if args.no_flex or args.flex == "none":
            self.flex_state["disabled"] = "skipped (--flex none)"

    def backend(self, seed, case=None):
        kv = case.kv if case is not None else ""
        if self.device == "cuda":
            return L.TorchBackend("cuda", self.dtype_of(case), seed, kv)
        if self.dry:
            return L.TorchBackend("cpu", self.dtype_of(case), seed, kv)
        return L.NumpyBackend(seed, kv)

    @property
    def dtype_name(self):
        return self.dtype_of(None)

    def dtype_of(self, case):
        return q_dtype(case, self.device)


def q_dtype(case, device):
    """q's dtype for a case: bf16 over an fp8 cache (on the CPU backend too: the contract takes no fp32 q over an
    fp8 cache); otherwise on the GPU bf16 unless the case names fp16, and fp32 on the CPU backend."""
    if case is not None and case.kv:
        return "bf16"
    if device != "cuda":
        return "fp32"
    return case.dtype if case is not None and case.dtype else "bf16"


# ---- one case

def _shapes(case, plan):
    sl = plan.seqlen_k
    return dict(hq=case.hq, hk=case.hk, d=case.d, dv=case.dv, batch=plan.b, sq=int(plan.sq.max()),
                n_new=int(plan.n_new.max()), page=case.page, keys_min=int(sl.min()), keys_mean=float(sl.mean()),
                keys_max=int(sl.max()), dist=case.dist, causal=case.causal, rotary=case.rotary, qv=case.qv,
                scaled_for_cpu=case.scaled)


def _time(fns, ctx, est_hint=None, metric=None):
    """(timing, est_us). Compute-bound cases (metric "flops") replay until their clock settles first
    (timing.settle_replays): every library of a case is then timed in the power state its own load holds."""
    if ctx.device == "cuda":
        return T.time_cuda(fns, ctx.torch, settle=metric == "flops")
    r = T.time_cpu(fns, target_s=ctx.args.cpu_target_s)
    return r, r["median_us"]


def _memory_budget(ctx):
    if ctx.device != "cuda":
        return 1 << 62
    free, _ = ctx.torch.cuda.mem_get_info()
    return free


def measure_kvattn(plan, ctx, seed):
    """Input sets, kvattn calls on them, timing. Returns (sets, fns, timing, est_us) or raises."""
    sb = L.set_bytes(plan, ctx.dtype_of(plan.case))
    free = _memory_budget(ctx)
    if sb * 2.2 > free:
        raise MemoryError(f"skipped: one input set and its gathered copy need {2.2 * sb / 1e9:.1f} GB, "
                          f"{free / 1e9:.1f} GB free")
    n_sets = T.n_sets_for(sb, 0.4 * free) if ctx.device == "cuda" else 1
    be = ctx.backend(seed, plan.case)
    sets = [L.materialize(plan, be, i) for i in range(n_sets)]
    fa = ctx.kvattn.flash_attn_with_kvcache
    fns = [functools.partial(fa, **kw) for kw in sets]
    fns[0]()
    be.sync()
    if ctx.device == "cuda":
        ctx.kvattn.device_errors()  # a device-side index error raises here (and synchronizes)
    timing, est = _time(fns, ctx, metric=plan.case.metric)
    timing["n_sets"] = n_sets
    timing["set_mb"] = round(sb / 2**20, 1)
    return be, sets, fns, timing, est


def run_case(case, ctx, env):
    plan = L.make_plan(case)
    nbytes, flops = L.count(plan, ctx.dtype_of(case))
    rec = dict(suite=case.suite, case=case.name, layout=case.layout, metric=case.metric, shapes=_shapes(case, plan),
               dtype=ctx.dtype_of(case), kv_dtype=case.kv or ctx.dtype_of(case), bytes=nbytes, flops=flops,
               floor_us=max(nbytes / (R.READ_CEILING_TBPS * 1e12), flops / (R.FLOP_CEILING_TFLOPS * 1e12)) * 1e6,
               baseline=case.baseline or None, status="ok", peers={})
    if case.speedup:
        rec["speedup_target"] = case.speedup
    rec.update({k: env.get(k) for k in ("card", "driver", "torch", "git", "date", "device", "peer_kit")})
    KvattnError = ctx.kvattn.KvattnError
    try:
        be, sets, fns, timing, est = measure_kvattn(plan, ctx, L.seed_of(case.seed_name))
    except KvattnError as exc:
        rec["status"] = f"rejected by kvattn: {exc}"
        return rec
    except MemoryError as exc:
        rec["status"] = str(exc) if str(exc).startswith("skipped") else f"error: out of memory ({exc})"
        return rec
    except Exception as exc:  # noqa: BLE001
        rec["status"] = f"error: {exc.__class__.__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        return rec
    t = timing["median_us"] * 1e-6
    rec["kvattn"] = timing
    rec.update(tbps=nbytes / t / 1e12, tflops=flops / t / 1e12)
    rec.update(bw_frac=rec["tbps"] / R.READ_CEILING_TBPS, flop_frac=rec["tflops"] / R.FLOP_CEILING_TFLOPS)
    sync = be.sync
    try:
        rec["host_us_python"] = T.host_time(fns[0], sync, est)
    except Exception as exc:  # noqa: BLE001
        rec["host_python_error"] = str(exc)[:200]
    try:
        rec["host_us_c"] = T.host_time_c(sets[0], sync, est)
    except Exception as exc:  # noqa: BLE001
        rec["host_c_error"] = str(exc)[:200]
    if case.mixed:
        _mixed_parts(case, ctx, rec)
    if not ctx.args.no_peers:
        _run_peers(plan, ctx, be, sets, rec)
    del sets, fns
    if case.kv:
        _check(case, ctx, rec)
    return rec


def _check(case, ctx, rec):
    """The oracle check of a case (bench/case_check.py): a failure makes the record not ok."""
    try:
        ok, lines = CC.check_case(case, ctx, L.seed_of(case.seed_name, 99))
    except Exception as exc:  # noqa: BLE001
        first = str(exc).splitlines()[0][:150] if str(exc) else ""
        ok, lines = False, [f"check raised {exc.__class__.__name__}: {first}"]
    rec["check"] = {"ok": ok, "lines": lines}
    if ok is False:
        rec["status"] = "check FAILED: " + lines[-1]


def _mixed_parts(case, ctx, rec):
    """W3 mixed batch: time the chunk alone and the decodes alone (kvattn), to compare with the mixed call."""
    chunk = dataclasses.replace(case, name=case.name + " [chunk part]", mixed=0, mixed_cached=0, batch=1)
    dec = dataclasses.replace(case, name=case.name + " [decode part]", mixed=0, mixed_cached=0, batch=case.mixed,
                              cached=case.mixed_cached, n_new=1, sq=1)
    try:
        parts = 0.0
        for c in (chunk, dec):
            be, sets, fns, timing, _ = measure_kvattn(L.make_plan(c), ctx, L.seed_of(c.name))
            parts += timing["median_us"]
            del sets, fns
        rec["parts_us"] = parts
        rec["mixed_vs_parts"] = rec["kvattn"]["median_us"] / parts
    except Exception as exc:  # noqa: BLE001
        rec["parts_error"] = str(exc).splitlines()[0][:200] if str(exc) else exc.__class__.__name__


def _selected_peers(ctx):
    names = [n.strip() for n in (getattr(ctx.args, "peers", "") or "").split(",") if n.strip()]
    return [p for p in P.PEERS if not names or p in names]


def _time_peer(name, rec, fns, note, inputs, ref_out, ctx, be):
    out0 = fns[0]()
    be.sync()
    err = P.relerr(out0, ref_out, ctx.torch)
    timing, _ = _time(fns, ctx, metric=rec["metric"])
    timing.update(note=note, inputs=inputs, relerr=err, ratio=rec["kvattn"]["median_us"] / timing["median_us"])
    rec["peers"][name] = timing


def _na(exc):
    msg = str(exc).strip().splitlines()
    return f"{exc.__class__.__name__}: {msg[0][:150] if msg else ''}"


def _run_peers(plan, ctx, be, sets, rec):
    torch = ctx.torch
    names = _selected_peers(ctx)
    if torch is None or (ctx.device != "cuda" and not ctx.dry):
        for name in names:
            rec["peers"][name] = {"na": "no CUDA device" if torch is not None else "torch not importable"}
        return
    ref_out = sets[0]["out"]
    na = {n: P.unsupported(n, plan) for n in names}
    for name in [n for n in names if na[n]]:
        rec["peers"][name] = {"na": na[name]}
    names = [n for n in names if not na[n]]
    # FlashInfer and FA4 first, on kvattn's own caches and page tables (q pre-rotated when rotary: neither
    # rotates), before the gathered copy that the other peers need takes its memory.
    paged = [n for n in names if n in P.PAGED]
    if paged:
        qs = [L.rotate_q(plan, kw, be) for kw in sets]
        for name in paged:
            if ctx.device != "cuda":
                rec["peers"][name] = {"na": "no CUDA device"}
                continue
            try:
                fns, note = PP.MAKERS[name](plan, sets, qs, torch)
                inputs = "kvattn's caches and page table" + (", q pre-rotated" if plan.case.rotary else "")
                _time_peer(name, rec, fns, note, inputs, ref_out, ctx, be)
            except PP.Unavailable as exc:
                rec["peers"][name] = {"na": str(exc)}
            except Exception as exc:  # noqa: BLE001 - a failing peer is reported, never fatal
                rec["peers"][name] = {"na": _na(exc)}
            torch.cuda.synchronize()
        del qs
    gathered_peers = [n for n in names if n not in P.PAGED]
    if not gathered_peers:
        return
    try:
        gathered = [L.gather(plan, kw, be) for kw in sets]
    except Exception as exc:  # noqa: BLE001
        for name in gathered_peers:
            rec["peers"][name] = {"na": f"gather failed: {exc.__class__.__name__}: {str(exc)[:80]}"}
        return
    rec["peer_note"] = gathered[0].note
    for name in gathered_peers:
        if name == "flex" and ctx.args.flex == "quick" and not plan.case.quick:
            rec["peers"][name] = {"na": "skipped: flex runs on the --quick cases (--flex all for every case)"}
            continue
        try:
            built = [P.make_peer(name, plan, g, ctx.flex_state, dry_run=ctx.dry) for g in gathered]
            _time_peer(name, rec, [fn for fn, _ in built], built[0][1],
                       gathered[0].note or "same tensors as kvattn", ref_out, ctx, be)
        except P.Unavailable as exc:
            rec["peers"][name] = {"na": str(exc)}
        except Exception as exc:  # noqa: BLE001 - a failing peer is reported, never fatal
            rec["peers"][name] = {"na": _na(exc)}
        if ctx.device == "cuda":
            torch.cuda.synchronize()
    del gathered


def cuda_alive(torch):
    """False once a sticky error (illegal address, ...) has broken the CUDA context."""
    try:
        torch.cuda.synchronize()
        (torch.ones(8, device="cuda") + 1).sum().item()
        return True
    except Exception:  # noqa: BLE001
        return False


def summarize(rec):
    if rec["status"] != "ok":
        return rec["status"][:110]
    k = rec["kvattn"]
    main = (f"{R._num(rec['tbps'])} TB/s ({100 * rec['bw_frac']:.0f}%)" if rec["metric"] == "bw"
            else f"{R._num(rec['tflops'])} TFLOP/s ({100 * rec['flop_frac']:.0f}%)")
    ran = rec.get("peers", {})
    peers = " ".join(f"{n}:{ran[n]['ratio']:.2f}x" if "ratio" in ran[n] else f"{n}:n/a" for n in P.PEERS if n in ran)
    check = {True: "  check PASS", False: "  check FAIL", None: "  not checked"}[rec["check"]["ok"]] \
        if "check" in rec else ""
    return f"{k['median_us']:.1f} us  {main}  {peers}{check}"


def link_baselines(records):
    """vs_baseline = time / the baseline's time; with a speedup target (fp8 caches), speedup = the inverse
    (tokens/s over the baseline's) and whether it meets the target."""
    by_name = {r["case"]: r for r in records}
    for r in records:
        b = by_name.get(r.get("baseline") or "")
        if b and r["status"] == "ok" and b["status"] == "ok":
            r["vs_baseline"] = r["kvattn"]["median_us"] / b["kvattn"]["median_us"]
            if r.get("speedup_target"):
                r["speedup"] = b["kvattn"]["median_us"] / r["kvattn"]["median_us"]
                r["speedup_met"] = r["speedup"] >= r["speedup_target"]


def suite_summary(records):
    lines = []
    for s in S.ORDER + ["MAIN"]:
        rs = [r for r in records if r["suite"] == s]
        if not rs:
            continue
        ok = [r for r in rs if r["status"] == "ok"]
        line = f"{s}: {len(ok)}/{len(rs)} ok"
        if ok:
            key = "tbps" if ok[0]["metric"] == "bw" else "tflops"
            vals = [r[key] for r in ok]
            line += (f", {key} geomean {R._num(math.exp(np.mean(np.log(vals))))} min {R._num(min(vals))} "
                     f"max {R._num(max(vals))}")
            for p in P.PEERS:
                ratios = [r["peers"][p]["ratio"] for r in ok if "ratio" in r.get("peers", {}).get(p, {})]
                if ratios:
                    line += f", kvattn/{p} median {float(np.median(ratios)):.2f}x ({len(ratios)})"
        targets = [r for r in ok if r.get("speedup") is not None]
        if targets:
            met = sum(r["speedup_met"] for r in targets)
            line += (f", speedup over baseline {met}/{len(targets)} met (min "
                     f"{min(r['speedup'] for r in targets):.2f}x)")
        bad = [r for r in rs if r["status"] != "ok"]
        if bad:
            line += f"; not ok: {len(bad)} (e.g. {bad[0]['case']}: {bad[0]['status'][:80]})"
        lines.append(line)
    return "\n".join(lines)


def write_outputs(records, env, out_dir, quiet=False):
    os.makedirs(out_dir, exist_ok=True)
    R.write_jsonl(os.path.join(out_dir, "results.jsonl"), records)
    with open(os.path.join(out_dir, "results.md"), "w") as f:
        f.write(R.markdown(records, env))
    with open(os.path.join(out_dir, "summary.md"), "w") as f:
        f.write(R.summary_markdown(records, env))
    msg = R.plots(records, out_dir) + "; " + R.suite_plots(records, out_dir)[1]
    if not quiet:
        log(f"wrote {out_dir}/results.jsonl, results.md, summary.md; {msg}")


# ---- the MAIN JOB

def _storage_numpy(x, torch):
    """A numpy copy in the storage dtype (bf16 through ml_dtypes when importable, else float32: exact)."""
    if isinstance(x, np.ndarray) or x is None:
        return x
    if x.dtype == torch.bfloat16:
        try:
            import ml_dtypes
            return x.detach().view(torch.int16).cpu().numpy().view(ml_dtypes.bfloat16)
        except ImportError:
            return x.detach().float().cpu().numpy()
    return x.detach().cpu().numpy()


def check_main(case, ctx):
    """One call on poisoned inputs (NaN in every invalid slot) against the float64 oracle. Returns (ok, lines)."""
    plan = L.make_plan(case)
    be = ctx.backend(L.seed_of(case.name, 99))
    kw = L.materialize(plan, be, 0, poison=True)
    names = ["q", "k_cache", "v_cache", "k", "v", "qv", "rotary_cos", "rotary_sin", "cache_seqlens",
             "cache_batch_idx", "cache_leftpad", "page_table"]
    before = {n: _storage_numpy(kw[n], ctx.torch) for n in names if kw.get(n) is not None}
    if isinstance(kw["out"], np.ndarray):
        kw["out"].fill(np.nan)
    else:
        kw["out"].fill_(float("nan"))
    ctx.kvattn.flash_attn_with_kvcache(**kw)
    be.sync()
    out = be.numpy(kw["out"]).astype(np.float64)
    try:
        reference_attention = CC.load_oracle()
    except Exception as exc:  # noqa: BLE001
        return None, [f"NOT CHECKED: the oracle tests/python/reference.py failed to import "
                      f"({exc.__class__.__name__}: {exc})"]
    # Sequences are independent: the oracle (float64, single-threaded) runs on the first and the last only when
    # the batch is large, with the whole cache and page table.
    sel = np.arange(plan.b) if plan.b <= 2 else np.array([0, plan.b - 1])
    per_seq = ("q", "k", "v", "qv", "cache_seqlens", "cache_batch_idx", "cache_leftpad")
    sub = {n: (a[sel] if n in per_seq else a) for n, a in before.items()}
    t0 = time.perf_counter()
    ref = reference_attention(**sub, causal=case.causal, rotary_interleaved=L.ROTARY_INTERLEAVED)
    tol = 2e-2 if ctx.dtype_name == "bf16" else 1e-4
    lines = [f"sequences {', '.join(map(str, sel))} of {plan.b} checked against the float64 oracle"]
    finite = bool(np.isfinite(out).all())  # every sequence: each output element written, no NaN read
    out = out[sel]
    err = float(np.linalg.norm(out - ref["out"]) / np.linalg.norm(ref["out"]))
    ok = finite and err <= tol
    lines.append(f"out: rel err {err:.2e} (tol {tol:.0e}); "
                 f"{'no NaN in any sequence' if finite else 'NaN present'}: {'PASS' if ok else 'FAIL'}")
    idx = [L.slot_index(plan, i, start=int(plan.seqlens[i])) for i in sel]
    i0 = np.concatenate([a for a, _ in idx])
    i1 = np.concatenate([b for _, b in idx])
    kc, vc = (be.numpy(L._index(kw[n], i0, i1, be)).astype(np.float64) for n in ("k_cache", "v_cache"))
    rk, rv = (ref[n][i0, i1].astype(np.float64) for n in ("k_cache", "v_cache"))
    e_k = float(np.linalg.norm(kc - rk) / np.linalg.norm(rk))
    e_v = float(np.linalg.norm(vc - rv) / max(np.linalg.norm(rv), 1e-30))
    ok_app = e_k <= tol and e_v <= tol
    lines.append(f"appended K (rotated) / V in the cache: rel err {e_k:.2e} / {e_v:.2e}: {'PASS' if ok_app else 'FAIL'}")
    lines.append(f"(oracle: {time.perf_counter() - t0:.1f} s)")
    del kw
    return ok and ok_app, lines


def run_main(args):
    device, torch, msg = pick_device(args.device)
    if args.torch_cpu:
        import torch
    ctx = Ctx(device, torch, args)
    env = environment(device, torch)
    case = S.main_case(cpu=device == "cpu")
    plan = L.make_plan(case)
    print(f"kvattn MAIN JOB: one decode step, {case.hq}/{case.hk} heads, d={case.d}, {ctx.dtype_name}, "
          f"paged cache (page {case.page}), scattered cache_batch_idx, cache_leftpad, append 1 token + rotary")
    print(f"device: {env['card']} ({device}); batch {plan.b} x {int(plan.seqlen_k[0])} tokens"
          + (f"\nNOTE: {msg}" if msg else ""))
    t0 = time.perf_counter()
    ok, lines = check_main(case, ctx)
    print("check: " + "\n       ".join(lines))
    rec = run_case(case, ctx, env)
    rec["check"] = {"ok": ok, "lines": lines}
    if device == "cpu" and rec["status"] == "ok":
        from .cpu_suite import main_job_peer
        rec["peers"] = {"sdpa_cpu": main_job_peer(case, plan, ctx.dtype_name, rec["kvattn"]["median_us"])}
    print(f"date {env['date']}, commit {env['git']}, torch {env['torch']}, driver {env['driver']}")
    if rec["status"] != "ok":
        print(f"timing: {rec['status']}")
    else:
        print(R.main_table(rec, device))
    print(f"({time.perf_counter() - t0:.1f} s)")
    if args.out:
        write_outputs([rec], env, args.out)
    return 1 if ok is False or rec["status"] != "ok" else 0


# ---- entry

def parse(argv):
    ap = argparse.ArgumentParser(prog="kvattn-bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--main", action="store_true", help="the MAIN JOB: one checked, timed decode step")
    ap.add_argument("--suite", default="", help="comma list of W1..W6 (default: all, in the order W1 W2 W4 W6 W3 W5)")
    ap.add_argument("--quick", action="store_true", help="a few cases per suite")
    ap.add_argument("--filter", default="", help="only cases whose name contains this (several: separated by '|'; '=NAME': that name exactly)")
    ap.add_argument("--device", choices=["cpu", "cuda", "auto"], default="auto")
    ap.add_argument("--out", default="", help="output folder (default bench/out/<date> in a source checkout, "
                    "else ./kvattn-bench-out/<date>)")
    ap.add_argument("--list", action="store_true", help="list the cases (bytes, FLOPs, floor) and exit")
    ap.add_argument("--no-peers", action="store_true")
    ap.add_argument("--peers", default="", help="comma list of peers to run (default: all of "
                    + ",".join(P.PEERS) + "); flashinfer and fa4 need the peer kit (tools/peer_kit.sh)")
    ap.add_argument("--flex", choices=["quick", "all", "none"], default="quick",
                    help="cases that run flex_attention, which compiles per shape (default: the --quick cases)")
    ap.add_argument("--no-flex", action="store_true", help="same as --flex none")
    ap.add_argument("--flex-budget", type=float, default=120.0, help="seconds of flex compile before flex is skipped")
    ap.add_argument("--max-minutes", type=float, default=7.0, help="start no case after this (the rest: skipped)")
    ap.add_argument("--cpu-target-s", type=float, default=0.3, help="seconds of timing per CPU measurement")
    ap.add_argument("--warmup-s", type=float, default=3.0,
                    help="GPU: seconds of matmuls before the first case, so every case is timed at the loaded clock")
    ap.add_argument("--torch-cpu", action="store_true", help=argparse.SUPPRESS)  # dry run of the torch path
    return ap.parse_args(argv)


def repeat_check(cases, records, ctx, env):
    """Time two cases again at the end of the run (kvattn only) and say whether each pair of medians agrees
    within the spread (p10-p90) of either: a difference smaller than that is noise (BENCHMARKS.md).

    The two: the run's first measured case, and its first bandwidth-bound one (floor >= 100 us). A short,
    latency-bound case also shows how far the SM clocks drifted under minutes of load (the memory clock
    does not move); the bandwidth-bound one shows whether the measurement itself repeats."""
    measured = [(case, rec) for case, rec in zip(cases, records) if "kvattn" in rec]
    bandwidth_bound = [(case, rec) for case, rec in measured if rec.get("floor_us", 0) >= 100]
    picked = measured[:1] + [p for p in bandwidth_bound[:1] if p[1] is not measured[0][1]]
    lines = []
    for case, rec in picked:
        again = run_case(case, ctx, env) if ctx.args.no_peers else _without_peers(run_case, case, ctx, env)
        if "kvattn" not in again:
            lines.append(f"repeat check: {case.name}: second run failed ({again.get('status')})")
            continue
        a, b = rec["kvattn"], again["kvattn"]
        spread = max(a["p90_us"] - a["p10_us"], b["p90_us"] - b["p10_us"])
        diff = abs(a["median_us"] - b["median_us"])
        verdict = "agree" if diff <= spread else "DISAGREE"
        rec["repeat"] = dict(median_us=b["median_us"], p10_us=b["p10_us"], p90_us=b["p90_us"], verdict=verdict)
        lines.append(f"repeat check: {case.name}: {a['median_us']:.1f} us then {b['median_us']:.1f} us, "
                     f"difference {diff:.1f} us vs spread {spread:.1f} us: {verdict}")
    return "\n".join(lines)


def _without_peers(fn, case, ctx, env):
    saved = ctx.args.no_peers
    ctx.args.no_peers = True
    try:
        return fn(case, ctx, env)
    finally:
        ctx.args.no_peers = saved


def list_cases(cases, device):
    for c in cases:
        plan = L.make_plan(c)
        dtype_name = q_dtype(c, device)
        nb, fl = L.count(plan, dtype_name)
        floor = max(nb / (R.READ_CEILING_TBPS * 1e12), fl / (R.FLOP_CEILING_TFLOPS * 1e12)) * 1e6
        print(f"{c.name:<58} {c.layout:<34} {nb / 1e6:10.1f} MB {fl / 1e9:12.1f} GFLOP  floor {floor:9.1f} us  "
              f"set {L.set_bytes(plan, dtype_name) / 2**30:6.2f} GiB")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse(argv)
    if not args.list:
        try:
            importlib.import_module("kvattn")._lib.load()
        except Exception as exc:  # noqa: BLE001
            print(f"kvattn-bench: kvattn is not usable ({exc.__class__.__name__}: {exc}); "
                  "set PYTHONPATH=python (and KVATTN_LIBRARY=build/libkvattn.so) or pip install .", file=sys.stderr)
            return 2
    unknown = [n for n in args.peers.split(",") if n.strip() and n.strip() not in P.PEERS]
    if unknown:
        raise SystemExit(f"--peers: unknown peer(s) {','.join(unknown)}; expected a comma list of {','.join(P.PEERS)}")
    if args.main or not argv:
        return run_main(args)
    names = [s.strip().upper() for s in args.suite.split(",") if s.strip()] or list(S.ORDER)
    for n in names:
        if n not in S.SUITES:
            raise SystemExit(f"--suite: unknown suite {n} (W1..W6)")
    if args.list:
        cpu = args.device == "cpu"
        cases = S.select(names, args.quick, cpu, args.filter)
        list_cases(cases, "cpu" if cpu else "cuda")
        print(f"{len(cases)} cases")
        return 0
    device, torch, msg = pick_device(args.device)
    if args.torch_cpu:
        import torch as _t
        torch = _t
    if msg:
        log(f"NOTE: {msg}")
    ctx = Ctx(device, torch, args)
    env = environment(device, torch)
    cases = S.select(names, args.quick, device == "cpu", args.filter)
    out_root = os.path.join(REPO, "bench", "out") if os.path.isdir(os.path.join(REPO, "tests")) else "kvattn-bench-out"
    out_dir = args.out or os.path.join(out_root, datetime.datetime.now().strftime("%Y%m%d-%H%M%S"))
    log(f"{len(cases)} cases on {env['card']} ({device}); commit {env['git']}; output {out_dir}")
    if device == "cuda" and args.warmup_s > 0:
        n = T.warm_up_gpu(torch, args.warmup_s)
        log(f"GPU warmed up: {n} bf16 4096^3 matmuls in {args.warmup_s:g} s (timing at the loaded clock)")
    t_start = time.perf_counter()
    records = []
    lost = ""
    for i, case in enumerate(cases, 1):
        t0 = time.perf_counter()
        if t0 - t_start > 60 * args.max_minutes:
            rec = dict(suite=case.suite, case=case.name, layout=case.layout, metric=case.metric, peers={},
                       status=f"skipped: time budget (--max-minutes {args.max_minutes:g})")
        elif lost:
            rec = dict(suite=case.suite, case=case.name, layout=case.layout, metric=case.metric, peers={},
                       status=f"skipped: the CUDA context was lost at {lost}")
        else:
            rec = run_case(case, ctx, env)
            if device == "cuda":
                if cuda_alive(torch):
                    torch.cuda.empty_cache()
                else:
                    lost = case.name
                    rec["status"] += " [CUDA context lost here: the rest of the run is skipped]"
        records.append(rec)
        log(f"[{i}/{len(cases)}] {case.name:<52} {summarize(rec)}  ({time.perf_counter() - t0:.1f} s, "
            f"total {time.perf_counter() - t_start:.0f} s)")
        if i % 10 == 0:
            write_outputs(records, env, out_dir, quiet=True)  # partial results survive a kill
    repeat = repeat_check(cases, records, ctx, env)
    link_baselines(records)
    write_outputs(records, env, out_dir)
    print(suite_summary(records))
    if repeat:
        print(repeat)
    print(f"{len(records)} cases in {time.perf_counter() - t_start:.0f} s; table: {out_dir}/results.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
