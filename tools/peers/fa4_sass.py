"""FA4's Hopper forward kernel as PTX, cubin and SASS, compiled here without a GPU (tools/peer_sass.sh runs
it in its venv): the CuTe DSL compiles FlashAttentionForwardSm90 against symbolic tensors for sm_90a and
keeps what it made; cuobjdump turns the cubin into SASS, for reading FA4's tile loop beside kvattn's
(bench/NOTES.md, session 49: d 64's missing turns were found this way).

    python3 tools/peers/fa4_sass.py --kit DIR --d 64 [--dv 64] [--causal] [--out DIR] [--cuobjdump PATH]

The tile is FA4's own Hopper pick unless given (--tile-m, --tile-n, --no-rs, --no-overlap); two stages
and 384 launch threads as its interface passes them. Dense bf16 q / k / v / out (b, s, h, d), one kv head
a q head, no paging, no score or mask mods."""
import argparse
import glob
import os
import subprocess
import sys
import time
import types


def fa4_tile(d, dv, causal):
    """(tile_m, tile_n, P V from registers, intra-warpgroup overlap): FA4 4.0.0b36's sm90 forward pick
    (interface.py, _tile_size_fwd_sm90) without a local window or block sparsity."""
    if d <= 64:
        return 192, 128, True, True
    if d <= 96:
        return (192, 128, False, True) if causal else (192, 144, False, True)
    if d <= 128:
        return 128, 128, True, True
    if d <= 192:
        return 128, 128 if dv <= 128 else 112, True, True
    return 128, 80, True, True


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kit", default=os.path.join(os.environ.get("PEER_SASS_WORK", "/tmp/kvattn-peer-sass"), "kit"))
    ap.add_argument("--d", type=int, required=True)
    ap.add_argument("--dv", type=int)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--tile-m", type=int)
    ap.add_argument("--tile-n", type=int)
    ap.add_argument("--no-rs", action="store_true", help="P V with P from shared memory")
    ap.add_argument("--no-overlap", action="store_true", help="no intra-warpgroup overlap")
    ap.add_argument("--out", default="/tmp/kvattn-peer-sass/out")
    ap.add_argument("--cuobjdump", default=os.environ.get("CUOBJDUMP", "cuobjdump"))
    a = ap.parse_args()
    dv = a.dv or a.d
    tile_m, tile_n, rs, overlap = fa4_tile(a.d, dv, a.causal)
    tile_m, tile_n = a.tile_m or tile_m, a.tile_n or tile_n
    rs, overlap = rs and not a.no_rs, overlap and not a.no_overlap
    name = f"fa4_sm90_d{a.d}_dv{dv}_{'causal' if a.causal else 'full'}_{tile_m}x{tile_n}"
    out = os.path.join(os.path.abspath(a.out), name)
    os.makedirs(out, exist_ok=True)
    # (before cutlass is imported: the DSL reads them once)
    os.environ.update(CUTE_DSL_ARCH="sm_90a", CUTE_DSL_KEEP="ptx,cubin", CUTE_DSL_DUMP_DIR=out)
    # The packages' __init__ pulls in the torch-facing interface; the kernel modules need none of it.
    for pkg, path in (("flash_attn", "flash_attn"), ("flash_attn.cute", "flash_attn/cute")):
        module = types.ModuleType(pkg)
        module.__path__ = [os.path.join(a.kit, path)]
        sys.modules[pkg] = module
    import cutlass
    import cutlass.cute as cute
    from flash_attn.cute.flash_fwd_sm90 import FlashAttentionForwardSm90
    from flash_attn.cute.utils import AuxData
    from quack.compile_utils import make_fake_tensor

    dtype = cutlass.BFloat16
    b, s, h = cute.sym_int(), cute.sym_int(), cute.sym_int()
    div = 128 // dtype.width
    q = make_fake_tensor(dtype, (b, s, h, a.d), divisibility=div)
    k = make_fake_tensor(dtype, (b, s, h, a.d), divisibility=div)
    v = make_fake_tensor(dtype, (b, s, h, dv), divisibility=div)
    o = make_fake_tensor(dtype, (b, s, h, dv), divisibility=div)
    lse = make_fake_tensor(cutlass.Float32, (b, h, s), divisibility=4)
    kernel = FlashAttentionForwardSm90(dtype, a.d, dv, 1, is_causal=a.causal, is_local=False, pack_gqa=False,
                                       tile_m=tile_m, tile_n=tile_n, num_stages=2, num_threads=384,
                                       Q_in_regs=False, intra_wg_overlap=overlap, mma_pv_is_rs=rs, mask_mod=None,
                                       score_mod=None, has_aux_tensors=False, q_subtile_factor=1,
                                       paged_kv_non_tma=False)
    stream = cute.runtime.make_fake_stream(use_tvm_ffi_env_stream=True)
    # (softmax scale, then the optional tensors of the call as FA4's interface passes them: none here)
    args = [kernel, q, k, v, o, lse, 1.0 / a.d**0.5] + [None] * 9 + [AuxData(None, None), None, None, stream]
    t0 = time.time()
    cute.compile(*args, options="--enable-tvm-ffi")
    cubins = sorted(glob.glob(os.path.join(out, "**", "*.cubin"), recursive=True), key=os.path.getmtime)
    if not cubins:
        sys.exit(f"no cubin under {out}: the DSL kept nothing (CUTE_DSL_KEEP)")
    sass = os.path.join(out, name + ".sass")
    with open(sass, "w") as f:
        subprocess.run([a.cuobjdump, "-sass", cubins[-1]], stdout=f, check=True)
    with open(sass) as f:
        lines = f.read().splitlines()
    hgmma = sum("HGMMA" in x for x in lines)
    print(f"{name}: compiled in {time.time() - t0:.1f} s; tile {tile_m} x {tile_n}, P V from "
          f"{'registers' if rs else 'shared memory'}, overlap {overlap}; {len(lines)} SASS lines, {hgmma} HGMMA")
    print(f"  {sass}\n  {cubins[-1]}")


if __name__ == "__main__":
    main()
