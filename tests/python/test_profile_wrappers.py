"""scripts/nsys-profile and scripts/ncu-profile: usage, and a clear exit 2 without the tool or a GPU."""

import os
import shutil
import subprocess

import pytest

from conftest import SCRIPTS

WRAPPERS = ["nsys-profile", "ncu-profile"]


def run(name, *args, path=None):
    env = dict(os.environ)
    if path is not None:
        env["PATH"] = path
    return subprocess.run(["bash", os.path.join(SCRIPTS, name), *args], capture_output=True, text=True, env=env,
                          timeout=60)


@pytest.mark.parametrize("name", WRAPPERS)
def test_help(name):
    r = run(name, "--help")
    assert r.returncode == 0
    assert "NAME_OR_REGEX" in r.stdout and "phasebench" in r.stdout


@pytest.mark.parametrize("name", WRAPPERS)
def test_needs_a_name(name):
    r = run(name)
    assert r.returncode == 2 and "give a benchmark name" in r.stderr


@pytest.mark.parametrize("name, tool", [("nsys-profile", "nsys"), ("ncu-profile", "ncu")])
def test_missing_tool_is_explained(name, tool, tmp_path):
    # A PATH with the basic commands but without Nsight, and a stand-in binary.
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for cmd in ("bash", "sed", "grep", "tr", "cut", "mkdir", "dirname", "awk", "printf"):
        p = shutil.which(cmd)
        if p:
            os.symlink(p, bindir / cmd)
    fake = tmp_path / "phasebench"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    r = run(name, "--binary", str(fake), "decode/linear/x/fp32/batch:1/impl:own", path=str(bindir))
    assert r.returncode == 2
    assert f"{tool} (Nsight" in r.stderr and "not installed" in r.stderr


@pytest.mark.parametrize("name, tool", [("nsys-profile", "nsys"), ("ncu-profile", "ncu")])
def test_no_gpu_is_explained(name, tool, tmp_path):
    if shutil.which("nvidia-smi"):
        pytest.skip("nvidia-smi present: the no-GPU path cannot be tested here")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    stub = bindir / tool
    stub.write_text("#!/bin/sh\necho should-not-run\nexit 99\n")
    stub.chmod(0o755)
    fake = tmp_path / "phasebench"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    r = run(name, "--binary", str(fake), "decode/linear/x/fp32/batch:1/impl:own",
            path=f"{bindir}:{os.environ.get('PATH', '/usr/bin:/bin')}")
    assert r.returncode == 2
    assert "no NVIDIA GPU" in r.stderr and "should-not-run" not in r.stdout


def _stubs(tmp_path, tool, profiled="1"):
    """nvidia-smi that lists a GPU and a tool stand-in that records its arguments."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    smi = bindir / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'GPU 0: Fake GPU (UUID: GPU-0)'\n")
    smi.chmod(0o755)
    args_file = tmp_path / "args.txt"
    stub = bindir / tool
    stub.write_text(f"#!/bin/sh\nfor a in \"$@\"; do echo \"$a\"; done > {args_file}\necho '{profiled} point(s) profiled'\n")
    stub.chmod(0o755)
    fake = tmp_path / "phasebench"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    return bindir, args_file, fake


NAME = "decode/linear/llama-3.1-8b.down_proj/bf16/batch:8/impl:cublas"


def test_nsys_command_line(tmp_path):
    bindir, args_file, fake = _stubs(tmp_path, "nsys")
    r = run("nsys-profile", "--binary", str(fake), "--out", str(tmp_path / "p"), NAME + "/manual_time", "--",
            "--decode-batches", "8", path=f"{bindir}:{os.environ['PATH']}")
    assert r.returncode == 0, r.stderr
    args = args_file.read_text().split("\n")
    for a in ("profile", "--capture-range=cudaProfilerApi", "--capture-range-end=repeat", "--trace=cuda,nvtx,cublas",
              str(fake), "run", "--profile",
              "--backend=cuda", "--decode-batches", "8"):
        assert a in args, (a, args)
    filt = next(a for a in args if a.startswith("--benchmark_filter="))
    import re
    rx = re.compile(filt.split("=", 1)[1])
    assert rx.search(NAME) and rx.search(NAME + "/manual_time")
    assert not rx.search(NAME.replace("batch:8", "batch:80")) and not rx.search(NAME.replace(".", "x", 1))


def test_ncu_command_line(tmp_path):
    bindir, args_file, fake = _stubs(tmp_path, "ncu")
    r = run("ncu-profile", "--binary", str(fake), "--out", str(tmp_path / "p"), NAME,
            path=f"{bindir}:{os.environ['PATH']}")
    assert r.returncode == 0, r.stderr
    args = args_file.read_text().split("\n")
    assert "--nvtx" in args and args[args.index("--nvtx-include") + 1] == f"phasebench@{NAME}/"
    for s in ("SpeedOfLight", "MemoryWorkloadAnalysis", "ComputeWorkloadAnalysis", "LaunchStats", "Occupancy"):
        assert s in args
    assert "--profile-from-start" in args and "off" in args


def test_no_point_matched_is_explained(tmp_path):
    bindir, _, fake = _stubs(tmp_path, "nsys", profiled="0")
    r = run("nsys-profile", "--binary", str(fake), "--out", str(tmp_path / "p"), NAME,
            path=f"{bindir}:{os.environ['PATH']}")
    assert r.returncode == 2 and "no point matched" in r.stderr
