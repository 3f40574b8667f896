#!/usr/bin/env python3
"""A kernel's loops and instruction mix from `cuobjdump -sass` text, to read two kernels' tile loops side by
side (kvattn's and a peer's: tools/peer_sass.sh). No GPU needed.

    tools/sass_hist.py FILE.sass [--kernel REGEX] --loops            # loops holding HGMMA: address ranges
    tools/sass_hist.py FILE.sass [--kernel REGEX] 0x2f10-0x49a0 ...  # opcode counts over the ranges

A loop is a backward branch (BRA to a lower address) and the instructions between its target and itself;
nested and overlapping loops are all listed, innermost first. Counts group opcodes by their first part,
keeping the suffix where it tells the unit (HGMMA's shape, MUFU.EX2, SYNCS, BAR, WARPGROUP, F2FP, SHFL)."""
import argparse
import collections
import re
import sys

from sass_diff import _FUNC_SASS, _INSN, _opcode, _word

KEEP_SUFFIX = ("HGMMA", "MUFU", "SYNCS", "BAR", "WARPGROUP", "F2FP", "SHFL")


def kernels(path):
    """{function name: [(address, instruction text)]} of a cuobjdump -sass listing (sass_diff's patterns,
    addresses kept)."""
    out, name = {}, None
    with open(path) as f:
        for line in f:
            if m := _FUNC_SASS.match(line):
                name = m.group(1)
                out[name] = []
            elif name is not None and (m := _INSN.search(line)):
                out[name].append((int(m.group(1), 16), m.group(2)))
    return out


def opcode(text):
    base = _opcode(text)
    if base == "HGMMA":
        return ".".join(_word(text).split(".")[:2])  # the shape (HGMMA.64x128x16)
    return _word(text) if base in KEEP_SUFFIX else base


def loops(code):
    """[(lo, hi, instructions, HGMMA count)] of the backward branches."""
    found = []
    for addr, text in code:
        target = re.search(r"\bBRA(?:\.\S+)?\s+(0x[0-9a-f]+)", text)
        if target is None:
            continue
        to = int(target.group(1), 16)
        if to < addr:
            body = [t for a, t in code if to <= a <= addr]
            found.append((to, addr, len(body), sum("HGMMA" in t for t in body)))
    return sorted(found, key=lambda x: x[2])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sass")
    ap.add_argument("ranges", nargs="*", help="LO-HI address ranges (hex)")
    ap.add_argument("--kernel", default="", help="a regex of the function name (the first match)")
    ap.add_argument("--loops", action="store_true")
    a = ap.parse_intermixed_args()
    ks = {n: c for n, c in kernels(a.sass).items() if re.search(a.kernel, n)}
    if not ks:
        sys.exit(f"no kernel matches {a.kernel!r}")
    name, code = next(iter(ks.items()))
    print(f"{name[:160]} ({len(code)} instructions{'; ' + str(len(ks)) + ' kernels matched' if len(ks) > 1 else ''})")
    if a.loops:
        for lo, hi, n, hg in loops(code):
            if hg:
                print(f"  loop 0x{lo:x}-0x{hi:x}: {n} instructions, {hg} HGMMA")
    if a.ranges:
        spans = [tuple(int(x, 16) for x in r.split("-")) for r in a.ranges]
        counts = collections.Counter(opcode(t) for addr, t in code if any(lo <= addr <= hi for lo, hi in spans))
        print(f"  {sum(counts.values())} instructions in {', '.join(a.ranges)}")
        for op, n in counts.most_common():
            print(f"  {n:5d} {op}")


if __name__ == "__main__":
    main()
