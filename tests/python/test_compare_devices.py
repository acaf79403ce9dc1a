"""phasebench-compare and the report across devices (python/phasebench_tools/crossdevice.py): an H200 and a
B200 results file on one roofline chart, each point against its own device's ceilings, the matched points
whose bound changed between them, and the chart option's bad input (one line, exit status 2)."""

import csv
import importlib.util
import io
import json
import os

import pytest

from conftest import FIXTURES, script
from phasebench_tools import compare, crossdevice, report, roofline
from phasebench_tools import results as pr
from test_compare_counters import counters_file

# The fixtures' own builder (make_fixtures.py): the same points, times and roofline blocks as the committed files.
_spec = importlib.util.spec_from_file_location("make_fixtures", os.path.join(FIXTURES, "make_fixtures.py"))
mf = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mf)

# Ceilings (P bf16 dense, W): ridges H200 186 measured / 206.1 datasheet, B200 250 / 281.25 FLOP/B.
H200 = {"name": "NVIDIA H200", "slug": "h200-sxm", "mem": 141 * 2**30,
        "ceil": {"measured": (800e12, 4.3e12), "datasheet": (989.5e12, 4.8e12)}}
B200 = {"name": "NVIDIA B200", "slug": "b200", "mem": 180 * 2**30,
        "ceil": {"measured": (1800e12, 7.2e12), "datasheet": (2250e12, 8.0e12)}}
N = K = 4096

# The linear layers at M = 1, 256 and 4096: intensity M*N*K / (N*K + M*K + M*N) = 1.0, 227.6 and 1365 FLOP/B,
# so M = 256 is compute-bound on the H200 (above 186) and memory-bound on the B200 (below 250).
DECODE = "decode/linear/llama-3.1-8b.o_proj/bf16/batch:1/impl:blas"
MOVER = "prefill/linear/llama-3.1-8b.o_proj/bf16/batch:1/prompt:256/impl:blas"
BIG = "prefill/linear/llama-3.1-8b.o_proj/bf16/batch:4/prompt:1024/impl:blas"
APPEND = "decode/kv_append/llama-3.1-8b/bf16/batch:16/context:4096"
MOVER_INTENSITY = 256 * N * K / (N * K + 256 * K + 256 * N)


def device_points(dev: dict) -> list:
    d = {"P": dev["ceil"]["measured"][0], "W": dev["ceil"]["measured"][1]}
    pts = [mf.linear("decode", "linear", "o_proj", 1, N, K, {"batch": 1}, 0.85, 0.7, d, impl="blas"),
           mf.linear("prefill", "linear", "o_proj", 256, N, K, {"batch": 1, "prompt": 256}, 0.85, 0.7, d, impl="blas"),
           mf.linear("prefill", "linear", "o_proj", 4096, N, K, {"batch": 4, "prompt": 1024}, 0.85, 0.7, d,
                     impl="blas"),
           mf.point("decode", "kv_append", "kv_append", "", {"B": 16, "S": 1, "Hkv": 8, "D": 128},
                    {"batch": 16, "context": 4096}, 0,
                    {"activations": 2 * 2 * 16 * 8 * 128, "writes": 2 * 2 * 16 * 8 * 128, "kv_cache": 0, "weights": 0,
                     "block_table": 0}, "own", 0.3, 1, d)]
    return [mf.finish(p, dev) for p in pts]


def device_doc(dev: dict) -> dict:
    return mf.document(dev, device_points(dev), "2026-02-01T10:00:00Z")


def write(path, doc) -> str:
    path.write_text(json.dumps(doc))
    return str(path)


def datasheet_only(doc: dict) -> dict:
    """The file as a run with --no-calibrate writes it on a device in the spec table: no measured ceilings,
    every point placed against the datasheet's."""
    pb = doc["context"]["phasebench"]
    pb["ceiling_used"] = "datasheet"
    c = pb["ceilings"]
    c["bandwidth"] = [x for x in c["bandwidth"] if x["source"] != "measured"]
    c["compute"] = {d: [x for x in v if x["source"] != "measured"] for d, v in c["compute"].items()}
    for b in doc["benchmarks"]:
        p = b["phasebench"]
        p["roofline_by_source"].pop("measured")
        p["roofline"] = p["roofline_by_source"]["datasheet"]
        p["fraction_of_roofline"], p["bound"] = p["roofline"]["fraction_of_roofline"], p["roofline"]["bound"]
    return doc


@pytest.fixture
def files(tmp_path):
    return {"h200": write(tmp_path / "h200.json", device_doc(H200)),
            "b200": write(tmp_path / "b200.json", device_doc(B200)),
            "b200-datasheet": write(tmp_path / "b200-datasheet.json", datasheet_only(device_doc(B200))),
            "h200-again": write(tmp_path / "h200-again.json", device_doc(H200)), "tmp": tmp_path}


def comparison(*paths):
    results = [pr.load_results(p) for p in paths]
    return results, compare.build_comparison(results, [], method="minmax")


def the_pair(cmp):
    bc = cmp["bound_changes"]
    assert bc is not None and len(bc["pairs"]) == 1
    return bc["pairs"][0]


# --------------------------------------------------------------------------------------
# Which points changed bound
# --------------------------------------------------------------------------------------

def test_the_point_between_the_ridges_changes_bound(files):
    results, cmp = comparison(files["h200"], files["b200"])
    pair = the_pair(cmp)
    assert (pair["reference_device"], pair["device"]) == ("NVIDIA H200", "NVIDIA B200")
    assert [c["name"] for c in pair["changed"]] == [MOVER]
    c = pair["changed"][0]
    assert c["change"] == "compute -> memory" and c["bound"] == ["compute", "memory"]
    assert c["how"] == ["recorded", "recorded"]
    assert c["intensity"] == pytest.approx([MOVER_INTENSITY, MOVER_INTENSITY])
    # Each side against its own device's (measured: the ceilings the runs used) ridge for bf16.
    assert c["ridge"] == pytest.approx([800e12 / 4.3e12, 1800e12 / 7.2e12])
    assert c["ridge_sources"] == ["measured", "measured"]
    a, b = (r.by_key[next(k for k in r.by_key if k.label() == MOVER)] for r in results)
    assert c["fraction_of_roofline"] == [a.fraction, b.fraction]
    assert c["time_ratio"] == pytest.approx(b.median_s / a.median_s)
    # The others kept their bound: the GEMV and KV append memory-bound, the large GEMM compute-bound.
    assert (pair["matched"], pair["memory_on_both"], pair["compute_on_both"]) == (4, 2, 1)
    assert pair["without_bound"] == []
    # The measured ceilings differ because the GPUs do, not because the machine changed.
    note = " ".join(cmp["warnings"])
    assert "come from different devices" in note and "machine changed" not in note


def test_the_other_way_round_is_memory_to_compute(files):
    _, cmp = comparison(files["b200"], files["h200"])
    pair = the_pair(cmp)
    assert [(c["name"], c["change"]) for c in pair["changed"]] == [(MOVER, "memory -> compute")]


def test_one_device_has_no_bound_changes(files):
    _, cmp = comparison(files["h200"], files["h200-again"])
    assert cmp["bound_changes"] is None
    assert "Bound changes" not in compare.render(cmp, "table")


def test_the_bound_a_point_records_is_the_one_used(files, tmp_path):
    # The B200 file says the point is compute-bound (say, a run against other ceilings): compare believes it.
    doc = device_doc(B200)
    p = next(b["phasebench"] for b in doc["benchmarks"] if b["name"].startswith(MOVER + "/"))
    p["roofline"]["bound"] = p["bound"] = "compute"
    _, cmp = comparison(files["h200"], write(tmp_path / "b200-says-compute.json", doc))
    assert the_pair(cmp)["changed"] == []


def test_without_a_recorded_bound_it_is_computed_from_the_devices_ridge(files, tmp_path):
    docs = []
    for dev in (H200, B200):
        doc = device_doc(dev)
        for b in doc["benchmarks"]:
            for k in ("roofline", "bound", "roofline_by_source"):
                b["phasebench"].pop(k)
        docs.append(write(tmp_path / f"{dev['slug']}-no-bounds.json", doc))
    _, cmp = comparison(*docs)
    pair = the_pair(cmp)
    assert [(c["name"], c["change"]) for c in pair["changed"]] == [(MOVER, "compute -> memory")]
    c = pair["changed"][0]
    assert c["how"] == ["computed", "computed"]
    # The ridge of each file's own ceilings, those its run used (measured) first.
    assert c["ridge"] == pytest.approx([800e12 / 4.3e12, 1800e12 / 7.2e12])
    assert (pair["memory_on_both"], pair["compute_on_both"]) == (2, 1)


def test_datasheet_ceilings_only_on_one_side(files):
    # Against the B200's datasheet ridge (281.25) the point is memory-bound too.
    _, cmp = comparison(files["h200"], files["b200-datasheet"])
    c = the_pair(cmp)["changed"][0]
    assert c["name"] == MOVER and c["ridge"] == pytest.approx([800e12 / 4.3e12, 2250e12 / 8.0e12])
    assert c["ridge_sources"] == ["measured", "datasheet"]


# --------------------------------------------------------------------------------------
# Compare's outputs and the chart
# --------------------------------------------------------------------------------------

def test_compare_says_which_points_moved_in_every_format(files):
    r = script("compare.py", files["h200"], files["b200"])
    assert r.returncode == 0, r.stderr
    out = r.stdout
    section = out[out.index("Bound changes between devices"):]
    assert "A (NVIDIA H200) -> B (NVIDIA B200): 4 matched point(s): 1 changed bound, 2 memory-bound on both, " \
           "1 compute-bound on both" in section, section
    row = next(line for line in section.splitlines() if line.startswith(MOVER))
    assert "compute -> memory" in row and "186 (measured)" in row and "250 (measured)" in row, row
    md = script("compare.py", files["h200"], files["b200"], "--format=markdown").stdout
    assert "## Bound changes between devices" in md and f"| {MOVER} | compute -> memory |" in md
    rows = list(csv.DictReader(io.StringIO(script("compare.py", files["h200"], files["b200"], "--format=csv").stdout)))
    moved = {(row["name"], row["file"]): row["bound_change"] for row in rows if row["bound_change"]}
    assert moved == {(MOVER, "B"): "compute -> memory"}
    d = json.loads(script("compare.py", files["h200"], files["b200"], "--format=json").stdout)
    assert [c["name"] for c in d["bound_changes"]["pairs"][0]["changed"]] == [MOVER]


def test_filter_limits_the_bound_changes(files):
    results = [pr.load_results(p) for p in (files["h200"], files["b200"])]
    cmp = compare.build_comparison(results, [], method="minmax", name_filter="decode/")
    pair = the_pair(cmp)
    assert pair["changed"] == [] and pair["matched"] == 2


def _lines(ax) -> dict:
    """The ceiling lines drawn, by gid ("ceiling:<file>:<source>:bandwidth" or ...:compute:<dtype>)."""
    return {ln.get_gid(): ln for ln in ax.get_lines() if (ln.get_gid() or "").startswith("ceiling:")}


def test_chart_draws_each_devices_own_ceilings_and_the_move(files):
    results, cmp = comparison(files["h200"], files["b200"])
    fig = roofline.cross_device_figure(results, cmp["bound_changes"])
    ax = fig.axes[0]
    lines = _lines(ax)
    # Memory slopes (y = W x) and compute roofs (y = P) of both devices, datasheet and measured.
    for lab, dev in (("A", H200), ("B", B200)):
        for src in ("datasheet", "measured"):
            P, W = dev["ceil"][src]
            bw = lines[f"ceiling:{lab}:{src}:bandwidth"]
            x, y = bw.get_xdata(), bw.get_ydata()
            assert y[0] / x[0] == pytest.approx(W) and y[-1] / x[-1] == pytest.approx(W)
            assert list(lines[f"ceiling:{lab}:{src}:compute:bf16"].get_ydata()) == pytest.approx([P, P])
            assert bw.get_linestyle() == {"measured": "-", "datasheet": "--"}[src]
    assert len({ln.get_color() for gid, ln in lines.items() if gid.startswith("ceiling:A:")}) == 1
    assert {ln.get_color() for gid, ln in lines.items() if gid.startswith("ceiling:A:")} != \
        {ln.get_color() for gid, ln in lines.items() if gid.startswith("ceiling:B:")}
    # The ceilings' labels and the legend name the devices.
    texts = [t.get_text() for t in ax.texts]
    assert any(t.startswith("NVIDIA H200: ") for t in texts) and any(t.startswith("NVIDIA B200: ") for t in texts)
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "A: h200.json (NVIDIA H200)" in legend and "B: b200.json (NVIDIA B200)" in legend
    # The moved point: an arrow from its place on the H200 to its place on the B200, and its label.
    a, b = (next(p for p in r.points if p.name == MOVER) for r in results)
    arrows = [t for t in ax.texts if (t.get_gid() or "").startswith("bound-change:")]
    assert [t.get_gid() for t in arrows] == [f"bound-change:{MOVER}"]
    assert arrows[0].xy == pytest.approx((b.intensity, b.flops_per_s))
    assert arrows[0].xyann == pytest.approx((a.intensity, a.flops_per_s))
    assert "B: compute -> memory" in texts
    roofline.plt.close(fig)


def test_chart_without_measured_ceilings_draws_none_for_that_device(files):
    results, cmp = comparison(files["h200"], files["b200-datasheet"])
    fig = roofline.cross_device_figure(results, cmp["bound_changes"])
    lines = _lines(fig.axes[0])
    assert {g for g in lines if g.startswith("ceiling:B:")} == {"ceiling:B:datasheet:bandwidth",
                                                               "ceiling:B:datasheet:compute:bf16"}
    assert "ceiling:A:measured:bandwidth" in lines
    roofline.plt.close(fig)


def test_compare_writes_the_chart(files):
    tmp = files["tmp"]
    svg, out = tmp / "chart.svg", tmp / "cmp.json"
    assert compare.main([files["h200"], files["b200"], "--roofline", str(svg), "--format", "json", "-o", str(out),
                         "--significance", "minmax"]) == 0
    text = svg.read_text()
    assert text.lstrip().startswith("<?xml")
    for gid in ("ceiling:A:datasheet:bandwidth", "ceiling:B:datasheet:bandwidth", "ceiling:A:measured:compute:bf16",
                "ceiling:B:measured:compute:bf16", f"bound-change:{MOVER}"):
        assert f'id="{gid}"' in text, gid
    assert json.loads(out.read_text())["bound_changes"]["pairs"][0]["changed"][0]["name"] == MOVER
    png = tmp / "chart.png"
    assert compare.main([files["h200"], files["b200"], "--roofline", str(png), "--significance", "minmax"]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # An earlier chart (not a results file) is replaced, as every tool's earlier output is.
    assert compare.main([files["h200"], files["b200"], "--roofline", str(png), "--significance", "minmax"]) == 0


def test_chart_follows_the_filter(files):
    results = [pr.load_results(p) for p in (files["h200"], files["b200"])]
    cmp = compare.build_comparison(results, [], method="minmax", name_filter="^prefill/")
    fig = compare.roofline_chart_figure(results, cmp, "^prefill/")
    assert len(fig.axes) == 1  # no KV append: no bandwidth-only panel
    drawn = sorted(float(v) for c in fig.axes[0].collections if (c.get_gid() or "").startswith("impl:")
                   for xy in c.get_offsets() for v in xy)
    want = [(p.intensity, p.flops_per_s) for r in results for p in r.points if p.name.startswith("prefill/")]
    assert len(want) == 4 and drawn == pytest.approx(sorted(v for xy in want for v in xy))
    roofline.plt.close(fig)


# --------------------------------------------------------------------------------------
# Bad input: one line, exit status 2, nothing written
# --------------------------------------------------------------------------------------

@pytest.mark.parametrize("args, says", [
    ("{h200} {b200} --roofline {tmp}/chart.gif", "--roofline '{tmp}/chart.gif': give a path ending in .png, .svg"),
    ("{h200} {b200} --roofline {tmp}/chart", "give a path ending in .png, .svg or .pdf"),
    ("{h200} {b200} --roofline {b200}", "is one of the inputs"),
    ("{h200} {b200} --roofline {h200-again}", "already exists and holds phasebench results"),
    ("{h200} {b200} --roofline {tmp}/c.png -o {tmp}/c.png", "--output and --roofline name the same file"),
    ("{h200} {b200} --roofline {tmp}/missing/c.png", "does not exist"),
    ("{h200} --impl own --against blas --roofline {tmp}/c.png", "--impl compares within one file"),
    ("{h200} {tmp}/no-such.json --roofline {tmp}/c.png", "no such file"),
])
def test_bad_chart_requests_are_one_line_and_exit_2(files, args, says, capsys):
    argv = [w.format(**files) for w in args.split()]
    says = says.format(**files)
    before = {p: open(p, "rb").read() for p in (files["b200"], files["h200-again"])}
    rc = compare.main(argv)
    out, err = capsys.readouterr()
    assert rc == compare.EXIT_BAD_INPUT, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1 and says in err, err
    assert {p: open(p, "rb").read() for p in before} == before, "an input or a results file was written over"
    assert not os.path.exists(files["tmp"] / "c.png") and not os.path.exists(files["tmp"] / "chart.gif")


def test_counters_files_have_no_roofline(tmp_path):
    a = counters_file(tmp_path, "a.json", [({"batch": 1}, 1_000_000, 0.9)])
    r = script("compare.py", a, a, "--roofline", str(tmp_path / "c.png"))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines() == ["compare.py: error: counters files (`phasebench counters`) have no "
                                             "times to place on a roofline; --roofline draws results files"]
    assert not (tmp_path / "c.png").exists()


# --------------------------------------------------------------------------------------
# The report
# --------------------------------------------------------------------------------------

def test_report_lists_the_moved_points_and_draws_the_devices_together(files, monkeypatch):
    results = [pr.load_results(p) for p in (files["h200"], files["b200"])]
    drawn = []  # the figures the page embeds, kept to read back what they show

    def keep(fig, alt):
        drawn.append((alt, {a.get_gid() for ax in fig.axes for a in ax.get_lines() + ax.texts if a.get_gid()}))
        return real_img(fig, alt)

    real_img = report.fig_img
    monkeypatch.setattr(report, "fig_img", keep)
    page, errors = report.build_report(results, [])
    assert errors == []
    gids = dict(drawn)["roofline across devices"]
    assert {"ceiling:A:datasheet:bandwidth", "ceiling:B:datasheet:bandwidth", f"bound-change:{MOVER}"} <= gids
    section = page[page.index("<h3>Bound changes between devices</h3>"):]
    assert "A (NVIDIA H200) -&gt; B (NVIDIA B200): 4 matched point(s): 1 changed bound" in section
    assert f"<td>{MOVER}</td><td>compute -&gt; memory</td>" in section
    assert "<h3>Roofline across devices</h3>" in page and 'alt="roofline across devices"' in page
    same, _ = report.build_report([pr.load_results(p) for p in (files["h200"], files["h200-again"])], [])
    assert "Bound changes between devices" not in same and "<h3>Roofline overlay</h3>" in same


def test_device_tags_keep_two_files_of_one_device_apart(files):
    results = [pr.load_results(files[k]) for k in ("h200", "b200", "h200-again")]
    assert crossdevice.device_tags(results, ["A", "B", "C"]) == ["A NVIDIA H200", "NVIDIA B200", "C NVIDIA H200"]
    bc = crossdevice.bound_changes(results, ["A", "B", "C"])
    assert [p["file"] for p in bc["pairs"]] == ["B"]  # C is the reference's device: its verdicts say it
