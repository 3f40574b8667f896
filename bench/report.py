"""Records out: JSON lines, a markdown table, a per-suite summary, and PNG plots (when matplotlib is importable).

    python3 -m bench.report RESULTS.jsonl [MORE.jsonl ...] [--out DIR] [--results-md bench/RESULTS.md]

regenerates, from a run's JSON lines (one run cut into several device calls: all their files, in order),
summary.md, results.md, results.jsonl (all records) and the plots in DIR (default: the first JSON's folder),
and with --results-md replaces the summary block of RESULTS.md (between its SUMMARY markers) with the run's.
"""
import argparse
import json
import lzma
import math
import os
import sys

from .peers import LABELS, PEERS

READ_CEILING_TBPS = 4.54
FLOP_CEILING_TFLOPS = 807.0


def write_jsonl(path, records):
    with open(path, "w") as f:
        for r in records:
            f.write(json.dumps(r, sort_keys=True) + "\n")


def _us(x):
    if x is None:
        return "-"
    return f"{x:.1f}" if x < 1000 else f"{x:,.0f}"


def _num(x):
    return f"{x:.2f}" if x >= 1 else f"{x:.3g}"


def _peer_cell(p):
    if p is None:
        return "-"
    if "na" in p:
        return "n/a: " + p["na"].replace("|", "/")[:60]
    cell = f"{_us(p['median_us'])} ({p['ratio']:.2f}x)"
    if p.get("relerr") is not None and p["relerr"] > 5e-2:
        cell += f" MISMATCH {p['relerr']:.1e}"
    return cell


def row(r):
    """One markdown table row of a record."""
    name, layout = r["case"], r["layout"]
    if r["status"] != "ok":
        return f"| {name} | {layout} | {r['status'].replace('|', '/')[:120]} |" + " |" * 7
    k = r["kvattn"]
    t = f"{_us(k['median_us'])} [{_us(k['p10_us'])}-{_us(k['p90_us'])}]"
    bw = f"{_num(r['tbps'])} ({100 * r['bw_frac']:.0f}%)"
    fl = f"{_num(r['tflops'])} ({100 * r['flop_frac']:.0f}%)"
    if r.get("metric") == "flops":
        fl = f"**{fl}**"
    else:
        bw = f"**{bw}**"
    host = f"{_us(r.get('host_us_python'))} / {_us(r.get('host_us_c'))}"
    peers = " | ".join(_peer_cell(r.get("peers", {}).get(p)) for p in PEERS)
    extra = []
    if r.get("speedup") is not None:  # tokens/s over the baseline's, against a target (fp8 caches: issue #11)
        extra.append(f"{r['speedup']:.2f}x the tokens/s of {r['baseline']} (target >= {r['speedup_target']:g}x: "
                     f"{'met' if r['speedup_met'] else 'NOT met'})")
    elif r.get("vs_baseline") is not None:
        extra.append(f"{r['vs_baseline']:.2f}x {r['baseline']}")
    if r.get("check"):
        extra.append("oracle check " + {True: "PASS", False: "FAIL", None: "not run"}[r["check"]["ok"]])
    if r.get("parts_us") is not None:
        extra.append(f"{r['mixed_vs_parts']:.2f}x the parts apart ({_us(r['parts_us'])} us)")
    if r.get("peer_note"):
        extra.append(r["peer_note"])
    return f"| {name} | {layout} | {t} | {bw} | {fl} | {host} | {peers} | {'; '.join(extra)} |"


HEADER = ("| case | layout | kvattn us [p10-p90] | TB/s (of 4.54) | TFLOP/s (of 807) | host us py / C | "
          + " | ".join(f"{LABELS[p]} us (kvattn/peer)" for p in PEERS) + " | notes |\n"
          + "|---" * (7 + len(PEERS)) + "|\n")


def markdown(records, env):
    lines = [f"# kvattn benchmark: {env.get('card')} ({env.get('device')})\n",
             f"date {env.get('date')}, commit {env.get('git')}, driver {env.get('driver')}, "
             f"torch {env.get('torch')}\n",
             "Times per call (median of CUDA-graph replays on the GPU); bold: the suite's metric; "
             "kvattn/peer < 1 means kvattn is faster; host us: per call without graphs, through Python / the C ABI.\n",
             "Bytes: K and V of the valid cached slots, new K/V read and written once, Q (+qv) and O once. "
             "FLOPs: 2 * heads * (d_qk + dv) * visible keys (= 4 * ... * d when d = dv), causal counted exactly. "
             "FlashInfer and FA4 run on kvattn's own caches and page tables (a contiguous cache viewed as pages; "
             "q pre-rotated; no left padding in their APIs). The torch peers (cuDNN, FA2, flex) take no page "
             "table, batch index, left padding, append or rotary: they run on a gathered contiguous copy of the "
             "valid keys (after kvattn's append), with q pre-rotated. fp8kv: an fp8 e4m3 K/V cache under bf16 q "
             "(K/V bytes counted at 1 byte an element), on its bf16 baseline's inputs with K/V quantized; its note "
             "gives baseline time / its time (tokens/s over the bf16 cache's) against the target.\n"]
    if any(r.get("shapes", {}).get("scaled_for_cpu") for r in records):
        lines.append("CPU backend: shapes scaled down (tokens / 64, batch <= 4, <= 2 KV heads); names keep the GPU "
                     "shapes, `shapes` in results.jsonl has the real ones. Ceiling fractions are the GPU's. q is fp32 "
                     "there, bf16 over an fp8 cache (fp8kv): an fp8kv case's ratio to its baseline says nothing of "
                     "the GPU's.\n")
    suite = None
    for r in records:
        if r["suite"] != suite:
            suite = r["suite"]
            lines.append(f"\n## {suite}\n\n" + HEADER.rstrip("\n"))
        lines.append(row(r))
    return "\n".join(lines) + "\n"


def plots(records, out_dir):
    """bandwidth vs the read ceiling per layout, and kvattn/peer per case; returns a message."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as exc:  # noqa: BLE001
        return f"plots skipped: matplotlib not importable ({exc})"
    ok = [r for r in records if r["status"] == "ok"]
    made = []
    bw = [r for r in ok if r.get("metric") == "bw"]
    if bw:
        layouts = sorted({r["layout"] for r in bw})
        fig, ax = plt.subplots(figsize=(max(8, 0.18 * len(bw) + 4), 5))
        x = 0
        ticks, labels = [], []
        for i, lay in enumerate(layouts):
            rs = [r for r in bw if r["layout"] == lay]
            xs = list(range(x, x + len(rs)))
            ax.bar(xs, [r["tbps"] for r in rs], color=f"C{i % 10}", label=lay)
            ticks.append(x + (len(rs) - 1) / 2)
            labels.append(lay)
            x += len(rs) + 1
        ax.axhline(READ_CEILING_TBPS, color="k", ls="--", label=f"read ceiling {READ_CEILING_TBPS} TB/s")
        ax.set_xticks(ticks, labels, rotation=30, ha="right", fontsize=7)
        ax.set_ylabel("achieved TB/s (K+V+Q+O bytes / time)")
        ax.set_title("kvattn achieved bandwidth per layout")
        ax.legend(fontsize=6, ncol=2)
        fig.tight_layout()
        fig.savefig(os.path.join(out_dir, "bw_vs_ceiling.png"), dpi=110)
        plt.close(fig)
        made.append("bw_vs_ceiling.png")
    with_peers = [r for r in ok if any("ratio" in p for p in r.get("peers", {}).values())]
    if with_peers:
        fig, ax = plt.subplots(figsize=(max(8, 0.22 * len(with_peers) + 4), 5))
        w = 0.8 / len(PEERS)
        for j, p in enumerate(PEERS):
            xs, ys = [], []
            for i, r in enumerate(with_peers):
                pr = r.get("peers", {}).get(p, {})
                if "ratio" in pr:
                    xs.append(i + (j - (len(PEERS) - 1) / 2) * w)
                    ys.append(pr["ratio"])
            if xs:
                ax.bar(xs, ys, width=w, label=LABELS[p], color=f"C{j}")
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_yscale("log")
        ax.set_xticks(range(len(with_peers)), [r["case"] for r in with_peers], rotation=90, fontsize=5)
        ax.set_ylabel("kvattn time / peer time (< 1: kvattn faster)")
        ax.set_title("kvattn / peer per case")
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(os.path.join(out_dir, "ratio_vs_peers.png"), dpi=110)
        plt.close(fig)
        made.append("ratio_vs_peers.png")
    return "plots: " + (", ".join(made) if made else "nothing to plot")


def main_table(r, device):
    """The MAIN JOB's short table. The CPU backend's rates are in GB/s (TB/s on the GPU)."""
    gpu = device == "cuda"
    unit, per_tb = ("TB/s", 1.0) if gpu else ("GB/s", 1e3)
    lines = [f"| impl | time us [p10-p90] | bytes (MB) | {unit}" + (" | of 4.54 TB/s" if gpu else "") + " | note |",
             "|---|---|---|---" + ("|---" if gpu else "") + "|---|"]

    def add(name, t, note=""):
        tbps = r["bytes"] / (t["median_us"] * 1e-6) / 1e12
        frac = f" | {100 * tbps / READ_CEILING_TBPS:.1f}%" if gpu else ""
        lines.append(f"| {name} | {_us(t['median_us'])} [{_us(t['p10_us'])}-{_us(t['p90_us'])}] | "
                     f"{r['bytes'] / 1e6:.1f} | {_num(tbps * per_tb)}{frac} | {note} |")
    if r.get("kvattn"):
        py, c = r.get("host_us_python"), r.get("host_us_c")
        if gpu:
            note = f"host/call: python {_us(py)} us, C ABI {_us(c)} us"
        else:
            # A CPU call is synchronous: its host time is the whole call, measured over other calls than
            # the timed ones, so on a shared machine it scatters around the timed median either way.
            note = (f"synchronous (host time = the call): through python {_us(py)} us, through the C ABI "
                    f"{_us(c)} us, each over other calls than the timed ones")
        add("kvattn", r["kvattn"], note)
    for p in list(PEERS) + ["sdpa_cpu"]:
        pr = r.get("peers", {}).get(p)
        if pr is None:
            continue
        label = LABELS.get(p, "torch SDPA (CPU)")
        if "na" in pr:
            lines.append(f"| {label} | n/a | | |" + (" |" if gpu else "") + f" {pr['na']} |")
        else:
            note = "; ".join(x for x in (pr.get("note"), r.get("peer_note")) if x)
            add(label, pr, f"kvattn/peer {pr['ratio']:.2f}x" + (f" ({note})" if note else ""))
    return "\n".join(lines)


# ---- the summary: per suite, kvattn next to each peer and the ceiling

SUITE_TITLES = {"W1": "decode, long contexts, every layout", "W2": "decode, large ragged batches",
                "W3": "chunked prefill over a paged prefix", "W4": "speculative decode (q 1-8, causal)",
                "W5": "MLA decode (d 64 + 512, paged 64)", "W6": "prefill 16k, contiguous",
                "MAIN": "the MAIN JOB (one decode step)"}
SUITE_ORDER = ["W1", "W2", "W3", "W4", "W5", "W6", "MAIN"]


def achieved(r, t_us):
    """The suite's metric for a time on this record's bytes / FLOPs: TB/s (bw) or TFLOP/s (flops)."""
    if r.get("metric") == "flops":
        return r["flops"] / (t_us * 1e-6) / 1e12
    return r["bytes"] / (t_us * 1e-6) / 1e12


def ceiling(metric):
    return FLOP_CEILING_TFLOPS if metric == "flops" else READ_CEILING_TBPS


def _geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def _median(xs):
    xs = sorted(xs)
    n = len(xs)
    return None if not n else (xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2]))


def suite_rows(records):
    """{(suite, metric): dict(n, n_ok, kvattn geomean, peers {name: dict(geomean, ratio, n, na)})}.

    A suite whose cases have two headline metrics (W5: TFLOP/s at 128 heads, TB/s at 16) gets a row each."""
    out = {}
    for s in SUITE_ORDER:
        rs = [r for r in records if r.get("suite") == s]
        for metric in [m for m in ("bw", "flops") if any(r.get("metric", "bw") == m for r in rs)]:
            rm = [r for r in rs if r.get("metric", "bw") == metric]
            ok = [r for r in rm if r.get("status") == "ok" and "kvattn" in r]
            row = dict(n=len(rm), n_ok=len(ok),
                       kvattn=_geomean([achieved(r, r["kvattn"]["median_us"]) for r in ok]), peers={})
            for p in PEERS:
                ran = [r for r in ok if "ratio" in r.get("peers", {}).get(p, {})]
                nas = [r["peers"][p]["na"] for r in ok if "na" in r.get("peers", {}).get(p, {})]
                if not ran and not nas:
                    continue
                row["peers"][p] = dict(geomean=_geomean([achieved(r, r["peers"][p]["median_us"]) for r in ran]),
                                       ratio=_median([r["peers"][p]["ratio"] for r in ran]), n=len(ran),
                                       na=max(set(nas), key=nas.count) if nas else "")
            out[(s, metric)] = row
    return out


def _unit(metric):
    return "TFLOP/s" if metric == "flops" else "TB/s"


def _kit(kit):
    return "; ".join(f"{v}" for v in kit.values()) if isinstance(kit, dict) else str(kit)


def summary_markdown(records, env=None):
    """The table RESULTS.md opens with: per suite, kvattn, each peer, the ceiling, kvattn/peer."""
    rows = suite_rows(records)
    peers = [p for p in PEERS if any(p in r["peers"] for r in rows.values())]
    head = ("| suite | metric | ceiling | kvattn (of ceiling) | " + " | ".join(LABELS[p] for p in peers) + " |")
    lines = [head, "|---" * (4 + len(peers)) + "|"]
    for (s, metric), row in rows.items():
        unit, ceil = _unit(metric), ceiling(metric)
        kv = row["kvattn"]
        cells = [f"{s} {SUITE_TITLES.get(s, '')}", unit, f"{ceil:g}",
                 f"**{_num(kv)}** ({100 * kv / ceil:.0f}%)" if kv else f"no case ok ({row['n']} cases)"]
        for p in peers:
            pr = row["peers"].get(p)
            if pr is None:
                cells.append("-")
            elif pr["n"] == 0:
                cells.append("n/a: " + pr["na"].replace("|", "/")[:70])
            else:
                cells.append(f"{_num(pr['geomean'])} ({pr['ratio']:.2f}x, {pr['n']}/{row['n_ok']})")
        lines.append("| " + " | ".join(cells) + " |")
    notes = ["Each cell: the geomean over the suite's cases of the metric (the case's bytes or FLOPs / median "
             "time); for a peer, over the cases it ran, and in brackets the median over those cases of kvattn "
             "time / peer time (above 1: kvattn is slower) and how many cases it ran (k/n). Ceilings: H200 read "
             "stream 4.54 TB/s, dense bf16 807 TFLOP/s."]
    if env:
        notes.insert(0, f"Run: {env.get('card')}, commit {env.get('git')}, {env.get('date')}, torch {env.get('torch')}"
                     + (f", peer kit: {_kit(env['peer_kit'])}" if env.get("peer_kit") else "") + ".")
    return "\n".join(lines) + "\n\n" + "\n".join(notes) + "\n"


def suite_plots(records, out_dir):
    """One PNG per suite: kvattn and each peer, achieved metric per case, against the ceiling."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as exc:  # noqa: BLE001
        return [], f"suite plots skipped: matplotlib not importable ({exc})"
    made = []
    for s in SUITE_ORDER:
        ok = [r for r in records if r.get("suite") == s and r.get("status") == "ok" and "kvattn" in r]
        if not ok:
            continue
        metric = ok[0].get("metric", "bw")
        fig, ax = plt.subplots(figsize=(max(8, 0.2 * len(ok) + 4), 5))
        xs = range(len(ok))
        ax.bar(xs, [achieved(r, r["kvattn"]["median_us"]) for r in ok], color="C0", label="kvattn")
        for j, p in enumerate(PEERS):
            pts = [(i, achieved(r, r["peers"][p]["median_us"])) for i, r in enumerate(ok)
                   if "median_us" in r.get("peers", {}).get(p, {})]
            if pts:
                ax.plot([x for x, _ in pts], [y for _, y in pts], ls="none", marker="os^vD"[j % 5],
                        color=f"C{j + 1}", label=LABELS[p])
        ceil = ceiling(metric)
        ax.axhline(ceil, color="k", ls="--", label=f"ceiling {ceil:g} {_unit(metric)}")
        ax.set_xticks(list(xs), [r["case"] for r in ok], rotation=90, fontsize=5)
        ax.set_ylabel(f"achieved {_unit(metric)} (the case's {'FLOPs' if metric == 'flops' else 'bytes'} / time)")
        ax.set_title(f"{s} {SUITE_TITLES.get(s, '')}: kvattn and peers against the ceiling")
        ax.legend(fontsize=7, ncol=3)
        fig.tight_layout()
        name = f"suite_{s}.png"
        fig.savefig(os.path.join(out_dir, name), dpi=110)
        plt.close(fig)
        made.append(name)
    return made, "suite plots: " + (", ".join(made) if made else "nothing to plot")


SUMMARY_BEGIN = "<!-- SUMMARY:BEGIN (generated by python3 -m bench.report ... --results-md) -->"
SUMMARY_END = "<!-- SUMMARY:END -->"


def replace_summary(md_path, block):
    text = open(md_path).read()
    if SUMMARY_BEGIN not in text or SUMMARY_END not in text:
        raise SystemExit(f"{md_path}: the markers {SUMMARY_BEGIN!r} and {SUMMARY_END!r} are missing")
    head, rest = text.split(SUMMARY_BEGIN, 1)
    _, tail = rest.split(SUMMARY_END, 1)
    with open(md_path, "w") as f:
        f.write(head + SUMMARY_BEGIN + "\n" + block + SUMMARY_END + tail)


def load_jsonl(path):
    """A run's records; `.xz` files too (older runs' records in bench/results are kept compressed, so that
    the checkout a device call carries stays small)."""
    with (lzma.open(path, "rt") if path.endswith(".xz") else open(path)) as f:
        return [json.loads(line) for line in f if line.strip()]


def env_of(records):
    r = next((r for r in records if r.get("card")), records[0] if records else {})
    return {k: r.get(k) for k in ("card", "driver", "torch", "git", "date", "device", "peer_kit")}


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python3 -m bench.report", description=__doc__.split("\n\n")[0])
    ap.add_argument("jsonl", nargs="+", help="a run's results.jsonl (several: one run in several calls)")
    ap.add_argument("--out", default="", help="folder for summary.md, results.md and the plots (default: the JSON's)")
    ap.add_argument("--results-md", default="", help="replace this file's summary block (bench/RESULTS.md)")
    ap.add_argument("--plot-prefix", default="", help="path of the plots as RESULTS.md links them")
    args = ap.parse_args(argv)
    records = [r for path in args.jsonl for r in load_jsonl(path)]
    if not records:
        raise SystemExit(f"{' '.join(args.jsonl)}: no records")
    out = args.out or os.path.dirname(os.path.abspath(args.jsonl[0]))
    os.makedirs(out, exist_ok=True)
    here = os.path.join(os.path.abspath(out), "results.jsonl")  # (a kept .xz is not written out again)
    if len(args.jsonl) > 1 or os.path.abspath(args.jsonl[0]) not in (here, here + ".xz"):
        write_jsonl(os.path.join(out, "results.jsonl"), records)
    env = env_of(records)
    summary = summary_markdown(records, env)
    made, msg = suite_plots(records, out)
    with open(os.path.join(out, "summary.md"), "w") as f:
        f.write(summary)
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write(markdown(records, env))
    print(msg + "; " + plots(records, out))
    if args.results_md:
        prefix = args.plot_prefix or os.path.relpath(out, os.path.dirname(os.path.abspath(args.results_md)))
        links = ", ".join(f"[{m[len('suite_'):-len('.png')]}]({prefix}/{m})" for m in made)
        replace_summary(args.results_md, summary + (f"\nPlots, kvattn and each peer against the ceiling per "
                                                    f"case: {links}.\n" if links else ""))
        print(f"{args.results_md}: summary replaced")
    print(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
