"""Roofline and decode-linear plots of phasebench results (python/phasebench_tools/roofline.py).

Run as `phasebench-roofline` or `.venv/bin/python scripts/roofline.py` (a thin wrapper):

    phasebench-roofline a.json [b.json ...] [--out-dir DIR] [--formats png,svg]

For every results file it writes (PNG and SVG):

  <stem>.roofline.{png,svg}      log-log roofline: compute ceilings per dtype and the bandwidth
                                 ceiling (measured solid, datasheet dashed, theoretical dotted),
                                 the cache read ceilings where measured (L2 on a GPU, the LLC on a
                                 CPU: a hot read, dash-dot; schema 3), which explain hot-cache
                                 points above the memory roof,
                                 every ok point at (intensity, achieved FLOP/s), coloured by
                                 phase, marked by operation, labelled where it helps;
  <stem>.decode-linear.{png,svg} decode linear layers: achieved FLOP/s against batch, with the
                                 batch where each layer crosses the ridge, measured and predicted,
                                 as `phasebench run` recorded them (schema 2; a schema 1 file has
                                 none, and the plot says so).

With several files it also writes overlay.roofline.{png,svg} and overlay.decode-linear.{png,svg}
(--overlay-name to change "overlay"): the devices on one plot, coloured by device.

Zero-FLOP operations (KV append is pure data movement) have intensity 0 and cannot sit on a
log-log FLOP/s plot. They are drawn in a separate "bandwidth only" panel to the right of the
roofline: achieved GB/s per point against the bandwidth ceilings, same colours and markers.
"""

from __future__ import annotations

import argparse
import math
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.ticker import EngFormatter, NullFormatter  # noqa: E402

from . import results as pr  # noqa: E402

PHASE_COLORS = {"prefill": "#1f77b4", "decode": "#d62728", "free": "#2ca02c"}
OTHER_PHASE_COLOR = "#7f7f7f"
OP_MARKERS = {"linear": "s", "decode_attention": "^", "decode_attention_paged": "v", "prefill_attention": "^",
              "kv_append": "D", "kv_append_paged": "d"}
EXTRA_MARKERS = ["P", "X", "*", "h", "<", ">", "p", "8"]
SOURCE_STYLES = {"measured": "-", "datasheet": "--", "theoretical": ":"}
# Vertical crossing lines of the decode-linear plot (the measured crossing is solid).
PREDICTED_STYLES = {"measured": "--", "datasheet": ":", "theoretical": "-."}
DEVICE_COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"]
SERIES_COLORS = plt.get_cmap("tab10").colors


#: The cache-level ceilings' line (dash-dot) and colour.
CACHE_STYLE, CACHE_COLOR = "-.", "#17becf"


def phase_color(phase: str) -> str:
    return PHASE_COLORS.get(phase, OTHER_PHASE_COLOR)


def op_marker(op: str, _extra: dict = {}) -> str:  # noqa: B006 (a deliberate memo)
    if op in OP_MARKERS:
        return OP_MARKERS[op]
    if op not in _extra:
        _extra[op] = EXTRA_MARKERS[len(_extra) % len(EXTRA_MARKERS)]
    return _extra[op]


def short_label(p: pr.Point) -> str:
    a = p.args()
    bits = [p.key.target or p.op]
    for k, tag in (("batch", "b"), ("prompt", "S"), ("context", "L")):
        if k in a:
            bits.append(f"{tag}={pr.fmt_arg(a[k])}")
    if p.key.impl and p.key.impl != "own":
        bits.append(p.key.impl)
    return " ".join(bits)


# --------------------------------------------------------------------------------------
# Roofline
# --------------------------------------------------------------------------------------

def _ceiling_lines(r: pr.Results, dtypes: list) -> tuple[list, list]:
    """([(source, dtype, P, x_start)], [(source, W, x_end_or_None)]) for the dtypes plotted."""
    compute, bandwidth = [], []
    any_w = next((w for w in (r.bandwidth_ceiling(s) for s in pr.CEILING_SOURCES) if w), None)
    for src in pr.CEILING_SOURCES:
        W = r.bandwidth_ceiling(src)
        ps = [r.compute_ceiling(d, src) for d in dtypes]
        ps = [p for p in ps if p]
        for d in dtypes:
            P = r.compute_ceiling(d, src)
            if P:
                w = W or any_w
                compute.append((src, d, P, P / w if w else None))
        if W:
            p_top = max(ps) if ps else max((r.compute_ceiling(d, s) or 0 for d in dtypes for s in pr.CEILING_SOURCES),
                                           default=0)
            bandwidth.append((src, W, p_top / W if p_top else None))
    return compute, bandwidth


def _pick_labels(points: list, limit: int = 12) -> set:
    """Label every point when few; else the extremes of intensity of each operation."""
    if len(points) <= limit:
        return set(range(len(points)))
    chosen = set()
    by_op: dict = {}
    for i, p in enumerate(points):
        by_op.setdefault(p.op, []).append(i)
    for idx in by_op.values():
        idx = sorted(idx, key=lambda i: (points[i].intensity, points[i].flops_per_s))
        chosen.add(idx[0])
        chosen.add(idx[-1])
    return chosen


def roofline_figure(results: list, title: str | None = None):
    """One roofline for one file, or an overlay (colour by device) for several."""
    overlay = len(results) > 1
    flop_pts = [[p for p in r.ok_points() if (p.flops or 0) > 0 and p.intensity and p.flops_per_s] for r in results]
    zero_pts = [[p for p in r.ok_points() if not (p.flops or 0) > 0 and p.bytes_per_s] for r in results]
    has_zero = any(zero_pts)
    if has_zero:
        fig, (ax, axb) = plt.subplots(1, 2, figsize=(13.5, 6.5), gridspec_kw={"width_ratios": [3.2, 1]})
    else:
        fig, ax = plt.subplots(figsize=(10.5, 6.5))
        axb = None

    xs = [p.intensity for pts in flop_pts for p in pts]
    ys = [p.flops_per_s for pts in flop_pts for p in pts]
    lines_per_file = []
    for r, pts in zip(results, flop_pts):
        dtypes = sorted({p.dtype for p in pts} & set(r.compute_ceilings())) or \
            (sorted(r.compute_ceilings()) if not pts else [])
        lines_per_file.append(_ceiling_lines(r, dtypes))
    ridges = [x for comp, _ in lines_per_file for (_, _, _, x) in comp if x]
    peaks = [P for comp, _ in lines_per_file for (_, _, P, _) in comp]
    lo_x = min(xs + ridges, default=0.1) / 4
    hi_x = max(xs + ridges, default=100) * 4
    lo_x, hi_x = (0.1, 1000) if not (xs or ridges) else (lo_x, hi_x)
    w_all = [W for _, bw in lines_per_file for (_, W, _) in bw]
    lo_y_cands = ys + [lo_x * W for W in w_all]
    lo_y = max(min(ys, default=1e9) / 4, min(lo_y_cands, default=1e9) / 2) if ys else min(lo_y_cands, default=1e9) / 2
    hi_y = max(ys + peaks, default=1e12) * 2.5

    # Ceilings.
    for fi, (r, (comp, bw)) in enumerate(zip(results, lines_per_file)):
        col = DEVICE_COLORS[fi % len(DEVICE_COLORS)] if overlay else "#333333"
        tag = f"{r.device_name}: " if overlay else ""
        for src, W, x_end in bw:
            x1 = min(x_end, hi_x) if x_end else hi_x
            ax.plot([lo_x, x1], [lo_x * W, x1 * W], SOURCE_STYLES.get(src, "-."), color=col, lw=1.6, alpha=0.9)
            xt = lo_x * 1.6
            ax.text(xt, xt * W * 1.15, f"{tag}{src} {pr.fmt_si(W, 'B/s')}", color=col, fontsize=7.5,
                    rotation=0, va="bottom", ha="left", clip_on=True)
        # Cache ceilings (a hot read within the L2 / last-level cache): the roof that
        # explains hot-cache points above the memory roof (ERT's hierarchical roofline).
        p_top = max((P for _, _, P, _ in comp), default=None)
        for c in r.cache_ceilings():
            Wc = float(c["bytes_per_s"])
            x1 = min(p_top / Wc, hi_x) if p_top else hi_x
            ax.plot([lo_x, x1], [lo_x * Wc, x1 * Wc], CACHE_STYLE, color=CACHE_COLOR if not overlay else col, lw=1.3,
                    alpha=0.9)
            xt = lo_x * 1.6
            ax.text(xt, xt * Wc * 1.15, f"{tag}{c.get('level', 'cache')} (hot) {pr.fmt_si(Wc, 'B/s')}",
                    color=CACHE_COLOR if not overlay else col, fontsize=7.5, va="bottom", ha="left", clip_on=True)
        for src, d, P, x_start in comp:
            x0 = max(x_start or lo_x, lo_x)
            ax.plot([x0, hi_x], [P, P], SOURCE_STYLES.get(src, "-."), color=col, lw=1.6, alpha=0.9)
            ax.text(hi_x / 1.08, P * 1.06, f"{tag}{d} {src} {pr.fmt_si(P, 'FLOP/s')}", color=col, fontsize=7.5,
                    ha="right", va="bottom", clip_on=True)

    # Points.
    for fi, (r, pts) in enumerate(zip(results, flop_pts)):
        groups: dict = {}
        for p in pts:
            groups.setdefault((p.phase, p.op), []).append(p)
        for (phase, op), g in groups.items():
            if overlay:
                col = DEVICE_COLORS[fi % len(DEVICE_COLORS)]
                face = col if phase == "prefill" else "none"
                ax.scatter([p.intensity for p in g], [p.flops_per_s for p in g], marker=op_marker(op), s=46,
                           facecolors=face, edgecolors=col, linewidths=1.3, zorder=3)
            else:
                col = phase_color(phase)
                ax.scatter([p.intensity for p in g], [p.flops_per_s for p in g], marker=op_marker(op), s=46,
                           color=col, edgecolors="black", linewidths=0.4, alpha=0.85, zorder=3)
        # Above its roofline: not a fast kernel but cached data or a low ceiling (the
        # point's above_roofline.likely_cause says which); ringed in red.
        above = [p for p in pts if p.above_roofline]
        if above:
            ax.scatter([p.intensity for p in above], [p.flops_per_s for p in above], marker="o", s=150,
                       facecolors="none", edgecolors="#d62728", linewidths=1.6, zorder=4)
        if not overlay:
            for i in sorted(_pick_labels(pts)):
                p = pts[i]
                ax.annotate(short_label(p), (p.intensity, p.flops_per_s), xytext=(5, 4), textcoords="offset points",
                            fontsize=7, color="#222222", alpha=0.9)

    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo_x, hi_x)
    ax.set_ylim(lo_y, hi_y)
    ax.xaxis.set_major_formatter(EngFormatter())
    ax.yaxis.set_major_formatter(EngFormatter(unit="FLOP/s"))
    _minor_labels(ax, "FLOP/s")
    ax.set_xlabel("arithmetic intensity (FLOP / byte of minimum traffic)")
    ax.set_ylabel("achieved rate (FLOP/s, from the median time)")
    ax.grid(True, which="major", alpha=0.3)
    ax.grid(True, which="minor", alpha=0.1)
    if not any(comp or bw for comp, bw in lines_per_file):
        ax.text(0.5, 0.02, "no ceilings in this file (run without --no-calibrate, or a GPU in the spec table)",
                transform=ax.transAxes, ha="center", fontsize=8, color="#aa0000")

    # Legend: colours, markers, line styles.
    handles = []
    all_pts = [p for pts in flop_pts + zero_pts for p in pts]
    if overlay:
        for fi, r in enumerate(results):
            handles.append(Line2D([], [], color=DEVICE_COLORS[fi % len(DEVICE_COLORS)], lw=2.5,
                                  label=f"{r.device_name} ({os.path.basename(r.path)})"))
        handles.append(Line2D([], [], ls="", marker="o", markerfacecolor="#777777", markeredgecolor="#777777",
                              label="filled: prefill"))
        handles.append(Line2D([], [], ls="", marker="o", markerfacecolor="none", markeredgecolor="#777777",
                              label="hollow: decode / other"))
    else:
        for ph in sorted({p.phase for p in all_pts}):
            handles.append(Line2D([], [], ls="", marker="o", color=phase_color(ph), label=f"phase: {ph}"))
    for op in sorted({p.op for p in all_pts}):
        handles.append(Line2D([], [], ls="", marker=op_marker(op), color="#555555", markerfacecolor="none", label=op))
    if any(p.above_roofline for p in all_pts):
        handles.append(Line2D([], [], ls="", marker="o", markersize=9, markerfacecolor="none", markeredgecolor="#d62728",
                              label="above its roofline (cached data or a low ceiling: above_roofline in the JSON)"))
    srcs = sorted({s for comp, bw in lines_per_file for s, *_ in comp + bw}, key=pr.CEILING_SOURCES.index)
    for s in srcs:
        handles.append(Line2D([], [], ls=SOURCE_STYLES.get(s, "-."), color="#333333", label=f"{s} ceiling"))
    levels = sorted({c.get("level", "cache") for r in results for c in r.cache_ceilings()})
    if levels:
        handles.append(Line2D([], [], ls=CACHE_STYLE, color=CACHE_COLOR,
                              label=f"{'/'.join(levels)} read ceiling (hot data; measured)"))
    ax.legend(handles=handles, fontsize=7.5, loc="upper left", framealpha=0.85)

    if title is None:
        if overlay:
            title = "Roofline overlay: " + " vs ".join(r.device_name for r in results)
        else:
            r = results[0]
            title = f"Roofline: {r.device_name} ({r.backend}), {len(flop_pts[0]) + len(zero_pts[0])} points"
    ax.set_title(title, fontsize=11)

    if axb is not None:
        _bandwidth_panel(axb, results, zero_pts, overlay)
    fig.tight_layout()
    return fig


def _bandwidth_panel(ax, results: list, zero_pts: list, overlay: bool) -> None:
    """0-FLOP operations: achieved B/s per point against the bandwidth ceilings."""
    labels, x = [], 0
    ys = []
    for fi, (r, pts) in enumerate(zip(results, zero_pts)):
        for p in pts:
            col = DEVICE_COLORS[fi % len(DEVICE_COLORS)] if overlay else phase_color(p.phase)
            ax.scatter([x], [p.bytes_per_s], marker=op_marker(p.op), s=50, color=col, edgecolors="black",
                       linewidths=0.4, zorder=3)
            labels.append((f"{pr.file_labels(len(results))[fi]}: " if overlay else "") + short_label(p).replace(
                p.op, p.op.replace("kv_append", "kv_app")))
            ys.append(p.bytes_per_s)
            x += 1
    ws = []
    for fi, r in enumerate(results):
        col = DEVICE_COLORS[fi % len(DEVICE_COLORS)] if overlay else "#333333"
        for src in pr.CEILING_SOURCES:
            W = r.bandwidth_ceiling(src)
            if W:
                ws.append(W)
                ax.axhline(W, ls=SOURCE_STYLES.get(src, "-."), color=col, lw=1.4)
                ax.text(-0.4, W * 1.06, f"{src} {pr.fmt_si(W, 'B/s')}", color=col, fontsize=7, va="bottom")
    ax.set_yscale("log")
    lo = min(ys + ws) / 3 if ys + ws else 1e6
    hi = max(ys + ws) * 3 if ys + ws else 1e12
    ax.set_ylim(lo, hi)
    ax.set_xlim(-0.6, max(x, 1) - 0.4)
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, rotation=60, ha="right", fontsize=7)
    ax.yaxis.set_major_formatter(EngFormatter(unit="B/s"))
    ax.set_ylabel("achieved bandwidth (minimum bytes / median time)")
    ax.set_title("0-FLOP ops: bandwidth only", fontsize=10)
    ax.grid(True, axis="y", alpha=0.3)


def _minor_labels(ax, unit: str) -> None:
    """Label the minor ticks of a log y axis only when it spans less than 2 decades."""
    lo, hi = ax.get_ylim()
    if lo > 0 and math.log10(hi / lo) < 2:
        ax.yaxis.set_minor_formatter(EngFormatter(unit=unit))
        ax.tick_params(axis="y", which="minor", labelsize=7)
    else:
        ax.yaxis.set_minor_formatter(NullFormatter())


# --------------------------------------------------------------------------------------
# Decode linear layers: achieved rate against batch, ridge crossings
# --------------------------------------------------------------------------------------

def linear_intensity(M: float, N: float, K: float, w: float, a_in: float, a_out: float) -> float:
    """FLOP/byte of Y[M,N] = X[M,K] W^T: 2MNK / (w*N*K + a_in*M*K + a_out*M*N).

    Mirrors linear_cost() in harness/src/workload.cpp (the table of docs/design.md); keep them in step.
    Only draws the attainable roof between the measured batches: the crossings are read from the file.
    """
    return 2 * M * N * K / (w * N * K + a_in * M * K + a_out * M * N)


def _element_sizes(p: pr.Point) -> tuple[float, float, float] | None:
    """w, a_in, a_out from the recorded bytes (weights = w*N*K, activations = a*M*K, writes = a*M*N)."""
    s = p.shape()
    b = p.pb.get("bytes") or {}
    try:
        M, N, K = float(s["M"]), float(s["N"]), float(s["K"])
        return b["weights"] / (N * K), b["activations"] / (M * K), b["writes"] / (M * N)
    except (KeyError, TypeError, ZeroDivisionError):
        return None


def decode_linear_series(r: pr.Results) -> list:
    """Per decode linear layer (model.target dtype): the fastest point per batch, in batch order."""
    groups: dict = {}
    for p in r.ok_points():
        if p.phase != "decode" or p.op_kind != "linear" or "batch" not in p.args():
            continue
        if not p.flops_per_s or _element_sizes(p) is None:
            continue
        g = groups.setdefault((p.key.model, p.key.target, p.dtype), {})
        b = int(p.args()["batch"])
        if b not in g or p.median_s < g[b].median_s:
            g[b] = p
    return [{"model": m, "target": t, "dtype": d, "batches": sorted(g), "points": [g[b] for b in sorted(g)]}
            for (m, t, d), g in sorted(groups.items())]


def batch_text(batch: int | None) -> str:
    """A recorded crossing batch; null means it never gets there (beyond 2^24)."""
    return "never" if batch is None else str(batch)


def crossing_label(r: pr.Results, series: dict) -> str:
    """The legend entry of one layer: its recorded crossings, or why there are none."""
    name = series["target"] or series["model"]
    x = r.crossing(series["model"], series["target"], series["dtype"])
    if x is None:
        # A schema 1 file says so once, in its own legend entry (decode_linear_figure).
        return f"{name}: crossing not recorded for this layer" if r.crossings_recorded else name
    predicted = ", ".join(f"{batch_text(v['batch'])} ({src})" for src, v in x["predicted"].items())
    return f"{name}: measured {x['measured']['text']}, predicted {predicted or '- (no ceilings)'}"


def _roof_ceilings(r: pr.Results, dtype: str, prefer: str) -> tuple[str, float, float] | None:
    """(source, P, W) of the attainable roof: the preferred source when it has both ceilings, else the first that has."""
    for src in [prefer, *pr.CEILING_SOURCES]:
        P, W = r.compute_ceiling(dtype, src), r.bandwidth_ceiling(src)
        if P and W:
            return src, P, W
    return None


def decode_linear_figure(results: list, title: str | None = None):
    """Achieved FLOP/s against batch for the decode linear layers; one panel per file and dtype."""
    panels = []
    for r in results:
        series = decode_linear_series(r)
        for d in sorted({x["dtype"] for x in series}):
            panels.append((r, d, [x for x in series if x["dtype"] == d]))
    if not panels:
        fig, ax = plt.subplots(figsize=(8, 3))
        ax.axis("off")
        ax.text(0.5, 0.5, "no decode linear (GEMV) points in " + ", ".join(os.path.basename(r.path) for r in results),
                ha="center", va="center")
        return fig
    n = len(panels)
    fig, axes = plt.subplots(1, n, figsize=(max(9, 8 * n), 7.5), squeeze=False)
    for ax, (r, dtype, series) in zip(axes[0], panels):
        all_b = sorted({b for x in series for b in x["batches"]})
        sources = []  # predicted-crossing sources drawn in this panel, for the legend
        for si, x in enumerate(series):
            col = SERIES_COLORS[si % len(SERIES_COLORS)]
            ax.plot(x["batches"], [p.flops_per_s for p in x["points"]], "-o", color=col, ms=4, lw=1.4,
                    label=crossing_label(r, x))
            c = r.crossing(x["model"], x["target"], dtype)
            if c is None:
                continue
            if c["measured"]["batch"] is not None:
                ax.axvline(c["measured"]["batch"], color=col, ls="-", lw=1.0, alpha=0.7)
            for src, v in c["predicted"].items():
                if v["batch"] is not None:
                    ax.axvline(v["batch"], color=col, ls=PREDICTED_STYLES.get(src, "-."), lw=1.0, alpha=0.55)
                if src not in sources:
                    sources.append(src)
        # The attainable roofline of the first layer, with the ceilings its crossings (else the run) used.
        x0 = series[0]
        c0 = r.crossing(x0["model"], x0["target"], dtype)
        roof = _roof_ceilings(r, dtype, (c0 or {}).get("ceiling_used") or r.ceiling_used)
        if roof:
            src, P, W = roof
            p0 = x0["points"][0]
            N, K = float(p0.shape()["N"]), float(p0.shape()["K"])
            w, a_in, a_out = _element_sizes(p0)
            bs = [all_b[0] * (all_b[-1] / all_b[0]) ** (i / 60) for i in range(61)] if len(all_b) > 1 else all_b
            att = [min(P, linear_intensity(b, N, K, w, a_in, a_out) * W) for b in bs]
            ax.plot(bs, att, color="#888888", lw=2.2, alpha=0.5,
                    label=f"attainable min(P, I(B)*W), {src} ceilings ({x0['target']})")
            ax.axhline(P, color="#888888", ls=SOURCE_STYLES.get(src, "-."), lw=1)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(all_b)
        ax.set_xticklabels([str(b) for b in all_b])
        ax.yaxis.set_major_formatter(EngFormatter(unit="FLOP/s"))
        ax.set_xlabel("batch (sequences; M = batch in decode)")
        ax.set_ylabel("achieved FLOP/s (fastest implementation per batch)")
        ax.grid(True, alpha=0.3)
        handles, _ = ax.get_legend_handles_labels()
        if r.crossings_recorded:
            handles.append(Line2D([], [], color="#333333", ls="-", label="vertical: measured crossing"))
            for src in sources:
                handles.append(Line2D([], [], color="#333333", ls=PREDICTED_STYLES.get(src, "-."),
                                      label=f"vertical: predicted crossing, {src} ceilings"))
        else:
            handles.append(Line2D([], [], ls="none", label=f"ridge crossings {r.crossings_absent_text}"))
        ax.legend(handles=handles, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2,
                  framealpha=0.85)
        _minor_labels(ax, "FLOP/s")
        ax.set_title(title or f"Decode linear layers, {dtype}: {r.device_name} ({r.backend})", fontsize=10.5)
    fig.tight_layout()
    return fig


# --------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------

def save(fig, base: str, formats: list) -> list:
    out = []
    for f in formats:
        path = f"{base}.{f}"
        fig.savefig(path, dpi=110 if f == "png" else None)
        out.append(path)
    plt.close(fig)
    return out


def main(argv: list | None = None) -> int:
    ap = argparse.ArgumentParser(description="Roofline and decode-linear plots (PNG + SVG).")
    ap.add_argument("files", nargs="+", metavar="FILE", help="results JSON written by `phasebench run`")
    ap.add_argument("--out-dir", default="plots", help="where the images go (default: ./plots)")
    ap.add_argument("--formats", default="png,svg", help="comma-separated: png, svg, pdf (default png,svg)")
    ap.add_argument("--overlay-name", default="overlay", help="file name stem of the multi-device overlays")
    ap.add_argument("--no-overlay", action="store_true", help="with several files, skip the overlay plots")
    a = ap.parse_args(argv)
    formats = [f.strip() for f in a.formats.split(",") if f.strip()]
    bad_fmt = [f for f in formats if f not in ("png", "svg", "pdf")]
    if bad_fmt or not formats:
        ap.error(f"unsupported --formats {','.join(bad_fmt) or a.formats!r}; use png, svg, pdf")
    prog = ap.prog  # roofline.py from scripts/, phasebench-roofline as a console script
    results, errors = pr.load_many(a.files)
    for e in errors:
        print(f"{prog}: error: {e}", file=sys.stderr)
    if not results:
        return 2
    os.makedirs(a.out_dir, exist_ok=True)
    written = []
    stems = _unique_stems(results)
    for r, stem in zip(results, stems):
        for w in r.warnings:
            print(f"{prog}: warning: {w}", file=sys.stderr)
        if not r.crossings_recorded and decode_linear_series(r):
            print(f"{prog}: note: {r.path}: decode-linear ridge crossings {r.crossings_absent_text}; "
                  f"the plot shows the points without them", file=sys.stderr)
        written += save(roofline_figure([r]), os.path.join(a.out_dir, f"{stem}.roofline"), formats)
        written += save(decode_linear_figure([r]), os.path.join(a.out_dir, f"{stem}.decode-linear"), formats)
    if len(results) > 1 and not a.no_overlay:
        written += save(roofline_figure(results), os.path.join(a.out_dir, f"{a.overlay_name}.roofline"), formats)
        written += save(decode_linear_figure(results), os.path.join(a.out_dir, f"{a.overlay_name}.decode-linear"),
                        formats)
    for w in written:
        print(w)
    return 2 if errors else 0


def _unique_stems(results: list) -> list:
    stems, seen = [], {}
    for r in results:
        s = r.stem
        if s in seen:
            seen[s] += 1
            s = f"{s}-{seen[s]}"
        else:
            seen[s] = 0
        stems.append(s)
    return stems


if __name__ == "__main__":
    sys.exit(main())
