"""phasebench-compare FILE --impl A --against B (one file's implementations against each other), and the
implementations' markers in the roofline plots and the report's legend."""

import copy
import json
import os

import pytest

from conftest import ROOT, fixture, script
from phasebench_tools import compare
from phasebench_tools import results as pr
from phasebench_tools import roofline

BASE = fixture("h100-base.json")
ATTN = "decode/attention/llama-3.1-8b/bf16/batch:8/context:4096"  # our decode attention point of BASE
GEMV = "decode/gemv/llama-3.1-8b.o_proj/bf16/batch:1/impl:cublas"
US = 1e-6


def spaced(t_us: float, rel: float = 0.005, n: int = 20) -> list:
    return [t_us * US * (1 - rel + 2 * rel * i / (n - 1)) for i in range(n)]


def with_times(entry: dict, impl: str, samples: list | None, status: str = "ok", message: str = "") -> dict:
    """A copy of a BASE entry as implementation `impl`, with these samples (or not run, with its message)."""
    e = copy.deepcopy(entry)
    pb = e["phasebench"]
    pb["impl"] = impl
    name = e["run_name"][: -len("/manual_time")] + ("" if impl == "own" else f"/impl:{impl}") + "/manual_time"
    e["name"] = e["run_name"] = name
    if status != "ok":
        pb.update(status=status, message=message)
        for k in ("time", "roofline", "roofline_by_source", "fraction_of_roofline"):
            pb.pop(k, None)
        return e
    t = pb["time"]
    t.update(samples_s=samples, median_s=sorted(samples)[len(samples) // 2], min_s=min(samples), max_s=max(samples),
             samples=len(samples))
    return e


def within_file(path, own_us: float, lib_us: float, lib: str = "flashinfer", skipped: bool = True) -> str:
    """BASE's decode attention as ours and as `lib` (and cuDNN refusing it), plus a GEMV of ours and blas."""
    doc = json.load(open(BASE))
    entries = {b["run_name"][: -len("/manual_time")]: b for b in doc["benchmarks"]}
    attn, gemv = entries[ATTN], entries[GEMV]
    doc["benchmarks"] = [with_times(attn, "own", spaced(own_us)), with_times(attn, lib, spaced(lib_us)),
                         with_times(gemv, "own", spaced(50)), with_times(gemv, "blas", spaced(50))]
    if skipped:
        doc["benchmarks"].append(with_times(attn, "cudnn", None, "skipped", "cuDNN has no kernel for this shape"))
    path.write_text(json.dumps(doc))
    return str(path)


def test_ours_slower_than_the_library_is_slower_and_fails_the_gate(tmp_path):
    f = within_file(tmp_path / "r.json", own_us=110, lib_us=100)
    r = script("compare.py", f, "--impl", "own", "--against", "flashinfer", "--format=json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["reference"] == "flashinfer" and [x["label"] for x in d["files"]] == ["flashinfer", "own"]
    assert d["within"]["impl"] == "own" and d["within"]["against"] == "flashinfer"
    # The GEMV has no flashinfer point: its operation is left out, not listed as missing.
    assert [e["name"] for e in d["points"]] == ["decode/decode_attention/llama-3.1-8b/bf16/batch:8/context:4096"]
    v = d["points"][0]["vs_first"]["own"]
    assert v["verdict"] == "SLOWER" and v["time_change_pct"] == pytest.approx(10)
    r = script("compare.py", f, "--impl", "own", "--against", "flashinfer", "--fail-on-regression", "5")
    assert r.returncode == compare.EXIT_REGRESSION, r.stdout + r.stderr
    assert "REGRESSIONS" in r.stdout and "1 regression(s) of own beyond 5% against flashinfer" in r.stderr
    r = script("compare.py", f, "--impl", "own", "--against", "flashinfer", "--fail-on-regression", "15")
    assert r.returncode == 0 and "no regression beyond 15% against flashinfer" in r.stdout, r.stdout + r.stderr


def test_ours_faster_than_the_library_is_faster(tmp_path):
    f = within_file(tmp_path / "r.json", own_us=80, lib_us=100, lib="cudnn", skipped=False)
    r = script("compare.py", f, "--impl", "own", "--against", "cudnn", "--fail-on-regression", "0")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "implementations within" in r.stdout and "own against cudnn" in r.stdout
    assert "1 FASTER, 0 SLOWER" in r.stdout
    assert "left out, run by only one of them: decode/linear" in r.stdout


def test_the_same_point_of_blas_on_a_real_cpu_run(cpu_runs):
    """A run of the binary has our GEMV and OpenBLAS's on the same layers: matched point by point."""
    r = script("compare.py", cpu_runs["plain"], "--impl", "own", "--against", "blas", "--format=json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    both = [e for e in d["points"] if all(c is not None for c in e["files"].values())]
    assert both and all(e["key"]["op"] == "linear" and e["key"]["impl"] == "" for e in both)
    assert sum(d["counts"].values()) == len(both)


@pytest.mark.parametrize("args, message", [
    (["--impl", "own", "--against", "cudnn"], "no point of implementation 'cudnn' (--against); the file's "
                                              "implementations: cublas, own"),
    (["--impl", "flashinfer", "--against", "own"], "no point of implementation 'flashinfer' (--impl)"),
    (["--against", "cublas"], "--against needs --impl"),
    (["--impl", "own"], "--impl needs --against"),
    (["--impl", "own", "--against", "own"], "name the same implementation"),
    ([BASE, "--impl", "own", "--against", "cublas"], "--impl compares the implementations within one file; got 2"),
    # Ours are attention and KV append, cuBLAS's the linear layers: no point of one is a point of the other.
    (["--impl", "own", "--against", "cublas"], "no point of 'own' has a point of 'cublas' with the same key"),
])
def test_bad_input_is_one_line_and_exit_2(args, message):
    r = script("compare.py", BASE, *args)
    assert r.returncode == compare.EXIT_BAD_INPUT, r.stdout + r.stderr
    assert message in r.stderr and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr
    assert r.stdout == ""


def test_help_says_which_side_is_the_reference():
    r = script("compare.py", "--help")
    assert r.returncode == 0
    text = " ".join(r.stdout.split())
    assert "--impl IMPL" in text and "It is the reference, so SLOWER means IMPL is slower than it" in text


# --------------------------------------------------------------------------------------
# Markers: one per implementation, in every plot and in the report's legend
# --------------------------------------------------------------------------------------

def _marker_vertices(marker: str):
    from matplotlib.markers import MarkerStyle

    m = MarkerStyle(marker)
    return m.get_path().transformed(m.get_transform()).vertices


def _impl_collections(fig) -> list:
    """(implementation, the marker's vertices) of every collection of points in the figure."""
    out = []
    for ax in fig.axes:
        for c in ax.collections:
            gid = c.get_gid() or ""
            if gid.startswith("impl:"):
                out.append((gid[len("impl:"):], c.get_paths()[0].vertices))
    return out


@pytest.fixture(scope="module")
def four_impls(tmp_path_factory):
    """BASE with its decode attention as ours, FlashInfer's, cuDNN's and an unknown library's, and its KV append
    (0 FLOPs: the bandwidth panel) as ours and FlashInfer's."""
    doc = json.load(open(BASE))
    extra = []
    for b in doc["benchmarks"]:
        if b["run_name"].startswith(ATTN) or b["run_name"].startswith("decode/kv_append/"):
            for impl in ("flashinfer", "cudnn", "mystery"):
                extra.append(with_times(b, impl, [x * 1.1 for x in b["phasebench"]["time"]["samples_s"]]))
    doc["benchmarks"] += extra
    path = tmp_path_factory.mktemp("impls") / "four.json"
    path.write_text(json.dumps(doc))
    return pr.load_results(str(path))


def test_each_implementation_has_its_marker_in_every_plot(four_impls):
    expected = {"own": "o", "blas": "s", "flashinfer": "^", "cudnn": "D", "mystery": "x"}
    other = pr.load_results(BASE)
    for fig in (roofline.roofline_figure([four_impls]), roofline.roofline_figure([four_impls, other]),
                roofline.decode_linear_figure([four_impls])):
        drawn = _impl_collections(fig)
        assert drawn
        for impl, vertices in drawn:
            assert _marker_vertices(expected[impl]).tolist() == vertices.tolist(), impl
        roofline.plt.close(fig)
    fig = roofline.roofline_figure([four_impls])
    assert {impl for impl, _ in _impl_collections(fig)} == set(expected)  # the fixture's cublas is blas
    legend = {t.get_text(): h for t, h in zip(fig.axes[0].get_legend().get_texts(),
                                               fig.axes[0].get_legend().legend_handles)}
    for impl, marker in expected.items():
        label = next(t for t in legend if t.startswith(f"{impl} ("))
        assert legend[label].get_marker() == marker, label
    roofline.plt.close(fig)


def test_ours_filled_and_libraries_hollow(four_impls):
    fig = roofline.roofline_figure([four_impls])
    for c in (c for ax in fig.axes for c in ax.collections if (c.get_gid() or "").startswith("impl:")):
        impl = c.get_gid()[len("impl:"):]
        filled = len(c.get_facecolors()) and c.get_facecolors()[0][3] > 0
        assert bool(filled) == (impl in ("own", "mystery")), impl  # an x has no inside: drawn in its colour
    roofline.plt.close(fig)


def test_the_reports_legend_names_the_same_markers(four_impls, tmp_path):
    from phasebench_tools import report

    page, _ = report.build_report([four_impls], [])
    legend = roofline.impl_legend_text()
    assert legend == ("own: circle, blas: square, flashinfer: triangle, cudnn: diamond, nccl: plus, "
                      "any other implementation: x")
    assert f"marked by implementation ({legend}" in page
