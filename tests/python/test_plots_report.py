"""phasebench-roofline and phasebench-report (scripts/roofline.py, scripts/report.py): plots, the
recorded ridge crossings, schema 1 files without them, and a render check in headless Chromium."""

import json
import os
import re
import shutil
import subprocess

import pytest

from conftest import fixture, script
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
    """The batches of the axvline()s (crossings) of every panel."""
    return {float(line.get_xdata()[0]) for ax in fig.axes for line in ax.get_lines()
            if list(line.get_ydata()) == [0, 1] and line.get_xdata()[0] == line.get_xdata()[1]}


def test_recorded_crossings_are_drawn():
    """The decode-linear plot draws the crossings the file records (the fixture's values), not its own."""
    fig = roofline.decode_linear_figure([pr.load_results(BASE)])
    texts = _legend_texts(fig)
    assert "o_proj: measured 254, predicted 317 (measured), 345 (datasheet)" in texts
    assert "down_proj: measured 243, predicted 300 (measured), 326 (datasheet)" in texts
    assert "vertical: measured crossing" in texts and "vertical: predicted crossing, datasheet ceilings" in texts
    assert {254, 317, 345, 243, 300, 326, 249, 309, 336, 241, 297, 322} == _vertical_lines(fig)
    roofline.plt.close(fig)


def test_schema_1_plot_says_crossings_are_not_recorded(tmp_path):
    fig = roofline.decode_linear_figure([pr.load_results(SCHEMA1)])
    texts = _legend_texts(fig)
    assert f"ridge crossings {NOT_RECORDED}" in texts
    assert "o_proj" in texts and not any("measured 2" in t or t.startswith("vertical:") for t in texts)
    assert not _vertical_lines(fig)
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
