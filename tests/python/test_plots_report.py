"""scripts/roofline.py and scripts/report.py, including a render check in headless Chromium."""

import os
import re
import shutil
import subprocess

import pytest

import phasebench_results as pr
import roofline
from conftest import fixture, script

BASE, H200 = fixture("h100-base.json"), fixture("h200-base.json")


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


def test_predicted_crossing_against_formula():
    r = pr.load_results(BASE)
    rows = {x["target"]: x for x in roofline.decode_linear_crossings(r)}
    x = rows["o_proj"]
    N = K = 4096
    for src, (P, W) in {"measured": (795e12, 2.9e12), "datasheet": (989e12, 3.35e12)}.items():
        ridge = P / W
        m = x["predicted"][src]
        # the smallest integer batch whose intensity reaches the ridge
        assert roofline.linear_intensity(m, N, K, 2, 2, 2) >= ridge > roofline.linear_intensity(m - 1, N, K, 2, 2, 2)
    # The fixture's times follow min(P_eff, I*W_eff) with 85% of W and 70% of P, so the measured crossing is
    # where I = 0.7 P / (0.85 W), within the sweep (1..1024).
    m_meas = roofline.batch_at_intensity(0.7 * 795e12 / (0.85 * 2.9e12), N, K, 2, 2, 2)
    assert x["measured"] == pytest.approx(m_meas, rel=1e-6)
    assert x["batches"] == [1, 8, 64, 256, 1024]


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
