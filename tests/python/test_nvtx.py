"""NVTX ranges checked without Nsight (issue item 5).

NVTX loads tests/nvtx/nvtx_log_injection.cpp (built as libphasebench_nvtx_log.so by
tests/nvtx/CMakeLists.txt, target phasebench_nvtx_log) through NVTX_INJECTION64_PATH; the
library logs every push/pop to PHASEBENCH_NVTX_LOG. Then, for a tiny CPU sweep:

- every range is in the "phasebench" domain (no stray global ranges),
- every range is named exactly as a benchmark point (the name without "/manual_time"),
- every ok point has at least as many ranges as its timed samples (one range per timed sample),
- pushes and pops balance on every thread, nothing is left open, no pop without a push;

and in --profile mode, exactly one range per selected point.

The library is taken from PHASEBENCH_NVTX_TOOL, else from <build>/tests/nvtx/ next to the
binary's build folder, else compiled here with the C++ compiler (headers from the CMake cache's
PHASEBENCH_NVTX3_INCLUDE or /usr/local/cuda/include).
"""

from __future__ import annotations

import collections
import glob
import json
import os
import re
import shutil
import subprocess

import pytest

from conftest import ROOT, TINY_SWEEP, run_binary

SOURCE = os.path.join(ROOT, "tests", "nvtx", "nvtx_log_injection.cpp")


def _nvtx_include(build_dir: str) -> str | None:
    cache = os.path.join(build_dir, "CMakeCache.txt")
    cands = []
    if os.path.exists(cache):
        m = re.search(r"^PHASEBENCH_NVTX3_INCLUDE:\w+=(.*)$", open(cache).read(), re.M)
        if m:
            cands.append(m.group(1).strip())
    cands += [os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "include"), "/usr/local/cuda/include",
              "/usr/include"]
    return next((c for c in cands if os.path.exists(os.path.join(c, "nvtx3", "nvToolsExt.h"))), None)


@pytest.fixture(scope="session")
def nvtx_tool(binary, tmp_path_factory) -> str:
    env = os.environ.get("PHASEBENCH_NVTX_TOOL")
    if env:
        assert os.path.exists(env), f"PHASEBENCH_NVTX_TOOL={env} does not exist"
        return env
    build_dir = os.path.dirname(os.path.dirname(os.path.abspath(binary)))  # <build>/bench/phasebench
    built = glob.glob(os.path.join(build_dir, "tests", "nvtx", "libphasebench_nvtx_log.so"))
    if built and os.path.getmtime(built[0]) >= os.path.getmtime(SOURCE):
        return built[0]
    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    inc = _nvtx_include(build_dir)
    if not cxx or not inc:
        pytest.skip(f"cannot build the NVTX tool library here (C++ compiler: {cxx}, nvtx3 headers: {inc}); "
                    f"build the CMake target phasebench_nvtx_log or set PHASEBENCH_NVTX_TOOL")
    out = str(tmp_path_factory.mktemp("nvtx-tool") / "libphasebench_nvtx_log.so")
    r = subprocess.run([cxx, "-std=c++17", "-O1", "-shared", "-fPIC", "-fvisibility=hidden", "-Wall", "-Wextra",
                        "-I", inc, SOURCE, "-o", out], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"building the NVTX tool failed:\n{r.stderr}"
    return out


def parse_log(path: str) -> list:
    events = []
    for line in open(path, encoding="utf-8"):
        parts = line.rstrip("\n").split("\t")
        events.append(parts + [""] * (4 - len(parts)))
    return events


def check_balanced(events: list) -> None:
    stacks = collections.defaultdict(list)
    for ev, tid, dom, msg in events:
        if ev == "push":
            stacks[(tid, dom)].append(msg)
        elif ev == "pop":
            assert stacks[(tid, dom)], f"pop of {msg!r} with nothing open"
            assert stacks[(tid, dom)].pop() == msg
        assert ev != "pop_unbalanced", f"a pop without a push on thread {tid} in domain {dom}"
    left = {k: v for k, v in stacks.items() if v}
    assert not left, f"ranges left open: {left}"


def run_with_tool(binary, tool, tmp_path, args) -> tuple:
    log = tmp_path / "nvtx.log"
    r = run_binary(binary, args, env={"NVTX_INJECTION64_PATH": tool, "PHASEBENCH_NVTX_LOG": str(log)})
    assert r.returncode == 0, f"{r.stdout[-1500:]}\n{r.stderr[-1500:]}"
    assert log.exists(), "the NVTX tool was not loaded (no log written)"
    events = parse_log(str(log))
    assert events and events[0][0] == "init"
    return r, events


def test_sweep_ranges(binary, nvtx_tool, tmp_path):
    out = tmp_path / "run.json"
    _, events = run_with_tool(binary, nvtx_tool, tmp_path, TINY_SWEEP + ["--no-calibrate", f"--out={out}"])
    doc = json.load(open(out))
    names = {}
    for b in doc["benchmarks"]:
        if b.get("run_type", "iteration") != "iteration":
            continue
        name = b["name"][: -len("/manual_time")] if b["name"].endswith("/manual_time") else b["name"]
        names[name] = b["phasebench"]
    ranges = [e for e in events if e[0] in ("push", "pop", "pop_unbalanced", "start", "mark")]
    assert ranges, "no NVTX range at all"
    stray = [e for e in ranges if e[2] != "phasebench"]
    assert not stray, f"ranges outside the phasebench domain: {stray[:5]}"
    pushes = collections.Counter(e[3] for e in events if e[0] == "push")
    unknown = set(pushes) - set(names)
    assert not unknown, f"ranges not named as a benchmark point: {sorted(unknown)[:5]}"
    for name, pb in names.items():
        if pb.get("status") != "ok":
            continue
        samples = pb["time"]["samples"]
        # Google Benchmark may run a point more than once (it sizes the iteration count first), and only the
        # last run's samples are in the file; every timed sample is inside a range.
        assert pushes[name] >= samples, f"{name}: {pushes[name]} ranges for {samples} timed samples"
    check_balanced(events)
    created = [e[2] for e in events if e[0] == "domain_create"]
    assert created and set(created) == {"phasebench"}, created


def test_profile_mode_one_range_per_point(binary, nvtx_tool, tmp_path):
    sel = r"^decode/(linear/tiny-model\.o_proj/fp32/batch:4/impl:blas|kv_append/)"
    r, events = run_with_tool(binary, nvtx_tool, tmp_path,
                              TINY_SWEEP + ["--no-calibrate", "--profile", f"--benchmark_filter={sel}"])
    pushes = [e[3] for e in events if e[0] == "push"]
    assert sorted(pushes) == sorted(set(pushes)), f"more than one range per point: {pushes}"
    assert set(pushes) == {"decode/linear/tiny-model.o_proj/fp32/batch:4/impl:blas",
                           "decode/kv_append/tiny-model/fp32/batch:1/context:1024"}, pushes
    assert all(e[2] == "phasebench" for e in events if e[0] == "push")
    assert "2 point(s) profiled" in r.stdout
    check_balanced(events)
