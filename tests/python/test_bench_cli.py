"""`kvattn-bench` as pip installs it: the package with its driver (kvattn/bench, with the oracle copied in,
as setup.py and pyproject.toml lay it out) run from a folder that is not a source checkout."""
import glob
import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir, os.pardir))


def installed_layout(site):
    """site/kvattn as the wheel holds it (the library comes from KVATTN_LIBRARY)."""
    package = os.path.join(site, "kvattn")
    shutil.copytree(os.path.join(ROOT, "python", "kvattn"), package, ignore=shutil.ignore_patterns("__pycache__"))
    bench = os.path.join(package, "bench")
    os.makedirs(bench)
    for path in glob.glob(os.path.join(ROOT, "bench", "*.py")):
        shutil.copy2(path, bench)
    shutil.copy2(os.path.join(ROOT, "tests", "python", "reference.py"), bench)


def run_cli(tmp_path, *args):
    site, elsewhere = tmp_path / "site", tmp_path / "elsewhere"
    if not site.exists():
        installed_layout(str(site))
        elsewhere.mkdir()
    env = dict(os.environ)
    env["PYTHONPATH"] = str(site)
    env.pop("KVATTN_BENCH_DIR", None)
    code = "import sys; from kvattn.bench_cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *args], cwd=str(elsewhere), env=env, capture_output=True,
                          text=True, timeout=900)


def test_help_cites_only_files_that_exist(tmp_path):
    proc = run_cli(tmp_path, "--help")
    assert proc.returncode == 0, proc.stderr
    assert "kvattn-bench" in proc.stdout
    for name in re.findall(r"[\w./-]+\.(?:md|py|sh)\b", proc.stdout):
        assert os.path.exists(os.path.join(ROOT, name)), f"--help cites {name}, which does not exist"


def test_main_job_runs_and_is_checked_outside_a_checkout(tmp_path):
    proc = run_cli(tmp_path, "--main", "--device", "cpu", "--cpu-target-s", "0.02")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "NOT CHECKED" not in out and "PASS" in out and "FAIL" not in out, out
    assert "| kvattn |" in out and "GB/s" in out, out
