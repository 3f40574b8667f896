"""The SM clock while a GPU timing runs, from NVML (the driver's libnvidia-ml, through ctypes: no Python
package needed). On the H200 the first ~second of tensor-core load runs at 1,980 MHz, then the SW power cap
holds the clock near 1,750 (bench/NOTES.md, session 23), so a record says which clock its samples saw, and
the board's power draw beside it: two kernels at the same cap differ in clock by their energy per operation.

    with ClockSampler(device_index) as clock:
        ... the timed replays ...
    record.update(clock.summary())   # {} where NVML is missing

The sampler is a host thread reading the clock and the throttle reasons every `period_s`; it never raises
(a failure leaves the summary empty)."""
import ctypes
import threading
import time

NVML_CLOCK_SM = 1
SW_POWER_CAP = 0x4  # nvmlClocksEventReasonSwPowerCap
_nvml = None


def _lib():
    """libnvidia-ml, initialized once; None where it cannot be loaded or initialized."""
    global _nvml
    if _nvml is None:
        try:
            lib = ctypes.CDLL("libnvidia-ml.so.1")
            _nvml = lib if lib.nvmlInit_v2() == 0 else False
        except (OSError, AttributeError):
            _nvml = False
    return _nvml or None


def summarize(samples):
    """{sm_clock_mhz: {min, median, max, samples}, power_capped: share of samples under the SW power cap,
    power_w: median board power (where the samples have it)}, or {} without samples. samples: (clock MHz,
    throttle reason bits[, power mW or None])."""
    if not samples:
        return {}
    clocks = sorted(s[0] for s in samples)
    capped = sum(1 for s in samples if s[1] & SW_POWER_CAP) / len(samples)
    out = {"sm_clock_mhz": {"min": clocks[0], "median": clocks[len(clocks) // 2], "max": clocks[-1],
                            "samples": len(clocks)},
           "power_capped": round(capped, 3)}
    watts = sorted(s[2] / 1000.0 for s in samples if len(s) > 2 and s[2] is not None)
    if watts:
        out["power_w"] = round(watts[len(watts) // 2], 1)
    return out


class ClockSampler:
    def __init__(self, device_index=0, period_s=0.02):
        self.samples = []
        self._stop = threading.Event()
        self._thread = None
        self._period = period_s
        lib = _lib()
        self._handle = None
        if lib is not None:
            handle = ctypes.c_void_p()
            # (the newer name of the throttle reasons first; the older one is deprecated, not removed)
            self._reasons = getattr(lib, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
                lib, "nvmlDeviceGetCurrentClocksThrottleReasons", None)
            self._power = getattr(lib, "nvmlDeviceGetPowerUsage", None)  # (optional: no power, no power_w)
            ok = self._reasons is not None and lib.nvmlDeviceGetHandleByIndex_v2(
                ctypes.c_uint(device_index), ctypes.byref(handle)) == 0
            if ok:
                self._lib, self._handle = lib, handle

    def _read(self):
        mhz, reasons = ctypes.c_uint(), ctypes.c_ulonglong()
        if self._lib.nvmlDeviceGetClockInfo(self._handle, NVML_CLOCK_SM, ctypes.byref(mhz)) != 0:
            return None
        if self._reasons(self._handle, ctypes.byref(reasons)) != 0:
            reasons.value = 0
        milliwatts = ctypes.c_uint()
        ok = self._power is not None and self._power(self._handle, ctypes.byref(milliwatts)) == 0
        return mhz.value, reasons.value, (milliwatts.value if ok else None)

    def _run(self):
        try:
            while not self._stop.is_set():
                s = self._read()
                if s is not None:
                    self.samples.append(s)
                time.sleep(self._period)
        except Exception:  # noqa: BLE001 - a sampler must not break the timing
            pass

    def __enter__(self):
        if self._handle is not None:
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=1.0)
        return False

    def summary(self):
        return summarize(list(self.samples))
