#!/usr/bin/env bash
# Build the offline peer kit for the benchmark's `flashinfer` and `fa4` peers (bench/paged_peers.py) into
# the git-ignored .peerkit/ of the checkout (never committed): the GPU machine has no package registry, so
# the libraries travel with the device call (`carry: [".peerkit"]`), and bench/peerkit.py unpacks them there.
#
#   tools/peer_kit.sh            # everything: wheels, build Python, FlashInfer modules, archives
#   FI_GROUPS="fa2" tools/peer_kit.sh     # only some FlashInfer module groups (tools/peers/fi_modules.py)
#   PEERKIT_SKIP_BUILD=1 tools/peer_kit.sh   # pack with the modules built so far
#   PEERKIT_JIT_HEADERS=1 tools/peer_kit.sh  # + FlashInfer's headers, to compile missing modules there
#
# What it holds (pinned; the GPU machine: x86-64, Python 3.12, torch 2.11 + CUDA 13.0, sm_90a):
#   fi.tar.xz   FlashInfer 0.7.2.post1 trimmed to its paged attention wrappers, its modules compiled here for
#               sm_90a (no GPU needed: nvcc), apache-tvm-ffi 0.1.15.post2 (cp312);
#   fa4.tar.xz  flash-attn-4 4.0.0b36 (flash_attn.cute), quack-kernels, nvidia-cutlass-dsl 4.8.1 with
#               -libs-base, -libs-core, -libs-cu13 (cp312; FA4 compiles its kernels there, at first call);
#   MANIFEST.json  versions, sizes, sha256, the FlashInfer modules inside.
# An archive over PEERKIT_PART_MIB is cut in parts (<name>.tar.xz.1, .2, ...) to be carried in separate
# calls; bench/peerkit.py stashes the parts it sees under /tmp until it has them all.
#
# The build side needs a Python with torch (FlashInfer's JIT layer keys its tables on torch dtypes and asks
# torch for the C++ ABI flag; nothing else of torch runs), jinja2, filelock and apache-tvm-ffi: a venv under
# $PEERKIT_WORK, made here. Compiling the modules takes long on 2 shared cores (FA3 modules: 10 heavy
# translation units each): run it early, in the background; nice'd (PEERKIT_NICE).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
KIT=${KVATTN_PEERKIT:-$REPO/.peerkit}
WORK=${PEERKIT_WORK:-/tmp/kvattn-peerkit-build}
JOBS=${PEERKIT_JOBS:-2}
NICE=${PEERKIT_NICE:-15}
FI_GROUPS=${FI_GROUPS:-fa2 fa3 fa2_fp16 fa2_fp8kv fa3_d64 fa3_d256}
PART_MIB=${PEERKIT_PART_MIB:-32}
BUILD_PY=${PEERKIT_BUILD_PYTHON:-python3}

FI_PIN=flashinfer-python==0.7.2.post1
TVM_PIN=apache-tvm-ffi==0.1.15.post2
TORCH_PIN=torch==2.11.0
FA4_PINS="flash-attn-4==4.0.0b36 quack-kernels==0.6.5 nvidia-cutlass-dsl==4.8.1 nvidia-cutlass-dsl-libs-base==4.8.1
  nvidia-cutlass-dsl-libs-core==4.8.1 nvidia-cutlass-dsl-libs-cu13==4.8.1"
GPU_WHEEL_FLAGS="--only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64
  --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64
  --platform manylinux2014_x86_64"
HERE=$REPO/tools/peers
say() { echo "[peer_kit $(date -u +%H:%M:%S)] $*"; }
mkdir -p "$WORK"

# 1. Wheels: FlashInfer (pure Python + sources) and the GPU machine's cp312 set.
W=$WORK/wheels
if [ ! -f "$W/.done" ]; then
  say "downloading wheels into $W"
  mkdir -p "$W/gpu"
  python3 -m pip download -q --no-deps -d "$W" "$FI_PIN"
  # shellcheck disable=SC2086
  python3 -m pip download -q --no-deps $GPU_WHEEL_FLAGS -d "$W/gpu" $TVM_PIN $FA4_PINS
  touch "$W/.done"
fi

# 2. The build side's Python: a venv with torch (+ the CUDA libraries torch imports), jinja2, filelock, tvm-ffi.
VENV=$WORK/venv
if [ ! -f "$VENV/.done" ]; then
  say "making the build venv $VENV (torch: a large download)"
  "$BUILD_PY" -m venv "$VENV"
  nice -n "$NICE" "$VENV/bin/pip" install -q "$TORCH_PIN" jinja2==3.1.6 filelock==3.20.0 "$TVM_PIN" \
    packaging==25.0 numpy==2.1.3 requests==2.32.3 tqdm==4.70.1 nvidia-ml-py==13.615.71
  touch "$VENV/.done"
fi

# 3. The trimmed FlashInfer tree (the modules below are built from it, so it is complete for them).
FI_WHEEL=$(ls "$W"/flashinfer_python-*.whl)
FI_FULL=$WORK/fi_wheel
ST=$WORK/stage_fi
if [ ! -d "$FI_FULL/flashinfer" ]; then
  rm -rf "$FI_FULL" && mkdir -p "$FI_FULL" && (cd "$FI_FULL" && unzip -q "$FI_WHEEL")
fi
if [ ! -d "$ST/flashinfer" ]; then
  python3 "$HERE/fi_stage.py" "$FI_FULL" "$ST"
fi

# 4. FlashInfer's modules for sm_90a, one group at a time ("MODULE <uri> <.so>" lines collected).
MODS=$WORK/fi_modules.txt
touch "$MODS"
if [ -z "${PEERKIT_SKIP_BUILD:-}" ]; then
  for g in $FI_GROUPS; do
    say "building FlashInfer module group $g (nice $NICE, $JOBS jobs)"
    PYTHONPATH=$ST FLASHINFER_WORKSPACE_BASE=$WORK/fi_workspace FLASHINFER_JIT_PREBUILD_MAX_JOBS=$JOBS \
      nice -n "$NICE" "$VENV/bin/python" "$HERE/fi_modules.py" "$g" | tee -a "$WORK/fi_build.log" \
      | grep '^MODULE ' >> "$MODS" || { say "group $g FAILED (see $WORK/fi_build.log)"; continue; }
    sort -u -o "$MODS" "$MODS"
  done
fi

# 5. Pack FlashInfer: the trimmed tree, the modules where FlashInfer looks for AOT artifacts
#    (flashinfer/data/aot/<uri>/<uri>.so), tvm-ffi for cp312. The header trees (~6 MiB of xz) only with
#    PEERKIT_JIT_HEADERS=1: then FlashInfer can compile a module the kit lacks on the GPU machine
#    (KVATTN_PEER_JIT=1; nvcc and ninja are there; an FA3 module takes minutes on its 16 cores).
PK=$WORK/pack_fi
rm -rf "$PK" && mkdir -p "$PK"
EXCL=(--exclude='__pycache__')
if [ -z "${PEERKIT_JIT_HEADERS:-}" ]; then
  EXCL+=(--exclude='flashinfer/data/include' --exclude='flashinfer/data/cutlass'
         --exclude='flashinfer/data/spdlog' --exclude='flashinfer/data/cccl')
fi
(cd "$ST" && tar -cf - "${EXCL[@]}" flashinfer) | (cd "$PK" && tar -xf -)
TVM_WHEEL=$(ls "$W"/gpu/apache_tvm_ffi-*-cp312-*.whl)
(cd "$PK" && unzip -q "$TVM_WHEEL" -x 'tvm_ffi/src/*' 'tvm_ffi/3rdparty/*')
n_mod=0
while read -r _ uri so; do
  [ -f "$so" ] || { say "missing module file $so"; continue; }
  mkdir -p "$PK/flashinfer/data/aot/$uri" && cp "$so" "$PK/flashinfer/data/aot/$uri/$uri.so"
  n_mod=$((n_mod + 1))
done < "$MODS"
say "FlashInfer: $n_mod prebuilt module(s): $(cut -d' ' -f2 "$MODS" | tr '\n' ' ')"

# 6. FA4 + CuTe DSL (staged once; unchanged between kit builds).
SF=$WORK/stage_fa4
if [ ! -f "$SF/.done" ]; then
  rm -rf "$SF"
  # shellcheck disable=SC2046
  python3 "$HERE/fa4_stage.py" "$SF" $(ls "$W"/gpu/*.whl | grep -v apache_tvm_ffi)
  touch "$SF/.done"
fi

# 7. Archives, then MANIFEST.json. The bulk is x86-64 machine code (the CuTe DSL compiler, 193 MB): xz's
#    x86 branch filter in front makes it ~5% smaller; preset 9e would gain 0.3% more at ~3x the time.
XZ_FILTERS=${PEERKIT_XZ:---x86 --lzma2=preset=6,dict=64MiB}
pack() {  # name dir
  local out=$WORK/$1.tar.xz
  if [ "$1" = fa4 ] && [ -s "$out" ] && [ "$out" -nt "$SF/.done" ]; then return; fi
  say "packing $1 (xz $XZ_FILTERS)"
  # shellcheck disable=SC2086
  (cd "$2" && tar --sort=name --owner=0 --group=0 --numeric-owner --exclude=.done -cf - .) \
    | nice -n "$NICE" xz -T"$JOBS" $XZ_FILTERS > "$out.tmp"
  mv "$out.tmp" "$out"
}
pack fi "$PK"
pack fa4 "$SF"
rm -rf "$KIT" && mkdir -p "$KIT"
python3 "$HERE/manifest.py" "$KIT" "$PART_MIB" "$MODS" "fi=$WORK/fi.tar.xz" "fa4=$WORK/fa4.tar.xz"
ls -l "$KIT"
say "kit ready in $KIT ($(du -sb "$KIT" | cut -f1) bytes)"
