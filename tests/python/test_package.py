"""The package python/phasebench_tools as installed and as run from the checkout: console scripts,
`python -m`, the scripts/ wrappers without an install, and a docstring atop every Python file."""

import ast
import glob
import os
import subprocess
import sys

import pytest

from conftest import PYTHON, ROOT, SCRIPTS, fixture

TOOLS = {"phasebench-compare": "compare", "phasebench-roofline": "roofline", "phasebench-report": "report",
         "phasebench-cpu-targets": "cpu_targets"}


def test_console_scripts_are_installed():
    bindir = os.path.dirname(sys.executable)
    found = {name: os.path.join(bindir, name) for name in TOOLS if os.access(os.path.join(bindir, name), os.X_OK)}
    if not found:
        pytest.skip(f"phasebench_tools is not installed next to {sys.executable} (scripts/setup installs it)")
    assert set(found) == set(TOOLS)
    for name, path in found.items():
        r = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and r.stdout.startswith(f"usage: {name} "), r.stdout + r.stderr


@pytest.mark.parametrize("module", sorted(TOOLS.values()))
def test_python_m(module):
    r = subprocess.run([sys.executable, "-m", f"phasebench_tools.{module}", "--help"], capture_output=True, text=True,
                       cwd=PYTHON, timeout=60)
    assert r.returncode == 0 and r.stdout.startswith("usage: "), r.stderr


def test_wrappers_run_the_checkout_without_an_install():
    # -S: no site-packages, so neither an installed copy nor third-party packages; compare (without
    # --fail-on-regression: no scipy) and cpu_targets need only the standard library.
    r = subprocess.run([sys.executable, "-S", os.path.join(SCRIPTS, "compare.py"), fixture("h100-base.json"),
                        fixture("h200-base.json"), "--format=json", "--significance=minmax"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([sys.executable, "-S", os.path.join(SCRIPTS, "cpu_targets.py"), fixture("h100-base.json")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode in (0, 1) and "decode GEMV batch 1" in r.stdout, r.stderr


def test_every_python_file_opens_with_a_docstring():
    files = [f for pattern in ("python/**/*.py", "scripts/*.py", "tests/python/**/*.py")
             for f in glob.glob(os.path.join(ROOT, pattern), recursive=True)]
    assert files
    missing = [os.path.relpath(f, ROOT) for f in files if not ast.get_docstring(ast.parse(open(f).read()))]
    assert not missing
