"""bench/gpu_clock.py: the summary of the SM clock samples, and a sampler that stays silent without NVML."""
import json
import os
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, ROOT)

from bench import gpu_clock  # noqa: E402


def test_summary_of_samples():
    s = gpu_clock.summarize([(1980, 0), (1755, 0x4), (1740, 0x4 | 0x1), (1965, 0x4)])
    assert s["sm_clock_mhz"] == {"min": 1740, "median": 1965, "max": 1980, "samples": 4}
    assert s["power_capped"] == 0.75
    assert "power_w" not in s
    assert gpu_clock.summarize([]) == {}


def test_summary_of_power_samples():
    s = gpu_clock.summarize([(1980, 0, 412000), (1755, 0x4, 699500), (1740, 0x4, None), (1750, 0x4, 700250)])
    assert s["power_w"] == 699.5  # the median of the samples that have a reading (mW -> W)
    assert s["sm_clock_mhz"]["samples"] == 4


def test_sampler_without_nvml_gives_an_empty_summary(monkeypatch):
    monkeypatch.setattr(gpu_clock, "_nvml", False)  # as where libnvidia-ml cannot be loaded
    with gpu_clock.ClockSampler(0) as clock:
        pass
    assert clock.summary() == {}


def test_gpu_ab_prints_the_clock(tmp_path):
    rec = {"case": "W6 x", "kvattn": {"median_us": 3800.0, "p10_us": 3400.0, "sm_clock_mhz":
                                      {"min": 1740, "median": 1755, "max": 1980, "samples": 30},
                                      "power_capped": 0.8, "power_w": 690.4, "series_us": [3400.0, 3800.0]}}
    for name, t in (("a", 3800.0), ("b", 3420.0)):
        (tmp_path / name).mkdir()
        r = dict(rec, kvattn=dict(rec["kvattn"], median_us=t))
        (tmp_path / name / "results.jsonl").write_text(json.dumps(r) + "\n")
    out = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "gpu_ab.py"), str(tmp_path / "a"),
                          str(tmp_path / "b"), "--series"], capture_output=True, text=True, check=True).stdout
    assert "1755 MHz  80% 690 W" in out and " 0.900 " in out and "3400 3800" in out


class _FakeNvml:
    """NVML's four calls as the sampler makes them (ctypes.byref arguments carry their object in _obj)."""

    def __init__(self):
        self.reads = 0

    def nvmlDeviceGetHandleByIndex_v2(self, index, handle):
        handle._obj.value = 1234
        return 0

    def nvmlDeviceGetClockInfo(self, handle, clock, mhz):
        assert clock == gpu_clock.NVML_CLOCK_SM
        self.reads += 1
        mhz._obj.value = 1980 if self.reads < 3 else 1755
        return 0

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle, reasons):
        reasons._obj.value = 0 if self.reads < 3 else gpu_clock.SW_POWER_CAP
        return 0

    def nvmlDeviceGetPowerUsage(self, handle, milliwatts):
        milliwatts._obj.value = 450000 if self.reads < 3 else 700000
        return 0


def test_sampler_reads_the_clock_while_it_runs(monkeypatch):
    fake = _FakeNvml()
    monkeypatch.setattr(gpu_clock, "_nvml", fake)
    with gpu_clock.ClockSampler(0, period_s=0.001) as clock:
        while fake.reads < 6:
            pass
    s = clock.summary()
    assert s["sm_clock_mhz"]["max"] == 1980 and s["sm_clock_mhz"]["min"] == 1755
    assert 0 < s["power_capped"] < 1
    assert s["power_w"] in (450.0, 700.0)


def _replays(times_s):
    """A fake replay and clock: each replay takes the next of `times_s` (then the last, forever)."""
    from bench import timing
    state = {"t": 0.0, "i": 0}

    def run():
        state["t"] += times_s[min(state["i"], len(times_s) - 1)]
        state["i"] += 1

    return timing, run, (lambda: state["t"])


def test_settle_waits_for_a_clock_ramp_to_end():
    # 4 ms replays falling 0.2% a replay (the clock rising after a heavier load) for 1.5 s, then flat.
    ramp = [0.004 * 0.998 ** i for i in range(700)]  # (1.5 s of replays: 0.004 (1 - 0.998^700) / 0.002)
    timing, run, now = _replays(ramp)
    spent, n = timing.settle_replays(run, lambda: None, now=now, min_s=1.0, max_s=5.0)
    ramp_s = sum(ramp)
    assert ramp_s < spent < 5.0  # past the ramp, before the cap
    # the last two windows (>= 3 replays each) agree within the tolerance; a window earlier did not
    assert n > len(ramp)


def test_settle_stops_after_the_minimum_when_flat_and_at_the_cap_when_drifting():
    timing, run, now = _replays([0.002])
    spent, n = timing.settle_replays(run, lambda: None, now=now, min_s=1.0, max_s=5.0)
    assert 1.0 <= spent < 1.01 and n == 500
    drifting = [0.004 * (1 - 5e-5 * i) for i in range(2000)]  # never settles: 0.6% a 0.5-s window
    timing, run, now = _replays(drifting)
    spent, n = timing.settle_replays(run, lambda: None, now=now, min_s=1.0, max_s=5.0)
    assert 5.0 <= spent < 5.01


def test_is_settled_compares_the_last_two_windows():
    from bench import timing
    assert not timing.is_settled([])
    assert not timing.is_settled([0.1] * 5, window_s=0.5)  # 2 windows of 5 replays need 10
    assert timing.is_settled([0.1] * 10, window_s=0.5)
    assert not timing.is_settled([0.1] * 5 + [0.1006] * 5, window_s=0.5)  # 0.6% apart
    assert timing.is_settled([0.1] * 5 + [0.1004] * 5, window_s=0.5)


def test_settle_off_is_the_fixed_heat(monkeypatch):
    timing, run, now = _replays([0.01])
    monkeypatch.setattr(timing, "HEAT_S", 0.3)
    spent, n = timing.settle_replays(run, lambda: None, now=now, min_s=1.0, max_s=0)
    assert 0.3 <= spent < 0.311 and n == 30


def test_compute_bound_cases_are_timed_settled(monkeypatch):
    """bench.run times a FLOP/s case settled, a TB/s case with the fixed heat (kvattn and the peers alike)."""
    from types import SimpleNamespace

    from bench import run
    seen = []

    def fake_time_cuda(fns, torch, **kw):
        seen.append(kw.get("settle"))
        return {"median_us": 1.0}, 1.0

    monkeypatch.setattr(run.T, "time_cuda", fake_time_cuda)
    ctx = SimpleNamespace(device="cuda", torch=None)
    run._time([], ctx, metric="flops")
    run._time([], ctx, metric="bw")
    run._time([], ctx)
    assert seen == [True, False, False]
