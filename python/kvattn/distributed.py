"""Context-parallel decode over torch.distributed: a sequence's KV pages spread over ranks (NCCL or gloo).

Each rank of `group` holds the pages a ShardLayout gives it (its own pool and page table, in logical
order), and every rank makes the same call with the same global arguments (q, the step's new k/v, global
lengths). Each rank appends the new tokens whose slots it owns and attends over its shard with the LSE
(kvattn.sharded.attend_shard); the partial (out, lse) of all ranks travel in one collective (all-gather,
or a gather to `dst`) and are merged by kvattn's combine, which counts the sinks once.

The collective is the only transport: torch.distributed with the group's backend (NCCL for CUDA tensors,
gloo for CPU tensors). NVLink multicast (NVLS) is turned off for NCCL when this module is imported
(NCCL_NVLS_ENABLE=0): on some multi-GPU hosts it has taken the GPUs out of service. NCCL reads it when a
communicator is created, so import this module before the first collective.
"""
import os

from .sharded import attend_shard, merge_partials
from .shard_layout import ShardLayout
from .errors import KvattnError

os.environ["NCCL_NVLS_ENABLE"] = "0"

__all__ = ["ShardLayout", "flash_attn_with_kvcache", "exchange_partials"]


def _dist():
    try:
        import torch
        import torch.distributed as dist
    except ImportError as e:
        raise KvattnError("kvattn.distributed needs torch (torch.distributed); the numpy pieces are in "
                          "kvattn.sharded") from e
    if not dist.is_available() or not dist.is_initialized():
        raise KvattnError("group: torch.distributed is not initialized (call torch.distributed.init_process_group)")
    return torch, dist


def exchange_partials(partial, group=None, dst=None):
    """The partial (out, lse) of every rank of `group`, stacked: ((n, rows, hq, dv), (n, rows, hq)) fp32.

    One collective carries out and lse together. dst=None: every rank gets them (all-gather); dst=rank (a
    global rank): only that rank does, the others get (None, None)."""
    torch, dist = _dist()
    out, lse = partial.out, partial.lse
    if not (torch.is_tensor(out) and torch.is_tensor(lse)):
        raise KvattnError("q: kvattn.distributed takes torch tensors (numpy arrays: use kvattn.sharded directly)")
    packed = torch.cat([out, lse.unsqueeze(-1)], dim=-1).contiguous()  # (rows, hq, dv + 1)
    world = dist.get_world_size(group)
    if dst is None:
        gathered = packed.new_empty((world,) + tuple(packed.shape))
        dist.all_gather(list(gathered.unbind(0)), packed, group=group)
    else:
        is_dst = dist.get_rank() == dst
        gathered = packed.new_empty((world,) + tuple(packed.shape)) if is_dst else None
        dist.gather(packed, list(gathered.unbind(0)) if is_dst else None, dst=dst, group=group)
        if not is_dst:
            return None, None
    dv = int(out.shape[-1])
    return gathered[..., :dv], gathered[..., dv]


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, qv=None, rotary_cos=None, rotary_sin=None,
                            cache_seqlens=None, cache_batch_idx=None, cache_leftpad=None, page_table=None,
                            cu_seqlens_q=None, cu_seqlens_k_new=None, max_seqlen_q=None, rotary_seqlens=None,
                            q_descale=None, k_descale=None, v_descale=None, softmax_scale=None, causal=False,
                            window_size=(-1, -1), attention_chunk=0, softcap=0.0, rotary_interleaved=True,
                            num_splits=0, pack_gqa=None, return_softmax_lse=False, *, layout, group=None, dst=None,
                            sinks=None, seqused_q=None, deterministic=False, alibi_slopes=None):
    """kvattn.flash_attn_with_kvcache over a cache sharded by `layout` across the ranks of `group`.

    Every rank passes the same global arguments and its own k_cache, v_cache (its page pool) and page_table
    (layout.rows rows listing its pages in logical order). cache_seqlens, cache_leftpad, rotary positions
    are those of the whole sequence. Returns what flash_attn_with_kvcache returns, on every rank (dst=None)
    or on rank `dst` only (the others get None, or (None, None) with return_softmax_lse).
    """
    _, dist = _dist()
    if layout.world_size != dist.get_world_size(group):
        raise KvattnError(f"layout: made for world_size {layout.world_size}, the group has "
                          f"{dist.get_world_size(group)} ranks")
    partial = attend_shard(
        layout, dist.get_rank(group), q, k_cache, v_cache, k=k, v=v, qv=qv, rotary_cos=rotary_cos,
        rotary_sin=rotary_sin, cache_seqlens=cache_seqlens, cache_batch_idx=cache_batch_idx,
        cache_leftpad=cache_leftpad, page_table=page_table, cu_seqlens_q=cu_seqlens_q,
        cu_seqlens_k_new=cu_seqlens_k_new, max_seqlen_q=max_seqlen_q, rotary_seqlens=rotary_seqlens,
        q_descale=q_descale, k_descale=k_descale, v_descale=v_descale, softmax_scale=softmax_scale, causal=causal,
        window_size=window_size, attention_chunk=attention_chunk, softcap=softcap,
        rotary_interleaved=rotary_interleaved, num_splits=num_splits, pack_gqa=pack_gqa,
        deterministic=deterministic, seqused_q=seqused_q, alibi_slopes=alibi_slopes)
    out_parts, lse_parts = exchange_partials(partial, group, dst)
    if out_parts is None:
        return (None, None) if return_softmax_lse else None
    out, lse = merge_partials(out_parts, lse_parts, partial, sinks=sinks)
    return (out, lse) if return_softmax_lse else out
