"""tools/sass_hist.py (loops and instruction mix of a SASS listing), tools/peers/torch_stub.py and
tools/peers/fa4_sass.py's tile pick: the pieces of tools/peer_sass.sh that run without the peer kit."""
import os
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools"))
sys.path.insert(0, os.path.join(ROOT, "tools", "peers"))

import sass_hist  # noqa: E402

LISTING = """
	code for sm_90a
		Function : other_kernel
        /*0000*/                   MOV R1, c[0x0][0x28] ;                      /* 0x0 */
        /*0010*/                   EXIT ;                                      /* 0x0 */
		Function : tile_kernel
        /*0000*/                   MOV R1, c[0x0][0x28] ;                      /* 0x0 */
        /*0010*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR4], R2 ;  /* 0x0 */
        /*0020*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR8], RZ, !UPT ;  /* 0x0 */
        /*0030*/                   MUFU.EX2 R3, R3 ;                           /* 0x0 */
        /*0040*/               @P1 MUFU.EX2 R4, R4 ;                           /* 0x0 */
        /*0050*/                   FFMA R5, R5, R6, -R7 ;                      /* 0x0 */
        /*0060*/              @!P0 BRA 0x10 ;                                  /* 0x0 */
        /*0070*/                   IADD3 R1, R1, 0x1, RZ ;                     /* 0x0 */
        /*0080*/                   BRA 0x70 ;                                  /* 0x0 */
"""


def test_kernels_loops_and_counts(tmp_path):
    f = tmp_path / "k.sass"
    f.write_text(LISTING)
    ks = sass_hist.kernels(str(f))
    assert list(ks) == ["other_kernel", "tile_kernel"] and len(ks["tile_kernel"]) == 9
    code = ks["tile_kernel"]
    # two backward branches: 0x60 -> 0x10 (6 instructions, one HGMMA), 0x80 -> 0x70 (2, none)
    assert sass_hist.loops(code) == [(0x70, 0x80, 2, 0), (0x10, 0x60, 6, 1)]
    assert sass_hist.opcode("@P1 MUFU.EX2 R4, R4") == "MUFU.EX2"
    assert sass_hist.opcode("HGMMA.64x128x16.F32.BF16 R24, gdesc[UR8], RZ") == "HGMMA.64x128x16"
    assert sass_hist.opcode("@!UP0 IADD3 R1, R1, 0x1, RZ") == "IADD3"
    out = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "sass_hist.py"), str(f), "--kernel", "tile",
                          "--loops", "0x10-0x60"], capture_output=True, text=True, check=True).stdout
    assert "loop 0x10-0x60: 6 instructions, 1 HGMMA" in out and "loop 0x70" not in out
    assert "    2 MUFU.EX2" in out and "6 instructions in 0x10-0x60" in out


def test_fa4_tile_pick():
    import fa4_sass

    assert fa4_sass.fa4_tile(64, 64, False) == (192, 128, True, True)
    assert fa4_sass.fa4_tile(96, 96, True) == (192, 128, False, True)
    assert fa4_sass.fa4_tile(96, 96, False) == (192, 144, False, True)
    assert fa4_sass.fa4_tile(128, 128, True) == (128, 128, True, True)
    assert fa4_sass.fa4_tile(192, 128, False) == (128, 128, True, True)
    assert fa4_sass.fa4_tile(192, 192, False) == (128, 112, True, True)
    assert fa4_sass.fa4_tile(256, 256, False) == (128, 80, True, True)


def test_torch_stub_in_a_fresh_process():
    """Under the stub, `import torch` gives placeholders: decorators keep what they decorate, classes stay
    classes, annotations combine, and nothing is truthy (run apart: the finder stays installed)."""
    code = """
import sys
sys.path.insert(0, sys.argv[1])
import torch_stub, torch, triton.language as tl
@torch.library.custom_op("x::y", mutates_args=())
def f(a):
    return a + 1
assert f(1) == 2 and repr(f.register_fake).startswith("<stub")
class G(torch.autograd.Function):
    pass
assert isinstance(torch.Tensor, type) and G.__mro__[-1] is object
assert not torch.cuda.is_available() and list(torch.float16) == [] and tl.constexpr is tl.constexpr
hint = torch.Tensor | None
print("ok", torch.__version__)
"""
    r = subprocess.run([sys.executable, "-c", code, os.path.join(ROOT, "tools", "peers")], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("ok")
