"""From a case to tensors: lengths, page tables, batch indices, left padding, append, rotary; bytes and FLOPs;
and the gathered contiguous copy that the peers run on.

The structure of a case (lengths, tables) is made in numpy; the data (q, caches, new tokens) by a backend:
numpy float32 for the CPU backend, torch (bf16 on CUDA) otherwise. An fp8 cache (case.kv == "fp8") holds the
same normal draws rounded to e4m3 (divided by FP8_DESCALE first), under bf16 q on either backend.
"""
import zlib
from dataclasses import dataclass

import numpy as np

ROTARY_INTERLEAVED = False  # GPT-NeoX / Llama pairs (m, m + rotary_dim / 2)
MAX_LEFTPAD = 256
# The per-tensor scale of an fp8 cache: K/V are stored as e4m3(x / FP8_DESCALE) and kvattn gets it as k_descale /
# v_descale (b, hk), as an engine passes its per-tensor scales. Normal draws (|x| < 6) fit e4m3 (+-448, 3 mantissa
# bits down to 2^-6) without scaling, so 1: a scale other than 1 would add a separate `out *= v_scale` kernel to
# FlashInfer's decode (its run() applies v_scale after the kernel), a cost of the choice, not of fp8.
FP8_DESCALE = 1.0
FP8_NAN_BITS = 0x7F  # e4m3fn NaN (S.1111.111): what a poisoned fp8 slot holds


def seed_of(name, salt=0):
    return (zlib.crc32(name.encode()) + 7919 * salt) & 0x7FFFFFFF


def cached_lengths(case, rng):
    """Cached tokens per sequence (b,) int64."""
    b = case.batch
    if case.dist == "equal":
        return np.full(b, case.cached, np.int64)
    uniform = np.random.default_rng(seed_of(f"{case.batch}/{case.lo}/{case.hi}")).integers(
        case.lo, case.hi + 1, b).astype(np.int64)
    if case.dist == "uniform":
        return uniform
    if case.dist == "zipf":  # the same total as the uniform draw, Zipf (s = 1) over ranks, at least lo each
        total = int(uniform.sum())
        w = 1.0 / np.arange(1, b + 1)
        lens = case.lo + np.floor(w / w.sum() * (total - b * case.lo)).astype(np.int64)
        lens[0] += total - lens.sum()
        return rng.permutation(lens)
    raise ValueError(f"unknown length distribution {case.dist}")


@dataclass
class Plan:
    """The integer structure of one case (shared by all its input sets)."""
    case: object
    b: int
    cached: np.ndarray  # (b,) valid tokens already in the cache
    leftpad: np.ndarray  # (b,)
    n_new: np.ndarray  # (b,)
    sq: np.ndarray  # (b,) query tokens
    rows: np.ndarray  # (b,) cache row / page-table row of each sequence
    n_rows: int
    capacity: int  # slots per row
    page_table: np.ndarray  # (n_rows, pages_per_row) int32, or None
    num_pages: int
    varlen: bool  # q and new tokens packed with cu_seqlens (mixed batch)
    seqlen_ro: int

    @property
    def seqlens(self):  # cache_seqlens: absolute slot index, left padding included
        return self.leftpad + self.cached

    @property
    def end(self):
        return self.seqlens + self.n_new

    @property
    def seqlen_k(self):  # valid keys attended to
        return self.cached + self.n_new


def make_plan(case):
    rng = np.random.default_rng(seed_of(case.seed_name))
    if case.mixed:
        b = 1 + case.mixed
        cached = np.array([case.cached] + [case.mixed_cached] * case.mixed, np.int64)
        n_new = np.array([case.n_new] + [1] * case.mixed, np.int64)
        sq = n_new.copy()
    else:
        b = case.batch
        cached = cached_lengths(case, rng)
        n_new = np.full(b, case.n_new, np.int64)
        sq = np.full(b, case.n_new or case.sq, np.int64)
    leftpad = np.zeros(b, np.int64)
    if case.leftpad:
        leftpad = rng.integers(1, max(2, min(MAX_LEFTPAD, case.cached // 4)), b).astype(np.int64)
    n_rows = 2 * b if case.scattered else b
    rows = rng.permutation(n_rows)[:b].astype(np.int64) if case.scattered else np.arange(b, dtype=np.int64)
    end = leftpad + cached + n_new
    table, num_pages = None, 0
    if case.page:
        ps = case.page
        need = -(-end // ps)
        ppr = int(need.max())
        num_pages = int(need.sum()) + 2
        ids = rng.permutation(num_pages)
        table = np.zeros((n_rows, ppr), np.int32)  # unused entries: page 0 (valid, never read)
        at = 0
        for i in range(b):
            table[rows[i], :need[i]] = ids[at:at + need[i]]
            at += need[i]
        capacity = ppr * ps
    else:
        capacity = int(end.max())
    seqlen_ro = int((leftpad + cached).max() + max(sq.max(), n_new.max()) + 1)
    return Plan(case, b, cached, leftpad, n_new, sq, rows, n_rows, capacity, table, num_pages,
                bool(case.mixed), seqlen_ro)


def cu(lengths):
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)


# ---- counts

def elem_size(dtype_name):
    return {"fp8": 1, "bf16": 2, "fp16": 2, "fp32": 4}[dtype_name]


def kv_elem_size(case, dtype_name):
    """Bytes of one cached K/V element: 1 in an fp8 cache, else those of q's dtype `dtype_name`."""
    return elem_size(case.kv) if case.kv else elem_size(dtype_name)


def visible_keys(plan):
    """Sum over sequences and query tokens of the keys each query sees (causal counted exactly)."""
    total = 0
    for lk, sq in zip(plan.seqlen_k, plan.sq):
        if plan.case.causal:
            qp = np.arange(sq) + lk - sq  # bottom-right aligned query positions
            total += int(np.clip(qp + 1, 0, lk).sum())
        else:
            total += int(lk * sq)
    return total


def byte_parts(plan, dtype_name):
    """(K/V bytes, Q/O bytes) of one call, q in `dtype_name`: K/V of valid cached slots in the cache's dtype, new
    K/V read in q's and written in the cache's; Q (+qv) and O once in q's."""
    c = plan.case
    es, es_kv = elem_size(dtype_name), kv_elem_size(c, dtype_name)
    kv = c.hk * (c.d + c.dv) * (es_kv * int(plan.cached.sum()) + (es + es_kv) * int(plan.n_new.sum()))
    qo = es * c.hq * int(plan.sq.sum()) * (c.d + c.dv + (c.dv if c.qv else 0))
    return kv, qo


def count(plan, dtype_name):
    """(bytes, flops): byte_parts' K/V + Q/O; FLOPs = 2 * heads * (d_qk + dv) * visible keys (= 4 * ... * d
    when d = dv)."""
    c = plan.case
    d_qk = c.d + (c.dv if c.qv else 0)
    return sum(byte_parts(plan, dtype_name)), 2 * c.hq * (d_qk + c.dv) * visible_keys(plan)


def set_bytes(plan, dtype_name):
    """Memory of one input set (caches in their dtype; q, new tokens, out in q's)."""
    c = plan.case
    es, es_kv = elem_size(dtype_name), kv_elem_size(c, dtype_name)
    slots = plan.num_pages * c.page if c.page else plan.n_rows * plan.capacity
    qtok = int(plan.sq.sum())
    return (es_kv * slots * c.hk * (c.d + c.dv) + es * int(plan.n_new.sum()) * c.hk * (c.d + c.dv)
            + es * qtok * c.hq * (c.d + 2 * c.dv + (c.dv if c.qv else 0)))


# ---- backends: where the data lives

class NumpyBackend:
    """The CPU backend through numpy: float32, or bf16 q over an fp8 e4m3 cache (kv="fp8"; the contract takes no
    fp32 q over an fp8 cache). bf16 and e4m3 are ml_dtypes' numpy dtypes."""
    kind = "cpu"

    def __init__(self, seed=0, kv=""):
        self.rng = np.random.default_rng(seed)
        self.kv = kv
        self.dtype_name = "bf16" if kv else "fp32"
        self.dtype = _ml_dtype("bfloat16") if kv else np.float32

    def randn(self, shape):
        return self.rng.standard_normal(shape, dtype=np.float32).astype(self.dtype, copy=False)

    def cache_randn(self, shape):
        """A K or V cache: normal draws in q's dtype, or rounded to e4m3 after / FP8_DESCALE in an fp8 cache."""
        x = self.rng.standard_normal(shape, dtype=np.float32)
        if not self.kv:
            return x
        return (x / np.float32(FP8_DESCALE)).astype(_ml_dtype("float8_e4m3fn"))

    def ints(self, a):
        return np.ascontiguousarray(np.asarray(a), np.int32)

    def floats(self, a):
        return np.ascontiguousarray(np.asarray(a), np.float32)

    def empty(self, shape):
        return np.empty(shape, self.dtype)

    def numpy(self, x):
        """float32 (or int) numpy values (bf16 and e4m3 are exact in float32)."""
        x = np.asarray(x)
        return x.astype(np.float32) if x.dtype.name in _ML_NAMES else x

    def sync(self):
        pass


def _ml_dtype(name):
    import ml_dtypes
    return np.dtype(getattr(ml_dtypes, name))


_ML_NAMES = ("bfloat16", "float8_e4m3fn")


class TorchBackend:
    """torch tensors on `device` ("cuda", or "cpu" for a dry run), in `dtype` (bf16 on CUDA); caches in e4m3 with
    kv="fp8"."""

    def __init__(self, device="cuda", dtype_name="bf16", seed=0, kv=""):
        import torch
        self.torch = torch
        self.device = torch.device(device)
        self.kind = self.device.type
        self.kv = kv
        self.dtype_name = dtype_name
        self.dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtype_name]
        self.gen = torch.Generator(device=self.device)
        self.gen.manual_seed(seed)

    def randn(self, shape):
        return self.torch.randn(shape, dtype=self.dtype, device=self.device, generator=self.gen)

    def cache_randn(self, shape):
        """A K or V cache: randn in q's dtype (the same draws as a q-dtype cache), rounded to e4m3 after
        / FP8_DESCALE in an fp8 cache."""
        x = self.randn(shape)
        if not self.kv:
            return x
        if FP8_DESCALE != 1.0:
            x.div_(FP8_DESCALE)
        return x.to(self.torch.float8_e4m3fn)

    def ints(self, a):
        return self.torch.from_numpy(np.ascontiguousarray(np.asarray(a), np.int32)).to(self.device)

    def floats(self, a):
        return self.torch.from_numpy(np.ascontiguousarray(np.asarray(a), np.float32)).to(self.device)

    def empty(self, shape):
        return self.torch.empty(shape, dtype=self.dtype, device=self.device)

    def numpy(self, x):
        """float32 (or int) numpy copy; bf16 values are exact in float32."""
        x = x.detach()
        if x.is_floating_point():
            x = x.float()
        return x.cpu().numpy()

    def sync(self):
        if self.kind == "cuda":
            self.torch.cuda.synchronize()


def rotary_tables(plan, seed):
    rng = np.random.default_rng(seed)
    ang = rng.uniform(0, 2 * np.pi, (plan.seqlen_ro, plan.case.d // 2))
    return np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)


def materialize(plan, be, set_index=0, poison=False):
    """One input set: the kwargs of kvattn.flash_attn_with_kvcache (out= included)."""
    c = plan.case
    if plan.varlen:
        tq = int(plan.sq.sum())
        q_shape, new_shape = (tq, c.hq, c.d), (int(plan.n_new.sum()), c.hk)
    else:
        q_shape, new_shape = (plan.b, int(plan.sq[0]), c.hq, c.d), (plan.b, int(plan.n_new[0]), c.hk)
    if c.page:
        cache_shape = (plan.num_pages, c.page, c.hk)
    else:
        cache_shape = (plan.n_rows, plan.capacity, c.hk)
    kw = dict(q=be.randn(q_shape), k_cache=be.cache_randn(cache_shape + (c.d,)),
              v_cache=be.cache_randn(cache_shape + (c.dv,)), cache_seqlens=be.ints(plan.seqlens), causal=c.causal)
    if c.kv:
        descale = np.full((plan.b, c.hk), FP8_DESCALE, np.float32)  # one per-tensor scale, as (b, hk)
        kw.update(k_descale=be.floats(descale), v_descale=be.floats(descale))
    if c.scattered:
        kw["cache_batch_idx"] = be.ints(plan.rows)
    if c.leftpad:
        kw["cache_leftpad"] = be.ints(plan.leftpad)
    if c.page:
        kw["page_table"] = be.ints(plan.page_table)
    if c.n_new:
        kw["k"] = be.randn(new_shape + (c.d,))
        kw["v"] = be.randn(new_shape + (c.dv,))
    if c.qv:
        kw["qv"] = be.randn(q_shape[:-1] + (c.dv,))
    if c.rotary:
        cos, sin = rotary_tables(plan, seed_of(c.name, set_index))
        kw.update(rotary_cos=be.floats(cos), rotary_sin=be.floats(sin), rotary_interleaved=ROTARY_INTERLEAVED)
    if plan.varlen:
        kw.update(cu_seqlens_q=be.ints(cu(plan.sq)), max_seqlen_q=int(plan.sq.max()),
                  cu_seqlens_k_new=be.ints(cu(plan.n_new)))
    if getattr(c, "deterministic", False):
        kw["deterministic"] = True
    if poison:
        _poison_invalid(plan, be, kw)
    kw["out"] = be.empty(q_shape[:-1] + (c.dv,))
    return kw


def slot_index(plan, i, start=None):
    """Where the valid slots [leftpad, end) of sequence i live: (index0, index1) arrays into the cache."""
    s = np.arange(plan.leftpad[i] if start is None else start, plan.end[i])
    r = plan.rows[i]
    if plan.case.page:
        return plan.page_table[r, s // plan.case.page].astype(np.int64), s % plan.case.page
    return np.full(s.shape, r, np.int64), s


def _poison_invalid(plan, be, kw):
    """NaN in every cache slot that is not valid after the append: reading one shows up in the output."""
    c = plan.case
    shape = (plan.num_pages, c.page) if c.page else (plan.n_rows, plan.capacity)
    valid = np.zeros(shape, bool)
    for i in range(plan.b):
        valid[slot_index(plan, i)] = True
    bad = np.nonzero(~valid)
    for name in ("k_cache", "v_cache"):
        x = kw[name]
        if isinstance(x, np.ndarray):
            x[bad] = np.nan
        elif x.dtype == be.torch.float8_e4m3fn:  # through the bytes: not every torch op takes e4m3
            x.view(be.torch.uint8)[tuple(be.torch.from_numpy(i).to(be.device) for i in bad)] = FP8_NAN_BITS
        else:
            x[tuple(be.torch.from_numpy(i).to(be.device) for i in bad)] = float("nan")


# ---- the peers' copy

def _index(x, idx0, idx1, be):
    if isinstance(x, np.ndarray):
        return x[idx0, idx1]
    t = be.torch
    return x[t.from_numpy(idx0).to(x.device), t.from_numpy(idx1).to(x.device)]


def rotate_q(plan, kw, be):
    """q rotated as kvattn rotates it (contract step 2), for the peers (which have no rotary)."""
    c = plan.case
    q = kw["q"]
    if not c.rotary:
        return q
    cos, sin = be.numpy(kw["rotary_cos"]), be.numpy(kw["rotary_sin"])
    per_token = c.causal
    pos = []
    for i in range(plan.b):
        t = np.arange(plan.sq[i]) if per_token else np.zeros(plan.sq[i], np.int64)
        pos.append(plan.seqlens[i] + t)
    pos = np.concatenate(pos) if plan.varlen else np.stack(pos)  # (tq,) or (b, sq)
    cs, sn = cos[pos], sin[pos]  # (..., half)
    half = c.d // 2
    if ROTARY_INTERLEAVED:
        i0, i1 = np.arange(0, c.d, 2), np.arange(1, c.d, 2)
    else:
        i0, i1 = np.arange(half), np.arange(half, c.d)
    if isinstance(q, np.ndarray):
        x = q.astype(np.float32)
        cs, sn = cs[..., None, :], sn[..., None, :]
        out = x.copy()
        out[..., i0] = x[..., i0] * cs - x[..., i1] * sn
        out[..., i1] = x[..., i0] * sn + x[..., i1] * cs
        return out.astype(q.dtype)
    t = be.torch
    x = q.float()
    cs = t.from_numpy(cs).to(q.device)[..., None, :]
    sn = t.from_numpy(sn).to(q.device)[..., None, :]
    i0, i1 = t.from_numpy(i0).to(q.device), t.from_numpy(i1).to(q.device)
    out = x.clone()
    out[..., i0] = x[..., i0] * cs - x[..., i1] * sn
    out[..., i1] = x[..., i0] * sn + x[..., i1] * cs
    return out.to(q.dtype)


@dataclass
class Gathered:
    """The valid keys of every sequence (after the append), packed and, when affordable, padded."""
    q: object  # (b, sq, hq, d) rotated, or packed (total_q, hq, d) when varlen
    qv: object
    k_packed: object  # (total_k, hk, d)
    v_packed: object
    lens: np.ndarray  # (b,) keys per sequence
    sq: np.ndarray
    k: object = None  # (b, Lmax, hk, d) padded (None when too large)
    v: object = None
    equal: bool = True
    note: str = ""


def gather(plan, kw, be, max_padded_bytes=16 << 30):
    """Call after kvattn ran once on `kw` (the appended tokens are then in the cache)."""
    c = plan.case
    idx = [slot_index(plan, i) for i in range(plan.b)]
    i0 = np.concatenate([a for a, _ in idx])
    i1 = np.concatenate([b for _, b in idx])
    kp = _index(kw["k_cache"], i0, i1, be)
    vp = _index(kw["v_cache"], i0, i1, be)
    lens = plan.seqlen_k.astype(np.int64)
    g = Gathered(rotate_q(plan, kw, be), kw.get("qv"), kp, vp, lens, plan.sq.copy(),
                 equal=bool((lens == lens[0]).all()))
    notes = []
    if c.needs_gather:
        notes.append("peer on gathered copy")
    if c.rotary:
        notes.append("q pre-rotated")
    lmax = int(lens.max())
    es = elem_size(be.dtype_name)
    if g.equal:
        g.k = kp.reshape((plan.b, lmax) + tuple(kp.shape[1:]))
        g.v = vp.reshape((plan.b, lmax) + tuple(vp.shape[1:]))
    elif plan.b * lmax * c.hk * (c.d + c.dv) * es <= max_padded_bytes:
        # Padded to the longest sequence; slots past a sequence's length are masked (zeros).
        pos = np.concatenate([i * lmax + np.arange(n) for i, n in enumerate(lens)])
        if isinstance(kp, np.ndarray):
            k = np.zeros((plan.b * lmax,) + kp.shape[1:], kp.dtype)
            v = np.zeros((plan.b * lmax,) + vp.shape[1:], vp.dtype)
            k[pos], v[pos] = kp, vp
        else:
            t = be.torch
            k = t.zeros((plan.b * lmax,) + tuple(kp.shape[1:]), dtype=kp.dtype, device=kp.device)
            v = t.zeros((plan.b * lmax,) + tuple(vp.shape[1:]), dtype=vp.dtype, device=vp.device)
            p = t.from_numpy(pos).to(kp.device)
            k[p], v[p] = kp, vp
        g.k = k.reshape((plan.b, lmax) + tuple(kp.shape[1:]))
        g.v = v.reshape((plan.b, lmax) + tuple(vp.shape[1:]))
        notes.append("padded to the longest, masked")
    g.note = ", ".join(notes)
    return g
