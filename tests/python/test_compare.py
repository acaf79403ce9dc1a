"""phasebench-compare (scripts/compare.py): tables, formats, verdicts from raw samples, regression gate, bad input."""

import csv
import io
import json
import math
import os
import statistics
import subprocess
import sys

import pytest

from conftest import SCRIPTS, fixture, script
from phasebench_tools import compare
from phasebench_tools import results as pr

BASE, SLOWER, NOISY = fixture("h100-base.json"), fixture("h100-slower.json"), fixture("h100-noisy.json")
SINGLE, H200, SCHEMA1 = fixture("h100-single-sample.json"), fixture("h200-base.json"), fixture("h100-schema1.json")


def test_cpu_runs_compare_as_table(cpu_runs):
    r = script("compare.py", cpu_runs["calibrated"], cpu_runs["plain"])
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "Per-phase summary" in out and "speedup vs A" in out
    assert "decode/linear/tiny-model.qkv_proj/fp32/batch:1/impl:blas" in out
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


# --------------------------------------------------------------------------------------
# Synthetic results files: points of h100-base.json with chosen raw samples
# --------------------------------------------------------------------------------------

US = 1e-6


def spaced(t_us: float, rel: float, n: int) -> list:
    """n evenly spaced samples over t*(1-rel)..t*(1+rel) (seconds): median t, IQR/median exactly rel."""
    return [t_us * US * (1 - rel + 2 * rel * i / (n - 1)) for i in range(n)]


def write_results(path, points: dict, schema: int = 3) -> str:
    """A results file of the h100-base.json points named in `points` ({name: raw samples, or "error"}).

    The time statistics are those of the samples; schema 1 and 2 files keep them without samples_s.
    """
    doc = json.load(open(BASE))
    doc["context"]["phasebench"]["schema_version"] = schema
    entries = {b["run_name"][: -len("/manual_time")]: b for b in doc["benchmarks"]}
    doc["benchmarks"] = []
    for name, xs in points.items():
        e = entries[name]
        pb = e["phasebench"]
        if xs == "error":
            pb.update(status="error", message="verification failed")
            del pb["time"]
        else:
            mean, sd = statistics.fmean(xs), statistics.stdev(xs)
            pb["time"] = {"median_s": statistics.median(xs), "mean_s": mean, "min_s": min(xs), "max_s": max(xs),
                          "stddev_s": sd, "cv": sd / mean, "samples": len(xs), "runs_per_sample": 1}
            if schema >= 3:
                pb["time"].update(samples_s=xs, converged=True, noise=sd / mean, stop_reason="converged")
        doc["benchmarks"].append(e)
    path.write_text(json.dumps(doc))
    return str(path)


def gemv(target: str, batch: int) -> str:
    return f"decode/gemv/llama-3.1-8b.{target}/bf16/batch:{batch}/impl:cublas"


PREFILL_QKV = "prefill/linear/llama-3.1-8b.qkv_proj/bf16/batch:4/prompt:1024/impl:cublas"
PREFILL_O = "prefill/linear/llama-3.1-8b.o_proj/bf16/batch:4/prompt:1024/impl:cublas"
PREFILL_ATTN = "prefill/attention/llama-3.1-8b/bf16/batch:1/prompt:1024/impl:own"

# Rank ties broken by a tiny step so that the medians and the ranks tell different stories:
# B's median is 20% below A's, but most of B's samples are above most of A's.
_A_BIMODAL = [(1 + i * 1e-4) * US for i in range(40)] + [(5 + i * 1e-4) * US for i in range(60)]
_B_BIMODAL = [(4 + i * 1e-4) * US for i in range(55)] + [(6 + i * 1e-4) * US for i in range(45)]

# name: (point, reference samples, new samples, verdict, significant, a phrase of the why)
SCENARIOS = {
    "faster": (gemv("qkv_proj", 1), spaced(100, 0.005, 20), spaced(90, 0.005, 20), "FASTER", True, "beyond"),
    "slower": (gemv("o_proj", 1), spaced(100, 0.005, 20), spaced(110, 0.005, 20), "SLOWER", True, "beyond"),
    "same_significant_small": (gemv("gate_up_proj", 1), spaced(100, 0.001, 20), spaced(101, 0.001, 20), "SAME",
                               True, "real but negligible"),
    "same_tight": (gemv("down_proj", 1), spaced(100, 0.005, 20), spaced(100.1, 0.005, 20), "SAME", False,
                   "both spreads"),
    "ambiguous_noisy": (gemv("qkv_proj", 8), spaced(100, 0.30, 20), spaced(105, 0.30, 20), "AMBIGUOUS", False,
                        "too noisy"),
    "ambiguous_big_but_noisy": (gemv("o_proj", 8), spaced(100, 0.6, 6), spaced(140, 0.6, 6), "AMBIGUOUS", False,
                                "too noisy"),
    "ambiguous_too_few": (PREFILL_QKV, spaced(100, 0.001, 3), spaced(150, 0.001, 3), "AMBIGUOUS", False,
                          "too few samples (3 vs 3)"),
    "ambiguous_ranks_vs_median": (PREFILL_O, _A_BIMODAL, _B_BIMODAL, "AMBIGUOUS", True,
                                  "the ranks say slower but the median moved -19.9%"),
    "prefill_same": (PREFILL_ATTN, spaced(100, 0.005, 20), spaced(99.9, 0.005, 20), "SAME", False, "both spreads"),
}


@pytest.fixture(scope="module")
def scenario_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("scenarios")
    a = write_results(d / "a.json", {p: xa for p, xa, _, _, _, _ in SCENARIOS.values()})
    b = write_results(d / "b.json", {p: xb for p, _, xb, _, _, _ in SCENARIOS.values()})
    return a, b


@pytest.fixture(scope="module")
def scenario_cmp(scenario_files):
    results, errors = pr.load_many(scenario_files)
    assert not errors and not any(r.warnings for r in results)
    return compare.build_comparison(results, errors)


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_each_verdict_is_reachable(scenario_cmp, scenario):
    point, _, _, expected, significant, why = SCENARIOS[scenario]
    v = next(e for e in scenario_cmp["points"] if e["name"] == point)["vs_first"]["B"]
    assert v["method"] == "mannwhitney"
    assert (v["verdict"], v["significant"]) == (expected, significant), v["why"]
    assert why in v["why"]
    assert 0 <= v["p_value"] <= 1


def test_p_value_is_scipys_mann_whitney_u():
    from scipy import stats

    point, a, b, *_ = SCENARIOS["ambiguous_noisy"]
    expected = stats.mannwhitneyu(b, a, alternative="two-sided").pvalue
    assert compare.mannwhitney(a, b)[0] == pytest.approx(expected)
    # The smallest p of the exact test is 2 / C(n1 + n2, n1): 0.1 for 3 vs 3, 2/252 for 5 vs 5.
    assert compare.min_p_value(3, 3) == pytest.approx(0.1)
    assert compare.min_p_value(5, 5) == pytest.approx(2 / math.comb(10, 5))
    assert compare.mannwhitney([1e-3] * 5, [1e-3] * 5)[0] == 1.0  # all equal: no evidence of a change


def test_too_few_samples_depends_on_alpha(tmp_path):
    """5 vs 5 samples can reach p = 0.0079: enough at alpha 0.05, never at alpha 0.005."""
    a = write_results(tmp_path / "a.json", {gemv("o_proj", 1): spaced(100, 0.001, 5)})
    b = write_results(tmp_path / "b.json", {gemv("o_proj", 1): spaced(120, 0.001, 5)})
    results, errors = pr.load_many([a, b])
    at = {alpha: compare.build_comparison(results, errors, alpha=alpha)["points"][0]["vs_first"]["B"]
          for alpha in (0.05, 0.005)}
    assert at[0.05]["verdict"] == "SLOWER"
    assert at[0.005]["verdict"] == "AMBIGUOUS" and "cannot reach p < 0.005" in at[0.005]["why"]
    assert at[0.005]["min_p_value"] == pytest.approx(2 / 252)


def test_points_timed_by_different_methods_are_flagged(tmp_path):
    """A point timed as a rotating graph in one file and as single launches in the other is warned about."""
    a = write_results(tmp_path / "a.json", {gemv("o_proj", 1): spaced(100, 0.001, 8),
                                            gemv("qkv_proj", 1): spaced(100, 0.001, 8)})
    doc = json.load(open(a))
    doc["benchmarks"][0]["phasebench"]["time"]["method"] = "rotating_graph"
    b = tmp_path / "b.json"
    b.write_text(json.dumps(doc))
    results, errors = pr.load_many([a, str(b)])
    cmp = compare.build_comparison(results, errors)
    mixed = [w for w in cmp["warnings"] if "different methods" in w]
    assert len(mixed) == 1 and mixed[0].startswith("1 matched point(s)") and "B: rotating_graph" in mixed[0], mixed
    same = compare.build_comparison(*pr.load_many([a, a]))
    assert not [w for w in same["warnings"] if "different methods" in w]
    # A file from before time.method whose point ran several launches per sample
    # (a hot graph) against a newer one that says "graph": the same method.
    old = json.load(open(a))
    old["benchmarks"][0]["phasebench"]["time"]["runs_per_sample"] = 40
    new = json.loads(json.dumps(old))
    new["benchmarks"][0]["phasebench"]["time"]["method"] = "graph"
    (tmp_path / "old.json").write_text(json.dumps(old))
    (tmp_path / "new.json").write_text(json.dumps(new))
    both = compare.build_comparison(*pr.load_many([str(tmp_path / "old.json"), str(tmp_path / "new.json")]))
    assert not [w for w in both["warnings"] if "different methods" in w], both["warnings"]


def test_same_within_moves_the_band(scenario_files):
    results, errors = pr.load_many(scenario_files)
    point = SCENARIOS["same_significant_small"][0]
    for pct, expected in ((2, "SAME"), (0.5, "SLOWER")):
        cmp = compare.build_comparison(results, errors, same_within_pct=pct)
        assert next(e for e in cmp["points"] if e["name"] == point)["vs_first"]["B"]["verdict"] == expected


def test_per_phase_verdict_counts(scenario_cmp):
    s = {(x["phase"], x["file"]): x["verdicts"] for x in scenario_cmp["summary"]}
    assert s[("decode", "A")] is None and s[("prefill", "A")] is None  # the reference is not judged
    assert s[("decode", "B")] == {"faster": 1, "slower": 1, "same": 2, "ambiguous": 2, "not_compared": 0}
    assert s[("prefill", "B")] == {"faster": 0, "slower": 0, "same": 1, "ambiguous": 2, "not_compared": 0}
    assert scenario_cmp["counts"] == {"faster": 1, "slower": 1, "same": 3, "ambiguous": 4, "not_compared": 0}
    assert len(scenario_cmp["ambiguous"]) == 4


def test_every_format_shows_verdict_p_value_and_phase_counts(scenario_files):
    slower = SCENARIOS["slower"][0]
    r = script("compare.py", *scenario_files)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    b_row = lines[next(i for i, ln in enumerate(lines) if ln.startswith(slower)) + 1].split()
    assert b_row[0] == "B" and b_row[-2] == "SLOWER" and float(b_row[-1]) < 0.05  # verdict and p-value
    assert "FASTER  SLOWER  SAME  AMBIGUOUS  not compared" in r.stdout
    assert "verdicts against A: 1 FASTER, 1 SLOWER, 3 SAME, 4 AMBIGUOUS, 0 not compared" in r.stdout
    assert "AMBIGUOUS points (4)" in r.stdout and "too few samples (3 vs 3)" in r.stdout

    r = script("compare.py", *scenario_files, "--format=markdown")
    assert "| time change | verdict | p-value |" in r.stdout
    assert "| FASTER | SLOWER | SAME | AMBIGUOUS | not compared |" in r.stdout
    assert "| decode | B | NVIDIA H100 80GB HBM3 |" in r.stdout

    rows = list(csv.DictReader(io.StringIO(script("compare.py", *scenario_files, "--format=csv").stdout)))
    row = next(x for x in rows if x["name"] == slower and x["file"] == "B")
    assert row["verdict"] == "SLOWER" and float(row["p_value"]) < 0.05 and row["method"] == "mannwhitney"

    d = json.loads(script("compare.py", *scenario_files, "--format=json").stdout)
    v = next(e for e in d["points"] if e["name"] == slower)["vs_first"]["B"]
    assert v["verdict"] == "SLOWER" and v["p_value"] < 0.05 and v["samples"] == [20, 20]
    assert (d["alpha"], d["same_within_pct"]) == (compare.DEFAULT_ALPHA, compare.DEFAULT_SAME_WITHIN_PCT) == (0.05, 2)
    assert {x["phase"] for x in d["summary"] if x["verdicts"]} == {"decode", "prefill"}
    cell = next(e for e in d["points"] if e["name"] == slower)["files"]["B"]
    assert (cell["raw_samples"], cell["converged"], cell["stop_reason"]) == (True, True, "converged")


# --------------------------------------------------------------------------------------
# The regression gate
# --------------------------------------------------------------------------------------

def test_gate_fails_on_significant_slowdown_beyond_threshold(tmp_path):
    pts = {gemv("o_proj", 1): (spaced(100, 0.005, 20), spaced(110, 0.005, 20))}
    a = write_results(tmp_path / "a.json", {k: x for k, (x, _) in pts.items()})
    b = write_results(tmp_path / "b.json", {k: x for k, (_, x) in pts.items()})
    r = script("compare.py", a, b, "--fail-on-regression", "5")
    assert r.returncode == compare.EXIT_REGRESSION, r.stdout + r.stderr
    assert "REGRESSIONS" in r.stdout and "1 regression(s) beyond 5%" in r.stderr
    r = script("compare.py", a, b, "--fail-on-regression", "15")
    assert r.returncode == 0 and "no regression beyond 15%" in r.stdout, r.stdout + r.stderr


def test_gate_ignores_large_but_not_significant_slowdown(scenario_files):
    """+40% (and +50% with too few samples) the U test cannot confirm: AMBIGUOUS, reported, not failed."""
    r = script("compare.py", *scenario_files, "--fail-on-regression", "20", "--format=json")
    assert r.returncode == 0, r.stdout + r.stderr
    d = json.loads(r.stdout)
    assert d["regressions"] == []  # the one SLOWER point is +10%
    big = next(e for e in d["points"] if e["name"] == SCENARIOS["ambiguous_big_but_noisy"][0])["vs_first"]["B"]
    assert big["time_change_pct"] == pytest.approx(40) and big["verdict"] == "AMBIGUOUS"
    r = script("compare.py", *scenario_files, "--fail-on-regression", "5")
    assert r.returncode == compare.EXIT_REGRESSION
    assert "1 regression(s)" in r.stderr and "4 AMBIGUOUS point(s) could not be checked" in r.stdout


def test_gate_counts_a_point_that_now_errors(tmp_path):
    a = write_results(tmp_path / "a.json", {gemv("o_proj", 1): spaced(100, 0.005, 20),
                                            gemv("o_proj", 8): spaced(100, 0.005, 20)})
    b = write_results(tmp_path / "b.json", {gemv("o_proj", 1): spaced(100, 0.005, 20), gemv("o_proj", 8): "error"})
    r = script("compare.py", a, b, "--fail-on-regression", "50", "--format=json")
    assert r.returncode == compare.EXIT_REGRESSION
    d = json.loads(r.stdout)
    assert [(x["kind"], x["to"]) for x in d["regressions"]] == [("error", "error")]
    assert d["summary"][1]["verdicts"] == {"faster": 0, "slower": 0, "same": 1, "ambiguous": 0, "not_compared": 1}


def test_regression_gate_on_fixtures():
    r = script("compare.py", BASE, SLOWER, "--fail-on-regression", "10")
    assert r.returncode == compare.EXIT_REGRESSION, r.stdout + r.stderr
    assert "REGRESSIONS" in r.stdout and "o_proj/bf16/batch:8" in r.stdout
    assert "1 regression(s)" in r.stderr
    r = script("compare.py", BASE, SLOWER, "--fail-on-regression", "60")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "no regression beyond 60%" in r.stdout


def test_same_file_is_not_a_regression():
    r = script("compare.py", BASE, BASE, "--fail-on-regression", "0", "--format=json")
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(r.stdout)["counts"]["same"] == 25


def test_noise_is_ambiguous_not_a_regression():
    r = script("compare.py", BASE, NOISY, "--fail-on-regression", "1", "--format=json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["counts"]["ambiguous"] == 25 and not d["regressions"]
    assert all(v["method"] == "mannwhitney" and v["p_value"] >= 0.05
               for p in d["points"] for v in p["vs_first"].values())


# --------------------------------------------------------------------------------------
# Files without raw samples (schema 1 and 2): min..max
# --------------------------------------------------------------------------------------

def test_single_samples_fall_back_to_min_max():
    r = script("compare.py", BASE, SINGLE, "--fail-on-regression", "10", "--format=json")
    assert r.returncode == compare.EXIT_REGRESSION
    d = json.loads(r.stdout)
    assert all(v["method"] == "minmax" and v["verdict"] == "SLOWER" and v["p_value"] is None
               for p in d["points"] for v in p["vs_first"].values())
    assert len(d["regressions"]) == len(d["points"])


def test_old_schema_uses_min_max_and_says_so():
    r = script("compare.py", SCHEMA1, SLOWER)  # the reference has no raw samples
    assert r.returncode == 0, r.stderr
    assert "verdicts against A: 0 FASTER, 1 SLOWER, 24 SAME, 0 AMBIGUOUS" in r.stdout
    row = next(ln for ln in r.stdout.splitlines() if "+50.0%" in ln)
    assert row.split()[-2:] == ["SLOWER", "minmax"]  # the p-value column names the method
    d = json.loads(script("compare.py", SCHEMA1, SLOWER, "--significance=mannwhitney", "--format=json").stdout)
    v = d["points"][0]["vs_first"]["B"]
    assert v["verdict"] == "AMBIGUOUS" and "no raw samples" in v["why"] and "the reference" in v["why"]


def test_min_max_overlap_with_large_spread_is_ambiguous(tmp_path):
    pts = {gemv("o_proj", 1): (spaced(100, 0.3, 20), spaced(105, 0.3, 20)),
           gemv("o_proj", 8): (spaced(100, 0.005, 20), spaced(100.5, 0.005, 20))}
    a = write_results(tmp_path / "a.json", {k: x for k, (x, _) in pts.items()}, schema=2)
    b = write_results(tmp_path / "b.json", {k: x for k, (_, x) in pts.items()}, schema=2)
    d = json.loads(script("compare.py", a, b, "--format=json").stdout)
    got = {e["name"]: e["vs_first"]["B"] for e in d["points"]}
    noisy, tight = got[gemv("o_proj", 1)], got[gemv("o_proj", 8)]
    assert (noisy["method"], noisy["verdict"], noisy["significant"]) == ("minmax", "AMBIGUOUS", False)
    assert (tight["method"], tight["verdict"]) == ("minmax", "SAME")


def test_without_scipy_min_max_works_and_the_u_test_says_what_is_missing():
    # -S: no site-packages, so no scipy (test_package.py runs the minmax case the same way).
    run = lambda *args: subprocess.run([sys.executable, "-S", os.path.join(SCRIPTS, "compare.py"), *args],  # noqa: E731
                                       capture_output=True, text=True, timeout=60)
    r = run(BASE, SLOWER, "--significance=minmax", "--format=json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["counts"]["slower"] == 1
    r = run(BASE, SLOWER)
    assert r.returncode == compare.EXIT_BAD_INPUT and r.stdout == ""
    assert r.stderr.startswith("compare.py: error: the Mann-Whitney U test needs scipy")
    assert "--significance minmax" in r.stderr


# --------------------------------------------------------------------------------------
# Bad input
# --------------------------------------------------------------------------------------

@pytest.mark.parametrize("args, message", [
    (["--alpha", "0"], "--alpha must be strictly between 0 and 1, not 0"),
    (["--alpha", "1"], "--alpha must be strictly between 0 and 1, not 1"),
    (["--alpha", "1.5"], "--alpha must be strictly between 0 and 1, not 1.5"),
    (["--alpha", "-0.1"], "--alpha must be strictly between 0 and 1, not -0.1"),
    (["--alpha", "nan"], "--alpha must be strictly between 0 and 1, not nan"),
    (["--alpha", "x"], "argument --alpha: invalid float value: 'x'"),
    (["--same-within", "-1"], "--same-within takes a percentage >= 0 and below 100, not -1"),
    (["--same-within", "100"], "--same-within takes a percentage >= 0 and below 100, not 100"),
    (["--fail-on-regression", "-5"], "--fail-on-regression takes a percentage >= 0, not -5"),
    (["--significance", "welch"], "argument --significance: invalid choice: 'welch'"),
])
def test_bad_flag_values_are_one_line_and_exit_2(args, message):
    r = script("compare.py", BASE, SLOWER, *args)
    assert r.returncode == compare.EXIT_BAD_INPUT
    assert r.stdout == ""
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("compare.py: error: ") and message in lines[0], r.stderr


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


def test_a_file_written_before_the_renames_matches_todays(tmp_path):
    """An older file (schema 3: decode/gemv, decode/attention, prefill/attention) against the same
    points as today's phasebench names them (schema 4: a point's op is its kind): every point
    matches, and each side's ops read as today's."""
    doc = json.loads(open(BASE).read())
    old_ops = {b["phasebench"]["op"] for b in doc["benchmarks"] if "phasebench" in b}
    assert {"gemv", "attention"} <= old_ops  # the fixture really is an old file
    doc["context"]["phasebench"]["schema_version"] = 4
    for b in doc["benchmarks"]:
        pb = b.get("phasebench")
        if pb:
            for k in ("name", "run_name"):
                parts = b[k].split("/")
                parts[1] = pb["op_kind"]
                b[k] = "/".join(parts)
            pb["op"] = pb["op_kind"]
    today = tmp_path / "today.json"
    today.write_text(json.dumps(doc))
    r = script("compare.py", BASE, str(today))
    assert r.returncode == 0, r.stderr
    assert "Points not in every file" not in r.stdout
    ops = {p.op for p in pr.load_results(BASE).points}
    assert {"linear", "decode_attention", "prefill_attention"} <= ops and not ops & {"gemv", "attention"}
