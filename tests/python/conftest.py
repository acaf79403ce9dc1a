"""Shared fixtures of the tests of the Python tools (tests/python; the package is python/phasebench_tools).

Results produced here come from the real binary on the CPU backend, with a tiny model
(fixtures/tiny-model.json) and a hot cache so that the whole test run stays well under two
minutes on two cores. The binary is found through PHASEBENCH_BINARY, else build/bench/phasebench,
else build-cpu/bench/phasebench, else any other build*/bench/phasebench; the tests that need it
skip (saying so) when there is none.
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPTS = os.path.join(ROOT, "scripts")
PYTHON = os.path.join(ROOT, "python")
FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
TINY_MODEL = os.path.join(FIXTURES, "tiny-model.json")

# The checkout's package, whether or not scripts/setup installed it.
sys.path.insert(0, PYTHON)

# The sweep every CPU run of the tests uses (small: ~1-2 s without calibration).
TINY_SWEEP = ["--backend=cpu", f"--model={TINY_MODEL}", "--ops=decode_linear,decode_attention,kv_append",
              "--decode-batches=1,4,16,64", "--attention-batches=1", "--contexts=256", "--append-batches=1",
              "--cache=hot", "--no-summary", "--benchmark_min_time=0.005"]


def find_binary() -> str | None:
    env = os.environ.get("PHASEBENCH_BINARY")
    if env:
        return env if os.access(env, os.X_OK) else None
    for rel in ("build/bench/phasebench", "build-cpu/bench/phasebench"):
        p = os.path.join(ROOT, rel)
        if os.access(p, os.X_OK):
            return p
    others = sorted(glob.glob(os.path.join(ROOT, "build*", "bench", "phasebench")), key=os.path.getmtime, reverse=True)
    return next((p for p in others if os.access(p, os.X_OK)), None)


@pytest.fixture(scope="session")
def binary() -> str:
    b = find_binary()
    if not b:
        where = os.environ.get("PHASEBENCH_BINARY") or "build/bench/phasebench or build-cpu/bench/phasebench"
        pytest.skip(f"no phasebench binary ({where}); build it first (cmake + ninja phasebench) "
                    f"or set PHASEBENCH_BINARY")
    return b


def run_binary(binary: str, args: list, env: dict | None = None, timeout: int = 120) -> subprocess.CompletedProcess:
    e = dict(os.environ)
    e.setdefault("OMP_NUM_THREADS", "2")
    if env:
        e.update(env)
    return subprocess.run([binary, "run", *args], capture_output=True, text=True, env=e, timeout=timeout)


@pytest.fixture(scope="session")
def cpu_runs(binary, tmp_path_factory) -> dict:
    """Two runs of the same tiny sweep: 'calibrated' (measured ceilings, so rooflines) and 'plain' (--no-calibrate)."""
    d = tmp_path_factory.mktemp("cpu-runs")
    out = {}
    for name, extra in (("calibrated", []), ("plain", ["--no-calibrate"])):
        path = str(d / f"{name}.json")
        r = run_binary(binary, TINY_SWEEP + extra + [f"--out={path}"], timeout=180)
        assert r.returncode == 0, f"phasebench run failed ({r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
        out[name] = path
    return out


def script(name: str, *args: str, cwd: str | None = None, timeout: int = 120) -> subprocess.CompletedProcess:
    """Run one of scripts/*.py (the documented commands) with this interpreter."""
    return subprocess.run([sys.executable, os.path.join(SCRIPTS, name), *args], capture_output=True, text=True,
                          cwd=cwd, timeout=timeout)


def fixture(name: str) -> str:
    return os.path.join(FIXTURES, name)
