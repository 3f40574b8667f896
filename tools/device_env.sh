# Sourced by the device check scripts (tools/*_check.sh, ncu_prefill.sh) on the GPU machine, from the
# repository root: the package and the wheels of .whl/ on PYTHONPATH, and `device_lib PATH NAME`, which
# echoes a path to the library PATH (.so, or .xz unpacked to /tmp/kvattn_lib/NAME.so).
export PYTHONPATH=python:/tmp/site:. PYTHONUNBUFFERED=1 PYTEST_DISABLE_PLUGIN_AUTOLOAD=1
if ls .whl/*.whl > /dev/null 2>&1 && { [ ! -d /tmp/site/pytest ] || [ ! -d /tmp/site/xdist ]; }; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl > /dev/null 2>&1
fi
device_lib() {
  if [[ "$1" == *.xz ]]; then
    mkdir -p /tmp/kvattn_lib && xz -dc "$1" > "/tmp/kvattn_lib/$2.so" && echo "/tmp/kvattn_lib/$2.so"
  else
    echo "$1"
  fi
}
# pytest's arguments for a test step in KVATTN_TEST_WORKERS worker processes (8; 0: one process), where
# pytest-xdist came with .whl/: the oracle (float64 numpy) is the tests' time, the kernels are short, and the
# machine has 16 cores, so a check call's test step shrinks several times. Not for -x smoke steps or the
# sanitizers (one process each). With it, run the step under `env "${TEST_WORKER_ENV[@]}"` (two BLAS threads
# a worker, not 16 each).
TEST_WORKER_ENV=(OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 MKL_NUM_THREADS=2)
test_workers() {
  local n=${KVATTN_TEST_WORKERS:-8}
  if [ "$n" != 0 ] && python3 -c "import xdist" > /dev/null 2>&1; then echo "-p xdist.plugin -n $n"; fi
}
