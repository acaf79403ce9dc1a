"""phasebench-compare on counters files (`phasebench counters`): SAME and CHANGED with the counters
that differ, the regression gate on DRAM bytes and the estimate, and bad input (mixed kinds, a
results file given as counters, an unknown schema) as one line with exit status 2."""

import json

from conftest import fixture, script
from phasebench_tools import counters as pc


def counters_file(tmp_path, name, points, gpu="h200-sxm", version=1):
    """A counters file as `phasebench counters` writes one, with `points` [(args, dram_bytes, fraction)]."""
    benches = []
    for args, dram, frac in points:
        label = "decode/gemv/m.down_proj/bf16/" + "/".join(f"{k}:{v}" for k, v in args.items()) + "/impl:own"
        launch = {"kind": "kernel", "kernel": "decode_gemv_kernel<1>", "sectors_read": dram // 32,
                  "global": {"ld": {"requests": 10, "sectors": 40, "ideal": 40, "bytes": 1280, "lanes": 320}}}
        benches.append({"name": label, "run_name": label, "run_type": "counters",
                        "phasebench": {"phase": "decode", "op": "gemv", "op_kind": "linear", "model": "m",
                                       "target": "down_proj", "dtype": "bf16", "impl": "own", "args": args,
                                       "status": "ok", "counters": [launch],
                                       "estimate": {"dram_bytes": dram, "estimated_fraction": frac, "excess": 0.0,
                                                    "sector_efficiency": 1.0, "bank_conflicts": 0,
                                                    "occupancy": 0.375, "waves": 1.0,
                                                    "inflight_bytes_per_sm": 81920}}})
    doc = {"context": {"phasebench": {"kind": "counters", "counters_schema_version": version, "schema_version": 3,
                                      "gpu": {"key": gpu, "name": gpu}, "complete": True}},
           "benchmarks": benches}
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return str(path)


def test_identical_counters_are_same(tmp_path):
    a = counters_file(tmp_path, "a.json", [({"batch": 1}, 1_000_000, 0.9), ({"batch": 8}, 1_100_000, 0.8)])
    r = script("compare.py", a, a)
    assert r.returncode == 0, r.stderr
    assert "2 same, 0 changed" in r.stdout


def test_a_changed_count_is_named(tmp_path):
    a = counters_file(tmp_path, "a.json", [({"batch": 1}, 1_000_000, 0.9)])
    doc = json.loads(open(a).read())
    doc["benchmarks"][0]["phasebench"]["counters"][0]["global"]["ld"]["sectors"] = 80
    b = tmp_path / "b.json"
    b.write_text(json.dumps(doc))
    r = script("compare.py", a, str(b), "--format=json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["counts"]["CHANGED"] == 1
    assert d["rows"][0]["changed"] == ["[0].global.ld.sectors"]


def test_regression_gate_fails_on_grown_dram_bytes_or_a_fallen_estimate(tmp_path):
    a = counters_file(tmp_path, "a.json", [({"batch": 1}, 1_000_000, 0.9), ({"batch": 8}, 1_000_000, 0.9)])
    b = counters_file(tmp_path, "b.json", [({"batch": 1}, 1_030_000, 0.9), ({"batch": 8}, 1_000_000, 0.8)])
    assert script("compare.py", a, b, "--fail-on-regression", "5").returncode == 1  # the estimate fell 11%
    r = script("compare.py", a, b, "--fail-on-regression", "2")
    assert r.returncode == 1
    assert "2 regression(s)" in r.stderr
    assert script("compare.py", a, b, "--fail-on-regression", "20").returncode == 0
    assert script("compare.py", a, b).returncode == 0  # no gate: a report


def test_points_in_one_file_only_are_listed(tmp_path):
    a = counters_file(tmp_path, "a.json", [({"batch": 1}, 1_000_000, 0.9)])
    b = counters_file(tmp_path, "b.json", [({"batch": 1}, 1_000_000, 0.9), ({"batch": 2}, 1_000_000, 0.9)])
    d = json.loads(script("compare.py", a, b, "--format=json").stdout)
    assert d["counts"] == {"SAME": 1, "CHANGED": 0, "NEW": 1, "GONE": 0}


def test_counters_and_results_do_not_mix(tmp_path):
    a = counters_file(tmp_path, "a.json", [({"batch": 1}, 1_000_000, 0.9)])
    r = script("compare.py", a, fixture("h200-base.json"))
    assert r.returncode == 2
    assert "compare counters with counters" in r.stderr
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr


def test_an_unknown_counters_schema_is_refused(tmp_path):
    a = counters_file(tmp_path, "a.json", [({"batch": 1}, 1_000_000, 0.9)])
    b = counters_file(tmp_path, "b.json", [({"batch": 1}, 1_000_000, 0.9)], version=9)
    r = script("compare.py", a, b)
    assert r.returncode == 2
    assert "counters schema version 9" in r.stderr and "Traceback" not in r.stderr


def test_three_counters_files_are_refused(tmp_path):
    a = counters_file(tmp_path, "a.json", [({"batch": 1}, 1_000_000, 0.9)])
    r = script("compare.py", a, a, a)
    assert r.returncode == 2
    assert "two at a time" in r.stderr


def test_different_gpus_warn(tmp_path):
    a = counters_file(tmp_path, "a.json", [({"batch": 1}, 1_000_000, 0.9)])
    b = counters_file(tmp_path, "b.json", [({"batch": 1}, 1_000_000, 0.9)], gpu="h100-sxm")
    r = script("compare.py", a, b)
    assert r.returncode == 0
    assert "different GPUs" in r.stderr


def test_file_kind_tells_counters_from_results(tmp_path):
    a = counters_file(tmp_path, "a.json", [({"batch": 1}, 1_000_000, 0.9)])
    assert pc.file_kind(a) == "counters"
    assert pc.file_kind(fixture("h200-base.json")) == "results"
    assert pc.file_kind(str(tmp_path / "missing.json")) is None
