"""phasebench-cpu-targets (scripts/cpu_targets.py): the CPU speed targets judged from results files."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from conftest import SCRIPTS

SCRIPT = os.path.join(SCRIPTS, "cpu_targets.py")
LLC = 32 << 20


# The files below are as an older phasebench wrote them: op names of before schema 4, each
# with its kind (read as today's op).
KINDS = {"gemv": "linear", "attention": "decode_attention", "attention_paged": "decode_attention_paged"}


def point(name, op, frac, paired, t, shape, impl="own"):
    p = {"phase": "decode", "op": op, "op_kind": KINDS[op], "model": "m", "dtype": "fp32", "impl": impl, "status": "ok",
         "shape": shape, "bytes": {"total": 5 * LLC}, "fraction_of_roofline": frac,
         "time": {"median_s": t}}
    if paired is not None:
        p["paired_read"] = {"fraction_median": paired}
    return {"name": name + "/manual_time", "run_name": name + "/manual_time", "phasebench": p}


def results(tmp_path, gemv=(0.9, 0.92), attn=(0.75, 0.72), paged_time=1.05, name="r.json"):
    att = {"B": 8, "L": 4096, "Hq": 32, "D": 128}
    doc = {"context": {"phasebench": {"schema_version": 1, "device": {"cache_bytes": LLC}}},
           "benchmarks": [
               point("decode/gemv/m.down_proj/fp32/batch:1/impl:own", "gemv", *gemv, 0.01, {"M": 1, "N": 1, "K": 1}),
               point("decode/gemv/m.down_proj/fp32/batch:1/impl:blas", "gemv", 0.3, 0.3, 0.03, {"M": 1, "N": 1, "K": 1},
                     impl="blas"),  # the BLAS row is not ours: not judged
               point("decode/attention/m/fp32/batch:8/context:4096", "attention", *attn, 1.0, att),
               point("decode/attention_paged/m/fp32/batch:8/context:4096/page:16", "attention_paged", 0.7, 0.7,
                     paged_time, att),
           ]}
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return str(path)


def run(*paths):
    return subprocess.run([sys.executable, SCRIPT, *paths], capture_output=True, text=True)


def test_targets_met(tmp_path):
    r = run(results(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "paired reads: median 0.920 [0.920..0.920], 1/1 points meet it: holds" in r.stdout
    assert "paired reads: median 0.720 [0.720..0.720], 1/1 points meet it: holds" in r.stdout
    assert "same shapes:  median 1.050 [1.050..1.050], 1/1 points meet it: holds" in r.stdout
    assert "impl:blas" not in r.stdout


def test_each_target_can_be_missed(tmp_path):
    assert run(results(tmp_path, gemv=(0.9, 0.79))).returncode == 1
    assert run(results(tmp_path, attn=(0.75, 0.69))).returncode == 1
    r = run(results(tmp_path, paged_time=1.2))
    assert r.returncode == 1
    assert "MISSED" in r.stdout
    # Missing against the run's ceiling alone is shown, not failed on (it moves with the machine).
    r = run(results(tmp_path, gemv=(0.6, 0.9)))
    assert r.returncode == 0 and "run ceiling:  median 0.600" in r.stdout and "MISSED" in r.stdout


def test_small_points_are_not_judged(tmp_path):
    path = results(tmp_path, gemv=(0.5, 0.5))
    doc = json.loads(open(path).read())
    doc["benchmarks"][0]["phasebench"]["bytes"]["total"] = LLC  # below 4x LLC
    open(path, "w").write(json.dumps(doc))
    r = run(path)
    assert "decode GEMV batch 1 >= 80% of the read bandwidth\n  run ceiling:  no points" in r.stdout


def test_bad_input_is_one_clear_line(tmp_path):
    # The loader's messages (results.py), as every tool prints them: one line naming the file.
    def one_line(path, message):
        r = run(str(path))
        assert r.returncode == 2 and r.stdout == ""
        assert len(r.stderr.strip().splitlines()) == 1 and f"{path}: {message}" in r.stderr, r.stderr

    bad = tmp_path / "bad.json"
    bad.write_text('{"benchmarks": [}')
    one_line(bad, "not valid JSON")
    bad.write_text('{"benchmarks": [')
    one_line(bad, "truncated JSON")
    other = tmp_path / "gb.json"
    other.write_text(json.dumps({"context": {}, "benchmarks": []}))
    one_line(other, "a Google Benchmark file without phasebench fields")
    one_line(tmp_path / "missing.json", "no such file")


def test_aggregates_only_runs_are_judged(tmp_path):
    # scripts/cpu-targets runs with --benchmark_report_aggregates_only: each point's median aggregate stands for it.
    path = results(tmp_path)
    doc = json.loads(open(path).read())
    aggs = []
    for b in doc["benchmarks"]:
        med = dict(b, run_type="aggregate", aggregate_name="median", name=b["name"] + "_median")
        mean = {k: v for k, v in med.items() if k != "phasebench"}
        aggs += [dict(mean, aggregate_name="mean", name=b["name"] + "_mean"), med]
    doc["benchmarks"] = aggs
    open(path, "w").write(json.dumps(doc))
    r = run(path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "paired reads: median 0.920 [0.920..0.920], 1/1 points meet it: holds" in r.stdout
    assert "same shapes:  median 1.050 [1.050..1.050], 1/1 points meet it: holds" in r.stdout
    assert "_median" not in r.stdout and "manual_time" not in r.stdout


def test_the_runs_beyond_caches_flag_decides(tmp_path):
    """Schema 2 points say whether they are beyond the caches; that, not a second rule here, decides."""
    path = results(tmp_path, gemv=(0.5, 0.5))  # a GEMV that misses its target ...
    doc = json.loads(open(path).read())
    doc["context"]["phasebench"]["schema_version"] = 2
    doc["context"]["phasebench"]["decode_linear_crossings"] = []
    for b in doc["benchmarks"]:
        b["phasebench"]["beyond_caches"] = b["phasebench"]["op"] != "gemv"  # ... but the run says it fits the caches
    with open(path, "w") as f:
        json.dump(doc, f)
    r = run(path)
    assert r.returncode == 1, r.stdout + r.stderr  # a target without points does not hold
    gemv = r.stdout.split("decode GEMV batch 1")[1].split("decode attention")[0]
    assert "run ceiling:  no points" in gemv and "paired reads: no points" in gemv, r.stdout
    assert "0.500" not in r.stdout
    assert "paired reads: median 0.720" in r.stdout  # the attention points still count
