"""A paged decode-with-append loop with torch tensors: on the GPU when there is one (and kvattn was built
with CUDA), else on the CPU backend. Pages are handed out as sequences grow, in scrambled order, and every
step appends one token per sequence (k, v) and attends, checked against torch's SDPA on the gathered cache.

    PYTHONPATH=python python3 examples/torch_paged_decode.py
"""
import sys


def main():
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        print("torch_paged_decode.py: needs torch (pip install torch); nothing run")
        return 0
    import kvattn

    cuda = torch.cuda.is_available() and kvattn.has_backend("cuda")
    device, dtype = ("cuda", torch.bfloat16) if cuda else ("cpu", torch.float32)
    gen = torch.Generator().manual_seed(0)
    b, hq, hk, d, page_size, num_pages, steps = 3, 16, 4, 128, 16, 64, 40
    lengths = [5, 17, 33]  # tokens already in each sequence

    def randn(*shape):
        return torch.randn(*shape, generator=gen).to(device=device, dtype=dtype)

    k_cache = randn(num_pages, page_size, hk, d)
    v_cache = randn(num_pages, page_size, hk, d)
    free_pages = torch.randperm(num_pages, generator=gen).tolist()
    pages_per_seq = (max(lengths) + steps + page_size - 1) // page_size
    page_table = torch.zeros(b, pages_per_seq, dtype=torch.int32)
    for i, n in enumerate(lengths):  # the pages a sequence's first tokens live in
        for j in range((n + page_size - 1) // page_size):
            page_table[i, j] = free_pages.pop()

    worst = 0.0
    for _ in range(steps):
        for i, n in enumerate(lengths):  # a new page when the next token starts one
            if n % page_size == 0:
                page_table[i, n // page_size] = free_pages.pop()
        q, k, v = randn(b, 1, hq, d), randn(b, 1, hk, d), randn(b, 1, hk, d)
        seqlens = torch.tensor(lengths, dtype=torch.int32, device=device)
        out = kvattn.flash_attn_with_kvcache(q, k_cache, v_cache, k=k, v=v, cache_seqlens=seqlens,
                                             page_table=page_table.to(device), causal=True)
        lengths = [n + 1 for n in lengths]
        for i, n in enumerate(lengths):  # the sequence's keys gathered from its pages, new token included
            rows = page_table[i, : (n + page_size - 1) // page_size].to(device)
            keys = k_cache[rows].reshape(-1, hk, d)[:n].transpose(0, 1).float()
            values = v_cache[rows].reshape(-1, hk, d)[:n].transpose(0, 1).float()
            ref = F.scaled_dot_product_attention(q[i].transpose(0, 1).float(), keys.repeat_interleave(hq // hk, 0),
                                                 values.repeat_interleave(hq // hk, 0))
            worst = max(worst, (out[i].transpose(0, 1).float() - ref).abs().max().item())
    if cuda:
        kvattn.device_errors()  # page ids checked on the device: raises if one was out of range
    tolerance = 3e-2 if dtype == torch.bfloat16 else 2e-5  # TESTING.md
    print(f"torch_paged_decode.py: {steps} steps on {device} ({dtype}), b={b}, hq={hq}, hk={hk}, d={d}, "
          f"pages of {page_size}: max |out - SDPA| = {worst:.2e}")
    if not worst < tolerance:
        print("torch_paged_decode.py: beyond the tolerance", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
