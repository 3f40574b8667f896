"""apply_rotary_emb, the reference rotary that FA3's kvcache tests import from FlashAttention-2's package
(its rotary cases are skipped without it). Written here from CONTRACT.md step 2, in torch, so that the
tests' reference side exists; kvattn's own rotary is what the tests check against it."""
import torch


def apply_rotary_emb(x, cos, sin, interleaved=False, inplace=False, seqlen_offsets=0, cu_seqlens=None,
                     max_seqlen=None):
    """x (b, s, h, d); cos, sin (seqlen_ro, rotary_dim / 2); token t of sequence i at position
    seqlen_offsets[i] + t (an int or a (b,) tensor). Dims >= rotary_dim pass unchanged. Returns a new tensor."""
    if cu_seqlens is not None:
        raise NotImplementedError("varlen x is not used by the tests this shim serves")
    s = x.shape[1]
    half = cos.shape[-1]
    rotary_dim = 2 * half
    offsets = torch.as_tensor(seqlen_offsets, device=x.device).reshape(-1, 1)  # (b or 1, 1)
    positions = (offsets + torch.arange(s, device=x.device)).long()  # (b or 1, s)
    c = cos[positions].to(torch.float32).unsqueeze(2)  # (b, s, 1, half)
    n = sin[positions].to(torch.float32).unsqueeze(2)
    r = x[..., :rotary_dim].to(torch.float32)
    if interleaved:  # pairs (2m, 2m + 1)
        x0, x1 = r[..., 0::2], r[..., 1::2]
        rotated = torch.stack((x0 * c - x1 * n, x0 * n + x1 * c), dim=-1).flatten(-2)
    else:  # pairs (m, m + half)
        x0, x1 = r[..., :half], r[..., half:]
        rotated = torch.cat((x0 * c - x1 * n, x0 * n + x1 * c), dim=-1)
    out = torch.cat((rotated.to(x.dtype), x[..., rotary_dim:]), dim=-1)
    if inplace:
        x.copy_(out)
        return x
    return out
