"""`kvattn-bench`: runs the benchmark driver (bench/run.py of the source tree; `kvattn-bench --help`).

The driver is found, in order, at $KVATTN_BENCH_DIR (a bench/ folder), ./bench (a source checkout as the
working directory), the source tree this package was imported from, or the copy installed with the package
(kvattn/bench, with the float64 oracle the main job checks against).
"""
import importlib.util
import os
import sys


def find_bench_dir():
    """The bench/ folder holding run.py, or None."""
    here = os.path.dirname(os.path.abspath(__file__))
    candidates = [os.environ.get("KVATTN_BENCH_DIR"), os.path.join(os.getcwd(), "bench"),
                  os.path.join(here, os.pardir, os.pardir, "bench"), os.path.join(here, "bench")]
    for path in candidates:
        if path and os.path.isfile(os.path.join(path, "run.py")) and os.path.isfile(os.path.join(path, "__init__.py")):
            return os.path.normpath(path)
    return None


def _load(bench_dir):
    """Import bench_dir as the package `bench` (its modules import each other relatively) and return bench.run."""
    spec = importlib.util.spec_from_file_location("bench", os.path.join(bench_dir, "__init__.py"),
                                                  submodule_search_locations=[bench_dir])
    package = importlib.util.module_from_spec(spec)
    sys.modules["bench"] = package
    spec.loader.exec_module(package)
    return importlib.import_module("bench.run")


def main(argv=None):
    bench_dir = find_bench_dir()
    if bench_dir is None:
        raise SystemExit("kvattn-bench: the benchmark driver was not found (neither installed with the package as "
                         "kvattn/bench nor in a source checkout); reinstall kvattn, or set KVATTN_BENCH_DIR to a "
                         "checkout's bench/ folder")
    return _load(bench_dir).main(argv)


if __name__ == "__main__":
    sys.exit(main())
