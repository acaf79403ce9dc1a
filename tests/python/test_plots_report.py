"""phasebench-roofline and phasebench-report (scripts/roofline.py, scripts/report.py): plots, the
recorded ridge crossings, schema 1 files without them, and a render check in headless Chromium."""

import json
import os
import re
import shutil
import subprocess

import pytest

from conftest import ROOT, fixture, script
from phasebench_tools import results as pr
from phasebench_tools import roofline

BASE, H200, SCHEMA1 = fixture("h100-base.json"), fixture("h200-base.json"), fixture("h100-schema1.json")
NOT_RECORDED = "not recorded in this file (schema 1)"


def _png_ok(path):
    import matplotlib.image as mpimg

    img = mpimg.imread(path)
    assert img.ndim == 3 and img.shape[0] > 100 and img.shape[1] > 100
    rgb = img[..., :3]
    non_white = (rgb < 0.95).any(axis=-1).mean()
    assert non_white > 0.01, f"{path} looks blank ({non_white:.4f} of the pixels are not white)"


def test_roofline_cli_per_file_and_overlay(cpu_runs, tmp_path):
    r = script("roofline.py", cpu_runs["calibrated"], BASE, "--out-dir", str(tmp_path))
    assert r.returncode == 0, r.stderr
    stem = os.path.basename(cpu_runs["calibrated"])[:-5]
    for base in (stem, "h100-base", "overlay"):
        for kind in ("roofline", "decode-linear"):
            png, svg = tmp_path / f"{base}.{kind}.png", tmp_path / f"{base}.{kind}.svg"
            assert png.stat().st_size > 10_000 and svg.stat().st_size > 10_000
            _png_ok(str(png))
            assert svg.read_text().lstrip().startswith("<?xml")


def test_roofline_without_ceilings_still_plots(cpu_runs, tmp_path):
    r = script("roofline.py", cpu_runs["plain"], "--out-dir", str(tmp_path), "--formats", "png")
    assert r.returncode == 0, r.stderr
    _png_ok(str(tmp_path / (os.path.basename(cpu_runs["plain"])[:-5] + ".roofline.png")))


def test_roofline_bad_file(tmp_path):
    r = script("roofline.py", BASE, fixture("truncated.json"), "--out-dir", str(tmp_path), "--formats", "png")
    assert r.returncode == 2 and "truncated JSON" in r.stderr
    assert (tmp_path / "h100-base.roofline.png").exists()  # the good file is still plotted


def test_linear_intensity_mirrors_the_harness(cpu_runs):
    """The Python copy of the linear FLOPs/bytes formula gives the intensity the binary recorded."""
    for path in (cpu_runs["calibrated"], BASE):
        r = pr.load_results(path)
        lin = [p for p in r.points if p.op_kind == "linear"]
        assert lin
        for p in lin:
            s = p.shape()
            w, a_in, a_out = roofline._element_sizes(p)
            assert roofline.linear_intensity(s["M"], s["N"], s["K"], w, a_in, a_out) == pytest.approx(p.intensity)


def _legend_texts(fig) -> list:
    return [t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()]


def _vertical_lines(fig) -> set:
    """The batches of any axvline() of any panel (the crossings are no longer lines across the points)."""
    return {float(line.get_xdata()[0]) for ax in fig.axes for line in ax.get_lines()
            if list(line.get_ydata()) == [0, 1] and line.get_xdata()[0] == line.get_xdata()[1]}


def _strip_marks(fig) -> list:
    """(batch, row) of every crossing marker in the strips above the decode-linear panels."""
    strips = fig.axes[: len(fig.axes) // 2]
    return [(float(x), float(y)) for ax in strips for c in ax.collections for x, y in c.get_offsets()]


def test_recorded_crossings_are_drawn():
    """The decode-linear plot draws the crossings the file records (the fixture's values), not its own."""
    fig = roofline.decode_linear_figure([pr.load_results(BASE)])
    texts = _legend_texts(fig)
    assert "o_proj: measured 254, predicted 317 (measured), 345 (datasheet)" in texts
    assert "down_proj: measured 243, predicted 300 (measured), 326 (datasheet)" in texts
    assert any(t.startswith("strip: measured crossing") for t in texts)
    assert "strip: predicted crossing, datasheet ceilings" in texts
    assert {254, 317, 345, 243, 300, 326, 249, 309, 336, 241, 297, 322} == {x for x, _ in _strip_marks(fig)}
    assert not _vertical_lines(fig), "no line crosses the points"
    roofline.plt.close(fig)


def test_crossings_at_the_same_batch_stay_apart(tmp_path):
    """Layers whose crossings coincide (issue 27) get one row each: no marker hides another."""
    doc = json.load(open(BASE))
    for x in doc["context"]["phasebench"]["decode_linear_crossings"]:
        x["measured"].update(batch=250, text="250")
        for v in x["predicted"].values():
            v["batch"] = 300
    path = tmp_path / "same.json"
    path.write_text(json.dumps(doc))
    fig = roofline.decode_linear_figure([pr.load_results(str(path))])
    marks = _strip_marks(fig)
    assert len(marks) == len(set(marks)) == 4 * 3, marks  # 4 layers x (measured + 2 predicted), all apart
    assert {x for x, _ in marks} == {250, 300}
    roofline.plt.close(fig)


def test_schema_1_plot_says_crossings_are_not_recorded(tmp_path):
    fig = roofline.decode_linear_figure([pr.load_results(SCHEMA1)])
    texts = _legend_texts(fig)
    assert f"ridge crossings {NOT_RECORDED}" in texts
    assert "o_proj" in texts and not any("measured 2" in t or t.startswith("strip:") for t in texts)
    assert not _vertical_lines(fig) and not _strip_marks(fig)
    roofline.plt.close(fig)
    r = script("roofline.py", SCHEMA1, BASE, "--out-dir", str(tmp_path), "--formats", "png")
    assert r.returncode == 0, r.stderr
    assert f"h100-schema1.json: decode-linear ridge crossings {NOT_RECORDED}" in r.stderr
    assert "h100-base.json: decode-linear" not in r.stderr
    for name in ("h100-schema1.decode-linear.png", "h100-schema1.roofline.png", "overlay.decode-linear.png"):
        _png_ok(str(tmp_path / name))


def test_report_shows_recorded_crossings_and_says_when_a_file_has_none(tmp_path):
    page = tmp_path / "r.html"
    r = script("report.py", SCHEMA1, BASE, "-o", str(page))
    assert r.returncode == 0, r.stderr
    html = page.read_text()
    assert html.count(f"Ridge crossings: {NOT_RECORDED}.") == 1  # the schema 1 file's section
    assert "<th>predicted (measured ceilings)</th><th>predicted (datasheet ceilings)</th>" in html
    assert ("<td>llama-3.1-8b.o_proj</td><td>bf16</td><td>1, 8, 64, 256, 1024</td><td>254</td>"
            "<td>317 (ridge 274.1 FLOP/B)</td><td>345 (ridge 295.2 FLOP/B)</td><td>measured</td>") in html
    assert html.count("data:image/png;base64,") >= 6


def test_cpu_run_crossings_are_shown(cpu_runs, tmp_path):
    """The binary's file: its recorded crossings in the report, or (schema 1) a note that there are none."""
    r = pr.load_results(cpu_runs["calibrated"])
    page = tmp_path / "cpu.html"
    res = script("report.py", cpu_runs["calibrated"], "-o", str(page))
    assert res.returncode == 0, res.stderr
    html = page.read_text()
    if not r.crossings_recorded:
        assert f"Ridge crossings: {r.crossings_absent_text}." in html
        pytest.skip(f"the binary writes schema {r.schema_version}: no recorded crossings to show yet")
    assert r.decode_linear_crossings
    texts = _legend_texts(roofline.decode_linear_figure([r]))
    for x in r.decode_linear_crossings:
        assert f"<td>{x['layer']}</td>" in html
        assert any(t.startswith(f"{x['target']}: measured {x['measured']['text']}, predicted") for t in texts)


def test_report_single_and_comparison(cpu_runs, tmp_path):
    one = tmp_path / "one.html"
    r = script("report.py", cpu_runs["calibrated"], "-o", str(one))
    assert r.returncode == 0, r.stderr
    html = one.read_text()
    assert "<h3>Ceilings</h3>" in html and "<h3>Device</h3>" in html and "measured" in html
    assert html.count("data:image/png;base64,") >= 2
    assert not re.search(r"""(src|href)=["']?(https?:|//)""", html), "the report must be self-contained"

    cmp = tmp_path / "cmp.html"
    r = script("report.py", BASE, H200, fixture("schema-v99.json"), "-o", str(cmp))
    assert r.returncode == 2  # the bad file is an error, but the page is written
    html = cmp.read_text()
    assert "unknown schema version 99" in html
    assert "Comparison against A" in html and "NVIDIA H200" in html and "Points not in every file" in html
    assert html.count("data:image/png;base64,") >= 6


def _chromium():
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        p = shutil.which(name)
        if p:
            return p
    return None


def test_report_renders_in_headless_chromium(tmp_path):
    browser = _chromium()
    if not browser:
        pytest.skip("chromium not installed (Debian package 'chromium'; scripts/setup installs it)")
    page = tmp_path / "report.html"
    r = script("report.py", BASE, H200, "-o", str(page))
    assert r.returncode == 0, r.stderr
    shot = tmp_path / "shot.png"
    cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars",
           "--no-first-run", "--window-size=1400,2400", f"--user-data-dir={tmp_path / 'profile'}",
           f"--screenshot={shot}", page.as_uri()]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=90)
    assert shot.exists(), f"no screenshot ({res.returncode}): {res.stderr[-1500:]}"
    import matplotlib.image as mpimg

    img = mpimg.imread(str(shot))[..., :3]
    assert img.shape[0] >= 2000 and img.shape[1] >= 1300
    non_white = (img < 0.95).any(axis=-1).mean()
    # Text, tables and the embedded plots: a blank or failed page is (almost) all white.
    assert non_white > 0.03, f"the screenshot looks blank: {non_white:.4f} of the pixels are not white"
    # The plots must have loaded: the red title rule and plot colours give saturated pixels.
    sat = (img.max(axis=-1) - img.min(axis=-1) > 0.3).mean()
    assert sat > 0.001, f"no coloured pixels in the screenshot ({sat:.5f}): were the images rendered?"


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_numbers_are_refused_by_every_tool(tmp_path, literal):
    """Strict JSON: a NaN or Infinity is one line naming the file and the field, exit 2, no traceback."""
    text = open(BASE).read()
    doc = json.loads(text)
    doc["benchmarks"][2]["phasebench"]["time"]["median_s"] = "@@"
    bad = tmp_path / "nan.json"
    bad.write_text(json.dumps(doc).replace('"@@"', literal))
    for tool, extra in (("compare.py", [BASE]), ("roofline.py", ["--out-dir", str(tmp_path), "--formats", "png"]),
                        ("report.py", ["-o", str(tmp_path / "r.html")]), ("cpu_targets.py", [])):
        args = [BASE, str(bad)] if tool == "compare.py" else [str(bad)] + extra
        r = script(tool, *args)
        assert r.returncode == 2, (tool, r.stdout, r.stderr)
        assert "Traceback" not in r.stderr, (tool, r.stderr)
        assert f"{literal} at benchmarks[2].phasebench.time.median_s" in r.stderr, (tool, r.stderr)
        assert str(bad) in r.stderr, (tool, r.stderr)


def test_points_above_their_roofline_are_marked(tmp_path):
    """The run's above_roofline: a red ring and legend entry on the plot, the likely cause in the report."""
    doc = json.loads(open(BASE).read())
    pb = doc["benchmarks"][0]["phasebench"]
    pb["above_roofline"] = {"fraction": 1.3, "likely_cause": "data cached: the point moves less than 4x the LLC"}
    marked = tmp_path / "above.json"
    marked.write_text(json.dumps(doc))
    r = pr.load_results(str(marked))
    assert sum(1 for p in r.points if p.above_roofline) == 1
    texts = _legend_texts(roofline.roofline_figure([r]))
    assert any(t.startswith("above its roofline") for t in texts), texts
    assert not any(t.startswith("above its roofline") for t in _legend_texts(roofline.roofline_figure(
        [pr.load_results(BASE)])))
    res = script("report.py", str(marked), "-o", str(tmp_path / "r.html"))
    assert res.returncode == 0, res.stderr
    assert "above its roofline: data cached: the point moves less than 4x the LLC" in (tmp_path / "r.html").read_text()


def test_report_shows_the_ceilings_that_apply(cpu_runs, tmp_path):
    """A CPU run of fp32 points: no bf16/fp16 compute ceilings in its report, and it says they are left out."""
    r = pr.load_results(cpu_runs["calibrated"])
    assert {p.dtype for p in r.points} == {"fp32"} and "bf16" in r.compute_ceilings()
    page = tmp_path / "cpu.html"
    res = script("report.py", cpu_runs["calibrated"], "-o", str(page))
    assert res.returncode == 0, res.stderr
    html = page.read_text()
    ceilings = html.split("<h3>Ceilings</h3>")[1].split("<h3>")[0]
    assert "<td>bf16</td>" not in ceilings and "<td>fp32</td>" in ceilings
    assert "types no point of this run uses are left out: bf16, fp16" in ceilings


def test_cache_ceilings_are_drawn(tmp_path):
    """A file with an L2 read ceiling (schema 3) draws it as its own roof with a legend entry; one without has none."""
    doc = json.load(open(BASE))
    doc["context"]["phasebench"]["ceilings"]["cache_bandwidth"] = [
        {"level": "L2", "bytes_per_s": 1.1e13, "source": "measured", "method": "read kernel over half the L2, hot"}]
    path = tmp_path / "l2.json"
    path.write_text(json.dumps(doc))
    r = pr.load_results(str(path))
    assert [c["level"] for c in r.cache_ceilings()] == ["L2"]
    fig = roofline.roofline_figure([r])
    assert any(t.startswith("L2 read ceiling") for t in _legend_texts(fig)), _legend_texts(fig)
    assert any("L2 (hot) 11 TB/s" in t.get_text() for t in fig.axes[0].texts), [t.get_text() for t in fig.axes[0].texts]
    assert not any("read ceiling" in t for t in _legend_texts(roofline.roofline_figure([pr.load_results(BASE)])))


# --------------------------------------------------------------------------------------
# Markers, labels and titles (issue 27)
# --------------------------------------------------------------------------------------

DEFAULT_SWEEP = os.path.join(ROOT, "results", "cpu-amd-epyc", "20261130T080546Z.json")  # the default CPU sweep
OTHER_RUN = os.path.join(ROOT, "results", "cpu-amd-epyc", "20261130T075622Z.json")  # the same machine, later


def _point_faces(ax) -> dict:
    """(x, y) of every plotted point -> whether its marker is filled."""
    out = {}
    for c in ax.collections:
        faces = c.get_facecolors()
        for i, (x, y) in enumerate(c.get_offsets()):
            face = faces[i % len(faces)] if len(faces) else None
            out[(round(float(x), 9), round(float(y), 3))] = bool(face is not None and face[3] > 0)
    return out


def test_library_rows_are_hollow_and_ours_filled():
    r = pr.load_results(DEFAULT_SWEEP)
    for fig in (roofline.roofline_figure([r]), roofline.roofline_figure([r, pr.load_results(OTHER_RUN)])):
        faces = _point_faces(fig.axes[0])
        pts = [p for p in r.ok_points() if (p.flops or 0) > 0]
        lib = [p for p in pts if p.key.impl == "blas"]
        own = [p for p in pts if p.key.impl == "own"]
        assert lib and own
        # Where an own and a blas point sit on the same spot either marker may be on top; check the rest.
        spots = lambda ps: {(round(p.intensity, 9), round(p.flops_per_s, 3)) for p in ps}  # noqa: E731
        for spot in spots(lib) - spots(own):
            assert faces[spot] is False, spot
        for spot in spots(own) - spots(lib):
            assert faces[spot] is True, spot
        texts = _legend_texts(fig)
        assert "own (our kernel)" in texts and "blas (a library)" in texts
        roofline.plt.close(fig)


def _boxes(fig, ax):
    fig.canvas.draw()
    rend = fig.canvas.get_renderer()
    return [(t.get_text(), t.get_window_extent(rend)) for t in ax.texts if t.get_visible() and t.get_text()]


def test_labels_cover_no_point_and_no_other_label():
    """The default sweep's roofline: every label clear of every point and every other label; legends outside."""
    for results in ([pr.load_results(DEFAULT_SWEEP)], [pr.load_results(DEFAULT_SWEEP), pr.load_results(OTHER_RUN)]):
        fig = roofline.roofline_figure(results)
        ax = fig.axes[0]
        boxes = _boxes(fig, ax)
        assert len(boxes) >= (4 if len(results) > 1 else 8), [t for t, _ in boxes]
        for i, (ta, a) in enumerate(boxes):
            for tb, b in boxes[i + 1:]:
                assert not a.overlaps(b), (ta, tb)
        pts = ax.transData.transform([(float(x), float(y)) for c in ax.collections for x, y in c.get_offsets()])
        for t, b in boxes:
            for x, y in pts:
                assert not (b.x0 - 3 < x < b.x1 + 3 and b.y0 - 3 < y < b.y1 + 3), (t, x, y)
        rend = fig.canvas.get_renderer()
        assert not ax.get_legend().get_window_extent(rend).overlaps(ax.get_window_extent(rend))
        if len(fig.axes) > 1:  # the bandwidth-only panel's ceiling labels
            panel = _boxes(fig, fig.axes[1])
            for i, (ta, a) in enumerate(panel):
                for tb, b in panel[i + 1:]:
                    assert not a.overlaps(b), (ta, tb)
        roofline.plt.close(fig)


def test_titles_name_the_files_not_only_the_devices(tmp_path):
    a, b = pr.load_results(DEFAULT_SWEEP), pr.load_results(OTHER_RUN)
    assert a.device_name == b.device_name == "AMD EPYC"
    fig = roofline.roofline_figure([a, b])
    title = fig.axes[0].get_title()
    assert "20261130T080546Z.json" in title and "20261130T075622Z.json" in title and "AMD EPYC vs AMD EPYC" not in title
    roofline.plt.close(fig)
    assert roofline.file_names([a, b]) == ["20261130T080546Z.json", "20261130T075622Z.json"]
    same = pr.load_results(DEFAULT_SWEEP)
    same.path = "/elsewhere/20261130T080546Z.json"
    assert roofline.file_names([a, same]) == ["cpu-amd-epyc/20261130T080546Z.json", "elsewhere/20261130T080546Z.json"]
    # The report of two runs on one GPU model (small files: the page draws every plot).
    again = tmp_path / "h100-again.json"
    shutil.copy(BASE, again)
    page = tmp_path / "r.html"
    r = script("report.py", BASE, str(again), "-o", str(page))
    assert r.returncode == 0, r.stderr
    head = page.read_text().split("</title>")[0]
    assert "h100-base.json (NVIDIA H100 80GB HBM3) vs h100-again.json (NVIDIA H100 80GB HBM3)" in head, head
