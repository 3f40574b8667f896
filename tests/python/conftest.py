"""Collection: the tests that need a device this machine lacks (torch, a GPU with a CUDA build) are
deselected at collection, not skipped one by one, and the summary says how many and why in one line each.

A test says what it needs with a skipif mark (harness.DEVICES, or a module's pytestmark) whose reason is
one of NEEDS below; other skips (a dtype a backend lacks) stay ordinary skips with their reasons.
KVATTN_KEEP_DEVICE_SKIPS=1 keeps them all as skips instead.
"""
import os

# reason -> where such tests run
NEEDS = {"needs torch": "torch is not importable here",
         "needs torch, a GPU and a CUDA build": "no GPU with a CUDA build here; tools/gpu_check.sh runs them on the "
                                                "GPU machine"}

_deselected = {}  # reason -> count


def _device_reason(item):
    for mark in item.iter_markers("skipif"):
        reason = mark.kwargs.get("reason", "")
        if reason in NEEDS and mark.args and all(bool(condition) for condition in mark.args):
            return reason
    return None


def pytest_collection_modifyitems(config, items):
    if os.environ.get("KVATTN_KEEP_DEVICE_SKIPS"):
        return
    kept, dropped = [], []
    for item in items:
        reason = _device_reason(item)
        if reason is None:
            kept.append(item)
        else:
            dropped.append(item)
            _deselected[reason] = _deselected.get(reason, 0) + 1
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def pytest_terminal_summary(terminalreporter):
    for reason, count in sorted(_deselected.items()):
        terminalreporter.write_line(f"kvattn: {count} tests deselected: {reason} ({NEEDS[reason]})")
