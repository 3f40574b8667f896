"""The benchmark suites W1-W6 of BENCHMARKS.md as lists of cases, and their scaled-down CPU versions.

A case names its shapes and its layout; bench/layouts.py turns it into tensors. Lengths are token counts:
`cached` tokens are already in the cache (valid, left padding not counted), `n_new` tokens are appended (and
attended to) by the call, `sq` query tokens per sequence.
"""
import dataclasses
from dataclasses import dataclass

K = 1024
FP8_KV_SPEEDUP = 1.8  # issue #11: an fp8 e4m3 cache (bf16 q) reaches >= 1.8x the bf16 cache's tokens/s
PAGE1_SPEED = 0.85  # issue #12: chunked prefill over a page-1 cache at >= 0.85x the page-16 speed


@dataclass(frozen=True)
class Case:
    suite: str
    name: str
    hq: int
    hk: int
    batch: int
    cached: int  # tokens in the cache per sequence (equal lengths), or the mean for dist != equal
    d: int = 128
    dv: int = 128
    dist: str = "equal"  # equal | uniform (in [lo, hi]) | zipf (same total as uniform, min lo)
    lo: int = 0
    hi: int = 0
    sq: int = 1
    n_new: int = 0  # appended tokens per sequence (then sq = n_new: the new tokens are the queries)
    rotary: bool = False
    causal: bool = False
    page: int = 0  # 0 = contiguous cache, else page size
    scattered: bool = False  # cache_batch_idx picks rows of a cache/page table twice the batch
    leftpad: bool = False  # cache_leftpad: random left padding per sequence (valid tokens stay `cached`)
    qv: bool = False  # MLA: q (d) + qv (dv) over one latent head, k_cache d, v_cache dv
    mixed: int = 0  # W3: this many 1-token decodes (over mixed_cached tokens) share the call with the chunk
    mixed_cached: int = 0
    baseline: str = ""  # a case of the same suite to compare the time with (W2 skewed/uniform, W4 q/q=1)
    dtype: str = ""  # "" = bf16 on the GPU; "fp16"
    kv: str = ""  # the K/V cache's dtype: "" = q's; "fp8" = float8 e4m3 (q bf16 on every backend), descales given
    speedup: float = 0.0  # target of baseline time / this case's time (tokens/s over the baseline's), 0 = none
    deterministic: bool = False  # fixed split points: the result is independent of the rest of the batch
    quick: bool = False  # part of --quick
    metric: str = "bw"  # the suite's headline metric: bw (TB/s) or flops (TFLOP/s)
    scaled: bool = False  # shrunk for the CPU backend

    @property
    def layout(self):
        parts = [f"paged{self.page}" if self.page else "contiguous"]
        if self.scattered:
            parts.append("scattered")
        if self.leftpad:
            parts.append("leftpad")
        if self.n_new:
            parts.append(f"append{self.n_new}")
        if self.rotary:
            parts.append("rotary")
        if self.mixed:
            parts.append(f"varlen+{self.mixed}dec")
        if self.deterministic:
            parts.append("deterministic")
        if self.kv:
            parts.append(f"{self.kv}kv")
        return "+".join(parts)

    @property
    def seed_name(self):
        """The name its lengths, tables and values are drawn from: an fp8-cache case draws its bf16 baseline's,
        so it runs on the same inputs, K/V quantized."""
        return self.baseline if self.kv and self.baseline else self.name

    @property
    def needs_gather(self):
        """Peers (no page table, batch index, left padding or append) run on a gathered contiguous copy."""
        return bool(self.page or self.scattered or self.leftpad or self.n_new or self.mixed)


def _tok(n):
    return f"{n // K}k" if n % K == 0 and n >= K else str(n)


def _layout_tag(page, scattered=False, leftpad=False):
    tag = f"p{page}" if page else "contig"
    return tag + ("+scat" if scattered else "") + ("+lpad" if leftpad else "")


def w1():
    cases = []
    layouts = [(0, False, False), (1, False, False), (16, False, False), (64, False, False),
               (0, True, False), (0, False, True), (16, True, True)]
    for hq, hk in ((32, 8), (64, 8)):
        for b in (1, 4, 16):
            for L in (32 * K, 128 * K):
                for page, scat, lpad in layouts:
                    quick = (hq, b, L) in ((32, 1, 128 * K), (32, 4, 32 * K)) and page in (0, 16) and not lpad
                    cases.append(Case("W1", f"W1 {hq}/{hk} b{b} {_tok(L)} {_layout_tag(page, scat, lpad)}",
                                      hq, hk, b, L, page=page, scattered=scat, leftpad=lpad, quick=quick))
    # Append + rotary fused into the call, against the same call without them (the issue's <= 3%), and
    # fp16 against bf16 (the "same as bf16"), each next to its baseline.
    base = "W1 32/8 b8 32k p16+scat+lpad"
    cases.append(Case("W1", base, 32, 8, 8, 32 * K, page=16, scattered=True, leftpad=True))
    cases.append(Case("W1", base + " append1+rotary", 32, 8, 8, 32 * K - 1, n_new=1, rotary=True, page=16,
                      scattered=True, leftpad=True, baseline=base))
    for b, L, page in ((4, 32 * K, 0), (16, 128 * K, 16)):
        name = f"W1 32/8 b{b} {_tok(L)} {_layout_tag(page)}"
        cases.append(Case("W1", name + " fp16", 32, 8, b, L, page=page, dtype="fp16", baseline=name))
    # An fp8 e4m3 cache under bf16 q (issue #11: >= 1.8x the bf16 cache's tokens/s), each next to the bf16
    # case of its shape as its baseline: the same lengths, tables and values (K/V quantized), half the K/V bytes.
    for b, L in ((1, 128 * K), (4, 32 * K), (16, 32 * K), (16, 128 * K)):
        name = f"W1 32/8 b{b} {_tok(L)} p16"
        cases.append(Case("W1", name + " fp8kv", 32, 8, b, L, page=16, kv="fp8", speedup=FP8_KV_SPEEDUP,
                          baseline=name, quick=(b, L) == (4, 32 * K)))
    # Deterministic mode (fixed 4096-key splits, batch-composition independent) against the default
    # schedule: what it costs (issue #5).
    for b, L, page in ((4, 32 * K, 16), (16, 128 * K, 16)):
        name = f"W1 32/8 b{b} {_tok(L)} {_layout_tag(page)}"
        cases.append(Case("W1", name + " deterministic", 32, 8, b, L, page=page, deterministic=True,
                          baseline=name))
    # Head dim 512 (Gemma's global layers; issue #11: >= 4.0 TB/s): W1's shapes at d = dv = 512, 4x the
    # bytes a key of d 128.
    for b, L, page in ((1, 128 * K, 16), (4, 32 * K, 0), (4, 32 * K, 1), (4, 32 * K, 16), (4, 32 * K, 64),
                       (16, 32 * K, 16)):
        cases.append(Case("W1", f"W1 32/8 b{b} {_tok(L)} {_layout_tag(page)} d512", 32, 8, b, L, d=512, dv=512,
                          page=page, quick=(b, page) == (4, 16)))
    # The 32/8 model under tensor parallelism (4 and 8 GPUs: 8/2 and 4/1 heads a GPU), batch 1 and 4: few
    # units, where the cluster form and the combine of many pieces decide (bench/NOTES.md, session 46).
    for hq, hk in ((8, 2), (4, 1)):
        for b in (1, 4):
            for L in (32 * K, 128 * K):
                cases.append(Case("W1", f"W1 {hq}/{hk} b{b} {_tok(L)} p16 tp", hq, hk, b, L, page=16))
    # Short contexts are latency-bound: compare their time with the floor (floor_us in the records) plus
    # a launch, not with the bandwidth ceiling.
    for L in (1 * K, 2 * K, 4 * K):
        for page in (0, 16):
            cases.append(Case("W1", f"W1 32/8 b1 {_tok(L)} {_layout_tag(page)} short", 32, 8, 1, L, page=page))
    # The cluster form's fp8 kernel (checked, untimed before session 44): no speedup target, since a
    # latency-bound call does not halve with its bytes.
    cases.append(Case("W1", "W1 32/8 b1 4k p16 short fp8kv", 32, 8, 1, 4 * K, page=16, kv="fp8",
                      baseline="W1 32/8 b1 4k p16 short"))
    return cases


def w2():
    cases = []
    for b in (64, 128, 256):
        for page in (1, 16):
            for dist in ("uniform", "zipf"):
                base = f"W2 32/8 b{b} uniform p{page}"
                cases.append(Case("W2", f"W2 32/8 b{b} {dist} p{page}", 32, 8, b, 2176, dist=dist, lo=256,
                                  hi=4096, page=page, baseline=base if dist == "zipf" else "",
                                  quick=(b == 128 and page == 16)))
    # fp8 e4m3 caches (bf16 q) on ragged batches, against the bf16 cache (issue #11's 1.8x).
    for b, dist in ((64, "uniform"), (128, "uniform"), (128, "zipf"), (256, "uniform")):
        base = f"W2 32/8 b{b} {dist} p16"
        cases.append(Case("W2", base + " fp8kv", 32, 8, b, 2176, dist=dist, lo=256, hi=4096, page=16, kv="fp8",
                          speedup=FP8_KV_SPEEDUP, baseline=base))
    # Deterministic mode on a skewed batch: fixed splits instead of the balanced schedule.
    cases.append(Case("W2", "W2 32/8 b128 zipf p16 deterministic", 32, 8, 128, 2176, dist="zipf", lo=256,
                      hi=4096, page=16, deterministic=True, baseline="W2 32/8 b128 zipf p16"))
    return cases


def w3():
    cases = []
    for hq, hk in ((32, 8), (64, 8)):
        for new in (512, 2048):
            for prefix in (4 * K, 32 * K):
                for page in (16, 64):
                    for b in (1, 8):
                        quick = hq == 32 and new == 512 and prefix == 4 * K and page == 16
                        cases.append(Case("W3", f"W3 {hq}/{hk} b{b} +{new} over {_tok(prefix)} p{page}", hq, hk, b,
                                          prefix, sq=new, n_new=new, rotary=True, causal=True, page=page,
                                          metric="flops", quick=quick))
    # fp8 e4m3 caches under bf16 q (the sm_90a prefill kernel converts each tile to f16 in shared memory),
    # against the bf16 cache on the same inputs (its baseline: the ratio; no target in the issues).
    for b, new, prefix in ((1, 2048, 32 * K), (8, 512, 4 * K), (8, 2048, 32 * K)):
        base = f"W3 32/8 b{b} +{new} over {_tok(prefix)} p16"
        cases.append(Case("W3", base + " fp8kv", 32, 8, b, prefix, sq=new, n_new=new, rotary=True, causal=True,
                          page=16, kv="fp8", baseline=base, metric="flops"))
    for new in (512, 2048):
        cases.append(Case("W3", f"W3 32/8 mixed +{new} over 4k & 64 decodes over 4k p16", 32, 8, 1, 4 * K, sq=new,
                          n_new=new, rotary=True, causal=True, page=16, mixed=64, mixed_cached=4 * K,
                          metric="flops", quick=new == 512))
    # Page 1 (issue #12: >= 0.85x the page-16 speed), against the same chunk over a page-16 cache.
    for b, new in ((8, 512), (1, 2048)):
        base = f"W3 32/8 b{b} +{new} over 32k p16"
        cases.append(Case("W3", f"W3 32/8 b{b} +{new} over 32k p1", 32, 8, b, 32 * K, sq=new, n_new=new,
                          rotary=True, causal=True, page=1, metric="flops", baseline=base, speedup=PAGE1_SPEED))
    return cases


def w4():
    cases = []
    for hq, hk in ((32, 8), (64, 8)):
        for b in (8, 32, 64):
            for L in (4 * K, 16 * K):
                for q in (1, 2, 4, 8):
                    base = f"W4 {hq}/{hk} b{b} {_tok(L)} q1 p16"
                    quick = hq == 32 and b == 32 and L == 4 * K
                    cases.append(Case("W4", f"W4 {hq}/{hk} b{b} {_tok(L)} q{q} p16", hq, hk, b, L, sq=q,
                                      causal=True, page=16, baseline=base if q > 1 else "", quick=quick))
    # Batch 1 over a long cache (local serving; session 34: 32 packed rows, 32/8 q 8, take the split kernel,
    # measured faster at b8 / b32 only).
    for q in (1, 2, 4, 8):
        cases.append(Case("W4", f"W4 32/8 b1 32k q{q} p16", 32, 8, 1, 32 * K, sq=q, causal=True, page=16,
                          baseline="W4 32/8 b1 32k q1 p16" if q > 1 else ""))
    return cases


def w5():
    cases = []
    for hq in (128, 16):
        for b in (64, 128):
            for L in (4 * K, 32 * K):
                cases.append(Case("W5", f"W5 MLA {hq}/1 b{b} {_tok(L)} p64", hq, 1, b, L, d=64, dv=512, qv=True,
                                  page=64, metric="flops" if hq == 128 else "bw",
                                  quick=b == 64 and L == 4 * K))
    return cases


def w6():
    cases = []
    for d in (64, 128, 256):
        for causal in (False, True):
            h = 2048 // d
            cases.append(Case("W6", f"W6 prefill 16k {h}x{d} {'causal' if causal else 'full'}", h, h, 1, 16 * K,
                              d=d, dv=d, sq=16 * K, causal=causal, metric="flops", quick=d == 128))
    # Issue #12's other head dims: DeepSeek's prefill (d 192, dv 128; 16 heads, as on 8 GPUs) and d 512
    # (Gemma's global layers; 4 x 512 = 2048, as the suite's heads x d).
    for h, d, dv in ((16, 192, 128), (4, 512, 512)):
        dims = f"{d}/{dv}" if dv != d else f"{d}"
        for causal in (False, True):
            cases.append(Case("W6", f"W6 prefill 16k {h}x{dims} {'causal' if causal else 'full'}", h, h, 1,
                              16 * K, d=d, dv=dv, sq=16 * K, causal=causal, metric="flops"))
    return cases


SUITES = {"W1": w1, "W2": w2, "W3": w3, "W4": w4, "W5": w5, "W6": w6}
# The order of a full run: the suites that must finish first.
ORDER = ["W1", "W2", "W4", "W6", "W3", "W5"]


def cpu_scaled(case):
    """The same case shrunk for the CPU backend: tokens / 64 (at least 16), batch <= 4, <= 2 KV heads."""
    def tok(n):
        return max(16, n // 64) if n else 0

    g = case.hq // case.hk
    hk = min(case.hk, 2)
    hq = min(hk * g, 16) if case.qv else hk * g
    batch = min(case.batch, 4)
    sq = tok(case.sq) if case.sq > 8 else case.sq
    n_new = tok(case.n_new) if case.n_new else 0
    if n_new:
        sq = n_new
    return dataclasses.replace(case, hq=hq, hk=hk, batch=batch, cached=tok(case.cached), lo=tok(case.lo),
                               hi=tok(case.hi), sq=sq, n_new=n_new, mixed=min(case.mixed, 4),
                               mixed_cached=tok(case.mixed_cached), scaled=True)


def select(names, quick=False, cpu=False, filt=None):
    """The cases of the suites `names` (in the order given), optionally --quick, CPU-scaled, name-filtered
    (`filt`: a substring of the name, or several separated by '|': any of them; one that starts with '='
    matches the whole name only)."""
    out = []
    for n in names:
        for c in SUITES[n]():
            if quick and not c.quick:
                continue
            if filt and not any(c.name == f[1:] if f.startswith("=") else f in c.name for f in filt.split("|")):
                continue
            out.append(cpu_scaled(c) if cpu else c)
    return out


def main_case(cpu):
    """The MAIN JOB: one decode step, 32/8 heads, d 128, paged (16) + scattered + leftpad + append 1 + rotary."""
    if cpu:
        return Case("MAIN", "main decode 32/8 b2 2k p16+scat+lpad+append1+rotary (cpu)", 32, 8, 2, 2 * K - 1,
                    n_new=1, rotary=True, page=16, scattered=True, leftpad=True, scaled=True)
    return Case("MAIN", "main decode 32/8 b8 32k p16+scat+lpad+append1+rotary", 32, 8, 8, 32 * K - 1, n_new=1,
                rotary=True, page=16, scattered=True, leftpad=True)
