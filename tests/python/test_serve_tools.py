"""The Python side of `phasebench serve` (python/phasebench_tools/serve.py): phasebench-pareto's charts,
phasebench-compare on two serve files, phasebench-report's serve page, and the one-line errors, all on the
hand-written fixtures serve-h200-sxm.json, serve-b200-sxm.json (concurrency 1, 8, 64) and
serve-rate-h200-sxm.json (rate 1, 4, 16). Expected figures are computed here from the fixtures' own numbers."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from conftest import PYTHON, fixture, script
from phasebench_tools import compare, report, serve

H200, B200, RATE = fixture("serve-h200-sxm.json"), fixture("serve-b200-sxm.json"), fixture("serve-rate-h200-sxm.json")


def _doc(path: str) -> dict:
    return json.loads(open(path).read())


def _edited(tmp_path, src: str, name: str, edit) -> str:
    """A copy of the serve file `src` with `edit(doc)` applied."""
    doc = _doc(src)
    edit(doc)
    out = str(tmp_path / name)
    with open(out, "w") as f:
        json.dump(doc, f)
    return out


def _png_ok(path: str) -> None:
    import matplotlib.image as mpimg

    img = mpimg.imread(path)
    assert img.ndim == 3 and img.shape[0] > 100 and img.shape[1] > 100
    assert (img[..., :3] < 0.95).any(axis=-1).mean() > 0.01, f"{path} looks blank"


def _svg_ok(path: str) -> ET.Element:
    root = ET.parse(path).getroot()  # raises on anything that is not XML
    assert root.tag.endswith("svg")
    return root


# --------------------------------------------------------------------------------------
# phasebench-pareto
# --------------------------------------------------------------------------------------

def test_pareto_writes_png_svg_and_pdf(tmp_path, capsys):
    png, svg, pdf = (str(tmp_path / f"chart.{x}") for x in ("png", "svg", "pdf"))
    assert serve.main([H200, B200, "-o", png]) == 0
    assert capsys.readouterr().out.strip() == png
    _png_ok(png)
    # The documented command (scripts/pareto.py), as a user runs it.
    r = script("pareto.py", H200, B200, RATE, "-o", svg)
    assert r.returncode == 0, r.stderr
    assert os.path.getsize(svg) > 0
    _svg_ok(svg)
    assert serve.main([RATE, "-o", pdf]) == 0
    assert open(pdf, "rb").read(5) == b"%PDF-"
    assert not [f for f in os.listdir(tmp_path) if f.endswith(".tmp")]


def _series(ax) -> list:
    """Per scatter call: (x, y, filled) of its one marker."""
    out = []
    for c in ax.collections:
        (x, y), = c.get_offsets()
        face = c.get_facecolors()
        out.append((float(x), float(y), len(face) > 0 and face[0][3] > 0))
    return out


def test_pareto_chart_marks_slo_tags_points_and_joins_the_frontier(tmp_path):
    # The chart draws the frontier the file marks: here one of B's points is marked off it.
    b = _edited(tmp_path, B200, "b.json", _set(["points", 1, "pareto"], False))
    files = [serve.load(H200), serve.load(b)]
    fig = serve.pareto_figure(files)
    ax = fig.axes[0]
    docs = [_doc(H200), _doc(b)]
    want = {(p["output_tokens_per_s_per_user"], p["output_tokens_per_s_per_gpu"], p["meets_slo"])
            for d in docs for p in d["points"]}
    assert set(_series(ax)) == want  # filled exactly where the point meets its SLO
    assert any(not filled for _, _, filled in _series(ax))  # the fixture's h200 c=64 misses it
    texts = [t.get_text() for t in ax.texts]
    assert sorted(texts) == sorted(f"c={p['concurrency']}" for d in docs for p in d["points"])
    # One frontier line per file, through its pareto points in order of tokens/s per user.
    lines = [ln for ln in ax.get_lines() if len(ln.get_xdata()) > 1]
    assert len(lines) == 2
    for ln, d in zip(lines, docs):
        front = sorted((p["output_tokens_per_s_per_user"], p["output_tokens_per_s_per_gpu"])
                       for p in d["points"] if p["pareto"])
        assert list(zip(ln.get_xdata(), ln.get_ydata())) == front
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "h200-sxm bf16 TP1: Pareto frontier" in legend and "b200-sxm bf16 TP1: Pareto frontier" in legend
    assert "SLO: TTFT <= 500 ms, TPOT <= 20 ms for 90% of requests" in legend
    title = ax.get_title()
    assert all(w in title for w in ("llama-3.1-8b", "h200-sxm", "b200-sxm", "bf16", "TP1", "colocated"))
    serve._plt().close(fig)


def test_pareto_rate_sweep_and_undefined_figures(tmp_path):
    fig = serve.pareto_figure([serve.load(RATE)])
    ax = fig.axes[0]
    assert sorted(t.get_text() for t in ax.texts) == ["1.0 req/s", "16.0 req/s", "4.0 req/s"]
    assert "NVIDIA H200 SXM 141GB" in ax.get_title()
    serve._plt().close(fig)

    def one_token_each(d):  # every request one output token: no TPOT, no per-user rate
        p = d["points"][0]
        p["tpot_s"] = {k: None for k in ("mean", "p50", "p90", "p99")}
        p["output_tokens_per_s_per_user"] = None
    path = _edited(tmp_path, H200, "nulls.json", one_token_each)
    fig = serve.pareto_figure([serve.load(path)])
    assert len(fig.axes[0].collections) == 2
    assert "1 point(s) without both figures left out" in [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    serve._plt().close(fig)


def test_trace_replay_and_disaggregated_engine(tmp_path, capsys):
    def trace_1p3d(d):
        d["workload"].update(kind="trace", trace="requests.jsonl")
        d["engine"].update(mode="disaggregated", prefill_replicas=1, decode_replicas=3, gpus=4)
        for p in d["points"]:
            p["concurrency"] = None  # a trace sets neither concurrency nor rate
    path = _edited(tmp_path, H200, "trace.json", trace_1p3d)
    s = serve.load(path)
    assert s.label() == "h200-sxm bf16 TP1 disaggregated 1P3D"
    assert [serve.point_tag(s, i) for i in range(3)] == ["#1", "#2", "#3"]
    assert compare.main([path, path, "--format", "json"]) == 0  # matched by position
    assert [r["in"] for r in json.loads(capsys.readouterr().out)["points"]] == ["both"] * 3


def test_two_runs_of_one_device_are_told_apart(tmp_path):
    other = str(tmp_path / "again.json")
    shutil.copy(H200, other)
    labels = serve.series_labels([serve.load(H200), serve.load(other)])
    assert labels == ["h200-sxm bf16 TP1 (serve-h200-sxm.json)", "h200-sxm bf16 TP1 (again.json)"]


# --------------------------------------------------------------------------------------
# phasebench-compare A.json B.json (serve files)
# --------------------------------------------------------------------------------------

def _expected_ratios() -> dict:
    a, b = ({p["concurrency"]: p for p in _doc(f)["points"]} for f in (H200, B200))
    return {c: (b[c]["output_tokens_per_s_per_gpu"] / a[c]["output_tokens_per_s_per_gpu"],
                b[c]["output_tokens_per_s_per_user"] / a[c]["output_tokens_per_s_per_user"]) for c in a}


def test_compare_table_has_the_ratios(capsys):
    assert compare.main([H200, B200]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.split()[:1] in (["1"], ["8"], ["64"])}
    assert set(rows) == {"1", "8", "64"}
    for c, (gpu, user) in _expected_ratios().items():
        assert rows[str(c)][-2:] == [f"{gpu:.3f}x", f"{user:.3f}x"], rows[str(c)]
    assert "tok/s/GPU B/A" in out and "TTFT p99 A" in out and "meets SLO B" in out
    assert "NO" in rows["64"] and "NO" not in rows["1"]  # h200's c=64 misses its SLO


def test_compare_json_round_trip(tmp_path):
    out = str(tmp_path / "cmp.json")
    assert compare.main([H200, B200, "--format", "json", "-o", out]) == 0
    cmp = json.loads(open(out).read())
    assert cmp == json.loads(json.dumps(serve.build_comparison(serve.load(H200), serve.load(B200))))
    assert cmp["sweep"] == "concurrency" and [f["device_key"] for f in cmp["files"]] == ["h200-sxm", "b200-sxm"]
    expected = _expected_ratios()
    assert [r["concurrency"] for r in cmp["points"]] == sorted(expected)
    a = {p["concurrency"]: p for p in _doc(H200)["points"]}
    for r in cmp["points"]:
        gpu, user = expected[r["concurrency"]]
        assert r["in"] == "both"
        assert r["B_over_A"]["output_tokens_per_s_per_gpu"] == pytest.approx(gpu)
        assert r["B_over_A"]["output_tokens_per_s_per_user"] == pytest.approx(user)
        assert r["A"]["ttft_p99_s"] == a[r["concurrency"]]["ttft_s"]["p99"]
        assert r["A"]["tpot_p50_s"] == a[r["concurrency"]]["tpot_s"]["p50"]


def test_compare_csv_and_markdown(tmp_path, capsys):
    assert compare.main([H200, B200, "--format", "csv"]) == 0
    rows = list(csv.reader(io.StringIO(capsys.readouterr().out)))
    assert rows[0][0] == "concurrency" and rows[0][-2:] == ["tok/s/GPU B/A", "tok/s/user B/A"]
    assert [r[0] for r in rows[1:]] == ["1", "8", "64"]
    assert [r[-2] for r in rows[1:]] == [f"{g:.3f}x" for g, _ in _expected_ratios().values()]
    assert compare.main([H200, B200, "--format", "markdown"]) == 0
    out = capsys.readouterr().out
    assert "## Points matched on concurrency" in out and "| 64 | both |" in out


def test_compare_lists_points_in_one_file_only(tmp_path, capsys):
    def other_sweep(d):
        d["points"][1]["concurrency"] = 128  # c=8 gone, c=128 new
    b = _edited(tmp_path, B200, "b.json", other_sweep)
    assert compare.main([H200, b, "--format", "json"]) == 0
    rows = {r["concurrency"]: r for r in json.loads(capsys.readouterr().out)["points"]}
    assert sorted(rows) == [1, 8, 64, 128]
    assert rows[8]["in"] == "A only" and rows[8]["B"] is None
    assert rows[128]["in"] == "B only" and rows[128]["A"] is None
    assert rows[8]["B_over_A"]["output_tokens_per_s_per_gpu"] is None
    assert compare.main([H200, b]) == 0
    assert "A only" in capsys.readouterr().out


def test_compare_roofline_draws_the_pareto_chart(tmp_path):
    chart = str(tmp_path / "pareto.svg")
    assert compare.main([H200, B200, "--roofline", chart, "-o", str(tmp_path / "t.txt")]) == 0
    assert os.path.getsize(chart) > 0
    _svg_ok(chart)
    assert open(str(tmp_path / "t.txt")).read().startswith("Serve files\n")


# --------------------------------------------------------------------------------------
# phasebench-report SERVE.json ...
# --------------------------------------------------------------------------------------

def test_report_serve_page(tmp_path):
    out = str(tmp_path / "serve.html")
    assert report.main([H200, B200, "-o", out]) == 0
    page = open(out).read()
    assert page.count('<img class="plot"') == 1 and "data:image/png;base64," in page
    for d in (_doc(H200), _doc(B200)):
        for p in d["points"]:
            assert f"<td>c={p['concurrency']}</td>" in page
    for w in ("Step times per operation", "qkv_proj", "kv_capacity_tokens=925000", "TTFT &lt;= 500 ms",
              "matched on concurrency", f"{_expected_ratios()[64][0]:.3f}x"):
        assert w in page, w
    out = str(tmp_path / "rate.html")
    assert report.main([RATE, "-o", out]) == 0
    page = open(out).read()
    assert "<td>16.0 req/s</td>" in page and '<td class="num">75.0%</td>' in page  # decode_attention's measured share


# --------------------------------------------------------------------------------------
# Bad input: one line on stderr, status 2, no traceback, nothing written
# --------------------------------------------------------------------------------------

def _set(path: list, value):
    def edit(d):
        for k in path[:-1]:
            d = d[k]
        d[path[-1]] = value
    return edit


def _drop(key: str):
    return lambda d: d.pop(key)


BAD = {"fast": _set(["points", 1, "output_tokens_per_s_per_gpu"], "fast"),
       "p99": _set(["points", 0, "ttft_s", "p99"], [1]),
       "nopoints": _drop("points"),
       "emptypoints": _set(["points"], []),
       "noconc": _set(["points", 2, "concurrency"], None),
       "v2": _set(["schema_version"], 2),
       "kind": _set(["kind"], "phasebench something"),
       "mode": _set(["engine", "mode"], "split"),
       "share": _set(["step_times", "ops", 1, "measured_share"], -0.5),
       "meets": _set(["points", 0, "meets_slo"], "yes"),
       "xpyd": _set(["engine", "mode"], "disaggregated")}  # the fixture's replica counts are 0

ERRORS = [
    ("pareto", "{fast} -o {tmp}/c.png", 'points[1].output_tokens_per_s_per_gpu is "fast", not a number'),
    ("pareto", "{p99} -o {tmp}/c.png", "points[0].ttft_s.p99 is a list, not a number"),
    ("pareto", "{nopoints} -o {tmp}/c.png", "points is missing"),
    ("pareto", "{emptypoints} -o {tmp}/c.png", "points is empty"),
    ("pareto", "{noconc} -o {tmp}/c.png", "points[2].concurrency is missing"),
    ("pareto", "{v2} -o {tmp}/c.png", "serve schema_version 2 is newer than this tool reads (1)"),
    ("pareto", "{kind} -o {tmp}/c.png", 'not a serve file (its "kind" is "phasebench something"'),
    ("pareto", "{mode} -o {tmp}/c.png", 'engine.mode is "split", not "colocated" or "disaggregated"'),
    ("pareto", "{share} -o {tmp}/c.png", "step_times.ops[1].measured_share is -0.5"),
    ("pareto", "{meets} -o {tmp}/c.png", 'points[0].meets_slo is "yes", not true, false or null'),
    ("pareto", "{xpyd} -o {tmp}/c.png", "engine.prefill_replicas is 0, not a whole number >= 1"),
    ("pareto", "{H}", "give the chart to write with -o CHART.png"),
    ("pareto", "{H} -o {S}", "already exists and holds phasebench results"),
    ("pareto", "{H} -o {H}", "is one of the inputs"),
    ("pareto", "{H} -o {tmp}/c.gif", "give a path ending in .png, .svg or .pdf"),
    ("pareto", "{tmp}/missing.json -o {tmp}/c.png", "no such file"),
    ("compare", "{H} {fast}", "points[1].output_tokens_per_s_per_gpu"),
    ("compare", "{H} {v2}", "schema_version 2"),
    ("compare", "{H} {R}", "both must be serve files (or both results files)"),
    ("compare", "{R} {H}", "both must be serve files (or both results files)"),
    ("compare", "{H} {B} --fail-on-regression 5", "--fail-on-regression applies to results files"),
    ("compare", "{H} {B} --significance minmax --alpha 0.1", "--alpha, --significance apply to results files"),
    ("compare", "{H} {B} {S}", "compared two at a time"),
    ("compare", "{H} {RATE}", "sweeps concurrency and"),
    ("compare", "{H} {B} -o {S}", "already exists and holds phasebench results"),
    ("compare", "{H} {B} --roofline {S}", "already exists and holds phasebench results"),
    ("compare", "{H} {tmp}/missing.json", "no such file"),
    ("report", "{H} {R} -o {tmp}/r.html", "mixed with others"),
    ("report", "{fast} -o {tmp}/r.html", "points[1].output_tokens_per_s_per_gpu"),
    ("report", "{H} {tmp}/missing.json -o {tmp}/r.html", "no such file"),
    ("report", "{H} -o {S}", "already exists and holds phasebench results"),
]

MAINS = {"pareto": serve.main, "compare": compare.main, "report": report.main}


@pytest.fixture
def files(tmp_path):
    d = {"tmp": str(tmp_path), "H": str(tmp_path / "h200.json"), "B": str(tmp_path / "b200.json"),
         "S": str(tmp_path / "existing-serve.json"), "RATE": RATE, "R": fixture("h100-base.json")}
    shutil.copy(H200, d["H"])
    shutil.copy(B200, d["B"])
    shutil.copy(B200, d["S"])
    for name, edit in BAD.items():
        d[name] = _edited(tmp_path, H200, f"{name}.json", edit)
    return d


def _digests(folder: str) -> dict:
    return {f: hashlib.sha256(open(os.path.join(folder, f), "rb").read()).hexdigest() for f in os.listdir(folder)}


@pytest.mark.parametrize("tool,args,says", ERRORS, ids=[f"{t}:{a}" for t, a, _ in ERRORS])
def test_bad_serve_input_is_one_line_and_status_two(tool, args, says, files, capsys):
    before = _digests(files["tmp"])
    rc = MAINS[tool]([w.format(**files) for w in args.split()])
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert rc == 2, f"exit status {rc}:\n{err}"
    assert "Traceback" not in err
    assert len(lines) == 1, f"{len(lines)} lines on stderr:\n{err}"
    assert says in lines[0], lines[0]
    assert _digests(files["tmp"]) == before, "a file was written or changed"


def test_overwrite_replaces_a_serve_file_and_an_earlier_chart_is_replaced_without_it(files, capsys):
    chart = os.path.join(files["tmp"], "chart.svg")
    shutil.copy(B200, chart)  # a serve file under a chart's name
    assert serve.main([files["H"], "-o", chart]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert serve.main([files["H"], "-o", chart, "--overwrite"]) == 0
    _svg_ok(chart)
    assert serve.main([files["B"], "-o", chart]) == 0  # an earlier chart holds no results: replaced, as cli's rule
    _svg_ok(chart)
    assert not [f for f in os.listdir(files["tmp"]) if f.endswith(".tmp")]


def test_python_m_serve_runs_from_the_checkout(tmp_path):
    out = str(tmp_path / "c.png")
    r = subprocess.run([sys.executable, "-m", "phasebench_tools.serve", H200, "-o", out], capture_output=True,
                       text=True, cwd=PYTHON, timeout=120)
    assert r.returncode == 0, r.stderr
    _png_ok(out)
