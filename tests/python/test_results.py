"""Loading and validating results files: the one loader, python/phasebench_tools/results.py."""

import json
import re

import pytest

from conftest import fixture
from phasebench_tools import results as pr


def _edited(tmp_path, edit, name="edited.json", source="h100-base.json"):
    """A copy of a fixture changed by edit(doc), loaded."""
    doc = json.load(open(fixture(source)))
    edit(doc)
    p = tmp_path / name
    p.write_text(json.dumps(doc))
    return pr.load_results(str(p))


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
    # The fractions are the file's own, read as written.
    for p in r.ok_points():
        assert p.fraction == p.pb["fraction_of_roofline"]
        for src, place in p.pb["roofline_by_source"].items():
            assert p.fraction_by_source(src) == place["fraction_of_roofline"]


def test_fractions_are_read_not_recomputed(tmp_path):
    def edit(doc):
        pb = doc["benchmarks"][0]["phasebench"]
        pb["fraction_of_roofline"] = 0.125
        pb["roofline_by_source"]["datasheet"]["fraction_of_roofline"] = 0.25
        pb["tflops"], pb["gbps"] = 7.0, 8.0
    p = _edited(tmp_path, edit).points[0]
    assert p.fraction == 0.125
    assert p.fraction_by_source("datasheet") == 0.25
    assert p.fraction_by_source("theoretical") is None  # not in this run
    assert (p.tflops, p.gbps) == (7.0, 8.0)


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


def test_last_repetition_stands_for_the_point(tmp_path):
    # Repetitions are not merged: the last entry with a phasebench object carries the point's pool.
    doc = json.load(open(fixture("h100-base.json")))
    first = doc["benchmarks"][0]
    rep = json.loads(json.dumps(first))
    rep["repetition_index"] = 1
    rep["phasebench"]["time"].update(median_s=first["phasebench"]["time"]["median_s"] * 3,
                                     mean_s=first["phasebench"]["time"]["mean_s"] * 3,
                                     samples=2 * first["phasebench"]["time"]["samples"])
    agg = json.loads(json.dumps(first))
    agg.update(run_type="aggregate", aggregate_name="mean", name=first["name"] + "_mean")
    doc["benchmarks"][1:1] = [rep, agg]
    p = tmp_path / "reps.json"
    p.write_text(json.dumps(doc))
    r = pr.load_results(str(p))
    pt = r.by_key[pr.make_key(first["phasebench"])]
    assert len(pt.entries) == 2
    assert pt.time == rep["phasebench"]["time"]
    assert pt.median_s == pytest.approx(3 * first["phasebench"]["time"]["median_s"])
    assert len(r.points) == len(doc["benchmarks"]) - 2


def test_repetition_rule_picks_the_last_block(tmp_path):
    """Interleaved repetitions of two points, an aggregate with another block, a last entry without one."""
    doc = json.load(open(fixture("h100-base.json")))
    a, b = doc["benchmarks"][0], doc["benchmarks"][1]

    def rep(entry, index, median_s, with_block=True):
        e = json.loads(json.dumps(entry))
        e["repetition_index"] = index
        if with_block:
            e["phasebench"]["time"]["median_s"] = median_s
        else:
            del e["phasebench"]
        return e

    def median_agg(entry, median_s):
        e = json.loads(json.dumps(entry))
        e.update(run_type="aggregate", aggregate_name="median", name=entry["name"] + "_median")
        e["phasebench"]["time"]["median_s"] = median_s
        return e

    doc["benchmarks"] = [rep(a, 0, 1.0), rep(b, 0, 2.0), rep(b, 1, 2.5), rep(a, 1, 1.5),
                         rep(a, 2, 9.0, with_block=False), median_agg(a, 7.0), median_agg(b, 7.0)]
    p = tmp_path / "interleaved.json"
    p.write_text(json.dumps(doc))
    r = pr.load_results(str(p))
    assert [pt.name for pt in r.points] == [a["run_name"][:-len("/manual_time")], b["run_name"][:-len("/manual_time")]]
    assert [pt.median_s for pt in r.points] == [1.5, 2.5]
    assert [len(pt.entries) for pt in r.points] == [3, 2]


def test_incomplete_run_warns(tmp_path):
    doc = json.load(open(fixture("h100-base.json")))
    doc["context"]["phasebench"]["complete"] = False
    p = tmp_path / "partial.json"
    p.write_text(json.dumps(doc))
    r = pr.load_results(str(p))
    assert any("did not complete" in w for w in r.warnings)


def test_identical_repetition_blocks_are_one_pool(tmp_path):
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


def test_schema_versions_1_to_4_load_others_do_not(tmp_path):
    v3, v1 = pr.load_results(fixture("h100-base.json")), pr.load_results(fixture("h100-schema1.json"))
    v2 = pr.load_results(fixture("h100-single-sample.json"))
    assert (v3.schema_version, v2.schema_version, v1.schema_version) == (3, 2, 1)
    assert [p.key for p in v1.points] == [p.key for p in v3.points] == [p.key for p in v2.points]
    with pytest.raises(pr.ResultsError) as e:
        _edited(tmp_path, lambda doc: doc["context"]["phasebench"].update(schema_version=5), name="v5.json")
    assert "v5.json: unknown schema version 5 (this script reads versions 1, 2, 3 and 4)" in str(e.value)


def test_raw_samples_are_read_from_schema_3_only():
    r = pr.load_results(fixture("h100-base.json"))
    for p in r.points:
        assert p.samples_s == p.time["samples_s"] and len(p.samples_s) == p.time["samples"] >= 5
        assert (p.time["converged"], p.time["stop_reason"]) == (True, "converged")  # carried through as written
    assert all(p.samples_s is None for p in pr.load_results(fixture("h100-schema1.json")).points)
    assert not r.warnings


@pytest.mark.parametrize("bad", [[], "1e-6", [1e-6, "x"], [1e-6, -1e-6], [1e-6, 0], [1e-6, None], [True, 1e-6]])
def test_unusable_raw_samples_are_none_and_warned(tmp_path, bad):
    r = _edited(tmp_path, lambda doc: doc["benchmarks"][0]["phasebench"]["time"].update(samples_s=bad))
    assert r.points[0].samples_s is None and r.points[1].samples_s is not None
    assert any("1 ok point(s) without a usable time.samples_s list" in w for w in r.warnings), r.warnings


def test_last_repetition_holds_the_pool_of_raw_samples(tmp_path):
    # Each repetition's entry carries the pool so far; the last one stands, with all of them.
    def edit(doc):
        first = doc["benchmarks"][0]
        early = json.loads(json.dumps(first))
        early["phasebench"]["time"]["samples_s"] = first["phasebench"]["time"]["samples_s"][:5]
        first["repetition_index"] = 1
        doc["benchmarks"].insert(0, early)
    r = _edited(tmp_path, edit)
    assert len(r.points[0].entries) == 2 and len(r.points[0].samples_s) == 20


def test_recorded_crossings_are_read():
    r = pr.load_results(fixture("h100-base.json"))
    assert r.crossings_recorded
    rows = {x["target"]: x for x in r.decode_linear_crossings}
    assert set(rows) == {"qkv_proj", "o_proj", "gate_up_proj", "down_proj"}
    x = r.crossing("llama-3.1-8b", "o_proj", "bf16")
    assert x == rows["o_proj"]
    assert x["layer"] == "llama-3.1-8b.o_proj" and (x["N"], x["K"]) == (4096, 4096)
    assert x["measured"]["batch"] == 254 and x["measured"]["text"] == "254"
    assert {s: v["batch"] for s, v in x["predicted"].items()} == {"measured": 317, "datasheet": 345}
    assert x["predicted"]["measured"]["ridge_flop_per_byte"] == 274.1
    assert x["batches"] == [1, 8, 64, 256, 1024] and x["ceiling_used"] == "measured"
    one = pr.load_results(fixture("disjoint.json")).decode_linear_crossings[0]
    assert one["measured"] == {"batch": None, "text": "one batch only", "peak_flops_per_s": 5.565e14,
                               "bandwidth_bytes_per_s": 2.465e12}


def test_schema_1_has_no_recorded_crossings():
    r = pr.load_results(fixture("h100-schema1.json"))
    assert not r.crossings_recorded and r.decode_linear_crossings is None
    assert r.crossing("llama-3.1-8b", "o_proj", "bf16") is None
    assert r.crossings_absent_text == "not recorded in this file (schema 1)"
    assert not r.warnings


def test_schema_2_without_the_crossings_list_warns(tmp_path):
    r = _edited(tmp_path, lambda doc: doc["context"]["phasebench"].pop("decode_linear_crossings"))
    assert r.decode_linear_crossings == []
    assert any("without a decode_linear_crossings list" in w for w in r.warnings)


def test_cpu_run_crossings(cpu_runs):
    """The binary's own crossings, once it writes schema 2 (the C++ side of the change)."""
    r = pr.load_results(cpu_runs["calibrated"])
    if not r.crossings_recorded:
        assert r.decode_linear_crossings is None
        pytest.skip(f"the binary writes schema {r.schema_version}: no recorded crossings to check yet")
    rows = r.decode_linear_crossings
    assert rows, "a calibrated run with decode linear points records their crossings"
    for x in rows:
        batches = sorted({int(p.args()["batch"]) for p in r.ok_points() if p.phase == "decode"
                          and p.op_kind == "linear" and (p.key.model, p.key.target, p.dtype) ==
                          (x["model"], x["target"], x["dtype"])})
        assert x["batches"] == batches, x["layer"]
        assert x["measured"]["text"]
        assert "measured" in x["predicted"] and x["ceiling_used"] in x["predicted"]
