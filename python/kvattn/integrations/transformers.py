"""kvattn as a transformers attention implementation: `register()`, then `attn_implementation="kvattn"`.

transformers calls an attention function with q (b, hq, sq, d), k/v (b, hk, sk, d) (the layer's whole key
range, cache included) and the mask its registered mask function built; it expects (out (b, sq, hq, dv),
weights). kvattn takes the same attention as one flash_attn_with_kvcache call over k/v as a full cache:
GQA as it is (hk < hq), the padding mask as `cache_leftpad`, causal bottom-right aligned (the queries are the
last sq keys), transformers' sliding window w as window_size (w - 1, 0), softcap, sinks (`s_aux`), scaling.

What it cannot express raises KvattnError (never a silent wrong answer): masks other than left padding
(right padding, holes, 4D custom masks, packed sequences), static caches (unfilled slots), dropout > 0, and
calls that need gradients (kvattn has no backward pass).
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


def register(name=NAME):
    """Registers kvattn with transformers under `name`: the attention function and its mask function.

    Then `AutoModelForCausalLM.from_pretrained(..., attn_implementation=name)` (or `from_config`, or
    `model.set_attn_implementation(name)`) runs every attention layer through kvattn."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(name, attention)
    AttentionMaskInterface.register(name, padding_mask)
    return name
