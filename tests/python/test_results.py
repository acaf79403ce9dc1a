"""Loading and validating results files (scripts/phasebench_results.py)."""

import json
import re

import pytest

import phasebench_results as pr
from conftest import fixture


def test_cpu_run_loads(cpu_runs):
    for path in cpu_runs.values():
        r = pr.load_results(path)
        assert r.backend == "cpu"
        assert r.complete
        assert r.points, "no points"
        keys = [p.key for p in r.points]
        assert len(keys) == len(set(keys)), "structured keys must be unique within a file"
        for p in r.points:
            assert not p.name.endswith("/manual_time")
            assert p.phase == "decode"
            if p.ok:
                assert p.median_s > 0 and p.time["samples"] >= 1
                assert p.flops_per_s is not None and p.bytes_per_s > 0


def test_calibrated_run_has_ceilings_and_fractions(cpu_runs):
    r = pr.load_results(cpu_runs["calibrated"])
    assert r.bandwidth_ceiling("measured") > 0
    assert r.compute_ceiling("fp32", "measured") > 0
    fr = [p.fraction for p in r.ok_points()]
    assert all(f is not None and f > 0 for f in fr)
    # The recomputed fraction is the file's own (both from the median time).
    for p in r.ok_points():
        if p.pb.get("fraction_of_roofline") is not None:
            assert p.fraction == pytest.approx(p.pb["fraction_of_roofline"], rel=1e-6)


def test_keys_match_across_runs_not_names(tmp_path):
    base = pr.load_results(fixture("h100-base.json"))
    doc = json.load(open(fixture("h100-base.json")))
    for b in doc["benchmarks"]:  # rename every benchmark: matching must not care
        b["name"] = b["run_name"] = "renamed/" + b["name"][::-1]
    p = tmp_path / "renamed.json"
    p.write_text(json.dumps(doc))
    renamed = pr.load_results(str(p))
    m = pr.match([base, renamed])
    assert len(m.common()) == len(base.points) and not m.partial()


@pytest.mark.parametrize("name, pattern", [
    ("truncated.json", r"truncated JSON"),
    ("not-json.txt", r"not JSON"),
    ("empty.json", r"empty"),
    ("top-level-array.json", r"not an object"),
    ("gbench-only.json", r"Google Benchmark file without phasebench fields"),
    ("schema-v99.json", r"unknown schema version 99"),
    ("does-not-exist.json", r"no such file"),
])
def test_bad_inputs_have_clear_messages(name, pattern):
    with pytest.raises(pr.ResultsError) as e:
        pr.load_results(fixture(name))
    assert re.search(pattern, str(e.value)), str(e.value)
    assert name in str(e.value)  # the message names the file


def test_repetitions_are_merged(tmp_path):
    doc = json.load(open(fixture("h100-base.json")))
    first = doc["benchmarks"][0]
    rep = json.loads(json.dumps(first))
    rep["repetition_index"] = 1
    rep["phasebench"]["time"].update(median_s=first["phasebench"]["time"]["median_s"] * 3,
                                     mean_s=first["phasebench"]["time"]["mean_s"] * 3)
    agg = json.loads(json.dumps(first))
    agg.update(run_type="aggregate", aggregate_name="mean", name=first["name"] + "_mean")
    doc["benchmarks"][1:1] = [rep, agg]
    p = tmp_path / "reps.json"
    p.write_text(json.dumps(doc))
    r = pr.load_results(str(p))
    pt = r.by_key[pr.make_key(first["phasebench"])]
    assert len(pt.entries) == 2
    assert pt.time["samples"] == 2 * first["phasebench"]["time"]["samples"]
    assert pt.time["mean_s"] == pytest.approx(2 * first["phasebench"]["time"]["mean_s"])
    assert len(r.points) == len(doc["benchmarks"]) - 2


def test_incomplete_run_warns(tmp_path):
    doc = json.load(open(fixture("h100-base.json")))
    doc["context"]["phasebench"]["complete"] = False
    p = tmp_path / "partial.json"
    p.write_text(json.dumps(doc))
    r = pr.load_results(str(p))
    assert any("did not complete" in w for w in r.warnings)


def test_identical_repetition_blocks_count_once(tmp_path):
    # phasebench writes the pooled statistics of a point on every repetition's entry
    # (and on the median aggregate): they are one pool, not three.
    doc = json.load(open(fixture("h100-base.json")))
    first = doc["benchmarks"][0]
    copies = []
    for i in (1, 2):
        rep = json.loads(json.dumps(first))
        rep["repetition_index"] = i
        copies.append(rep)
    med = json.loads(json.dumps(first))
    med.update(run_type="aggregate", aggregate_name="median", name=first["name"] + "_median")
    doc["benchmarks"][1:1] = copies + [med]
    p = tmp_path / "reps.json"
    p.write_text(json.dumps(doc))
    pt = pr.load_results(str(p)).by_key[pr.make_key(first["phasebench"])]
    assert pt.time["samples"] == first["phasebench"]["time"]["samples"]
    assert pt.time["median_s"] == first["phasebench"]["time"]["median_s"]


def test_aggregates_only_file_uses_the_median_entry(tmp_path):
    # --benchmark_report_aggregates_only: no iteration entries, the median carries the fields.
    doc = json.load(open(fixture("h100-base.json")))
    aggs = []
    for b in doc["benchmarks"]:
        med = json.loads(json.dumps(b))
        med.update(run_type="aggregate", aggregate_name="median", name=b["name"] + "_median",
                   run_name=b.get("run_name", b["name"]))
        mean = {k: v for k, v in med.items() if k != "phasebench"}
        mean.update(aggregate_name="mean", name=b["name"] + "_mean")
        aggs += [mean, med]
    n = len(doc["benchmarks"])
    doc["benchmarks"] = aggs
    p = tmp_path / "aggs.json"
    p.write_text(json.dumps(doc))
    assert len(pr.load_results(str(p)).points) == n
