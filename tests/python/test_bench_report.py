"""bench/report.py's summary (the table RESULTS.md opens with) from JSON records, without a GPU: geomeans of
the suite metric for kvattn and each peer, the median kvattn/peer ratio, n/a reasons, a suite with two
metrics split in two rows, and the replacement of RESULTS.md's summary block."""
import math
import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir, os.pardir))
sys.path.insert(0, ROOT)

from bench import report as R  # noqa: E402


def rec(suite, case, metric, kv_us, peers, nbytes=4.54e6, flops=807e6):
    out = {}
    for name, us in peers.items():
        out[name] = {"na": us} if isinstance(us, str) else {"median_us": us, "ratio": kv_us / us}
    return dict(suite=suite, case=case, metric=metric, status="ok", bytes=nbytes, flops=flops,
                kvattn={"median_us": kv_us}, peers=out)


def test_summary_rows_geomeans_ratios_and_reasons():
    records = [
        rec("W1", "a", "bw", 2.0, {"flashinfer": 1.0, "fa4": "left padding (cache_leftpad): no"}),
        rec("W1", "b", "bw", 8.0, {"flashinfer": 2.0, "fa4": 4.0}),
        rec("W5", "c", "flops", 4.0, {"fa4": "MLA (q + qv)"}),
        rec("W5", "d", "bw", 1.0, {}),
        dict(suite="W1", case="e", metric="bw", status="error: boom", peers={}),
    ]
    rows = R.suite_rows(records)
    assert set(rows) == {("W1", "bw"), ("W5", "flops"), ("W5", "bw")}
    w1 = rows[("W1", "bw")]
    # 4.54e6 bytes in 2 us = 2.27 TB/s, in 8 us = 0.5675 TB/s: geomean sqrt(2.27 * 0.5675)
    assert math.isclose(w1["kvattn"], math.sqrt(2.27 * 0.5675), rel_tol=1e-9)
    assert (w1["n"], w1["n_ok"]) == (3, 2)
    fi = w1["peers"]["flashinfer"]
    assert fi["n"] == 2 and math.isclose(fi["ratio"], 3.0)  # ratios 2 and 4
    assert math.isclose(fi["geomean"], math.sqrt(4.54 * 2.27), rel_tol=1e-9)
    assert w1["peers"]["fa4"]["n"] == 1 and math.isclose(w1["peers"]["fa4"]["ratio"], 2.0)
    assert rows[("W5", "flops")]["peers"]["fa4"] == dict(geomean=None, ratio=None, n=0, na="MLA (q + qv)")
    md = R.summary_markdown(records)
    lines = md.splitlines()
    assert lines[0].startswith("| suite | metric | ceiling | kvattn (of ceiling) | FlashInfer | FA4 |")
    w5 = [ln for ln in lines if ln.startswith("| W5")]
    assert len(w5) == 2
    w5_flops = [ln for ln in w5 if "| TFLOP/s |" in ln]
    assert len(w5_flops) == 1 and "n/a: MLA (q + qv)" in w5_flops[0]
    assert "(3.00x, 2/2)" in md  # FlashInfer's median ratio over its 2 of 2 cases


def test_results_md_summary_block_is_replaced(tmp_path):
    md = tmp_path / "RESULTS.md"
    md.write_text(f"# r\n\n{R.SUMMARY_BEGIN}\nold table\n{R.SUMMARY_END}\n\n## Details\nkept\n")
    R.replace_summary(str(md), "new table\n")
    text = md.read_text()
    assert "old table" not in text and "new table" in text and text.endswith("## Details\nkept\n")
    bare = tmp_path / "bare.md"
    bare.write_text("no markers\n")
    try:
        R.replace_summary(str(bare), "x")
    except SystemExit as exc:
        assert "markers" in str(exc)
    else:
        raise AssertionError("a file without the markers was accepted")


def test_speedup_target_row_states_tokens_per_second_over_the_baseline():
    """An fp8-cache record: the note gives baseline time / its time against the target, met or not; a record
    without a target keeps its time ratio."""
    def full(case, kv_us, **extra):
        r = rec("W1", case, "bw", kv_us, {"fa4": "fp8 cache, bf16 q: FA4 takes q, k, v of one dtype"})
        r.update(layout="paged16+fp8kv", tbps=1.0, bw_frac=0.2, tflops=0.1, flop_frac=0.0, **extra)
        r["kvattn"].update(p10_us=kv_us, p90_us=kv_us)
        return r
    met = full("W1 32/8 b4 32k p16 fp8kv", 50.0, baseline="W1 32/8 b4 32k p16", vs_baseline=0.5, speedup=2.0,
               speedup_target=1.8, speedup_met=True, check={"ok": True, "lines": []})
    missed = full("W1 32/8 b16 32k p16 fp8kv", 80.0, baseline="W1 32/8 b16 32k p16", vs_baseline=0.625,
                  speedup=1.6, speedup_target=1.8, speedup_met=False)
    plain = full("W2 32/8 b64 zipf p16", 90.0, baseline="W2 32/8 b64 uniform p16", vs_baseline=1.05)
    assert "2.00x the tokens/s of W1 32/8 b4 32k p16 (target >= 1.8x: met); oracle check PASS" in R.row(met)
    assert "1.60x the tokens/s of W1 32/8 b16 32k p16 (target >= 1.8x: NOT met)" in R.row(missed)
    assert "n/a: fp8 cache, bf16 q: FA4 takes q, k, v of one dtype" in R.row(met)
    assert "1.05x W2 32/8 b64 uniform p16" in R.row(plain) and "tokens/s" not in R.row(plain)


def test_records_load_from_plain_and_xz_files(tmp_path):
    """Older runs' records are kept as results.jsonl.xz: load_jsonl reads both forms alike."""
    import json
    import lzma
    records = [rec("W1", "a", "bw", 2.0, {"flashinfer": 1.0}), rec("W6", "b", "flops", 3.0, {})]
    text = "".join(json.dumps(r) + "\n" for r in records) + "\n"
    (tmp_path / "r.jsonl").write_text(text)
    with lzma.open(tmp_path / "r.jsonl.xz", "wt") as f:
        f.write(text)
    assert R.load_jsonl(str(tmp_path / "r.jsonl")) == records
    assert R.load_jsonl(str(tmp_path / "r.jsonl.xz")) == records
