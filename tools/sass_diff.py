#!/usr/bin/env python3
"""Checks that a refactor left the GPU code alone, without a GPU: compares the SASS of every kernel.

  tools/sass_diff.py dump BUILD_DIR_OR_FILES... -o before.json   # objects (*.o) / libraries with device code
  ... change the sources, rebuild (incrementally) ...
  tools/sass_diff.py dump BUILD_DIR_OR_FILES... -o after.json
  tools/sass_diff.py diff before.json after.json [--show 40] [--kernel REGEX]

A recipe (one build dir, rebuilt incrementally; a clean baseline from `git archive BASE | tar -x -C DIR`):
  cmake -S . -B build-dev -DKVATTN_CUDA=ON -DKVATTN_CUDA_ARCHS="80;90a" -DKVATTN_DEV_HEAD_DIM=128 ...
        ... -DKVATTN_DEV_DTYPE=bf16; cmake --build build-dev -j2 --target kvattn
  tools/sass_diff.py dump build-dev/CMakeFiles/kvattn.dir/src/cuda -o before.json
The dev build compiles the sm_90a prefill kernel of its head dim only: for 64 and 256 configure with that
KVATTN_DEV_HEAD_DIM (archs 90a) and build the whole target; `make src/cuda/.../x.o` alone does not see a
changed header (CMake reads the compiler's dependency files in the target build only): delete the .o first.

A snapshot holds, per (object file, arch, kernel): the SASS as its instruction sequence (addresses and
encodings dropped; branch targets renamed L0, L1, ... in address order, so that an inserted instruction
moves no other line) and the resources of `cuobjdump -res-usage` (REG, STACK, SHARED, LOCAL, ...).
A directory argument is searched for *.o files (a CMake build dir: CMakeFiles/<target>.dir/...).
cuobjdump: $CUOBJDUMP, else PATH, else /usr/local/cuda/bin. Where the toolkit lacks it (the developer
machine's does), the pinned PyPI wheels carry it and the nvdisasm it runs:
`export CUOBJDUMP=$(bash tools/deps.sh sass | tail -1)` (requirements-sass.txt; once into ~/.cache/kvattn).

diff prints one verdict a kernel:
  identical     same instructions, same resources: the generated code did not change
  regalloc      the same instructions up to register numbers (R/UR/P/UP/B) and .reuse hints: only the
                allocation moved
  changed       otherwise: the opcode counts that differ, the counts per class (tensor, fp32, int, memory,
                control: ptxas trades equivalent integer forms freely), whether the main loop (first to
                last tensor-core instruction) is the same up to registers, resources, spill instructions
                (STL/LDL), and with --show N the first N lines of a unified diff of the (register-
                normalized) sequences
and kernels only in one of the snapshots. Exit status 0 when every kernel is identical, 1 otherwise.
"""
import argparse
import collections
import difflib
import json
import os
import re
import shutil
import subprocess
import sys

_CUOBJDUMP = "cuobjdump"
_INSN = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
_FUNC_SASS = re.compile(r"^\s*Function : (\S+)")
_FUNC_RES = re.compile(r"^\s*Function (\S+):\s*$")
_ARCH = re.compile(r"^\s*arch = (\S+)")
_BRANCHES = ("BRA", "BSSY", "CALL", "JMP", "SSY", "PBK", "PCNT", "BREAK", "BRX", "JMX", "RET", "WARPSYNC")
_TARGET = re.compile(r"(?<![\w\]\[])0x([0-9a-f]+)\b")
_REGS = [(re.compile(r"\.reuse\b"), ""), (re.compile(r"\bUR\d+\b"), "UR"), (re.compile(r"\bR\d+\b"), "R"), (re.compile(r"\bUP\d\b"), "UP"),
         (re.compile(r"\bP\d\b"), "P"), (re.compile(r"\bB\d+\b"), "B")]


def _word(insn):
    """The mnemonic of an instruction with its modifiers, predicate dropped: '@!P0 FFMA.FTZ R1, ...' ->
    FFMA.FTZ."""
    words = insn.split()
    return words[1] if words[0].startswith("@") and len(words) > 1 else words[0]


def _opcode(insn):
    """The mnemonic of an instruction, predicate and modifiers dropped: '@!P0 FFMA.FTZ R1, ...' -> FFMA."""
    return _word(insn).split(".")[0]


def _normalize(insns):
    """(address, text) pairs -> texts with branch targets as labels numbered in address order; a call's
    return address (MOV Rn, <the address after a CALL>) is a label too."""
    targets, returns = set(), set()
    for k, (_, text) in enumerate(insns):
        if _opcode(text) in _BRANCHES:
            targets.update(int(t, 16) for t in _TARGET.findall(text.split(None, 1)[-1]))
        if _opcode(text) == "CALL" and k + 1 < len(insns):
            returns.add(insns[k + 1][0])
    labels = {t: "L%d" % i for i, t in enumerate(sorted(targets | returns))}
    out = []
    for _, text in insns:
        op = _opcode(text)
        if op in _BRANCHES:
            text = _TARGET.sub(lambda mt: labels.get(int(mt.group(1), 16), mt.group(0)), text)
        elif op == "MOV" and (mt := re.search(r", 0x([0-9a-f]+)$", text)) and int(mt.group(1), 16) in returns:
            text = text[: mt.start()] + ", " + labels[int(mt.group(1), 16)]
        out.append(re.sub(r"\s+", " ", text))
    return out


def _cuobjdump(flag, path):
    # -sass runs nvdisasm: look for it next to cuobjdump first (the PyPI wheels put both in one bin/).
    env = dict(os.environ, PATH=os.path.dirname(os.path.abspath(_CUOBJDUMP)) + os.pathsep + os.environ.get("PATH", ""))
    run = subprocess.run([_CUOBJDUMP, flag, path], capture_output=True, text=True, env=env)
    if run.returncode != 0 and "nvdisasm" in run.stderr:  # not "no device code": a snapshot of nothing
        sys.exit(f"sass_diff: {_CUOBJDUMP} {flag} needs nvdisasm: {run.stderr.strip()[:200]}")
    return run.stdout if run.returncode == 0 else ""  # host-only objects have no device code


def _find_cuobjdump():
    for candidate in (os.environ.get("CUOBJDUMP"), shutil.which("cuobjdump"), "/usr/local/cuda/bin/cuobjdump"):
        if candidate and os.path.exists(candidate):
            return candidate
    sys.exit("sass_diff: no cuobjdump (set CUOBJDUMP, or put it on PATH: see the usage above)")


_ANON = re.compile(r"(\d+)_GLOBAL__N_")


def _stable_name(name):
    """An anonymous namespace's mangled name carries a hash of the file that may move with its content:
    '41_GLOBAL__N__a4a6d2dd_9_append_cu_9a9fb34d' -> '12_GLOBAL__N_1' (what c++filt shows as well)."""
    out, pos = [], 0
    for m in _ANON.finditer(name):
        if m.start() < pos:
            continue
        out.append(name[pos : m.start()] + "12_GLOBAL__N_1")
        pos = m.end(1) + int(m.group(1))
    return "".join(out) + name[pos:]


def _parse_sass(text):
    kernels, arch, name, insns = {}, "?", None, []

    def close():
        if name is not None:
            kernels[(arch, _stable_name(name))] = _normalize(insns)

    for line in text.splitlines():
        if m := _ARCH.match(line):
            close()
            arch, name, insns = m.group(1), None, []
        elif m := _FUNC_SASS.match(line):
            close()
            name, insns = m.group(1), []
        elif name is not None and (m := _INSN.search(line)):
            insns.append((int(m.group(1), 16), m.group(2)))
    close()
    return kernels


def _parse_res(text):
    res, arch, name = {}, "?", None
    for line in text.splitlines():
        if m := _ARCH.match(line):
            arch, name = m.group(1), None
        elif m := _FUNC_RES.match(line):
            name = m.group(1)
        elif name is not None and ":" in line:
            res[(arch, _stable_name(name))] = dict(kv.split(":", 1) for kv in line.split())
            name = None
    return res


def _inputs(paths):
    for path in paths:
        if os.path.isdir(path):
            for root, _, files in sorted(os.walk(path)):
                for f in sorted(files):
                    if f.endswith(".o"):
                        yield os.path.join(root, f)
        else:
            yield path


def dump(args):
    snap = {}
    base = os.path.commonpath([os.path.abspath(p if os.path.isdir(p) else os.path.dirname(p)) for p in args.paths])
    for path in _inputs(args.paths):
        sass = _parse_sass(_cuobjdump("-sass", path))
        res = _parse_res(_cuobjdump("-res-usage", path))
        rel = os.path.relpath(path, base)
        for (arch, name), insns in sass.items():
            snap["%s|%s|%s" % (rel, arch, name)] = {"sass": insns, "res": res.get((arch, name), {})}
    with open(args.output, "w") as f:
        json.dump(snap, f)
    print("%d kernels from %s -> %s" % (len(snap), " ".join(args.paths), args.output))


def _demangle(names):
    for tool in ("cu++filt", "c++filt"):
        if shutil.which(tool):
            run = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True)
            out = run.stdout.splitlines()
            if run.returncode == 0 and len(out) == len(names):
                return dict(zip(names, out))
    return {n: n for n in names}


def _strip_regs(insns):
    out = []
    for text in insns:
        for pattern, repl in _REGS:
            text = pattern.sub(repl, text)
        out.append(text)
    return out


def _counts(insns):
    return collections.Counter(_opcode(t) for t in insns)


# Opcode classes, for a kernel whose instructions moved: ptxas picks freely among equivalent integer forms
# (IADD3 / IMAD.IADD / VIADD, MOV / IMAD.MOV), so a class total says more than a single opcode.
_CLASSES = [
    ("tensor", r"HMMA|HGMMA|IMMA|QGMMA|WARPGROUP|DMMA"),
    ("fp32", r"F[A-Z0-9]*|MUFU"),
    ("memory", r"LD[A-Z]*|ST[A-Z]*|ATOM[A-Z]*|RED|UTMA[A-Z]*|UBLKCP|LDGSTS|CCTL[A-Z]*|SYNCS|MEMBAR|FENCE|ULDC"),
    ("control", r"BRA|BRX|JMP|JMX|CALL|RET|EXIT|BSSY|BSYNC|BAR|WARPSYNC|YIELD|NOP|BPT|ELECT|VOTEU?|CGAERRBAR|ACQBULK"),
    ("int", r"U?(IADD3|IMAD|VIADD|IMNMX|VIMNMX|LEA|LOP3|SHF|SHL|SHR|MOV|SEL|PRMT|ISETP|PLOP3|IABS|POPC|FLO|BREV|CS2R|S2R|S2UR|R2UR|P2R|R2P|SHFL|I2F|F2I|I2FP|F2IP|IMUL|ICMP|BMSK|SGXT)"),
]


def _opclass(op):
    for name, pattern in _CLASSES:
        if re.fullmatch(pattern, op):
            return name
    return "other"


def _class_counts(insns):
    return collections.Counter(_opclass(_opcode(t)) for t in insns)


def _mma_span(insns):
    """The instructions from the first to the last tensor-core one (the main loop), or None."""
    idx = [k for k, t in enumerate(insns) if _opclass(_opcode(t)) == "tensor"]
    return insns[idx[0] : idx[-1] + 1] if idx else None


def diff(args):
    with open(args.before) as f:
        before = json.load(f)
    with open(args.after) as f:
        after = json.load(f)
    keys = sorted(set(before) | set(after))
    if args.kernel:
        keys = [k for k in keys if re.search(args.kernel, k)]
    names = _demangle(sorted({k.split("|", 2)[2] for k in keys}))
    verdicts = collections.Counter()
    for key in keys:
        obj, arch, name = key.split("|", 2)
        title = "%s %s %s" % (obj, arch, names.get(name, name)[: args.width])
        if key not in after or key not in before:
            verdicts["only in " + ("before" if key in before else "after")] += 1
            print("ONLY IN %s: %s" % ("BEFORE" if key in before else "AFTER", title))
            continue
        a, b = before[key], after[key]
        if a["sass"] == b["sass"] and a["res"] == b["res"]:
            verdicts["identical"] += 1
            if args.verbose:
                print("identical: %s (%d instructions)" % (title, len(a["sass"])))
            continue
        na, nb = _strip_regs(a["sass"]), _strip_regs(b["sass"])
        verdict = "regalloc" if na == nb else "changed"
        verdicts[verdict] += 1
        print("%s: %s" % (verdict.upper(), title))
        print("  instructions %d -> %d" % (len(a["sass"]), len(b["sass"])))
        for field in sorted(set(a["res"]) | set(b["res"])):
            if a["res"].get(field) != b["res"].get(field):
                print("  %s %s -> %s" % (field, a["res"].get(field), b["res"].get(field)))
        ca, cb = _counts(a["sass"]), _counts(b["sass"])
        moved = {op: (ca[op], cb[op]) for op in set(ca) | set(cb) if ca[op] != cb[op]}
        if moved:
            print("  opcodes: " + ", ".join("%s %d->%d" % (op, x, y) for op, (x, y) in sorted(moved.items())))
        elif verdict == "changed":
            print("  opcode counts: all equal (order / operands differ)")
        ka, kb = _class_counts(a["sass"]), _class_counts(b["sass"])
        print("  classes: " + ", ".join("%s %d->%d" % (c, ka[c], kb[c]) for c in sorted(set(ka) | set(kb))))
        sa, sb = _mma_span(na), _mma_span(nb)
        if sa is not None and sb is not None:
            if sa == sb:
                print("  mma span (first to last tensor-core instruction, %d): same up to registers" % len(sa))
            else:
                moved = sum(1 for line in difflib.unified_diff(sa, sb, n=0) if line[:1] in "+-") - 2
                xa, xb = _class_counts(sa), _class_counts(sb)
                print("  mma span: %d -> %d instructions, %d diff lines; its classes: %s" % (
                    len(sa), len(sb), moved,
                    ", ".join("%s %d->%d" % (c, xa[c], xb[c]) for c in sorted(set(xa) | set(xb)))))
        spills = [(op, ca[op], cb[op]) for op in ("STL", "LDL") if ca[op] or cb[op]]
        if spills:
            print("  local memory: " + ", ".join("%s %d->%d" % s for s in spills))
        if args.show and verdict == "changed":
            lines = list(difflib.unified_diff(na, nb, "before", "after", n=2, lineterm=""))
            for line in lines[2 : 2 + args.show]:
                print("    " + line)
            if len(lines) > 2 + args.show:
                print("    ... (%d more diff lines)" % (len(lines) - 2 - args.show))
    print("summary: " + ", ".join("%d %s" % (n, v) for v, n in sorted(verdicts.items())))
    return 0 if set(verdicts) <= {"identical"} else 1


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    d = sub.add_parser("dump", help="snapshot the SASS of objects / libraries")
    d.add_argument("paths", nargs="+")
    d.add_argument("-o", "--output", required=True)
    c = sub.add_parser("diff", help="compare two snapshots")
    c.add_argument("before")
    c.add_argument("after")
    c.add_argument("--show", type=int, default=0, help="diff lines to print per changed kernel")
    c.add_argument("--kernel", help="only keys (object|arch|mangled name) matching this regex")
    c.add_argument("--width", type=int, default=140, help="characters of a demangled name to print")
    c.add_argument("-v", "--verbose", action="store_true", help="list identical kernels too")
    args = parser.parse_args()
    if args.command == "dump":
        global _CUOBJDUMP
        _CUOBJDUMP = _find_cuobjdump()
        dump(args)
        return 0
    return diff(args)


if __name__ == "__main__":
    sys.exit(main())
