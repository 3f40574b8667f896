"""Peers run side by side with kvattn on the same inputs (a gathered contiguous copy where they cannot take
the layout): torch SDPA with the cuDNN backend, the FlashAttention-2 kernel of torch (SDPA's flash backend,
or its op directly for bottom-right causal and ragged lengths, which SDPA cannot express), flex_attention.
FlashInfer and FlashAttention-4 take kvattn's paged inputs themselves: bench/paged_peers.py (from the
offline peer kit, bench/peerkit.py).

make_peer() returns (fn, note) with fn() -> output in kvattn's layout, or raises Unavailable(reason).
"""
import time

PEERS = ["flashinfer", "fa4", "cudnn", "flash", "flex"]
PAGED = {"flashinfer", "fa4"}  # run on kvattn's own caches and page tables (bench/paged_peers.py)
LABELS = {"flashinfer": "FlashInfer", "fa4": "FA4", "cudnn": "SDPA cuDNN", "flash": "SDPA flash (FA2)",
          "flex": "flex_attention"}


class Unavailable(Exception):
    pass


# The peers that take no fp8 e4m3 KV cache under bf16 q (the W1/W2 fp8kv cases); FlashInfer's decode does.
FP8_KV_NA = {
    "fa4": "fp8 cache, bf16 q: FA4 takes q, k, v of one dtype (fp8: SM100 only)",
    "cudnn": "fp8 cache, bf16 q: SDPA takes q, k, v of one dtype",
    "flash": "fp8 cache, bf16 q: FA2 takes fp16 / bf16 only",
    "flex": "fp8 cache, bf16 q: flex_attention takes q, k, v of one dtype",
}


def unsupported(name, plan):
    """Why peer `name` cannot run this case at all, decided before any input is made for it ('' = it may try)."""
    if plan.case.kv == "fp8":
        return FP8_KV_NA.get(name, "")
    return ""


def _torch():
    try:
        import torch
        return torch
    except Exception as exc:  # noqa: BLE001
        raise Unavailable(f"torch not importable ({exc})") from None


def _sdpa_inputs(g, case, torch):
    """(q, k, v) as (B, H, L, D) views for SDPA; MLA folds qv into q and v into k (d 576)."""
    q, k, v = g.q, g.k, g.v
    if case.qv:
        q = torch.cat([q, g.qv], dim=-1)
        k = torch.cat([k, v], dim=-1)
    return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)


def _mask(g, case, torch, device):
    """Boolean (B, 1, sq, Lmax) mask (True = attend): lengths and bottom-right causal; None if not needed."""
    sq, lmax = int(g.sq[0]), int(g.lens.max())
    causal_cut = case.causal and sq > 1
    if g.equal and not causal_cut:
        return None
    lens = torch.from_numpy(g.lens).to(device)
    kp = torch.arange(lmax, device=device)
    t = torch.arange(sq, device=device)
    m = kp[None, None, :] < lens[:, None, None]
    if case.causal:
        m = m & (kp[None, None, :] <= (t[None, :, None] + lens[:, None, None] - sq))
    return m[:, None]


def _to_kvattn_layout(o):
    return o.transpose(1, 2)  # (B, H, sq, dv) -> (B, sq, H, dv)


def make_peer(name, plan, g, flex_state=None, dry_run=False):
    torch = _torch()
    if plan.varlen and name != "flash":
        raise Unavailable("varlen query batch (mixed chunk + decodes)")
    if not dry_run and getattr(g.q, "device", None) is not None and g.q.device.type != "cuda":
        raise Unavailable("no CUDA device")
    if name == "cudnn":
        return _sdpa(plan, g, torch, "CUDNN_ATTENTION", dry_run)
    if name == "flash":
        return _flash(plan, g, torch, dry_run)
    if name == "flex":
        return _flex(plan, g, torch, flex_state, dry_run)
    raise Unavailable(f"unknown peer {name}")


def _sdpa(plan, g, torch, backend_name, dry_run):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F
    case = plan.case
    if g.k is None:
        raise Unavailable("the padded copy would be too large (ragged lengths)")
    q, k, v = _sdpa_inputs(g, case, torch)
    mask = _mask(g, case, torch, q.device)
    sq, lk = q.shape[2], k.shape[2]
    is_causal = bool(case.causal and sq == lk and g.equal)
    if is_causal:
        mask = None
    backend = getattr(SDPBackend, backend_name)
    note = "mask" if mask is not None else ""

    def fn():
        if dry_run:
            return _to_kvattn_layout(F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal,
                                                                     enable_gqa=True))
        with sdpa_kernel(backend):
            return _to_kvattn_layout(F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal,
                                                                     enable_gqa=True))
    return fn, note


def _flash(plan, g, torch, dry_run):
    case = plan.case
    if case.qv:
        raise Unavailable("head dim 576 (MLA) is over FA2's 256")
    sq0 = int(g.sq[0])
    plain_sdpa = (not plan.varlen and g.equal and g.k is not None
                  and (not case.causal or sq0 == 1 or sq0 == int(g.lens[0])))
    if plain_sdpa or dry_run:
        if g.k is None:
            raise Unavailable("the padded copy would be too large (ragged lengths)")
        fn, note = _sdpa(plan, g, torch, "FLASH_ATTENTION", dry_run)
        return fn, note
    # FA2 through torch's op: bottom-right causal (dense), or ragged lengths (packed varlen).
    op = getattr(torch.ops.aten, "_flash_attention_forward", None)
    if op is None:
        raise Unavailable("torch.ops.aten._flash_attention_forward missing")
    from .layouts import cu
    if g.equal and not plan.varlen:
        q, k, v = g.q, g.k, g.v
        lk = int(g.lens[0])

        def fn():
            return op(q, k, v, None, None, sq0, lk, 0.0, bool(case.causal), False)[0]
        return fn, "aten op, bottom-right causal"
    dev = g.q.device
    q = g.q.reshape((-1,) + tuple(g.q.shape[-2:]))
    cq = torch.from_numpy(cu(g.sq)).to(dev)
    ck = torch.from_numpy(cu(g.lens)).to(dev)
    mq, mk = int(g.sq.max()), int(g.lens.max())
    kp, vp = g.k_packed, g.v_packed
    shape = tuple(g.q.shape[:-1]) + (case.dv,)

    def fn():
        return op(q, kp, vp, cq, ck, mq, mk, 0.0, bool(case.causal), False)[0].reshape(shape)
    return fn, "aten varlen op"


def _flex(plan, g, torch, state, dry_run):
    if state is None:
        state = {}
    if state.get("disabled"):
        raise Unavailable(state["disabled"])
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    except Exception as exc:  # noqa: BLE001
        raise Unavailable(f"flex_attention not importable ({exc})") from None
    if g.k is None:
        raise Unavailable("the padded copy would be too large (ragged lengths)")
    budget = state.get("budget_s", 90.0)
    if state.get("spent_s", 0.0) > budget:
        raise Unavailable(f"skipped: flex compile budget ({budget:.0f} s) spent")
    case = plan.case
    if "compiled" not in state:
        import torch._dynamo
        for attr in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit",
                     "accumulated_recompile_limit"):
            if hasattr(torch._dynamo.config, attr):
                setattr(torch._dynamo.config, attr, 4096)
        state["compiled"] = flex_attention if dry_run else torch.compile(flex_attention, dynamic=False)
    flex = state["compiled"]
    q, k, v = _sdpa_inputs(g, case, torch)
    sq, lmax = q.shape[2], k.shape[2]
    block_mask = None
    if not g.equal or (case.causal and sq > 1):
        lens = torch.from_numpy(g.lens).to(q.device)
        causal = case.causal

        def mask_mod(b, h, q_idx, kv_idx):
            ok = kv_idx < lens[b]
            if causal:
                ok = ok & (kv_idx <= q_idx + lens[b] - sq)
            return ok
        block_mask = create_block_mask(mask_mod, q.shape[0], None, sq, lmax, device=q.device)

    def fn():
        return _to_kvattn_layout(flex(q, k, v, block_mask=block_mask, enable_gqa=True))
    t0 = time.perf_counter()
    try:
        fn()  # compiles (for this shape) outside any timing
        if not dry_run:
            torch.cuda.synchronize()
    finally:
        state["spent_s"] = state.get("spent_s", 0.0) + time.perf_counter() - t0
    return fn, "compiled" + (", block mask" if block_mask is not None else "")


def relerr(a, b, torch):
    """||a - b|| / ||b|| in float32 (a peer's output against kvattn's)."""
    a = a.float().reshape(-1)
    b = b.float().reshape(-1)
    return float((a - b).norm() / b.norm().clamp_min(1e-30))
