"""The package python/phasebench_tools as installed and as run from the checkout: console scripts,
`python -m`, the scripts/ wrappers without an install, and a docstring atop every Python file."""

import ast
import glob
import importlib.metadata
import os
import subprocess
import sys

import pytest

from conftest import PYTHON, ROOT, SCRIPTS, fixture

TOOLS = {"phasebench-compare": "compare", "phasebench-roofline": "roofline", "phasebench-report": "report",
         "phasebench-cpu-targets": "cpu_targets", "phasebench-pareto": "serve"}


def _recorded_at_install() -> set:
    """The console scripts the installed package's metadata names (those pyproject had when it was installed)."""
    try:
        return {e.name for e in importlib.metadata.distribution("phasebench-tools").entry_points}
    except importlib.metadata.PackageNotFoundError:
        return set()


def test_pyproject_names_every_tool():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    with open(os.path.join(PYTHON, "pyproject.toml"), "rb") as f:
        scripts = tomllib.load(f)["project"]["scripts"]
    assert {name: scripts.get(name) for name in TOOLS} == {n: f"phasebench_tools.{m}:main" for n, m in TOOLS.items()}


def test_console_scripts_are_installed():
    bindir = os.path.dirname(sys.executable)
    found = {name: os.path.join(bindir, name) for name in TOOLS if os.access(os.path.join(bindir, name), os.X_OK)}
    if not found:
        pytest.skip(f"phasebench_tools is not installed next to {sys.executable} (scripts/setup installs it)")
    # A tool added to pyproject after the install has no script until scripts/setup runs again: that is a
    # stale install, said below; a script the install recorded but that is gone is a broken one.
    stale = set(TOOLS) - _recorded_at_install()
    assert set(found) == set(TOOLS) - stale
    for name, path in found.items():
        r = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and r.stdout.startswith(f"usage: {name} "), r.stdout + r.stderr
    if stale:
        pytest.skip(f"{', '.join(sorted(stale))} not installed: the package was installed before pyproject named "
                    f"{'it' if len(stale) == 1 else 'them'}; rerun scripts/setup (the others were checked)")


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
