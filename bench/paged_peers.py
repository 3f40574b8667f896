"""The peers that serving engines run on Hopper, called on kvattn's own paged inputs: FlashInfer
(BatchDecodeWithPagedKVCacheWrapper with tensor cores for one query token, also over an fp8 e4m3 cache under
bf16 q; BatchPrefillWithPagedKVCacheWrapper with the FA3 backend otherwise) and FlashAttention-4
(flash_attn.cute's varlen entry with page_table).

Same tensors as kvattn: the K/V caches of each input set (after kvattn's append), its page table rows (picked
by cache_batch_idx: a small int copy, never K/V). A contiguous cache is the same memory viewed as pages of
CONTIG_PAGE tokens. What neither library has: left padding (cache_leftpad); q is pre-rotated for rotary cases.

Setup (FlashInfer's plan, FA4's first call, which compiles its kernel) happens here, outside the timed
region: an engine plans once per step and reuses the plan across all layers, so the per-layer cost is run().
"""
import math
import os

import numpy as np

from . import layouts
from . import peerkit

# Environment: KVATTN_FI_PREFILL (FlashInfer's prefill backends in the order tried, default "fa3,fa2"),
# KVATTN_PEER_JIT=1 (let FlashInfer compile a module the kit lacks; needs a kit with its headers).
CONTIG_PAGE = 128  # FA4 loads whole pages by TMA when a page is one key tile (128 keys at d 128)
FI_WORKSPACE_BYTES = 512 << 20


class Unavailable(Exception):
    pass


_WS = {}


def _workspace(torch, device):
    """FlashInfer's float workspace (split-KV partial results), zeroed before its first use as it asks."""
    if device not in _WS:
        _WS[device] = torch.zeros(FI_WORKSPACE_BYTES, dtype=torch.uint8, device=device)
    return _WS[device]


def page_view(plan):
    """The valid keys of every sequence after kvattn's append, as pages of the caches kvattn reads (numpy).

    Returns dict(page, rows (b, pages per row) int32: the page ids of each sequence's row, lens (b,): keys,
    npages (b,), indptr (b + 1,), indices (sum npages,), last_len (b,)): FlashInfer's indptr / indices /
    last-page lengths and FA4's page table + seqused_k. Pages of a contiguous cache: that cache viewed as
    (rows * capacity / page, page, heads, d), row r's pages r * capacity / page + j."""
    c = plan.case
    if c.leftpad:
        raise Unavailable("left padding (cache_leftpad): no per-sequence start offset in its API")
    lens = plan.seqlen_k.astype(np.int64)  # slots [0, len) of each sequence's row after the append
    if c.page:
        page = c.page
        rows = plan.page_table[plan.rows]
    else:
        page = math.gcd(plan.capacity, CONTIG_PAGE)
        per_row = plan.capacity // page
        rows = plan.rows[:, None] * per_row + np.arange(per_row)[None, :]
    npages = -(-lens // page)
    return dict(page=page, rows=np.ascontiguousarray(rows, np.int32), lens=lens, npages=npages,
                indptr=np.concatenate([[0], np.cumsum(npages)]).astype(np.int32),
                indices=np.concatenate([rows[i, :n] for i, n in enumerate(npages)]).astype(np.int32),
                last_len=(lens - (npages - 1) * page).astype(np.int32))


class PageView:
    """page_view() on the device of an input set, and each set's caches as pages (views, no copy)."""

    def __init__(self, plan, kw, torch):
        pv = page_view(plan)
        self.page, self.lens = pv["page"], pv["lens"]
        self.device = dev = kw["k_cache"].device

        def t(a):
            return torch.from_numpy(np.ascontiguousarray(a, np.int32)).to(dev)
        self.table, self.seqused = t(pv["rows"]), t(pv["lens"])
        self.indptr, self.indices, self.last_len = t(pv["indptr"]), t(pv["indices"]), t(pv["last_len"])

    def caches(self, kw):
        """This input set's (K pages, V pages): its own caches, viewed as pages when contiguous."""
        k, v = kw["k_cache"], kw["v_cache"]
        return k.view(-1, self.page, *k.shape[2:]), v.view(-1, self.page, *v.shape[2:])


def _packed_q(plan, q):
    """(total query tokens, hq, d): the batch layout flattened (a view), or the varlen layout as it is."""
    return q if plan.varlen else q.reshape(-1, *q.shape[2:])


def _qo_indptr(plan, torch, dev):
    return torch.from_numpy(np.concatenate([[0], np.cumsum(plan.sq)]).astype(np.int32)).to(dev)


def _check(plan, torch):
    c = plan.case
    if c.qv:
        raise Unavailable("MLA (q + qv, d 64 + 512): not in this peer's paged GQA path")
    return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(c.dtype or "bf16")


# ---- FlashInfer

def _fi_module_ready(fi, backend, dtype, d, torch, kv_dtype=None):
    """True when the kit holds FlashInfer's prebuilt module for (backend, q/o dtype, K/V dtype (default q's), d)
    (or JIT is allowed)."""
    if os.environ.get("KVATTN_PEER_JIT") == "1":
        return True
    from flashinfer.jit.attention import modules as M
    args = (dtype, kv_dtype or dtype, dtype, torch.int32, d, d, 0, False, False, False)
    spec = (M._gen_batch_prefill_primary_module(backend, *args) if backend == "fa2"
            else M.gen_batch_prefill_module(backend, *args))
    return spec.aot_path.exists()


def make_flashinfer(plan, sets, qs, torch):
    """fns (one per input set) and a note; FlashInfer's wrappers planned once for all sets."""
    fi = peerkit.activate().get("fi")
    if isinstance(fi, str):
        raise Unavailable(fi)
    dtype = _check(plan, torch)
    c = plan.case
    view = PageView(plan, sets[0], torch)
    dev = view.device
    ws = _workspace(torch, dev)
    decode = not plan.varlen and int(plan.sq.max()) == 1
    fp8 = c.kv == "fp8"
    kv_dtype = torch.float8_e4m3fn if fp8 else dtype
    fns = []
    if decode:
        if not _fi_module_ready(fi, "fa2", dtype, c.d, torch, kv_dtype):
            what = "bf16 q / fp8 e4m3 K/V (kit group fa2_fp8kv)" if fp8 else c.dtype or "bf16"
            raise Unavailable(f"FlashInfer's FA2 module for {what} d{c.d} is not in the kit")
        # backend="fa2": the tensor-core kernel that "auto" picks for bf16/fp16, named so that no cuDNN
        # auto-selection can stand in for it. An fp8 cache: the same kernel, K/V e4m3 (no fp8 MMA: q is bf16),
        # with kvattn's per-tensor scale as k_scale / v_scale (floats in its API).
        w = fi.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD", use_tensor_cores=True, backend="fa2")
        w.plan(view.indptr, view.indices, view.last_len, c.hq, c.hk, c.d, view.page,
               q_data_type=dtype, kv_data_type=kv_dtype)
        scales = dict(k_scale=layouts.FP8_DESCALE, v_scale=layouts.FP8_DESCALE) if fp8 else {}
        for kw, q in zip(sets, qs):
            kv = view.caches(kw)
            qd = q.reshape(q.shape[0], c.hq, c.d)
            out = torch.empty_like(qd)
            fns.append(lambda w=w, qd=qd, kv=kv, out=out:
                       w.run(qd, kv, out=out, **scales).view(out.shape[0], 1, *out.shape[1:]))
        note = f"decode wrapper, tensor cores (fa2), page {view.page}"
        return fns, note + (f", fp8 e4m3 K/V (k_scale = v_scale = {layouts.FP8_DESCALE:g})" if fp8 else "")
    if fp8:
        raise Unavailable("fp8 cache: only FlashInfer's decode wrapper (one query token) is wired here")
    order = os.environ.get("KVATTN_FI_PREFILL", "fa3,fa2").split(",")  # e.g. "fa2": FA2 backend only
    backends = [b for b in order if b in ("fa3", "fa2") and _fi_module_ready(fi, b, dtype, c.d, torch)]
    if not backends:
        raise Unavailable(f"FlashInfer's prefill modules for {c.dtype or 'bf16'} d{c.d} are not in the kit")
    failed = ""
    for backend in backends:  # FA3 (what engines run on Hopper); FA2 if the kit lacks FA3 or FA3 fails here
        try:
            fns, note = _fi_prefill(fi, backend, plan, sets, qs, view, ws, dtype, torch)
            fns[0]()
            return fns, note + failed
        except Exception as exc:  # noqa: BLE001 - the next backend, the failure named in the note
            if backend == backends[-1]:
                raise
            first = str(exc).splitlines()[0][:80] if str(exc) else ""
            failed = f"; {backend} failed ({exc.__class__.__name__}: {first})"


def _fi_prefill(fi, backend, plan, sets, qs, view, ws, dtype, torch):
    c, dev, fns = plan.case, view.device, []
    qo = _qo_indptr(plan, torch, dev)
    if not c.page and not c.scattered and (view.lens == plan.capacity).all():
        # A contiguous cache that each sequence fills: the keys are packed as they are, which is FlashInfer's
        # ragged layout (what an engine uses for a prompt without a cached prefix).
        w = fi.BatchPrefillWithRaggedKVCacheWrapper(ws, "NHD", backend=backend)
        kv_indptr = torch.from_numpy(np.arange(plan.b + 1, dtype=np.int32) * plan.capacity).to(dev)
        w.plan(qo, kv_indptr, c.hq, c.hk, c.d, causal=bool(c.causal), q_data_type=dtype, kv_data_type=dtype)
        for kw, q in zip(sets, qs):
            k, v = (kw[n].view(-1, *kw[n].shape[2:]) for n in ("k_cache", "v_cache"))
            qp = _packed_q(plan, q)
            out = torch.empty_like(qp)
            fns.append(lambda w=w, qp=qp, k=k, v=v, out=out, shape=q.shape: w.run(qp, k, v, out=out).view(shape))
        return fns, f"ragged prefill wrapper (the contiguous cache as packed keys), {backend} backend"
    w = fi.BatchPrefillWithPagedKVCacheWrapper(ws, "NHD", backend=backend)
    w.plan(qo, view.indptr, view.indices, view.last_len, c.hq, c.hk, c.d, view.page, causal=bool(c.causal),
           q_data_type=dtype, kv_data_type=dtype)
    for kw, q in zip(sets, qs):
        kv = view.caches(kw)
        qp = _packed_q(plan, q)
        out = torch.empty_like(qp)
        fns.append(lambda w=w, qp=qp, kv=kv, out=out, shape=q.shape: w.run(qp, kv, out=out).view(shape))
    return fns, f"paged prefill wrapper, {backend} backend, page {view.page}"


# ---- FlashAttention-4

def make_fa4(plan, sets, qs, torch):
    fa4 = peerkit.activate().get("fa4")
    if isinstance(fa4, str):
        raise Unavailable(fa4)
    _check(plan, torch)
    c = plan.case
    view = PageView(plan, sets[0], torch)
    dev = view.device
    kwargs = dict(seqused_k=view.seqused, page_table=view.table, causal=bool(c.causal))
    if plan.varlen:
        kwargs.update(cu_seqlens_q=_qo_indptr(plan, torch, dev), max_seqlen_q=int(plan.sq.max()))
    note = f"varlen entry, page_table (page {view.page})"

    def call(q, kv, splits):
        out = fa4.flash_attn_varlen_func(q, kv[0], kv[1], num_splits=splits, **kwargs)
        return out[0] if isinstance(out, tuple) else out

    # num_splits=0: FA4's own heuristic (split-KV where the grid is small). Its sm90 path refuses split-KV;
    # then one split per sequence is what a caller gets, and the note says so.
    splits = 0
    kv0 = view.caches(sets[0])
    with torch.inference_mode():
        try:
            call(qs[0], kv0, splits)  # compiles the kernel (cached for the other sets)
        except AssertionError as exc:
            if "SplitKV" not in str(exc):
                raise
            splits = 1
            note += "; split-KV refused on sm90 (FA4), num_splits=1"
            call(qs[0], kv0, splits)
    fns = []
    for kw, q in zip(sets, qs):
        kv = view.caches(kw)

        def fn(q=q, kv=kv):
            with torch.inference_mode():
                return call(q, kv, splits)
        fns.append(fn)
    return fns, note


MAKERS = {"flashinfer": make_flashinfer, "fa4": make_fa4}
