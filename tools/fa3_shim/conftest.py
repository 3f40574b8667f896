"""pytest plugin for FA3's test file under tools/fa3_tests.sh: keeps a deterministic sample of each test
function's parameter cases (KVATTN_FA3_SAMPLE cases per function, drawn with the seed KVATTN_FA3_SEED;
0 = all), so that a run fits one device call. The test file itself is unmodified."""
import os
import random
from collections import defaultdict


def _work(item):
    """seqlen_q * seqlen_k of a case (the size of its attention), 0 when it has no such parameters."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    if "seqlen_q" in params and "seqlen_k" in params:
        return params["seqlen_q"] * params["seqlen_k"]
    return params.get("seqlen", 0) * params.get("num_splits", 1)


def pytest_collection_modifyitems(config, items):
    per_function = int(os.environ.get("KVATTN_FA3_SAMPLE", "0"))
    max_work = int(os.environ.get("KVATTN_FA3_MAX_WORK", "0"))  # the CPU backend: small cases only
    if max_work > 0:
        too_big = [item for item in items if _work(item) > max_work]
        items[:] = [item for item in items if _work(item) <= max_work]
        config.hook.pytest_deselected(items=too_big)
    if per_function <= 0:
        return
    groups = defaultdict(list)
    for item in items:
        groups[item.originalname if hasattr(item, "originalname") else item.name].append(item)
    rng = random.Random(int(os.environ.get("KVATTN_FA3_SEED", "0")))
    keep = set()
    for name in sorted(groups):
        cases = groups[name]
        keep.update(id(item) for item in rng.sample(cases, min(per_function, len(cases))))
    deselected = [item for item in items if id(item) not in keep]
    items[:] = [item for item in items if id(item) in keep]
    config.hook.pytest_deselected(items=deselected)


def pytest_configure(config):
    """KVATTN_FA3_DEVICE=cpu: run the file's "cuda" tensors on the CPU (kvattn's CPU backend), for a check
    without a GPU: a torch function mode turns device="cuda" into "cpu" in the tensor factories the tests
    call, and the device capability reads as sm_80 (so the fp8 cases, a CUDA feature, are left out)."""
    if os.environ.get("KVATTN_FA3_DEVICE") != "cpu":
        return
    import torch
    from torch.overrides import TorchFunctionMode

    class CudaIsCpu(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = dict(kwargs or {})
            device = kwargs.get("device")
            if device is not None and str(device).startswith("cuda"):
                kwargs["device"] = "cpu"
            return func(*args, **kwargs)

    torch.cuda.get_device_capability = lambda *args, **kwargs: (8, 0)
    CudaIsCpu().__enter__()
