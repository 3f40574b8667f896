"""Records out: JSON lines, a markdown table, and PNG plots (when matplotlib is importable)."""
import json
import os

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
    if r.get("vs_baseline") is not None:
        extra.append(f"{r['vs_baseline']:.2f}x {r['baseline']}")
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
             "Peers take no page table, batch index, left padding, append or rotary: they run on a gathered "
             "contiguous copy of the valid keys (after kvattn's append), with q pre-rotated.\n"]
    if any(r.get("shapes", {}).get("scaled_for_cpu") for r in records):
        lines.append("CPU backend: shapes scaled down (tokens / 64, batch <= 4, <= 2 KV heads); names keep the GPU "
                     "shapes, `shapes` in results.jsonl has the real ones. Ceiling fractions are the GPU's.\n")
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
