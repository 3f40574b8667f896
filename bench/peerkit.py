"""The offline peer kit on the GPU machine: FlashInfer (its sm_90a modules prebuilt) and FlashAttention-4
(flash_attn.cute with the CuTe DSL), built by tools/peer_kit.sh into the git-ignored .peerkit/ and carried
along with the checkout (the GPU machine has no package registry).

The kit folder holds MANIFEST.json and one .tar.xz per library (or its parts .tar.xz.1, .2, ... when a
library had to be split over two transfers: parts seen in an earlier call are stashed under the
destination, which stays while the machine does). Each archive is unpacked once into DEST/site_<name>;
activate() puts it on sys.path.

Environment: KVATTN_PEERKIT (default <repo>/.peerkit), KVATTN_PEERKIT_DEST (default /tmp/kvattn-peerkit).
"""
import ctypes
import glob
import json
import os
import shutil
import site
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAMES = ("fi", "fa4")


def kit_dir():
    return os.environ.get("KVATTN_PEERKIT") or os.path.join(REPO, ".peerkit")


def dest_dir():
    return os.environ.get("KVATTN_PEERKIT_DEST") or "/tmp/kvattn-peerkit"


def manifest(kit=None):
    """The kit's MANIFEST.json as a dict, or None when there is no kit."""
    path = os.path.join(kit or kit_dir(), "MANIFEST.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def _stamp(dest, name, info):
    return os.path.join(dest, f".unpacked_{name}_{info['sha256'][:16]}")


def _unpack(parts, target):
    """Concatenated parts -> tar.xz -> target. The system's xz (multi-threaded) when present."""
    tmp = target + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    if shutil.which("xz") and shutil.which("tar"):
        cat = subprocess.Popen(["cat"] + parts, stdout=subprocess.PIPE)
        xz = subprocess.Popen(["xz", "-d", "-T0"], stdin=cat.stdout, stdout=subprocess.PIPE)
        cat.stdout.close()
        tar = subprocess.run(["tar", "-x", "-C", tmp], stdin=xz.stdout)
        xz.stdout.close()
        if xz.wait() or cat.wait() or tar.returncode:
            raise RuntimeError(f"unpacking {parts} failed")
    else:
        import lzma
        import tarfile
        with open(tmp + ".xz", "wb") as out:
            for p in parts:
                with open(p, "rb") as f:
                    shutil.copyfileobj(f, out)
        with lzma.open(tmp + ".xz") as xf, tarfile.open(fileobj=xf, mode="r|") as tf:
            tf.extractall(tmp)
        os.remove(tmp + ".xz")
    shutil.rmtree(target, ignore_errors=True)
    os.rename(tmp, target)


def unpack(log=print):
    """Unpack what the kit holds. Returns {name: None (ready) | reason it is not}."""
    kit, dest = kit_dir(), dest_dir()
    man = manifest(kit) or manifest(dest)  # dest's copy: unpacked by an earlier call on this machine
    if man is None:
        return {n: f"no peer kit ({kit}/MANIFEST.json missing: build it with tools/peer_kit.sh)" for n in NAMES}
    os.makedirs(os.path.join(dest, "parts"), exist_ok=True)
    if manifest(kit) is not None:
        shutil.copyfile(os.path.join(kit, "MANIFEST.json"), os.path.join(dest, "MANIFEST.json"))
    state = {}
    for name in NAMES:
        info = man.get("archives", {}).get(name)
        if info is None:
            state[name] = "not in the peer kit"
            continue
        target = os.path.join(dest, "site_" + name)
        if os.path.exists(_stamp(dest, name, info)) and os.path.isdir(target):
            state[name] = None
            continue
        parts = []
        for p in info["parts"]:
            here, stash = os.path.join(kit, p), os.path.join(dest, "parts", p)
            if os.path.exists(here) and (not os.path.exists(stash) or os.path.getsize(stash) != os.path.getsize(here)):
                shutil.copyfile(here, stash)  # an earlier transfer's part stays for a later call
            parts.append(stash if os.path.exists(stash) else None)
        missing = [p for p, s in zip(info["parts"], parts) if s is None]
        if missing:
            state[name] = f"kit parts missing: {', '.join(missing)} (carry them in another call first)"
            continue
        t0 = time.perf_counter()
        try:
            _unpack(parts, target)
        except Exception as exc:  # noqa: BLE001
            state[name] = f"unpacking failed: {exc}"
            continue
        open(_stamp(dest, name, info), "w").close()
        log(f"peer kit: unpacked {name} ({info['version']}) in {time.perf_counter() - t0:.1f} s into {target}")
        state[name] = None
    return state


def _preload_cudart():
    """FlashInfer's prebuilt modules need libcudart.so.13 (NEEDED, no rpath): torch's copy, or the toolkit's."""
    import torch
    tdir = os.path.dirname(torch.__file__)
    cands = ["libcudart.so.13"] + glob.glob(os.path.join(tdir, "..", "nvidia", "*", "lib", "libcudart.so.13*"))
    cands += glob.glob("/usr/local/cuda*/lib64/libcudart.so.13*")
    for c in cands:
        try:
            ctypes.CDLL(c, mode=ctypes.RTLD_GLOBAL)
            return c
        except OSError:
            continue
    return None


_ACTIVE = {}


def activate(log=print):
    """Unpack and import the peers once per process. Returns {name: module | reason string}.

    FlashInfer is imported before the CuTe DSL is on sys.path: the kit's FlashInfer has no CuTe-DSL kernels,
    and must not go looking for them."""
    if _ACTIVE:
        return _ACTIVE
    state = unpack(log)
    dest = dest_dir()
    os.environ.setdefault("FLASHINFER_WORKSPACE_BASE", dest)  # writable; JIT fallbacks land here
    os.environ.setdefault("FLASHINFER_CUDA_ARCH_LIST", "9.0a")
    os.environ.setdefault("FLASHINFER_DISABLE_VERSION_CHECK", "1")
    os.environ.setdefault("FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED", "1")
    os.environ.setdefault("FLASH_ATTENTION_CUTE_DSL_CACHE_DIR", os.path.join(dest, "fa4_cache"))
    if state.get("fi") is None:
        site.addsitedir(os.path.join(dest, "site_fi"))
        try:
            _preload_cudart()
            import flashinfer
            _ACTIVE["fi"] = flashinfer
        except Exception as exc:  # noqa: BLE001
            _ACTIVE["fi"] = f"flashinfer import failed: {exc.__class__.__name__}: {str(exc)[:150]}"
    else:
        _ACTIVE["fi"] = state.get("fi")
    if state.get("fa4") is None:
        if state.get("fi") is not None:  # tvm_ffi ships in the FlashInfer archive
            _ACTIVE["fa4"] = "needs the kit's fi archive too (apache-tvm-ffi lives there)"
        else:
            site.addsitedir(os.path.join(dest, "site_fa4"))  # its .pth puts the CuTe DSL on sys.path
            try:
                import flash_attn.cute as fa4
                _ACTIVE["fa4"] = fa4
            except Exception as exc:  # noqa: BLE001
                _ACTIVE["fa4"] = f"flash_attn.cute import failed: {exc.__class__.__name__}: {str(exc)[:150]}"
    else:
        _ACTIVE["fa4"] = state.get("fa4")
    for name in NAMES:
        mod = _ACTIVE[name]
        if isinstance(mod, str):
            log(f"peer kit: {name} unavailable: {mod}")
    return _ACTIVE


def versions():
    man = manifest() or manifest(dest_dir())
    if not man:
        return {}
    return {n: a.get("version") for n, a in man.get("archives", {}).items()}


if __name__ == "__main__":  # python3 -m bench.peerkit: unpack and import, say what is ready
    got = activate()
    for n, m in got.items():
        print(n, "ready" if not isinstance(m, str) else m, getattr(m, "__file__", ""))
    sys.exit(0 if all(not isinstance(m, str) for m in got.values()) else 1)
