#!/usr/bin/env bash
# Download (here, where pip reaches the registry) the wheels that tests/python needs on the GPU machine,
# into .whl/ at the repository root. The GPU machine has no internet; tools/gpu_check.sh installs these
# into /tmp/site there (pass `.whl` in the device run's `carry`). Python 3.12, x86-64 manylinux, pinned.
#
# The GPU image already ships pytest, its dependencies and ml-dtypes; carrying pinned copies makes the
# run independent of whatever versions that image happens to hold. Dependencies are named explicitly
# (--no-deps): pytest 8.3 needs iniconfig, packaging, pluggy (and no pygments, unlike 8.4); ml_dtypes
# needs numpy, which the image has.
set -euo pipefail
cd "$(dirname "$0")/.."

# pytest and ml_dtypes at the pins of requirements-dev.txt (the CPU CI's), their dependencies pinned here.
pin() { sed -n "s/^\($1==[^ ;#]*\).*/\1/p" requirements-dev.txt 2>/dev/null | head -1; }
WHEELS=(
  "$(pin pytest)"
  iniconfig==2.1.0
  pluggy==1.6.0
  packaging==25.0
  "$(pin ml_dtypes)"
  # The device's test steps in worker processes (tools/device_env.sh test_workers): device-only, so pinned
  # here; both pure Python.
  pytest-xdist==3.6.1
  execnet==2.1.1
)
for w in "${WHEELS[@]}"; do
  [ -n "$w" ] || { echo "fetch_gpu_wheels: no pytest/ml_dtypes pin in requirements-dev.txt" >&2; exit 1; }
done

# .whl/ must never be committed; .gitignore already lists it, .git/info/exclude keeps it out of the
# device run's working tree too.
if [ -d .git/info ] || mkdir -p .git/info 2>/dev/null; then
  grep -qxF '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
fi

mkdir -p .whl
python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl "${WHEELS[@]}"

# One version of each package: two would stop the whole install on the GPU machine.
dups=$(cd .whl && printf '%s\n' *.whl | sed 's/-.*//' | tr 'A-Z-' 'a-z_' | sort | uniq -d)
if [ -n "$dups" ]; then
  echo "fetch_gpu_wheels: more than one version of: $dups (remove the stale .whl/ files)" >&2
  exit 1
fi
ls -l .whl
