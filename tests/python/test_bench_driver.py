"""The benchmark driver on the CPU backend: it runs its cases end to end, writes one JSON record per case
with the fields the report and RESULTS.md rely on, compares each case with its baseline, and re-times
cases at the end. (Speed itself is shown by the benchmark, never by tests.)"""
import json
import os
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir, os.pardir))


def run_driver(tmp_path, *args):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(ROOT, "python"), ROOT, env.get("PYTHONPATH", "")])
    out = tmp_path / "bench"
    proc = subprocess.run([sys.executable, "-m", "bench.run", "--device", "cpu", "--cpu-target-s", "0.02",
                           "--out", str(out), *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    records = [json.loads(line) for line in open(out / "results.jsonl")]
    return proc.stdout, records, out


def test_fp16_and_fused_append_cases_run_next_to_their_baselines(tmp_path):
    stdout, records, out = run_driver(tmp_path, "--suite", "W1", "--filter", "b8 32k p16+scat+lpad")
    by_name = {r["case"]: r for r in records}
    assert set(by_name) == {"W1 32/8 b8 32k p16+scat+lpad", "W1 32/8 b8 32k p16+scat+lpad append1+rotary"}
    for r in records:
        assert r["status"] == "ok", r["status"]
        assert r["kvattn"]["median_us"] > 0 and r["kvattn"]["p10_us"] <= r["kvattn"]["p90_us"]
        assert r["bytes"] > 0 and r["floor_us"] > 0 and r["dtype"] == "fp32"  # the CPU backend's dtype
    fused = by_name["W1 32/8 b8 32k p16+scat+lpad append1+rotary"]
    assert fused["baseline"] == "W1 32/8 b8 32k p16+scat+lpad"
    assert "repeat check: W1 32/8 b8 32k p16+scat+lpad:" in stdout
    assert (out / "results.md").read_text().count("| W1 32/8 b8 32k") == 2


def test_skewed_batch_compares_with_uniform(tmp_path):
    stdout, records, _ = run_driver(tmp_path, "--suite", "W2", "--filter", "b64")
    zipf = [r for r in records if "zipf" in r["case"]]
    assert zipf and all(r["baseline"] and "uniform" in r["baseline"] for r in zipf)
    assert all(r["status"] == "ok" for r in records)


def test_flashinfer_and_fa4_read_exactly_kvattns_keys():
    """The page view handed to FlashInfer (indptr / indices / last page) and FA4 (page table + seqused_k) covers,
    for every sequence of every case, exactly the cache slots that kvattn attends to, in order; left padding,
    which neither library can express, is refused by name."""
    sys.path.insert(0, ROOT)
    import numpy as np
    from bench import layouts as L
    from bench import paged_peers as PP
    from bench import suites as S

    checked = refused = 0
    for case in S.select(list(S.ORDER), cpu=True):
        plan = L.make_plan(case)
        if case.leftpad:
            try:
                PP.page_view(plan)
            except PP.Unavailable as exc:
                assert "cache_leftpad" in str(exc)
                refused += 1
                continue
            raise AssertionError(f"{case.name}: left padding accepted")
        pv = PP.page_view(plan)
        page = pv["page"]
        width = page if case.page else plan.capacity  # slots per page / per contiguous row
        for i in range(plan.b):
            idx0, idx1 = L.slot_index(plan, i)
            want = idx0 * width + idx1  # kvattn's slots of sequence i, as flat slot numbers
            pages = pv["indices"][pv["indptr"][i]:pv["indptr"][i + 1]]
            assert np.array_equal(pages, pv["rows"][i, :len(pages)]), case.name  # FA4's table row
            got = (pages[:, None].astype(np.int64) * page + np.arange(page)[None, :]).reshape(-1)[:pv["lens"][i]]
            assert pv["last_len"][i] == pv["lens"][i] - (len(pages) - 1) * page
            assert np.array_equal(got, want), f"{case.name}: sequence {i} reads other slots than kvattn"
        checked += 1
    assert checked > 100 and refused > 0
