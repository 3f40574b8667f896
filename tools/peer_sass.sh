#!/usr/bin/env bash
# A peer's Hopper kernel as SASS without a GPU: FA4's sm_90a forward compiled here by the CuTe DSL against
# symbolic tensors (tools/peers/fa4_sass.py), to read its tile loop beside kvattn's (cuobjdump of a
# developer build's object; tools/sass_hist.py counts a loop's instructions by class).
#   tools/peer_sass.sh --d 64 [--dv 64] [--causal] [--tile-n 112] [--out DIR]
# Needs the kit's FA4 part (.peerkit/fa4.tar.xz.*, tools/peer_kit.sh) and a Python 3.12 (the kit's
# compiled wheels; PEER_SASS_PYTHON names one). Makes $PEER_SASS_WORK (/tmp/kvattn-peer-sass) once: a venv
# with the pinned PyPI packages the DSL imports, the kit unpacked, and tools/peers/torch_stub.py standing in
# for torch and triton (imported by FA4's modules, run by none of a compile). Each compile takes seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
W=${PEER_SASS_WORK:-/tmp/kvattn-peer-sass}
PY=${PEER_SASS_PYTHON:-}
for c in "${HOME}"/.pyenv/versions/3.12*/bin/python3 python3.12; do  # (a pyenv shim may exist and not run)
  [ -z "$PY" ] && "$c" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2> /dev/null && PY=$c
done
[ -n "$PY" ] || { echo "peer_sass: no Python 3.12 (set PEER_SASS_PYTHON)"; exit 2; }
ls .peerkit/fa4.tar.xz.* > /dev/null 2>&1 || { echo "peer_sass: no .peerkit/fa4.tar.xz.* (tools/peer_kit.sh)"; exit 2; }
if [ ! -x "$W/venv/bin/python" ]; then
  "$PY" -m venv "$W/venv"
  "$W/venv/bin/pip" install -q numpy==2.5.5 cuda-bindings==13.5.0 cuda-pathfinder==1.9.1 \
    apache-tvm-ffi==0.1.15.post2 einops==0.8.2 protobuf==7.36.2 typing_extensions==4.16.0
fi
if [ ! -d "$W/kit/flash_attn/cute" ]; then
  rm -rf "$W/kit" && mkdir -p "$W/kit"
  cat .peerkit/fa4.tar.xz.* | xz -dc | tar -x -C "$W/kit"
fi
site=$("$W/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
# (.pth files run in name order: the kit on the path, the DSL's own packages, then the stub)
echo "$W/kit" > "$site/kvattn_peer_kit.pth"
cp "$W/kit/nvidia_cutlass_dsl_packages.pth" "$site/"
printf '%s\nimport torch_stub\n' "$PWD/tools/peers" > "$site/zz_kvattn_torch_stub.pth"
CUOBJDUMP=${CUOBJDUMP:-$(bash tools/deps.sh sass | tail -1)}
exec "$W/venv/bin/python" tools/peers/fa4_sass.py --kit "$W/kit" --cuobjdump "$CUOBJDUMP" "$@"
