"""The benchmark driver on the CPU backend: it runs its cases end to end, writes one JSON record per case
with the fields the report and RESULTS.md rely on, compares each case with its baseline, and re-times
cases at the end. (Speed itself is shown by the benchmark, never by tests.)"""
import json
import os
import subprocess
import sys

import pytest

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


FP8_CASES = {"W1 32/8 b1 4k p16 short fp8kv": "W1 32/8 b1 4k p16 short",
             "W1 32/8 b1 128k p16 fp8kv": "W1 32/8 b1 128k p16", "W1 32/8 b4 32k p16 fp8kv": "W1 32/8 b4 32k p16",
             "W1 32/8 b16 32k p16 fp8kv": "W1 32/8 b16 32k p16", "W1 32/8 b16 128k p16 fp8kv": "W1 32/8 b16 128k p16",
             "W2 32/8 b64 uniform p16 fp8kv": "W2 32/8 b64 uniform p16",
             "W2 32/8 b128 uniform p16 fp8kv": "W2 32/8 b128 uniform p16",
             "W2 32/8 b128 zipf p16 fp8kv": "W2 32/8 b128 zipf p16",
             "W2 32/8 b256 uniform p16 fp8kv": "W2 32/8 b256 uniform p16"}


def test_fp8_cache_cases_count_fp8_bytes_and_draw_their_baselines_inputs():
    """Each fp8-cache case names its bf16 baseline of the same shape, counts 1 byte a cached K/V element (half the
    baseline's K/V bytes, the same Q/O bytes), and runs on the baseline's inputs: the same lengths and page table,
    q the same draws, K/V the same draws rounded to e4m3 after / FP8_DESCALE, the descales given as (b, hk)."""
    sys.path.insert(0, ROOT)
    import ml_dtypes
    import numpy as np
    from bench import layouts as L
    from bench import suites as S

    cases = {c.name: c for c in S.select(["W1", "W2"])}
    fp8 = {n: c for n, c in cases.items() if c.kv}
    assert set(fp8) == set(FP8_CASES)
    assert [n for n, c in fp8.items() if c.quick] == ["W1 32/8 b4 32k p16 fp8kv"]
    for name, case in fp8.items():
        base = cases[FP8_CASES[name]]
        # (the short decode is latency-bound: no speedup target)
        target = 0.0 if "short" in name else S.FP8_KV_SPEEDUP
        assert case.baseline == base.name and not base.kv and case.speedup == target and S.FP8_KV_SPEEDUP == 1.8
        assert case.layout == base.layout + "+fp8kv" and case.suite == base.suite
        plan, bplan = L.make_plan(case), L.make_plan(base)
        assert np.array_equal(plan.page_table, bplan.page_table) and np.array_equal(plan.cached, bplan.cached)
        kv, qo = L.byte_parts(plan, "bf16")
        bkv, bqo = L.byte_parts(bplan, "bf16")
        assert 2 * kv == bkv and qo == bqo and L.count(plan, "bf16")[0] == kv + qo
        slots = plan.num_pages * case.page * case.hk * (case.d + case.dv)  # elements of the caches, spare pages too
        assert L.set_bytes(bplan, "bf16") - L.set_bytes(plan, "bf16") == slots  # 2 bytes an element, then 1
    case, base = (S.cpu_scaled(cases[n]) for n in ("W1 32/8 b4 32k p16 fp8kv", "W1 32/8 b4 32k p16"))
    kw = L.materialize(L.make_plan(case), L.NumpyBackend(L.seed_of(case.seed_name), case.kv))
    bkw = L.materialize(L.make_plan(base), L.NumpyBackend(L.seed_of(base.seed_name), base.kv))
    fp8_dtype, bf16 = np.dtype(ml_dtypes.float8_e4m3fn), np.dtype(ml_dtypes.bfloat16)
    assert kw["q"].dtype == bf16 and kw["out"].dtype == bf16 and kw["k_cache"].dtype == fp8_dtype
    assert np.array_equal(kw["q"], bkw["q"].astype(bf16))
    for name in ("k_cache", "v_cache"):
        assert np.array_equal(kw[name], (bkw[name] / np.float32(L.FP8_DESCALE)).astype(fp8_dtype))
    assert kw["k_descale"].shape == (case.batch, case.hk) and (kw["v_descale"] == L.FP8_DESCALE).all()


def test_fp8_cache_case_runs_on_cpu_checked_against_the_oracle(tmp_path):
    """One fp8-cache case and its baseline on the CPU backend (bf16 q over an e4m3 cache there too): the fp8 case
    passes its oracle check, and its record gives the baseline time / its time against the 1.8x target."""
    stdout, records, out = run_driver(tmp_path, "--suite", "W1", "--filter",
                                      "=W1 32/8 b4 32k p16|=W1 32/8 b4 32k p16 fp8kv")
    by_name = {r["case"]: r for r in records}
    assert set(by_name) == {"W1 32/8 b4 32k p16", "W1 32/8 b4 32k p16 fp8kv"}
    fp8, base = by_name["W1 32/8 b4 32k p16 fp8kv"], by_name["W1 32/8 b4 32k p16"]
    assert fp8["status"] == "ok" and base["status"] == "ok", (fp8["status"], base["status"])
    assert fp8["check"]["ok"] is True and "PASS" in fp8["check"]["lines"][-1], fp8["check"]
    assert "check" not in base  # only the fp8 cases are checked per case
    assert (fp8["dtype"], fp8["kv_dtype"], base["dtype"], base["kv_dtype"]) == ("bf16", "fp8", "fp32", "fp32")
    assert fp8["layout"] == "paged16+fp8kv" and fp8["baseline"] == base["case"] and fp8["speedup_target"] == 1.8
    assert abs(fp8["speedup"] - base["kvattn"]["median_us"] / fp8["kvattn"]["median_us"]) < 1e-9
    assert fp8["speedup_met"] == (fp8["speedup"] >= 1.8)
    assert "the tokens/s of W1 32/8 b4 32k p16 (target >= 1.8x" in (out / "results.md").read_text()
    assert "speedup over baseline" in stdout


def test_fp8_check_fails_on_a_wrong_output():
    """The per-case oracle check can fail: kvattn's output off by 0.1 in one element of a checked sequence."""
    sys.path.insert(0, ROOT)
    import kvattn
    from bench import case_check as CC
    from bench import run as R
    from bench import suites as S

    class OffByOne:
        KvattnError = kvattn.KvattnError

        def flash_attn_with_kvcache(self, **kw):
            kvattn.flash_attn_with_kvcache(**kw)
            kw["out"][0, 0, 0, 0] += 0.1

    ctx = R.Ctx("cpu", None, R.parse(["--device", "cpu"]))
    case = S.select(["W1"], cpu=True, filt="=W1 32/8 b4 32k p16 fp8kv")[0]
    ok, lines = CC.check_case(case, ctx, 1)
    assert ok is True, lines
    ctx.kvattn = OffByOne()
    ok, lines = CC.check_case(case, ctx, 1)
    assert ok is False and "FAIL" in lines[-1], lines


def test_peers_without_an_fp8_cache_say_why():
    sys.path.insert(0, ROOT)
    from bench import layouts as L
    from bench import peers as P
    from bench import suites as S

    fp8 = L.make_plan(S.select(["W1"], cpu=True, filt="=W1 32/8 b4 32k p16 fp8kv")[0])
    bf16 = L.make_plan(S.select(["W1"], cpu=True, filt="=W1 32/8 b4 32k p16")[0])
    assert P.unsupported("flashinfer", fp8) == ""  # FlashInfer's decode takes an e4m3 cache under bf16 q
    for name in ("fa4", "cudnn", "flash", "flex"):
        assert P.unsupported(name, fp8).startswith("fp8 cache, bf16 q: ") and P.unsupported(name, bf16) == ""


def _torch_importable():
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.skipif(not _torch_importable(), reason="needs torch")
def test_fp8_case_through_torch_tensors_passes_its_check():
    """The GPU's input path on torch CPU tensors (the dry run): e4m3 caches under bf16 q, poisoned through their
    bytes, gathered for the oracle through uint8 views; the check passes."""
    sys.path.insert(0, ROOT)
    import torch
    from bench import case_check as CC
    from bench import layouts as L
    from bench import run as R
    from bench import suites as S

    ctx = R.Ctx("cpu", torch, R.parse(["--device", "cpu", "--torch-cpu"]))
    case = S.select(["W1"], cpu=True, filt="=W1 32/8 b4 32k p16 fp8kv")[0]
    plan = L.make_plan(case)
    kw = L.materialize(plan, ctx.backend(3, case), poison=True)
    assert kw["q"].dtype == torch.bfloat16 and kw["k_cache"].dtype == torch.float8_e4m3fn
    assert kw["v_cache"].view(torch.uint8).eq(L.FP8_NAN_BITS).any()  # the spare pages
    ok, lines = CC.check_case(case, ctx, 3)
    assert ok is True, lines


def test_prefill_check_takes_the_last_rows_at_their_positions(monkeypatch):
    """A chunked prefill case (append + rotary, causal, fp8 cache) checked on its last rows only: the oracle
    sees them at their own positions (causal bottom-right, rotary start moved), so the check passes, and an
    error in a checked row fails it."""
    sys.path.insert(0, ROOT)
    import kvattn
    from bench import case_check as CC
    from bench import run as R
    from bench import suites as S

    class OffInLastRow:
        KvattnError = kvattn.KvattnError

        def flash_attn_with_kvcache(self, **kw):
            kvattn.flash_attn_with_kvcache(**kw)
            kw["out"][0, -1, 0, 0] += 0.1

    monkeypatch.setattr(CC, "CHECK_ROWS", 8)
    ctx = R.Ctx("cpu", None, R.parse(["--device", "cpu"]))
    case = S.select(["W3"], cpu=True, filt="=W3 32/8 b1 +2048 over 32k p16 fp8kv")[0]
    ok, lines = CC.check_case(case, ctx, 1)
    assert ok is True and "query rows 24-31 of 32" in lines[0], lines
    ctx.kvattn = OffInLastRow()
    ok, lines = CC.check_case(case, ctx, 1)
    assert ok is False and "FAIL" in lines[-1], lines
