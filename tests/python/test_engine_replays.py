"""SGLang's FlashAttentionBackend and vLLM's FlashAttentionImpl call sites, replayed with random data.

Each test builds the arguments in the form the engine builds them (docs/integrations.md lists the forms:
shapes, dtypes, optional arguments, page sizes, metadata), makes the engine's call through kvattn with
the one-line swap that docs/integrations.md gives, and checks the answer against the float64 oracle on
the *meaning* of the engine's call (for the cascades: the unsplit attention). Parametrized by device
(numpy and torch CPU on the CPU backend, torch CUDA where present)."""
import numpy as np
import pytest

import harness as H
from inputs import DTYPES, cu_from_lengths, randn
from reference import reference_attention

kvattn = H.kvattn


def _pool(rng, num_pages, page_size, hk, d, dtype, hnd=False):
    """A NaN page pool (num_pages, page_size, hk, d), optionally an NHD view of HND storage."""
    if hnd:
        return np.full((num_pages, hk, page_size, d), np.nan, dtype).transpose(0, 2, 1, 3)
    return np.full((num_pages, page_size, hk, d), np.nan, dtype)


def _fill(rng, k_pool, v_pool, table, lens, dtype):
    """Random K/V in slots [0, lens[i]) of each row of `table` (scrambled pages), NaN elsewhere."""
    ps = k_pool.shape[1]
    for i, n in enumerate(lens):
        for s in range(n):
            page, off = table[i, s // ps], s % ps
            k_pool[page, off] = randn(rng, k_pool.shape[2:], dtype)
            v_pool[page, off] = randn(rng, v_pool.shape[2:], dtype)


def _table(rng, lens, page_size, extra=3):
    pages = [-(-max(n, 1) // page_size) for n in lens]
    width = max(pages) + 1
    num_pages = sum(pages) + extra
    perm = rng.permutation(num_pages)
    table = np.full((len(lens), width), 0, np.int32)  # unused entries: page 0, never read (engines leave junk)
    at = 0
    for i, n in enumerate(pages):
        table[i, :n] = perm[at: at + n]
        at += n
    return table, num_pages


def _dev(device, *xs):
    return [H.to_device(x, device) for x in xs]


def _check(name, out, lse, ref, dtype):
    H.assert_close(f"{name} out", H.to_numpy(out), ref["out"], H.TOL_OUT[dtype])
    if lse is not None:
        H.assert_close(f"{name} lse", H.to_numpy(lse), ref["lse"], H.TOL_LSE[dtype])


# ---- SGLang: FlashAttentionBackend (sgl_kernel.flash_attn.flash_attn_with_kvcache, FA3's signature)


def sglang_swap(**kw):
    """SGLang's call with kvattn: the same keywords, less cu_seqlens_k_new when no k/v is passed (SGLang
    writes K/V with set_kv_buffer first and passes the metadata's cu_seqlens_k anyway; FA3 ignores it)."""
    if kw.get("k") is None:
        kw.pop("cu_seqlens_k_new", None)
    return kvattn.flash_attn_with_kvcache(**kw)


def _sglang_batch(rng, mode, page_size, b, hq, hk, d, dtype, num_draft=3):
    """q (total_q, hq, d), the pool as SGLang views it (-1, page_size, hk, d), and its metadata."""
    prefix = rng.integers(0, 40, b)
    if mode == "decode":
        q_lens = np.ones(b, np.int64)
    elif mode == "extend":  # extend over a radix-cache prefix: new tokens already written at [prefix, total)
        q_lens = rng.integers(1, 9, b)
    else:  # target_verify: num_draft tokens per request, already written after the prefix
        q_lens = np.full(b, num_draft)
    total = prefix + q_lens
    if mode == "decode":
        total = np.maximum(total, 1)
    table, num_pages = _table(rng, total, page_size)
    cache_dt = DTYPES["fp8"] if dtype == "fp8" else DTYPES[dtype]
    k_pool = _pool(rng, num_pages, page_size, hk, d, cache_dt)
    v_pool = _pool(rng, num_pages, page_size, hk, d, cache_dt)
    _fill(rng, k_pool, v_pool, table, total, cache_dt)
    q = randn(rng, (int(q_lens.sum()), hq, d), cache_dt)  # SGLang casts q to the fp8 kv dtype too
    meta = dict(cache_seqlens=total.astype(np.int32), cu_seqlens_q=cu_from_lengths(q_lens),
                cu_seqlens_k=cu_from_lengths(total), max_seqlen_q=int(q_lens.max()), page_table=table)
    return q, k_pool, v_pool, meta


@H.on_devices
@pytest.mark.parametrize("mode", ["decode", "extend", "target_verify"])
@pytest.mark.parametrize("page_size", [1, 16])
@pytest.mark.parametrize("variant", ["plain", "sliding", "fp8"])
def test_sglang_mha(mode, page_size, variant, device):
    """forward_decode / forward_extend, MHA: varlen q, paged pool, cache_seqlens = full lengths, causal;
    sliding-window layers pass window_size=(sliding_window_size, 0); fp8 caches pass (b, hk) descales that
    are stride-0 expands of one scale, and q cast to fp8."""
    dtype = "fp8" if variant == "fp8" else "bf16"
    seed = 100 * ["decode", "extend", "target_verify"].index(mode) + page_size + 1000 * ["plain", "sliding",
                                                                                         "fp8"].index(variant)
    rng = np.random.default_rng(seed)
    b, hq, hk, d = 3, 8, 2, 64
    q, k_pool, v_pool, meta = _sglang_batch(rng, mode, page_size, b, hq, hk, d, dtype)
    window = (int(rng.integers(2, 12)), 0) if variant == "sliding" else (-1, -1)
    scaling = float(d ** -0.5)
    descales = {}
    if variant == "fp8":
        descales = dict(k_descale=np.broadcast_to(np.float32(rng.uniform(0.5, 2)), (b, hk)),
                        v_descale=np.broadcast_to(np.float32(rng.uniform(0.5, 2)), (b, hk)))
    kw = dict(q=q, k_cache=k_pool, v_cache=v_pool, page_table=meta["page_table"], cache_seqlens=meta["cache_seqlens"],
              cu_seqlens_q=meta["cu_seqlens_q"], cu_seqlens_k_new=meta["cu_seqlens_k"],
              max_seqlen_q=meta["max_seqlen_q"], softmax_scale=scaling, causal=True, window_size=window,
              softcap=0.0, **descales)
    ref = reference_attention(**{k: v for k, v in kw.items() if k != "cu_seqlens_k_new"})
    dev = {k: (H.to_device(np.ascontiguousarray(v) if k.endswith("descale") and device != "cpu" else v, device)
               if isinstance(v, np.ndarray) else v) for k, v in kw.items()}
    with H.poisoned_outputs():
        out = sglang_swap(**dev)
    H.sync_device_errors(device)
    _check(f"sglang {mode} p{page_size} {variant} seed{seed}", out, None, ref, "bf16" if dtype == "fp8" else dtype)


@H.on_devices
def test_sglang_target_verify_topk_cascade(device):
    """Target verify with topk > 1: a non-causal call over each request's prefix (return lse), a second one
    where each draft token is its own sequence over its tree ancestors (page size 1, page table of their
    slots), merged by merge_state_v2(o, lse.T, o_expand, lse_expand.T): here kvattn.flash_attn_combine."""
    H.skip_unsupported_on(device, np.float32)
    rng = np.random.default_rng(31)
    b, hq, hk, d, nd = 2, 4, 2, 32, 4
    prefix = rng.integers(1, 20, b)
    parent = [[-1] + [int(rng.integers(0, t)) for t in range(1, nd)] for _ in range(b)]
    table, num_pages = _table(rng, prefix + nd, 1)
    k_pool, v_pool = _pool(rng, num_pages, 1, hk, d, np.float32), _pool(rng, num_pages, 1, hk, d, np.float32)
    _fill(rng, k_pool, v_pool, table, prefix + nd, np.float32)
    q = randn(rng, (b * nd, hq, d))
    ancestors = []
    for i in range(b):
        for t in range(nd):
            chain, a = [], t
            while a >= 0:
                chain.append(a)
                a = parent[i][a]
            ancestors.append([int(table[i, prefix[i] + a]) for a in sorted(chain)])
    expand_table = np.zeros((b * nd, nd), np.int32)
    for r, slots in enumerate(ancestors):
        expand_table[r, : len(slots)] = slots
    expand_lens = np.array([len(s) for s in ancestors], np.int32)

    dq, dk, dv = _dev(device, q, k_pool, v_pool)
    o, lse = sglang_swap(q=dq, k_cache=dk, v_cache=dv, page_table=H.to_device(table, device),
                         cache_seqlens=H.to_device(prefix.astype(np.int32), device),
                         cu_seqlens_q=H.to_device(cu_from_lengths(np.full(b, nd)), device), max_seqlen_q=nd,
                         causal=False, return_softmax_lse=True)
    o_x, lse_x = sglang_swap(q=dq, k_cache=dk, v_cache=dv, page_table=H.to_device(expand_table, device),
                             cache_seqlens=H.to_device(expand_lens, device),
                             cu_seqlens_q=H.to_device(cu_from_lengths(np.ones(b * nd)), device), max_seqlen_q=1,
                             causal=False, return_softmax_lse=True)
    stack = (lambda xs: np.stack(xs)) if device == "cpu" else (lambda xs: __import__("torch").stack(xs))
    with H.poisoned_outputs():
        out, _ = kvattn.flash_attn_combine(stack([o, o_x]), stack([lse.T, lse_x.T]))  # fp32 q: fp32 partials
    # The meaning: each draft token attends, unmasked, over its request's prefix and its tree ancestors.
    rows = [np.concatenate([table[i, : prefix[i]], ancestors[i * nd + t]]) for i in range(b) for t in range(nd)]
    width = max(len(r) for r in rows)
    k_tok = np.full((b * nd, width, hk, d), np.nan, np.float32)
    v_tok = k_tok.copy()
    for r, slots in enumerate(rows):
        k_tok[r, : len(slots)], v_tok[r, : len(slots)] = k_pool[slots, 0], v_pool[slots, 0]
    ref = reference_attention(q[:, None], k_tok, v_tok, cache_seqlens=np.array([len(r) for r in rows], np.int32))
    H.assert_close("sglang topk cascade out", H.to_numpy(out), ref["out"][:, 0], H.TOL_OUT["fp32"])


@H.on_devices
def test_sglang_mla_decode(device):
    """Absorbed MLA decode: q_rope (n, hq, 64) as q, q_nope (n, hq, 512) as qv, and k_rope / c_kv as two
    strided views of one (pages, page_size, 1, 576) buffer (kv_cache[..., 512:] and [..., :512])."""
    skip = device == "cuda"
    rng = np.random.default_rng(47)
    b, hq, ps, rope, nope = 2, 8, 16, 64, 512
    lens = rng.integers(1, 40, b)
    table, num_pages = _table(rng, lens, ps)
    dt = np.float32 if not skip else DTYPES["bf16"]
    kv = np.full((num_pages, ps, 1, nope + rope), np.nan, dt)
    for i, n in enumerate(lens):
        for s in range(n):
            kv[table[i, s // ps], s % ps] = randn(rng, (1, nope + rope), dt)
    q_nope, q_rope = randn(rng, (b, hq, nope), dt), randn(rng, (b, hq, rope), dt)
    scaling = float((nope + rope) ** -0.5)
    kw = dict(page_table=table, cache_seqlens=lens.astype(np.int32), cu_seqlens_q=cu_from_lengths(np.ones(b)),
              max_seqlen_q=1, softmax_scale=scaling, causal=True)
    ref = reference_attention(q_rope, kv[..., nope:], kv[..., :nope], qv=q_nope, **kw)
    dkv = H.to_device(kv, device)
    with H.poisoned_outputs():
        out = sglang_swap(q=H.to_device(q_rope, device), k_cache=dkv[..., nope:], v_cache=dkv[..., :nope],
                          qv=H.to_device(q_nope, device), cu_seqlens_k_new=cu_from_lengths(lens),
                          **{k: H.to_device(v, device) for k, v in kw.items()})
    H.sync_device_errors(device)
    _check("sglang mla decode", out, None, ref, H.DTYPE_NAME[np.dtype(dt)])


@H.on_devices
def test_sglang_varlen_chunked_prefix(device):
    """MLA chunked-prefix MHA: sgl_kernel's flash_attn_varlen_func(..., return_softmax_lse=True) over packed
    k/v; kvattn.flash_attn_varlen_func takes FA3's name for it, return_attn_probs."""
    H.skip_unsupported_on(device, np.float32)
    rng = np.random.default_rng(53)
    hq, hk, d, dv = 4, 4, 48, 32
    q_lens, k_lens = np.array([3, 0, 5]), np.array([7, 2, 4])
    q = randn(rng, (int(q_lens.sum()), hq, d))
    k, v = randn(rng, (int(k_lens.sum()), hk, d)), randn(rng, (int(k_lens.sum()), hk, dv))
    cu_q, cu_k = cu_from_lengths(q_lens), cu_from_lengths(k_lens)
    ref = reference_attention(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, softmax_scale=0.3)
    with H.poisoned_outputs():
        out, lse = kvattn.flash_attn_varlen_func(*_dev(device, q, k, v, cu_q, cu_k), max_seqlen_q=5, max_seqlen_k=7,
                                                 softmax_scale=0.3, causal=False, return_attn_probs=True)
    _check("sglang chunked prefix", out, lse, ref, "fp32")


def test_sglang_cu_seqlens_k_new_without_k_as_is():
    """SGLang passes cu_seqlens_k_new on every call; without k/v it is ignored (FA3's rule): the answer is
    the call's without it."""
    rng = np.random.default_rng(2)
    q, k_pool, v_pool, meta = _sglang_batch(rng, "decode", 16, 2, 4, 2, 32, "fp32")
    kw = dict(page_table=meta["page_table"], cache_seqlens=meta["cache_seqlens"],
              cu_seqlens_q=meta["cu_seqlens_q"], max_seqlen_q=1, causal=True)
    got = kvattn.flash_attn_with_kvcache(q, k_pool, v_pool, cu_seqlens_k_new=meta["cu_seqlens_k"], **kw)
    want = kvattn.flash_attn_with_kvcache(q, k_pool, v_pool, **kw)
    assert np.isfinite(np.asarray(want, dtype=np.float64)).all()
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


# ---- vLLM: FlashAttentionImpl (vllm_flash_attn's flash_attn_varlen_func with block_table)


def vllm_reshape_and_cache_flash(key, value, key_cache, value_cache, slot_mapping, kv_cache_dtype, k_scale, v_scale):
    """vLLM's op with kvattn: key/value may be padded past slot_mapping (vLLM's op reads len(slot_mapping))."""
    n = slot_mapping.shape[0]
    kvattn.append_kv(key[:n], value[:n], key_cache, value_cache, slot_mapping,
                     k_scale if kv_cache_dtype.startswith("fp8") else None,
                     v_scale if kv_cache_dtype.startswith("fp8") else None)


def vllm_flash_attn_varlen_func(q, k, v, max_seqlen_q, cu_seqlens_q, max_seqlen_k, seqused_k=None, out=None,
                                softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                                alibi_slopes=None, block_table=None, return_softmax_lse=False,
                                scheduler_metadata=None, fa_version=3, q_descale=None, k_descale=None,
                                v_descale=None, num_splits=0, s_aux=None, cu_seqlens_k=None):
    """vllm_flash_attn's varlen call with kvattn: with block_table it is flash_attn_with_kvcache over the
    paged cache (seqused_k = cache_seqlens); without, FA3's varlen over packed k/v."""
    if block_table is None:
        return kvattn.flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                             seqused_k=seqused_k, softmax_scale=softmax_scale, causal=causal,
                                             q_descale=q_descale, k_descale=k_descale, v_descale=v_descale,
                                             window_size=window_size, softcap=softcap, num_splits=num_splits or 1,
                                             return_attn_probs=return_softmax_lse, sinks=s_aux,
                                             alibi_slopes=alibi_slopes, out=out)
    return kvattn.flash_attn_with_kvcache(q, k, v, cache_seqlens=seqused_k, page_table=block_table,
                                         cu_seqlens_q=cu_seqlens_q, max_seqlen_q=max_seqlen_q,
                                         softmax_scale=softmax_scale, causal=causal, window_size=window_size,
                                         softcap=softcap, q_descale=q_descale, k_descale=k_descale,
                                         v_descale=v_descale, num_splits=num_splits,
                                         return_softmax_lse=return_softmax_lse, sinks=s_aux,
                                         alibi_slopes=alibi_slopes, out=out)


def _vllm_step(rng, b, hk, d, block_size, dtype, hnd, num_padded=2):
    """A step's requests: context lens, query lens, the kv_cache (2, blocks, block_size, hk, d) in vLLM's
    layout (HND: a permuted view), slot_mapping (int64) of the new tokens, and the new key/value (padded)."""
    context = rng.integers(0, 30, b)
    q_lens = rng.integers(1, 6, b)
    seq_lens = context + q_lens
    table, num_blocks = _table(rng, seq_lens, block_size)
    if hnd:
        kv = np.full((2, num_blocks, hk, block_size, d), np.nan, dtype).transpose(0, 1, 3, 2, 4)
    else:
        kv = np.full((2, num_blocks, block_size, hk, d), np.nan, dtype)
    key_cache, value_cache = kv[0], kv[1]
    _fill(rng, key_cache, value_cache, table, context, dtype)
    slots = np.concatenate([table[i, s // block_size] * block_size + s % block_size
                            for i in range(b) for s in [np.arange(context[i], seq_lens[i])]]).astype(np.int64)
    n = len(slots)
    key, value = randn(rng, (n + num_padded, hk, d), dtype), randn(rng, (n + num_padded, hk, d), dtype)
    return dict(context=context, q_lens=q_lens, seq_lens=seq_lens.astype(np.int32), table=table,
                key_cache=key_cache, value_cache=value_cache, slots=slots, key=key, value=value)


@H.on_devices
@pytest.mark.parametrize("hnd", [False, True], ids=["NHD", "HND"])
@pytest.mark.parametrize("variant", ["plain", "sliding-sinks", "alibi-softcap"])
def test_vllm_forward(hnd, variant, device):
    """FlashAttentionImpl.forward: reshape_and_cache_flash of the step's tokens, then flash_attn_varlen_func
    with block_table, seqused_k = seq_lens, cu_seqlens_q = query_start_loc, out = output[:num_actual_tokens],
    window (sliding_window - 1, 0), s_aux sinks, ALiBi, softcap, scheduler_metadata None."""
    H.skip_unsupported_on(device, np.float32)
    rng = np.random.default_rng({"plain": 61, "sliding-sinks": 62, "alibi-softcap": 63}[variant] + 10 * hnd)
    b, hq, hk, d, bs = 3, 8, 2, 64, 16
    st = _vllm_step(rng, b, hk, d, bs, np.float32, hnd)
    n = len(st["slots"])
    query = randn(rng, (n + 2, hq, d))  # padded past num_actual_tokens, as vLLM's buffers are
    output = np.full((n + 2, hq, d), np.nan, np.float32)
    opts = dict(softmax_scale=float(d ** -0.5), causal=True, window_size=(-1, -1), softcap=0.0)
    if variant == "sliding-sinks":
        opts.update(window_size=(int(rng.integers(4, 20)) - 1, 0), s_aux=randn(rng, (hq,), np.float32))
    if variant == "alibi-softcap":
        opts.update(alibi_slopes=rng.uniform(0.01, 0.5, hq).astype(np.float32), softcap=30.0)
    key_cache, value_cache, key, value = _dev(device, st["key_cache"], st["value_cache"], st["key"], st["value"])
    vllm_reshape_and_cache_flash(key, value, key_cache, value_cache, H.to_device(st["slots"], device), "auto",
                                 None, None)
    out_dev = H.to_device(output, device)
    cu_q = cu_from_lengths(st["q_lens"])
    vllm_flash_attn_varlen_func(q=H.to_device(query, device)[:n], k=key_cache, v=value_cache, out=out_dev[:n],
                                cu_seqlens_q=H.to_device(cu_q, device), max_seqlen_q=int(st["q_lens"].max()),
                                seqused_k=H.to_device(st["seq_lens"], device), max_seqlen_k=int(st["seq_lens"].max()),
                                block_table=H.to_device(st["table"], device), scheduler_metadata=None, fa_version=3,
                                num_splits=0, **{k: H.to_device(v, device) for k, v in opts.items()})
    H.sync_device_errors(device)
    # The meaning: the new tokens written at their slots, then causal attention of each request's queries
    # over its whole sequence.
    k_ref, v_ref = st["key_cache"].copy(), st["value_cache"].copy()
    for t, s in enumerate(st["slots"]):
        k_ref[s // bs, s % bs], v_ref[s // bs, s % bs] = st["key"][t], st["value"][t]
    ref = reference_attention(query[:n], k_ref, v_ref, cache_seqlens=st["seq_lens"], page_table=st["table"],
                              cu_seqlens_q=cu_q, sinks=opts.pop("s_aux", None), **opts)
    got = H.to_numpy(out_dev)
    H.assert_close(f"vllm {variant} out", got[:n], ref["out"], H.TOL_OUT["fp32"])
    assert np.isnan(got[n:]).all(), "rows past num_actual_tokens must stay untouched"
    H.assert_cache_equal("vllm key_cache", H.to_numpy(key_cache), k_ref, False, "fp32")


@H.on_devices
def test_vllm_cascade(device):
    """cascade_attention: a shared prefix of common_prefix_len tokens (whole blocks) attended by every query
    as one sequence (cu_prefix_query_lens = [0, n], block_table[:1], causal False), the suffixes with
    block_table[:, common_blocks:] and causal, merged by merge_attn_states: here flash_attn_combine."""
    H.skip_unsupported_on(device, np.float32)
    rng = np.random.default_rng(71)
    b, hq, hk, d, bs, common_blocks = 3, 4, 2, 32, 4, 2
    common = common_blocks * bs
    q_lens = rng.integers(1, 4, b)
    seq_lens = common + rng.integers(0, 9, b) + q_lens
    table, num_blocks = _table(rng, seq_lens, bs)
    table[:, :common_blocks] = table[0, :common_blocks]  # the shared prefix: the same blocks in every row
    k_cache, v_cache = _pool(rng, num_blocks, bs, hk, d, np.float32), _pool(rng, num_blocks, bs, hk, d, np.float32)
    _fill(rng, k_cache, v_cache, table, seq_lens, np.float32)
    n = int(q_lens.sum())
    query = randn(rng, (n, hq, d))
    cu_q = cu_from_lengths(q_lens)
    dq, dk, dv = _dev(device, query, k_cache, v_cache)
    prefix_out, prefix_lse = vllm_flash_attn_varlen_func(
        q=dq, k=dk, v=dv, cu_seqlens_q=H.to_device(np.array([0, n], np.int32), device), max_seqlen_q=n,
        seqused_k=H.to_device(np.array([common], np.int32), device), max_seqlen_k=common, softmax_scale=0.2,
        causal=False, block_table=H.to_device(table[:1], device), return_softmax_lse=True)
    suffix_out, suffix_lse = vllm_flash_attn_varlen_func(
        q=dq, k=dk, v=dv, cu_seqlens_q=H.to_device(cu_q, device), max_seqlen_q=int(q_lens.max()),
        seqused_k=H.to_device((seq_lens - common).astype(np.int32), device), max_seqlen_k=int(seq_lens.max()) - common,
        softmax_scale=0.2, causal=True, block_table=H.to_device(np.ascontiguousarray(table[:, common_blocks:]), device),
        return_softmax_lse=True)
    stack = (lambda xs: np.stack(xs)) if device == "cpu" else (lambda xs: __import__("torch").stack(xs))
    with H.poisoned_outputs():
        out, lse = kvattn.flash_attn_combine(stack([prefix_out, suffix_out]), stack([prefix_lse.T, suffix_lse.T]))
    ref = reference_attention(query, k_cache, v_cache, cache_seqlens=seq_lens.astype(np.int32), page_table=table,
                              cu_seqlens_q=cu_q, softmax_scale=0.2, causal=True)
    H.assert_close("vllm cascade out", H.to_numpy(out), ref["out"], H.TOL_OUT["fp32"])
    H.assert_close("vllm cascade lse", H.to_numpy(lse).T, ref["lse"], H.TOL_LSE["fp32"])


@H.on_devices
def test_vllm_encoder_attention(device):
    """_forward_encoder_attention: packed q/k/v with cu_seqlens_k = cu_seqlens_q, bidirectional."""
    H.skip_unsupported_on(device, np.float32)
    rng = np.random.default_rng(79)
    lens = np.array([5, 1, 7])
    hq, hk, d = 4, 2, 32
    q, k, v = (randn(rng, (int(lens.sum()), h, d)) for h in (hq, hk, hk))
    cu = cu_from_lengths(lens)
    out = np.full_like(q, np.nan)
    out_dev = H.to_device(out, device)
    vllm_flash_attn_varlen_func(*_dev(device, q, k, v), cu_seqlens_q=H.to_device(cu, device),
                                cu_seqlens_k=H.to_device(cu, device), max_seqlen_q=7, max_seqlen_k=7,
                                softmax_scale=0.25, causal=False, out=out_dev, fa_version=3)
    ref = reference_attention(q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu, softmax_scale=0.25)
    H.assert_close("vllm encoder out", H.to_numpy(out_dev), ref["out"], H.TOL_OUT["fp32"])


def test_vllm_padded_key_as_is():
    """reshape_and_cache_flash's padded key/value: the rows past len(slot_mapping) are ignored, so the caches
    equal those written from the unpadded tokens, and the padding rows land nowhere."""
    rng = np.random.default_rng(3)
    st = _vllm_step(rng, 2, 2, 32, 16, np.float32, False)
    n = len(st["slots"])
    kc, vc = st["key_cache"].copy(), st["value_cache"].copy()
    kvattn.append_kv(st["key"], st["value"], st["key_cache"], st["value_cache"], st["slots"])
    kvattn.append_kv(st["key"][:n].copy(), st["value"][:n].copy(), kc, vc, st["slots"])
    np.testing.assert_array_equal(st["key_cache"], kc)  # NaN slots compare equal: untouched in both
    np.testing.assert_array_equal(st["value_cache"], vc)
    written = st["key_cache"].reshape(-1, *st["key_cache"].shape[2:])[st["slots"]]
    np.testing.assert_array_equal(written, st["key"][:n])
