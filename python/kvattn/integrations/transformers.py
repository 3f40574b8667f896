"""kvattn as a transformers attention implementation: `register()`, then `attn_implementation="kvattn"`.

transformers calls an attention function with q (b, hq, sq, d), k/v (b, hk, sk, d) (the layer's whole key
range, cache included) and the mask its registered mask function built; it expects (out (b, sq, hq, dv),
weights). kvattn takes the same attention as one flash_attn_with_kvcache call over k/v as a full cache:
GQA as it is (hk < hq), the padding mask as `cache_leftpad`, causal bottom-right aligned (the queries are the
last sq keys), transformers' sliding window w as window_size (w - 1, 0), softcap, sinks (`s_aux`), scaling.

What it cannot express raises KvattnError (never a silent wrong answer): masks other than left padding
(right padding, holes, 4D custom masks, packed sequences), static caches (unfilled slots), dropout > 0, and
calls that need gradients (kvattn has no backward pass).

`paged|kvattn` (registered too) is the continuous-batching form (`generate_batch`, `init_continuous_batching`):
transformers keeps its PagedAttentionCache as a slot pool (num_slots, hk, d) per layer and, per step, a
read index (each request's slots in logical order, cu_seq_lens_k) and a write index (the new tokens' slots).
kvattn takes those as they are: the slot pool is the k_cache, (cu_seq_lens_k, read index) the ragged index
(kv_indptr, kv_indices, page size 1), and the new tokens are appended through it (cache_seqlens = the
request's key count minus its new tokens, so token j lands on the index's entry past + j: the write slot).
No K/V is gathered. A sliding-window layer's read index holds the window's cached slots and then a sentinel
per new token; the sentinels are replaced by the write slots (the ring buffer's next slots). That is exact
unless a request's new tokens wrap the ring onto slots that its own earlier queries still read (window
cache + new tokens > sliding_window: a prompt chunk longer than the window); such a layer step, known from
the host-side max_seqlen_k (padded to >= 1024 under CUDA graphs), keeps transformers' own read-then-write
order (cache.update gathers the window and the new tokens) and runs kvattn on the packed result.
"""
from ..errors import KvattnError
from ..interface import flash_attn_with_kvcache

NAME = "kvattn"


def padding_mask(batch_size, q_length, kv_length, attention_mask=None, **kwargs):
    """transformers' mask function for "kvattn": the 2D (b, kv_length) bool padding mask, or None (no padding).

    Keeps the last kv_length columns (a sliding-window layer's cache keeps only its last keys). The causal and
    sliding-window patterns are not materialized: the attention function applies them from its arguments."""
    if attention_mask is None:
        return None
    attention_mask = attention_mask[:, -kv_length:]
    if attention_mask.shape[1] == kv_length and bool(attention_mask.all()):
        return None
    return attention_mask


def _left_padding(mask, batch, kv_length):
    """cache_leftpad (b,) int32 from a (b, kv_length) padding mask that is zeros then ones on every row."""
    import torch

    if mask.dim() == 2 and mask.shape[0] == batch and mask.shape[1] < kv_length:
        raise KvattnError(f"attention_mask: covers {mask.shape[1]} keys of the {kv_length} given (a static cache's "
                          "unfilled slots); kvattn's transformers integration takes dynamic caches only (leave "
                          "cache_implementation unset)")
    if mask.dim() != 2 or tuple(mask.shape) != (batch, kv_length):
        raise KvattnError(f"attention_mask: kvattn takes a 2D padding mask of shape (batch, kv_length) = "
                          f"({batch}, {kv_length}) (its mask function's), got shape {tuple(mask.shape)}; "
                          "custom 4D masks are not supported (use attn_implementation='sdpa' or 'eager')")
    valid = mask.to(torch.bool)
    leftpad = (~valid).to(torch.int32).cumprod(dim=1).sum(dim=1, dtype=torch.int32)
    expected = torch.arange(kv_length, device=mask.device)[None, :] >= leftpad[:, None].to(torch.int64)
    if not bool(torch.equal(valid, expected)):
        bad = int((valid != expected).any(dim=1).nonzero()[0, 0])
        raise KvattnError(f"attention_mask: kvattn supports left padding only (each row zeros then ones up to "
                          f"the last key, kv_length {kv_length}); row {bad} is {valid[bad].int().tolist()} "
                          "(right padding or holes: use 'sdpa' or 'eager', "
                          "or pad on the left)")
    return leftpad


def attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, sliding_window=None,
              softcap=None, s_aux=None, is_causal=None, **kwargs):
    """transformers' attention function signature -> (out (b, sq, hq, dv), None)."""
    import torch

    if dropout:
        raise KvattnError(f"dropout: kvattn has no attention dropout, expected 0.0, got {dropout} "
                          "(call model.eval(), or use another attn_implementation for training)")
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (query, key, value, s_aux)):
        raise KvattnError("query/key/value: require grad, and kvattn computes no gradients; run the model "
                          "under torch.no_grad() or torch.inference_mode() (generate() does)")
    if query.dim() != 4 or key.dim() != 4 or value.dim() != 4:
        raise KvattnError(f"query, key, value: expected (b, h, s, d) each, got shapes {tuple(query.shape)}, "
                          f"{tuple(key.shape)}, {tuple(value.shape)}")
    batch, _, q_length, _ = query.shape
    kv_length = key.shape[2]
    leftpad = None
    if attention_mask is not None:
        leftpad = _left_padding(attention_mask, batch, kv_length)
    position_ids = kwargs.get("position_ids")
    if attention_mask is None and position_ids is not None and q_length == kv_length and q_length > 1:
        # transformers' sign of packed sequences (find_packed_sequence_indices): a position that does not
        # follow its left neighbour. kvattn would attend across them.
        if bool(((position_ids[..., 1:] - position_ids[..., :-1]) != 1).any()):
            raise KvattnError("position_ids: restart inside the row (packed sequences); kvattn's transformers "
                              "integration attends over one sequence per batch row")
    if attention_mask is None and position_ids is not None and int(position_ids[..., -1].max()) + 1 < kv_length:
        # No padding, so slot = position: keys past the last query's position are unfilled (a static cache).
        raise KvattnError(f"key: {kv_length} slots, but the last query is at position "
                          f"{int(position_ids[..., -1].max())} (a static cache's unfilled slots); kvattn's "
                          "transformers integration takes dynamic caches only (leave cache_implementation unset)")
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    window = (-1, -1)
    if sliding_window is not None and sliding_window > 0:
        # transformers keeps key kv iff q - sliding_window < kv <= q: sliding_window - 1 keys back.
        window = (int(sliding_window) - 1, 0 if causal else int(sliding_window) - 1)
    sinks = None
    if s_aux is not None:
        sinks = s_aux.detach().to(torch.float32).reshape(-1)
    out = flash_attn_with_kvcache(
        query.transpose(1, 2),
        key.transpose(1, 2).contiguous(),
        value.transpose(1, 2).contiguous(),
        cache_seqlens=kv_length,
        cache_leftpad=leftpad,
        softmax_scale=scaling,
        causal=bool(causal),
        window_size=window,
        softcap=float(softcap) if softcap else 0.0,
        sinks=sinks,
    )
    return out, None


def paged_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, sliding_window=None,
                    softcap=None, s_aux=None, **kwargs):
    """transformers' continuous-batching attention: q (1, hq, total_q, d), k/v (1, hk, total_q, d) of the new
    tokens, the PagedAttentionCache in `cache` and its indices -> (out (total_q, hq, dv), None)."""
    import torch

    cache = kwargs.get("cache")
    if cache is None or "read_index" not in kwargs or "write_index" not in kwargs:
        raise KvattnError(f"cache: paged|{NAME} is transformers' continuous-batching attention and needs its "
                          "PagedAttentionCache, read_index and write_index (generate_batch passes them); use "
                          f"attn_implementation='{NAME}' for a standard forward")
    if kwargs.get("block_table") is not None:
        raise KvattnError("block_table: transformers' decode fast path is FlashAttention's; paged|kvattn takes the "
                          "read/write slot indices (leave max_blocks_per_request unset or 0)")
    if dropout:
        raise KvattnError(f"dropout: kvattn has no attention dropout, expected 0.0, got {dropout}")
    layer = module.layer_idx
    group, in_group = cache.layer_index_to_group_indices[layer]
    ring = cache.sliding_windows[layer]  # 1: full attention; else the ring buffer's length (the window)
    layer_type = "full_attention" if ring == 1 else "sliding_attention"
    cu_q, cu_k, max_k = kwargs["cu_seq_lens_q"], kwargs["cu_seq_lens_k"], kwargs["max_seqlen_k"]
    if isinstance(cu_k, dict):
        cu_k, max_k = cu_k[layer_type], max_k[layer_type]
    cu_q, cu_k = cu_q.to(torch.int32), cu_k.to(torch.int32)
    read, write = kwargs["read_index"][group], kwargs["write_index"][group]
    window = (-1, -1)
    if sliding_window is not None and sliding_window > 0:  # keys q - sliding_window < kv <= q
        window = (int(sliding_window) - 1, 0)
    elif ring > 1:
        window = (ring - 1, 0)
    q = query[0].transpose(0, 1)  # (total_q, hq, d): a view, the head dim contiguous
    k_new, v_new = key[0].transpose(0, 1), value[0].transpose(0, 1)
    rows = q.shape[0]
    if q.device.type == "cpu":  # no CUDA-graph padding on the CPU; the CPU backend checks cu_q[-1] == rows
        rows = int(cu_q[-1])
        q, k_new, v_new = q[:rows], k_new[:rows], v_new[:rows]
    common = dict(cu_seqlens_q=cu_q, max_seqlen_q=max(1, int(kwargs.get("max_seqlen_q") or 1)),
                  softmax_scale=scaling, causal=True, window_size=window, softcap=float(softcap) if softcap else 0.0,
                  sinks=None if s_aux is None else s_aux.detach().to(torch.float32).reshape(-1))
    if ring > 1 and int(max_k) > ring:
        # New tokens would wrap the ring onto slots that earlier queries of the same request still read.
        k_all, v_all = cache.update(key_states=key, value_states=value, layer_idx=layer, read_index=kwargs["read_index"],
                                    write_index=kwargs["write_index"])
        if q.device.type == "cpu":
            k_all, v_all = k_all[:int(cu_k[-1])], v_all[:int(cu_k[-1])]
        out = flash_attn_with_kvcache(q, k_all, v_all, cu_seqlens_k=cu_k, **common)
    else:
        if read.numel() == 0:  # no request has cached tokens: each reads exactly the slots it writes
            indptr, indices = cu_q, write
        elif ring > 1:  # the sentinels mark the new tokens: their slots are the write slots, in order
            indptr, indices = cu_k, read.masked_scatter(read == cache.sentinel_index, write)
        else:  # full attention: the read index already holds the new tokens' slots
            indptr, indices = cu_k, read
        cache_len = (indptr[1:] - indptr[:-1]) - (cu_q[1:] - cu_q[:-1])  # tokens already in the cache
        out = flash_attn_with_kvcache(q, cache.key_cache[in_group], cache.value_cache[in_group], k=k_new, v=v_new,
                                      cache_seqlens=cache_len.to(torch.int32), cu_seqlens_k_new=cu_q,
                                      kv_indptr=indptr, kv_indices=indices.to(torch.int32), **common)
    if out.shape[0] != query.shape[2]:  # CPU: rows past cu_q[-1] (none without padding)
        out = torch.cat([out, out.new_zeros((query.shape[2] - out.shape[0],) + tuple(out.shape[1:]))])
    return out, None


def register(name=NAME):
    """Registers kvattn with transformers under `name`: the attention function and its mask function.

    Then `AutoModelForCausalLM.from_pretrained(..., attn_implementation=name)` (or `from_config`, or
    `model.set_attn_implementation(name)`) runs every attention layer through kvattn; continuous batching
    (`generate_batch`) switches to `paged|{name}`, registered here too (paged_attention)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(name, attention)
    AttentionMaskInterface.register(name, padding_mask)
    AttentionInterface.register(f"paged|{name}", paged_attention)
    return name
