"""phasebench-compare (scripts/compare.py): tables, formats, significance, regression gate, bad input."""

import csv
import io
import json

import pytest

from conftest import fixture, script
from phasebench_tools import compare

BASE, SLOWER, NOISY = fixture("h100-base.json"), fixture("h100-slower.json"), fixture("h100-noisy.json")
SINGLE, H200 = fixture("h100-single-sample.json"), fixture("h200-base.json")


def test_cpu_runs_compare_as_table(cpu_runs):
    r = script("compare.py", cpu_runs["calibrated"], cpu_runs["plain"])
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "Per-phase summary" in out and "speedup vs A" in out
    assert "decode/gemv/tiny-model.qkv_proj/fp32/batch:1/impl:blas" in out
    assert "Points not in every file" not in out  # the same sweep twice: everything matched


@pytest.mark.parametrize("fmt", ["markdown", "csv", "json"])
def test_cpu_runs_formats(cpu_runs, fmt):
    r = script("compare.py", cpu_runs["calibrated"], cpu_runs["plain"], f"--format={fmt}")
    assert r.returncode == 0, r.stderr
    if fmt == "json":
        d = json.loads(r.stdout)
        assert [f["label"] for f in d["files"]] == ["A", "B"]
        assert d["points"] and all(set(p["files"]) == {"A", "B"} for p in d["points"])
        assert all("B" in p["vs_first"] for p in d["points"] if p["files"]["A"]["status"] == "ok"
                   and p["files"]["B"]["status"] == "ok")
    elif fmt == "csv":
        rows = list(csv.DictReader(io.StringIO(r.stdout)))
        assert rows and {row["file"] for row in rows} == {"A", "B"}
        assert set(compare.CSV_FIELDS) == set(rows[0])
    else:
        assert "| point | file |" in r.stdout and "## Per-phase summary" in r.stdout


def test_exact_ratios_and_geomean_across_gpus():
    r = script("compare.py", BASE, H200, "--format=json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    pts = {p["name"]: p for p in d["points"]}
    p = pts["decode/gemv/llama-3.1-8b.o_proj/bf16/batch:1/impl:cublas"]
    a, b = p["files"]["A"]["median_s"], p["files"]["B"]["median_s"]
    assert p["vs_first"]["B"]["speedup"] == pytest.approx(a / b)
    assert p["vs_first"]["B"]["speedup"] == pytest.approx(4.3 / 2.9, rel=1e-3)  # bandwidth-bound: W ratio
    # Fractions of roofline as each file records them, per ceiling source too.
    src = json.load(open(BASE))["benchmarks"]
    pb = next(b["phasebench"] for b in src if b["name"].startswith("decode/gemv/llama-3.1-8b.o_proj/bf16/batch:1/"))
    cells = p["files"]["A"]
    assert cells["fraction_of_roofline"] == pb["fraction_of_roofline"]
    assert cells["fraction_of_roofline_by_source"] == {s: v["fraction_of_roofline"]
                                                       for s, v in pb["roofline_by_source"].items()}
    s = {(x["phase"], x["file"]): x for x in d["summary"]}
    assert s[("decode", "A")]["geomean_speedup_vs_first"] == pytest.approx(1.0)
    assert s[("decode", "B")]["geomean_speedup_vs_first"] > 1.1
    # Points in only one file are listed, not dropped.
    only = {o["name"]: o for o in d["only_in_some"]}
    assert only["prefill/attention/llama-3.1-8b/bf16/batch:1/prompt:1024/impl:own"]["missing_from"] == ["B"]
    assert only["decode/gemv/llama-3.1-8b.o_proj/bf16/batch:2048/impl:cublas"]["present_in"] == ["B"]


def test_regression_gate_fails_on_significant_slowdown():
    r = script("compare.py", BASE, SLOWER, "--fail-on-regression", "10")
    assert r.returncode == compare.EXIT_REGRESSION, r.stdout + r.stderr
    assert "REGRESSIONS" in r.stdout and "o_proj/bf16/batch:8" in r.stdout
    assert "1 regression(s)" in r.stderr


def test_regression_gate_threshold_above_change_passes():
    r = script("compare.py", BASE, SLOWER, "--fail-on-regression", "60")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "no regression beyond 60%" in r.stdout


def test_same_file_is_not_a_regression():
    r = script("compare.py", BASE, BASE, "--fail-on-regression", "0")
    assert r.returncode == 0, r.stdout + r.stderr


def test_noise_is_not_significant():
    r = script("compare.py", BASE, NOISY, "--fail-on-regression", "1", "--format=json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["counts"]["slower"] == 0 and not d["regressions"]
    assert all(v["method"] == "welch" for p in d["points"] for v in p["vs_first"].values())


def test_single_samples_fall_back_to_min_max():
    r = script("compare.py", BASE, SINGLE, "--fail-on-regression", "10", "--format=json")
    assert r.returncode == compare.EXIT_REGRESSION
    d = json.loads(r.stdout)
    assert all(v["method"] == "minmax" and v["significant"] for p in d["points"] for v in p["vs_first"].values())
    assert len(d["regressions"]) == len(d["points"])


def test_welch_p_value_matches_known_value():
    # Equal means: p = 1; a huge separation: p ~ 0.
    assert compare.welch_p_value(1.0, 0.1, 10, 1.0, 0.1, 10) == pytest.approx(1.0)
    assert compare.welch_p_value(1.0, 0.01, 50, 2.0, 0.01, 50) < 1e-50
    # t = 2 with df = 18 (equal n and sd): two-sided p = 0.0608.
    s = 1.0
    assert compare.welch_p_value(0.0, s, 10, 2 * (2 * s * s / 10) ** 0.5, s, 10) == pytest.approx(0.0608, abs=2e-4)


def test_bad_file_reported_and_others_still_compared():
    r = script("compare.py", BASE, SLOWER, fixture("truncated.json"), fixture("gbench-only.json"))
    assert r.returncode == compare.EXIT_BAD_INPUT
    assert "truncated JSON" in r.stderr and "without phasebench fields" in r.stderr
    assert "Per-phase summary" in r.stdout and "o_proj/bf16/batch:8" in r.stdout  # the good pair is reported


@pytest.mark.parametrize("bad, pattern", [
    ("truncated.json", "truncated JSON"),
    ("not-json.txt", "not JSON"),
    ("empty.json", "empty"),
    ("gbench-only.json", "without phasebench fields"),
    ("schema-v99.json", "unknown schema version 99"),
])
def test_bad_second_file_exits_nonzero(bad, pattern):
    r = script("compare.py", BASE, fixture(bad))
    assert r.returncode == compare.EXIT_BAD_INPUT
    assert pattern in r.stderr
    assert "need two to compare" in r.stderr


def test_no_benchmark_in_common():
    r = script("compare.py", BASE, fixture("disjoint.json"))
    assert r.returncode == compare.EXIT_BAD_INPUT
    assert "no benchmark in common" in r.stderr


def test_one_file_is_a_usage_error():
    r = script("compare.py", BASE)
    assert r.returncode == 2 and "two or more" in r.stderr


def test_filter_and_output_file(tmp_path):
    out = tmp_path / "c.md"
    r = script("compare.py", BASE, H200, "--filter", "down_proj", "--format=markdown", "-o", str(out))
    assert r.returncode == 0, r.stderr
    text = out.read_text()
    assert "down_proj" in text and "qkv_proj" not in text
