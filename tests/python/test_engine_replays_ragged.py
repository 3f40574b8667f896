"""The engine call replays in their ragged forms: each engine's own index passed to kvattn as it is
(kv_indptr / kv_indices; docs/integrations.md, "The ragged index"), next to test_engine_replays.py's forms.

Every replay runs the engine's call twice on kvattn, through the index as the engine keeps it and through
the same pages as a dense page_table, and checks the first against the float64 oracle and the two against
each other: the same bits on the CPU backend; within the oracle tolerance on CUDA, where the static bound of
a row's keys differs between the two forms (test_ragged.py). Parametrized by device (numpy and torch CPU on
the CPU backend, torch CUDA where present); bf16 at d = 128, the developer CUDA build's shape."""
import numpy as np
import pytest

import harness as H
from inputs import DTYPES, cu_from_lengths, randn
from reference import reference_attention

kvattn = H.kvattn

JUNK_INDEX = 1 << 24  # index entries past kv_indptr[b] (a preallocated buffer): never read, else an error


def _stage(x, device):
    """A fresh device copy (each call appends into its own pools)."""
    return H.to_device(np.array(x, copy=True), device) if isinstance(x, np.ndarray) else x


def _dense_table(indptr, indices):
    """The index as the dense table that the oracle and the comparison call read; page 0 past a row (junk,
    as engines leave it: never read)."""
    counts = np.diff(indptr)
    table = np.zeros((len(counts), max(1, int(counts.max(initial=0)))), np.int32)
    for r, n in enumerate(counts):
        table[r, :n] = indices[indptr[r]: indptr[r] + n]
    return table


def _ragged_and_dense(device, name, q, k_pool, v_pool, indptr, indices, kw, ref, pages_of=None):
    """kvattn's call through (kv_indptr, kv_indices) over the pool as the engine stores it, and through the
    dense table over the same pool (a slot pool seen as pages of one slot); out against `ref` (the oracle's
    answer) and ragged against dense; with k/v, both pools after the append against the oracle's.
    `pages_of` = (for K, for V): functions turning the staged pools into the (num_pages, ps, hk, d) views
    kvattn reads (engines that keep K and V in one buffer); None: the pools are those (or slot pools)."""
    view_k, view_v = pages_of or (lambda x: x, lambda x: x)
    results = []
    for form in ("ragged", "dense"):
        kd, vd = _stage(k_pool, device), _stage(v_pool, device)
        kc, vc = view_k(kd), view_v(vd)
        args = dict(kv_indptr=indptr, kv_indices=indices)
        if form == "dense":
            if kc.ndim == 3:  # the slot pool as pages of one slot
                kc, vc = kc[:, None], vc[:, None]
            args = dict(page_table=_dense_table(indptr, indices))
        call = {k: _stage(v, device) for k, v in dict(kw, **args).items()}
        with H.poisoned_outputs():
            out = kvattn.flash_attn_with_kvcache(_stage(q, device), kc, vc, **call)
        H.sync_device_errors(device)
        results.append((H.to_numpy(out), H.to_numpy(kd), H.to_numpy(vd)))
    (out, k_after, v_after), (out_dense, k_dense, v_dense) = results
    dtype = H.DTYPE_NAME[np.dtype(q.dtype)]
    H.assert_close(f"{name} out", out, ref["out"], H.TOL_OUT[dtype])
    if device == "cuda":
        H.assert_close(f"{name} ragged vs dense", out, out_dense, H.TOL_OUT[dtype])
    else:
        np.testing.assert_array_equal(out.view(np.uint16), out_dense.view(np.uint16),
                                      err_msg=f"{name}: ragged != dense")
    if "k" in kw:
        pools = (("k", k_after, k_dense, ref["k_cache"]), ("v", v_after, v_dense, ref["v_cache"]))
        for what, got, dense, want in pools:
            H.assert_cache_equal(f"{name} {what} pool", got, want, False, dtype)
            H.assert_cache_equal(f"{name} {what} pool dense", dense, want, False, dtype)
    else:  # nothing to write: the pools are left as they were
        H.assert_cache_equal(f"{name} k pool", k_after, k_pool, False, dtype)
        H.assert_cache_equal(f"{name} v pool", v_after, v_pool, False, dtype)
    return out


class _SGLangPool:
    """SGLang's token-to-KV pool with page size 1: a (size + 1, hk, d) buffer per layer whose slot 0 is the
    padding slot (CUDA-graph padding tokens write there: finite junk), free slots NaN, and req_to_token
    (max_reqs, max_context_len) mapping a request's positions to slots (scattered, as the allocator's free
    list leaves them; requests that share a radix-cache prefix share its slots)."""

    def __init__(self, rng, hk, d, dtype, size=400, max_reqs=8, max_context=64):
        self.rng, self.dtype = rng, dtype
        self.k = np.full((size + 1, hk, d), np.nan, dtype)
        self.v = np.full((size + 1, hk, d), np.nan, dtype)
        self.k[0], self.v[0] = randn(rng, (hk, d), dtype), randn(rng, (hk, d), dtype)
        self.free = list(rng.permutation(np.arange(1, size + 1)))
        self.req_to_token = np.zeros((max_reqs, max_context), np.int32)

    def alloc(self, n):
        slots, self.free = np.array(self.free[:n], np.int32), self.free[n:]
        return slots

    def write(self, slots):
        """set_kv_buffer: random K/V (as the model computed them) at `slots`."""
        self.k[slots] = randn(self.rng, (len(slots),) + self.k.shape[1:], self.dtype)
        self.v[slots] = randn(self.rng, (len(slots),) + self.v.shape[1:], self.dtype)

    def kv_index(self, req_pool_indices, seq_lens):
        """create_flashinfer_kv_indices_triton: kv_indptr = cumsum(seq_lens), kv_indices the rows' slots
        back to back in a buffer preallocated longer (the tail: junk)."""
        indptr = cu_from_lengths(seq_lens)
        rows = [self.req_to_token[r, :n] for r, n in zip(req_pool_indices, seq_lens)]
        indices = np.concatenate(rows + [np.full(5, JUNK_INDEX, np.int32)]).astype(np.int32)
        return indptr, indices


def _sglang_requests(rng, pool, b, mode, num_draft=3):
    """A batch over a radix cache: requests 0 and 1 share a cached prefix (the same slots); each has its
    cached tokens written and `q_lens` new tokens allocated in req_to_token (out_cache_loc). Returns
    (req_pool_indices, prefix lens, q lens, out_cache_loc)."""
    req_pool_indices = rng.permutation(pool.req_to_token.shape[0])[:b]
    prefix = rng.integers(0, 30, b)
    if mode == "decode":
        q_lens, prefix = np.ones(b, np.int64), np.maximum(prefix, 1) - 1
    elif mode == "extend":
        q_lens = rng.integers(1, 9, b)
    else:
        q_lens = np.full(b, num_draft)
    shared = int(rng.integers(1, 1 + min(prefix[0], prefix[1]))) if min(prefix[0], prefix[1]) else 0
    shared_slots = pool.alloc(shared)
    pool.write(shared_slots)
    new_slots = []
    for i, r in enumerate(req_pool_indices):
        own = pool.alloc(int(prefix[i]) - (shared if i < 2 else 0))
        pool.write(own)
        cached = np.concatenate([shared_slots, own]) if i < 2 else own
        new_slots.append(pool.alloc(int(q_lens[i])))
        pool.req_to_token[r, : prefix[i] + q_lens[i]] = np.concatenate([cached, new_slots[-1]])
    return req_pool_indices, prefix, q_lens, np.concatenate(new_slots)


@H.on_devices
@pytest.mark.parametrize("mode", ["decode", "extend", "target_verify"])
def test_sglang_ragged_token_pool(mode, device):
    """SGLang with page size 1, its token-to-KV pool passed as it is: kv_indptr / kv_indices of
    req_to_token[req_pool_idx, :seq_len] over the (num_slots, hk, d) pool (no (b, max_len) page table built).
    decode and target verify (num_draft tokens per request, causal): K/V written by set_kv_buffer first,
    cache_seqlens = the full lengths. extend over a radix-cache prefix: the new tokens' K/V passed as k/v
    (varlen, cu_seqlens_k_new) and appended through the index at out_cache_loc, cache_seqlens = prefix."""
    _sglang_ragged_replay(mode, device)


def _sglang_ragged_replay(mode, device, mutate=False):
    seed = 300 + ["decode", "extend", "target_verify"].index(mode)
    rng = np.random.default_rng(seed)
    b, hq, hk, d, dtype = 4, 8, 2, 128, DTYPES["bf16"]
    pool = _SGLangPool(rng, hk, d, dtype)
    req_pool_indices, prefix, q_lens, out_cache_loc = _sglang_requests(rng, pool, b, mode)
    seq_lens = prefix + q_lens
    q = randn(rng, (int(q_lens.sum()), hq, d), dtype)
    kw = dict(cu_seqlens_q=cu_from_lengths(q_lens), max_seqlen_q=int(q_lens.max()), softmax_scale=float(d ** -0.5),
              causal=True)
    if mode == "extend":
        k_new = randn(rng, (len(out_cache_loc), hk, d), dtype)
        v_new = randn(rng, (len(out_cache_loc), hk, d), dtype)
        kw.update(k=k_new, v=v_new, cu_seqlens_k_new=cu_from_lengths(q_lens), cache_seqlens=prefix.astype(np.int32))
    else:
        pool.write(out_cache_loc)
        kw.update(cache_seqlens=seq_lens.astype(np.int32))
    indptr, indices = pool.kv_index(req_pool_indices, seq_lens)
    ref = reference_attention(q, pool.k[:, None], pool.v[:, None], page_table=_dense_table(indptr, indices), **kw)
    ref["k_cache"], ref["v_cache"] = ref["k_cache"][:, 0], ref["v_cache"][:, 0]
    if mutate:  # a cached token of the longest request read from the padding slot: the oracle's answer fails
        r = int(np.argmax(seq_lens))
        indices = indices.copy()
        indices[indptr[r] + int(rng.integers(0, prefix[r]))] = 0
    if mode == "extend":  # the meaning of the append: the new tokens at out_cache_loc, nothing else written
        want_k = pool.k.copy()
        want_k[out_cache_loc] = k_new
        H.assert_cache_equal("oracle k pool", ref["k_cache"], want_k, False, "bf16")
    _ragged_and_dense(device, f"sglang ragged {mode} seed{seed}", q, pool.k, pool.v, indptr, indices, kw, ref)


@pytest.mark.parametrize("mode", ["decode", "target_verify"])
def test_sglang_ragged_replay_can_fail(mode):
    """The replay's assertions read the index: a request's cached token pointed at another slot fails it
    (the oracle keeps the engine's index; both kvattn forms read the mutated one)."""
    with pytest.raises(AssertionError, match="out"):
        _sglang_ragged_replay(mode, "cpu", mutate=True)


@H.on_devices
@pytest.mark.parametrize("mode", ["decode", "extend"])
def test_sglang_ragged_sliding_window_pool(mode, device):
    """A sliding-window layer with SGLang's SWA pool: a separate, smaller pool for the window layers
    (full_to_swa_index_mapping; slots of tokens that left the window are freed: NaN), and the window index
    that SGLang's Triton backend builds for such layers (update_sliding_window_buffer): only each request's
    last tokens (their full slots translated to SWA slots), cache_seqlens = that length, window_size = (w, 0).
    The meaning checked: windowed causal attention over the whole sequence (the oracle reads every token from
    a dense copy), so the shift of positions by the dropped head is checked too."""
    seed = 350 + ["decode", "extend"].index(mode)
    rng = np.random.default_rng(seed)
    b, hq, hk, d, dtype, w = 3, 8, 2, 128, DTYPES["bf16"], int(rng.integers(3, 9))
    seq_lens = rng.integers(1, 40, b)
    q_lens = np.ones(b, np.int64) if mode == "decode" else np.minimum(rng.integers(1, 7, b), seq_lens)
    k_seq = randn(rng, (b, int(seq_lens.max()), hk, d), dtype)  # every token's K/V, as the model made them
    v_seq = randn(rng, (b, int(seq_lens.max()), hk, d), dtype)
    for i in range(b):
        k_seq[i, seq_lens[i]:], v_seq[i, seq_lens[i]:] = np.nan, np.nan
    q = randn(rng, (int(q_lens.sum()), hq, d), dtype)
    # The window index: the tail that the step's queries see, plus 1-3 tokens that the window must mask (SGLang
    # frees out-of-window slots lazily, and its backends differ by one in the tail they keep): without them
    # decode could not tell a wrong window from the right one.
    kept = np.minimum(seq_lens, w + q_lens + rng.integers(1, 4, b))
    swa_size = int(kept.sum()) + 6
    k_swa, v_swa = np.full((swa_size + 1, hk, d), np.nan, dtype), np.full((swa_size + 1, hk, d), np.nan, dtype)
    k_swa[0], v_swa[0] = randn(rng, (hk, d), dtype), randn(rng, (hk, d), dtype)  # the padding slot
    slots = rng.permutation(np.arange(1, swa_size + 1))
    rows, at = [], 0
    for i in range(b):
        tail = slots[at: at + kept[i]].astype(np.int32)
        at += kept[i]
        tokens = slice(seq_lens[i] - kept[i], seq_lens[i])
        k_swa[tail], v_swa[tail] = k_seq[i, tokens], v_seq[i, tokens]
        rows.append(tail)
    indptr = cu_from_lengths(kept)
    indices = np.concatenate(rows + [np.full(4, JUNK_INDEX, np.int32)]).astype(np.int32)
    kw = dict(cu_seqlens_q=cu_from_lengths(q_lens), max_seqlen_q=int(q_lens.max()), softmax_scale=float(d ** -0.5),
              causal=True, window_size=(w, 0))
    ref = reference_attention(q, k_seq, v_seq, cache_seqlens=seq_lens.astype(np.int32), **kw)
    if mode == "extend":  # the new tokens through k/v, appended at their SWA slots (the tail's last q_len)
        new_at = np.concatenate([rows[i][kept[i] - q_lens[i]:] for i in range(b)])
        k_new, v_new = k_swa[new_at].copy(), v_swa[new_at].copy()
        k_swa[new_at], v_swa[new_at] = np.nan, np.nan
        kw.update(k=k_new, v=v_new, cu_seqlens_k_new=cu_from_lengths(q_lens),
                  cache_seqlens=(kept - q_lens).astype(np.int32))
        ref["k_cache"], ref["v_cache"] = k_swa.copy(), v_swa.copy()
        ref["k_cache"][new_at], ref["v_cache"][new_at] = k_new, v_new
    else:
        kw.update(cache_seqlens=kept.astype(np.int32))
    _ragged_and_dense(device, f"sglang swa {mode} w{w} seed{seed}", q, k_swa, v_swa, indptr, indices, kw, ref)


def flashinfer_swap(q, kv_cache, kv_indptr, kv_indices, kv_last_page_len, kv_layout="NHD", qo_indptr=None,
                    max_qo_len=None, causal=False, sm_scale=None):
    """A FlashInfer-style paged call (vLLM's and SGLang's FlashInfer backends: BatchDecode / BatchPrefill
    WithPagedKVCache over kv_cache (num_blocks, 2, block_size, hk, d), or (num_blocks, 2, hk, block_size, d)
    for HND) with kvattn: K and V are the two halves of the buffer as page views, the index as it is, and
    cache_seqlens = (pages - 1) * block_size + kv_last_page_len."""
    k, v = _flashinfer_half(kv_cache, 0, kv_layout), _flashinfer_half(kv_cache, 1, kv_layout)
    seqlens = (kv_indptr[1:] - kv_indptr[:-1] - 1) * k.shape[1] + kv_last_page_len
    if qo_indptr is None:  # decode: one query per request
        return kvattn.flash_attn_with_kvcache(q[:, None], k, v, cache_seqlens=seqlens, kv_indptr=kv_indptr,
                                             kv_indices=kv_indices, softmax_scale=sm_scale, causal=causal)[:, 0]
    return kvattn.flash_attn_with_kvcache(q, k, v, cache_seqlens=seqlens, kv_indptr=kv_indptr, kv_indices=kv_indices,
                                         cu_seqlens_q=qo_indptr, max_seqlen_q=max_qo_len, softmax_scale=sm_scale,
                                         causal=causal)


def _flashinfer_half(kv_cache, which, kv_layout):
    """K (0) or V (1) of a FlashInfer kv_cache as the (num_blocks, block_size, hk, d) view kvattn reads
    (numpy or torch: swapaxes is both's)."""
    half = kv_cache[:, which]
    return half.swapaxes(1, 2) if kv_layout == "HND" else half


@H.on_devices
@pytest.mark.parametrize("hnd", [False, True], ids=["NHD", "HND"])
@pytest.mark.parametrize("mode", ["decode", "prefill"])
def test_flashinfer_paged_index(mode, hnd, device):
    """vLLM's / SGLang's FlashInfer backends keep paged_kv_indptr, paged_kv_indices (the block table's first
    ceil(seq_len / 16) blocks of each request back to back, in a longer preallocated buffer) and
    paged_kv_last_page_len, over a (num_blocks, 2, 16, hk, d) buffer holding K and V: decode (one query per
    request) and chunked prefill (qo_indptr, causal, the context and the chunk already written), through
    flashinfer_swap; then the same call through a dense page table (_ragged_and_dense), bit-equal on the CPU."""
    seed = 400 + 10 * ["decode", "prefill"].index(mode) + hnd
    rng = np.random.default_rng(seed)
    b, hq, hk, d, bs, dtype = 4, 8, 2, 128, 16, DTYPES["bf16"]
    layout = "HND" if hnd else "NHD"
    q_lens = np.ones(b, np.int64) if mode == "decode" else rng.integers(1, 20, b)
    seq_lens = q_lens + rng.integers(0, 50, b)
    pages = -(-seq_lens // bs)
    num_blocks = int(pages.sum()) + 3
    kv_cache = np.full((num_blocks, 2, hk, bs, d) if hnd else (num_blocks, 2, bs, hk, d), np.nan, dtype)
    blocks = rng.permutation(num_blocks)[: int(pages.sum())].astype(np.int32)
    indptr = cu_from_lengths(pages)
    indices = np.concatenate([blocks, np.full(7, JUNK_INDEX, np.int32)])
    last_page_len = (seq_lens - (pages - 1) * bs).astype(np.int32)
    k_pages, v_pages = _flashinfer_half(kv_cache, 0, layout), _flashinfer_half(kv_cache, 1, layout)  # views
    for i in range(b):
        for s in range(seq_lens[i]):
            blk = blocks[indptr[i] + s // bs]
            k_pages[blk, s % bs], v_pages[blk, s % bs] = randn(rng, (hk, d), dtype), randn(rng, (hk, d), dtype)
    q = randn(rng, (int(q_lens.sum()), hq, d), dtype)
    scale = float(d ** -0.5)
    kw = dict(softmax_scale=scale, causal=True, cache_seqlens=seq_lens.astype(np.int32),
              cu_seqlens_q=cu_from_lengths(q_lens), max_seqlen_q=int(q_lens.max()))
    ref = reference_attention(q, k_pages, v_pages, page_table=_dense_table(indptr, indices), **kw)

    with H.poisoned_outputs():
        out = flashinfer_swap(
            H.to_device(q, device), H.to_device(kv_cache, device), H.to_device(indptr, device),
            H.to_device(indices, device), H.to_device(last_page_len, device), kv_layout=layout,
            qo_indptr=None if mode == "decode" else H.to_device(cu_from_lengths(q_lens), device),
            max_qo_len=int(q_lens.max()), causal=True, sm_scale=scale)
    H.sync_device_errors(device)
    name = f"flashinfer {mode} {layout} seed{seed}"
    H.assert_close(f"{name} swap out", H.to_numpy(out), ref["out"], H.TOL_OUT["bf16"])
    halves = (lambda x: _flashinfer_half(x, 0, layout), lambda x: _flashinfer_half(x, 1, layout))
    both = _ragged_and_dense(device, name, q, kv_cache, kv_cache, indptr, indices, kw, ref, pages_of=halves)
    if device != "cuda":  # the swap's own cache_seqlens and views: the same call
        np.testing.assert_array_equal(H.to_numpy(out).view(np.uint16), both.view(np.uint16))
