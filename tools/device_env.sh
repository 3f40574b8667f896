# Sourced by the device check scripts (tools/*_check.sh, ncu_prefill.sh) on the GPU machine, from the
# repository root: the package and the wheels of .whl/ on PYTHONPATH, and `device_lib PATH NAME`, which
# echoes a path to the library PATH (.so, or .xz unpacked to /tmp/kvattn_lib/NAME.so).
export PYTHONPATH=python:/tmp/site:. PYTHONUNBUFFERED=1 PYTEST_DISABLE_PLUGIN_AUTOLOAD=1
if ls .whl/*.whl > /dev/null 2>&1 && [ ! -d /tmp/site/pytest ]; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl > /dev/null 2>&1
fi
device_lib() {
  if [[ "$1" == *.xz ]]; then
    mkdir -p /tmp/kvattn_lib && xz -dc "$1" > "/tmp/kvattn_lib/$2.so" && echo "/tmp/kvattn_lib/$2.so"
  else
    echo "$1"
  fi
}
