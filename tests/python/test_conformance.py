"""The conformance set (tests/conformance, README there) through python/phasebench_tools/results.py:
for every <case>.expected.json, the entries that stand, the figures per phase and op, the recorded
crossings and the warnings; tests/unit/test_results_conformance.cpp holds the C++ reader to the same
answers. Then compare over every readable case, and an old file compared and reported against today's
(report draws plots: seconds a file, so once)."""

import glob
import json
import os
import statistics

import pytest

from conftest import ROOT
from phasebench_tools import compare, report
from phasebench_tools import results as pr

HERE = os.path.join(ROOT, "tests", "conformance")
CASES = sorted(glob.glob(os.path.join(HERE, "*.expected.json")))


def load_case(expected_path):
    with open(expected_path) as f:
        exp = json.load(f)
    return exp, os.path.join(HERE, exp["fixture"])


def close(a, b):
    return a == b or (a is not None and b is not None and abs(a - b) <= 1e-9 * max(abs(a), abs(b)))


def groups_of(r):
    """The summary's fraction table from the points that stand: per phase, op and implementation, the ok
    points with a fraction (their number, best, median), skipped and error points."""
    out = {}
    for p in r.points:
        g = out.setdefault((p.phase, p.op, p.key.impl), {"fractions": [], "skipped": 0, "errors": 0})
        if p.ok and p.fraction is not None:
            g["fractions"].append(p.fraction)
        g["skipped"] += p.status == "skipped"
        g["errors"] += p.status == "error"
    return {k: {"points": len(g["fractions"]), "best": max(g["fractions"], default=None),
                "median": statistics.median(g["fractions"]) if g["fractions"] else None,
                "skipped": g["skipped"], "errors": g["errors"]} for k, g in out.items()}


def crossing_answers(rows):
    return [{"layer": x["layer"], "dtype": x["dtype"], "measured_text": x["measured"]["text"],
             "measured_batch": x["measured"]["batch"],
             "predicted_batch": x["predicted"].get(x["ceiling_used"], {}).get("batch")} for x in rows]


def test_the_set_is_there():
    assert len(CASES) >= 10, HERE
    fixtures = {os.path.basename(p) for p in glob.glob(os.path.join(HERE, "*.json"))} - \
        {os.path.basename(p) for p in CASES}
    named = {load_case(p)[0]["fixture"] for p in CASES}
    assert fixtures == named, "every fixture has one expected file and every expected file names a fixture"


@pytest.mark.parametrize("expected_path", CASES, ids=[os.path.basename(p)[: -len(".expected.json")] for p in CASES])
def test_case(expected_path):
    exp, path = load_case(expected_path)
    if not exp["readable"] or exp.get("python_refuses"):
        with pytest.raises(pr.ResultsError) as e:
            pr.load_results(path)
        assert (exp.get("error_contains") or exp.get("python_refuses") or "") in str(e.value)
        return
    pr.load_results(path)  # the checks on the text (strict JSON) pass
    with open(path) as f:
        doc = json.load(f)
    r = pr.parse_results(doc, path)  # the same objects, so each point's entry is found by identity
    index = {id(b.get("phasebench")): i for i, b in enumerate(doc["benchmarks"]) if isinstance(b, dict)}
    got = [{"index": index[id(p.pb)], "status": p.pb.get("status")} for p in r.points]
    assert got == [{"index": s["index"], "status": s["status"]} for s in exp["standing"]]

    want = {(g["phase"], g["op"], g["impl"]): g for g in exp["groups"]}
    have = groups_of(r)
    assert sorted(have) == sorted(want)
    for k, g in have.items():
        for field in ("points", "skipped", "errors"):
            assert g[field] == want[k][field], (k, field)
        for field in ("best", "median"):
            assert close(g[field], want[k][field]), (k, field, g[field], want[k][field])

    recorded = r.decode_linear_crossings
    assert (None if recorded is None else crossing_answers(recorded)) == exp["crossings_recorded"]
    for w in exp.get("python_warnings", []):
        assert any(w in x for x in r.warnings), (w, r.warnings)


READABLE = [load_case(p)[1] for p in CASES if load_case(p)[0]["readable"] and not load_case(p)[0].get("python_refuses")]


@pytest.mark.parametrize("path", READABLE, ids=[os.path.basename(p) for p in READABLE])
def test_compare_reads_every_case(path, tmp_path):
    assert compare.main([path, path, "--format", "json", "-o", str(tmp_path / "c.json")]) == 0


def test_an_old_file_matches_todays_points(tmp_path):
    """A schema 1 file of an old phasebench against today's run of the same points: every point matched on
    its parameters, none only in one file (nothing was renamed; a rename must keep this true)."""
    old, new = os.path.join(HERE, "old-schema1-cpu.json"), os.path.join(HERE, "current-schema3-cpu.json")
    out = tmp_path / "cmp.json"
    assert compare.main([old, new, "--format", "json", "-o", str(out)]) == 0
    cmp = json.loads(out.read_text())
    assert len(cmp["points"]) == 16 and not cmp["only_in_some"]
    assert report.main([old, new, "-o", str(tmp_path / "r.html")]) == 0
