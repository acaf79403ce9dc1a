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
                                 operation (phase and op), marked by implementation (IMPL_MARKERS:
                                 own a circle, blas a square, flashinfer a triangle, cudnn a
                                 diamond, nccl a plus, anything else an x), filled for our kernels and hollow
                                 for the libraries' rows, labelled where a label fits
                                 without covering a point, a ceiling's label or another label;
  <stem>.decode-linear.{png,svg} decode linear layers: achieved FLOP/s against batch, with the
                                 batch where each layer crosses the ridge, measured and predicted,
                                 as `phasebench run` recorded them (schema 2; a schema 1 file has
                                 none, and the plot says so): each layer's crossings are
                                 triangles in a strip above the points (measured filled, predicted
                                 hollow), one row per layer, so crossings at the same batch stay
                                 apart; a batch's marker is the fastest implementation's (filled
                                 where it was our kernel).

Legends sit outside the axes; titles name the files (two runs of one machine are told apart).

With several files it also writes overlay.roofline.{png,svg} and overlay.decode-linear.{png,svg}
(--overlay-name to change "overlay"): the devices on one plot, coloured by device, marked by
implementation, with labels naming the operations.

Zero-FLOP operations (KV append is pure data movement) have intensity 0 and cannot sit on a
log-log FLOP/s plot. They are drawn in a separate "bandwidth only" panel to the right of the
roofline: achieved GB/s per point against the bandwidth ceilings, same colours and markers.
"""

from __future__ import annotations

import io
import math
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.ticker import EngFormatter, NullFormatter  # noqa: E402

from . import cli  # noqa: E402
from . import crossdevice  # noqa: E402
from . import results as pr  # noqa: E402

#: A point's marker is its implementation's, in every plot and in the report's legend: ours a circle,
#: the vendor BLAS a square, the attention libraries a triangle (FlashInfer) and a diamond (cuDNN), NCCL a plus;
#: anything else an x. Filled for ours, hollow for a library.
IMPL_MARKERS = {"own": "o", "blas": "s", "flashinfer": "^", "cudnn": "D", "nccl": "P"}
UNKNOWN_IMPL_MARKER = "x"
#: What the markers are called where words describe them (the report's legend).
MARKER_NAMES = {"o": "circle", "s": "square", "^": "triangle", "D": "diamond", "P": "plus", "x": "x"}
#: Names of the implementations in files written before they had today's: the vendor BLAS was named after
#: the library (hand-written GPU-like fixtures say cublas), and a point without an impl is ours (is_library).
IMPL_ALIASES = {"cublas": "blas", "cublaslt": "blas", "openblas": "blas", "": "own"}
#: Colours of the operations (phase and op) of a single-file roofline, in the order of their names:
#: tab20's ten strong colours, then its ten light ones (a default sweep has about 15 operations).
OP_COLORS = plt.get_cmap("tab20").colors[0::2] + plt.get_cmap("tab20").colors[1::2]
SOURCE_STYLES = {"measured": "-", "datasheet": "--", "theoretical": ":"}
# Vertical crossing lines of the decode-linear plot (the measured crossing is solid).
PREDICTED_STYLES = {"measured": "--", "datasheet": ":", "theoretical": "-."}
DEVICE_COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"]
SERIES_COLORS = plt.get_cmap("tab10").colors


#: The cache-level ceilings' line (dash-dot) and colour.
CACHE_STYLE, CACHE_COLOR = "-.", "#17becf"
#: The arrows of the cross-device chart, from a point on one device to the same point on another.
MOVE_COLOR = "#222222"


def is_library(p: pr.Point) -> bool:
    """A library's row (the vendor BLAS, FlashInfer, cuDNN) rather than our own kernel."""
    return is_library_impl(p.key.impl)


def is_library_impl(impl: str) -> bool:
    return impl_name(impl) != "own"


def file_names(results: list) -> list:
    """Each file's name for titles and legends: its base name, with as much of its folder as tells equal names apart."""
    parts = [os.path.normpath(r.path).split(os.sep) for r in results]
    names = []
    for i, ps in enumerate(parts):
        n = 1
        while n < len(ps) and any(j != i and parts[j][-n:] == ps[-n:] for j in range(len(parts))):
            n += 1
        names.append("/".join(ps[-n:]))
    return names


def files_title(results: list) -> str:
    """'a.json (AMD EPYC) vs b.json (AMD EPYC)': the files first, each with its device."""
    return " vs ".join(f"{n} ({r.device_name})" for n, r in zip(file_names(results), results))


class LabelPlacer:
    """Places text on an axes where it covers no point, no other label and nothing already placed.

    Everything works in display coordinates after the figure's layout is final: points and texts
    already drawn are obstacles; each label tries its candidate offsets in order and is left out
    when none fits (the legend and the JSON still name every point).
    """

    def __init__(self, ax):
        self.ax = ax
        fig = ax.figure
        self.renderer = fig.canvas.get_renderer()
        self.area = ax.get_window_extent(self.renderer)
        self.taken = []

    def block_points(self, xs: list, ys: list, radius_px: float = 6.0) -> None:
        for x, y in self.ax.transData.transform(list(zip(xs, ys))) if xs else []:
            self.taken.append((x - radius_px, y - radius_px, x + radius_px, y + radius_px))

    def block_artist(self, artist) -> None:
        b = artist.get_window_extent(self.renderer)
        self.taken.append((b.x0, b.y0, b.x1, b.y1))

    def _free(self, b) -> bool:
        a = self.area
        if b.x0 < a.x0 or b.x1 > a.x1 or b.y0 < a.y0 or b.y1 > a.y1:
            return False
        return not any(b.x0 < x1 and x0 < b.x1 and b.y0 < y1 and y0 < b.y1 for x0, y0, x1, y1 in self.taken)

    def place(self, text: str, xy, offsets: list, **kw):
        """Annotate `xy` (data; or a list of places to try in turn) with `text` at the first free offset
        (dx, dy, ha, va in points); None if none is."""
        for at in (xy if isinstance(xy, list) else [xy]):
            for dx, dy, ha, va in offsets:
                t = self.ax.annotate(text, at, xytext=(dx, dy), textcoords="offset points", ha=ha, va=va, **kw)
                b = t.get_window_extent(self.renderer)
                if self._free(b):
                    self.taken.append((b.x0, b.y0, b.x1, b.y1))
                    return t
                t.remove()
        return None


#: Where a point's label may go, in order: right-up, right-down, left-up, left-down, above, below.
POINT_OFFSETS = [(6, 3, "left", "bottom"), (6, -3, "left", "top"), (-6, 3, "right", "bottom"),
                 (-6, -3, "right", "top"), (0, 7, "center", "bottom"), (0, -7, "center", "top")]


def impl_name(impl: str) -> str:
    """Today's name of an implementation (IMPL_ALIASES for older files' names)."""
    return IMPL_ALIASES.get(impl, impl)


def impl_marker(impl: str) -> str:
    """The marker of an implementation's points (IMPL_MARKERS; an implementation not in it: an x)."""
    return IMPL_MARKERS.get(impl_name(impl), UNKNOWN_IMPL_MARKER)


def impl_legend_text(impls: list | None = None) -> str:
    """'own: circle, blas: square, ...' for `impls` (default: every known one, then the unknown's)."""
    shown = [impl_name(i) for i in impls] if impls is not None else list(IMPL_MARKERS)
    out = list(dict.fromkeys(shown))
    words = [f"{i}: {MARKER_NAMES[impl_marker(i)]}" for i in out if i in IMPL_MARKERS]
    if impls is None or any(i not in IMPL_MARKERS for i in out):
        words.append(f"any other implementation: {MARKER_NAMES[UNKNOWN_IMPL_MARKER]}")
    return ", ".join(words)


def op_colors(points: list) -> dict:
    """The colour of each operation ("phase op") of a single-file roofline: one per operation, so the
    markers can tell the implementations apart (the same operation in two phases is two operations)."""
    names = sorted({op_name(p) for p in points})
    return {n: OP_COLORS[i % len(OP_COLORS)] for i, n in enumerate(names)}


def op_name(p: pr.Point) -> str:
    return f"{p.phase} {p.op}"


def scatter(ax, xs: list, ys: list, impl: str, color, overlay: bool, size: float = 46, zorder: int = 3):
    """One implementation's points: its marker, filled for ours and hollow for a library (an x has no
    inside: drawn in its colour either way). The collection's gid names the implementation."""
    marker = impl_marker(impl)
    if is_library_impl(impl) and marker != UNKNOWN_IMPL_MARKER:
        return ax.scatter(xs, ys, marker=marker, s=size, facecolors="none", edgecolors=color, linewidths=1.4,
                          zorder=zorder, gid=f"impl:{impl_name(impl)}")
    if marker == UNKNOWN_IMPL_MARKER:  # lines only: drawn in the face colour
        return ax.scatter(xs, ys, marker=marker, s=size, color=color, linewidths=1.4, zorder=zorder,
                          gid=f"impl:{impl_name(impl)}")
    return ax.scatter(xs, ys, marker=marker, s=size, color=color, edgecolors=color if overlay else "black",
                      linewidths=0.4, alpha=0.85, zorder=zorder, gid=f"impl:{impl_name(impl)}")


def impl_handles(points: list) -> list:
    """Legend entries: one per implementation drawn, with its marker as drawn (filled or hollow)."""
    out = []
    for impl in dict.fromkeys(sorted((impl_name(p.key.impl) for p in points), key=_impl_order)):
        m = impl_marker(impl)
        lib = is_library_impl(impl)
        who = "our kernel" if not lib else ("a library" if m != UNKNOWN_IMPL_MARKER else "not a known implementation")
        out.append(Line2D([], [], ls="", marker=m, color="#555555", markeredgecolor="#555555",
                          markerfacecolor="none" if lib and m != UNKNOWN_IMPL_MARKER else "#555555",
                          label=f"{impl} ({who})"))
    return out


def _impl_order(impl: str) -> tuple:
    known = list(IMPL_MARKERS)
    return (known.index(impl) if impl in known else len(known), impl)


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


def roofline_figure(results: list, title: str | None = None, tags: list | None = None, moves: list | None = None):
    """One roofline for one file, or an overlay (colour by device) for several.

    tags: each file's name on its ceilings' labels in an overlay (default its label, A, B, ...; the
    cross-device chart names the devices). moves: arrows from one point to another, each
    {"from": (x, y), "to": (x, y), "name", "file", "text"} (the cross-device chart's points that changed
    bound: both ends ringed, one label "<file>: <text> (<count>)" where it first fits).
    Every ceiling line's gid says whose and which it is, "ceiling:<file label>:<source>:bandwidth",
    ":compute:<dtype>" or "ceiling:<file label>:cache:<level>", so what was drawn can be read back.
    """
    overlay = len(results) > 1
    file_labels = pr.file_labels(len(results))
    tags = list(tags) if tags is not None else file_labels
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

    # Ceilings (their labels are placed once the layout is final, below).
    ceiling_labels = []  # (text, (x, y) in data, offsets, colour)
    above_line = [(0, 2, "left", "bottom"), (0, -2, "left", "top")] + [(0, 2 + 9 * k, "left", "bottom")
                                                                        for k in range(1, 5)]
    at_right = [(0, 2, "right", "bottom"), (0, -2, "right", "top")] + [(0, sgn * (2 + 9 * k), "right", va)
                                                                       for k in range(1, 5)
                                                                       for sgn, va in ((1, "bottom"), (-1, "top"))]
    for fi, (r, (comp, bw)) in enumerate(zip(results, lines_per_file)):
        col = DEVICE_COLORS[fi % len(DEVICE_COLORS)] if overlay else "#333333"
        tag = f"{tags[fi]}: " if overlay else ""
        gid = f"ceiling:{file_labels[fi]}"
        for src, W, x_end in bw:
            x1 = min(x_end, hi_x) if x_end else hi_x
            ax.plot([lo_x, x1], [lo_x * W, x1 * W], SOURCE_STYLES.get(src, "-."), color=col, lw=1.6, alpha=0.9,
                    gid=f"{gid}:{src}:bandwidth")
            along = [lo_x * 1.6 * f for f in (1, 3, 9) if lo_x * 1.6 * f < x1] or [lo_x * 1.6]
            ceiling_labels.append((f"{tag}{src} {pr.fmt_si(W, 'B/s')}", [(x, x * W) for x in along], above_line, col))
        # Cache ceilings (a hot read within the L2 / last-level cache): the roof that
        # explains hot-cache points above the memory roof (ERT's hierarchical roofline).
        p_top = max((P for _, _, P, _ in comp), default=None)
        for c in r.cache_ceilings():
            Wc = float(c["bytes_per_s"])
            x1 = min(p_top / Wc, hi_x) if p_top else hi_x
            ax.plot([lo_x, x1], [lo_x * Wc, x1 * Wc], CACHE_STYLE, color=CACHE_COLOR if not overlay else col, lw=1.3,
                    alpha=0.9, gid=f"{gid}:cache:{c.get('level', 'cache')}")
            along = [lo_x * 1.6 * f for f in (1, 3, 9) if lo_x * 1.6 * f < x1] or [lo_x * 1.6]
            ceiling_labels.append((f"{tag}{c.get('level', 'cache')} (hot) {pr.fmt_si(Wc, 'B/s')}",
                                   [(x, x * Wc) for x in along], above_line, CACHE_COLOR if not overlay else col))
        for src, d, P, x_start in comp:
            x0 = max(x_start or lo_x, lo_x)
            ax.plot([x0, hi_x], [P, P], SOURCE_STYLES.get(src, "-."), color=col, lw=1.6, alpha=0.9,
                    gid=f"{gid}:{src}:compute:{d}")
            ceiling_labels.append((f"{tag}{d} {src} {pr.fmt_si(P, 'FLOP/s')}", [(hi_x / f, P) for f in (1.08, 4, 16)],
                                   at_right, col))

    # Points: marker by implementation (filled ours, hollow a library's), colour by operation (phase
    # and op) in one file's plot and by device in an overlay, where the labels name the operations.
    colors = op_colors([p for pts in flop_pts + zero_pts for p in pts])
    for fi, (r, pts) in enumerate(zip(results, flop_pts)):
        groups: dict = {}
        for p in pts:
            groups.setdefault((op_name(p), p.key.impl), []).append(p)
        for (op, impl), g in groups.items():
            col = DEVICE_COLORS[fi % len(DEVICE_COLORS)] if overlay else colors[op]
            scatter(ax, [p.intensity for p in g], [p.flops_per_s for p in g], impl, col, overlay)
        # Above its roofline: not a fast kernel but cached data or a low ceiling (the
        # point's above_roofline.likely_cause says which); ringed in red.
        above = [p for p in pts if p.above_roofline]
        if above:
            ax.scatter([p.intensity for p in above], [p.flops_per_s for p in above], marker="o", s=150,
                       facecolors="none", edgecolors="#d62728", linewidths=1.6, zorder=4)
    # A matched point that moved (another device's ceilings put it on the other side of its ridge): an
    # arrow from where it sits on one device to where it sits on the other, so the pair reads as one point.
    # Both ends are ringed too: a point whose ridge moved more than the point did has a short arrow.
    for mv in moves or []:
        arrow = ax.annotate("", xy=mv["to"], xytext=mv["from"], xycoords="data", textcoords="data", zorder=5,
                            arrowprops={"arrowstyle": "->", "color": MOVE_COLOR, "lw": 1.3, "shrinkA": 5,
                                        "shrinkB": 5}, gid=f"bound-change:{mv['name']}")
        arrow.arrow_patch.set_gid(f"bound-change:{mv['name']}")  # an empty text is not drawn: its gid is lost
        ax.scatter([mv["from"][0], mv["to"][0]], [mv["from"][1], mv["to"][1]], marker="o", s=190, facecolors="none",
                   edgecolors=MOVE_COLOR, linewidths=1.1, zorder=4, gid=f"bound-change-ends:{mv['name']}")

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
    names = file_names(results)
    if overlay:
        for fi, r in enumerate(results):
            handles.append(Line2D([], [], color=DEVICE_COLORS[fi % len(DEVICE_COLORS)], lw=2.5,
                                  label=f"{file_labels[fi]}: {names[fi]} ({r.device_name})"))
    else:
        for op, col in colors.items():
            handles.append(Line2D([], [], color=col, lw=4, label=op))
    handles += impl_handles(all_pts)
    if any(p.above_roofline for p in all_pts):
        handles.append(Line2D([], [], ls="", marker="o", markersize=9, markerfacecolor="none", markeredgecolor="#d62728",
                              label="above its roofline (cached data or a low ceiling: above_roofline in the JSON)"))
    if moves:
        handles.append(Line2D([], [], ls="", marker="o", markersize=10, markerfacecolor="none",
                              markeredgecolor=MOVE_COLOR, label=f"bound changed between devices ({len(moves)}): "
                                                                f"ringed, arrow from the first file's point"))
    srcs = sorted({s for comp, bw in lines_per_file for s, *_ in comp + bw}, key=pr.CEILING_SOURCES.index)
    for s in srcs:
        handles.append(Line2D([], [], ls=SOURCE_STYLES.get(s, "-."), color="#333333", label=f"{s} ceiling"))
    levels = sorted({c.get("level", "cache") for r in results for c in r.cache_ceilings()})
    if levels:
        handles.append(Line2D([], [], ls=CACHE_STYLE, color=CACHE_COLOR,
                              label=f"{'/'.join(levels)} read ceiling (hot data; measured)"))
    # Below the axes, where it covers no point.
    ax.legend(handles=handles, fontsize=7.5, loc="upper center", bbox_to_anchor=(0.5, -0.11), ncol=3,
              framealpha=0.85)

    if title is None:
        if overlay:
            title = "Roofline overlay: " + files_title(results)
        else:
            r = results[0]
            title = (f"Roofline: {names[0]} ({r.device_name}, {r.backend}), "
                     f"{len(flop_pts[0]) + len(zero_pts[0])} points")
    ax.set_title(title, fontsize=11)

    panel_labels = _bandwidth_panel(axb, results, zero_pts, overlay, colors, tags) if axb is not None else []
    fig.tight_layout()
    if axb is not None:
        placer_b = LabelPlacer(axb)
        placer_b.block_points(list(range(sum(len(z) for z in zero_pts))),
                              [p.bytes_per_s for pts in zero_pts for p in pts])
        for text, xy, offsets, col in panel_labels:
            placer_b.place(text, xy, offsets, color=col, fontsize=7)
    # Labels last, on the final layout: the ceilings' first, then the points' where they fit.
    placer = LabelPlacer(ax)
    placer.block_points([p.intensity for pts in flop_pts for p in pts], [p.flops_per_s for pts in flop_pts for p in pts])
    for text, xy, offsets, col in ceiling_labels:
        placer.place(text, xy, offsets, color=col, fontsize=7.5)
    # In an overlay the colour is the device and the marker the implementation: the labels name the
    # operations (each file's lowest and highest intensity per operation, where they fit).
    # One label per file and change ("B: memory -> compute (4)"), at its first point; first, so that it
    # wins a free place. The rings mark the others.
    said: dict = {}
    for mv in moves or []:
        said.setdefault((mv["file"], mv["text"]), []).append(mv)
    for (f, text), mvs in said.items():
        placer.place(f"{f}: {text}" + (f" ({len(mvs)})" if len(mvs) > 1 else ""),
                     [x for mv in mvs for x in (mv["to"], mv["from"])], POINT_OFFSETS, fontsize=7, color=MOVE_COLOR,
                     fontweight="bold")
    for fi, pts in enumerate(flop_pts):
        for i in sorted(_pick_labels(pts), key=lambda i: (pts[i].intensity, pts[i].flops_per_s)):
            p = pts[i]
            named = f"{p.op} {short_label(p)}" if p.key.target else short_label(p)  # else it starts with the op
            text = f"{file_labels[fi]}: {named}" if overlay else short_label(p)
            placer.place(text, (p.intensity, p.flops_per_s), POINT_OFFSETS, fontsize=7, color="#222222")
    return fig


def cross_device_figure(results: list, bound_changes: dict | None, title: str | None = None):
    """The files of different devices on one roofline: each device's own ceilings in its colour, labelled
    with the device's name, its points in the same colour (marked by implementation), and an arrow from
    the first file's point to the other file's for every matched point whose bound changed
    (crossdevice.bound_changes; the points sit where they were measured, so only the ceilings move)."""
    labels = pr.file_labels(len(results))
    moves = []
    for pair in (bound_changes or {}).get("pairs", []):
        for c in pair["changed"]:
            xs, ys = c["intensity"], c["flops_per_s"]
            if all(v and v > 0 for v in xs + ys):  # a 0-FLOP point has no place on the log-log axes
                moves.append({"from": (xs[0], ys[0]), "to": (xs[1], ys[1]), "name": c["name"],
                              "file": pair["file"], "text": c["change"]})
    if title is None:
        title = "Roofline across devices, each point against its own device's ceilings\n" + files_title(results)
    return roofline_figure(results, title=title, tags=crossdevice.device_tags(results, labels), moves=moves)


def _bandwidth_panel(ax, results: list, zero_pts: list, overlay: bool, colors: dict, tags: list) -> list:
    """0-FLOP operations: achieved B/s per point against the bandwidth ceilings.

    Returns the ceilings' labels (text, (x, y), offsets, colour), placed once the layout is final.
    """
    labels, x = [], 0
    ys = []
    for fi, (r, pts) in enumerate(zip(results, zero_pts)):
        for p in pts:
            col = DEVICE_COLORS[fi % len(DEVICE_COLORS)] if overlay else colors[op_name(p)]
            scatter(ax, [x], [p.bytes_per_s], p.key.impl, col, overlay, size=50)
            labels.append((f"{pr.file_labels(len(results))[fi]}: " if overlay else "") + short_label(p).replace(
                p.op, p.op.replace("kv_append", "kv_app")))
            ys.append(p.bytes_per_s)
            x += 1
    ws, texts = [], []
    offsets = [(0, 2, "left", "bottom"), (0, -2, "left", "top")] + [(0, sgn * (2 + 9 * k), "left", va)
                                                                    for k in range(1, 4)
                                                                    for sgn, va in ((1, "bottom"), (-1, "top"))]
    for fi, r in enumerate(results):
        col = DEVICE_COLORS[fi % len(DEVICE_COLORS)] if overlay else "#333333"
        tag = f"{tags[fi]}: " if overlay else ""
        for src in pr.CEILING_SOURCES:
            W = r.bandwidth_ceiling(src)
            if W:
                ws.append(W)
                ax.axhline(W, ls=SOURCE_STYLES.get(src, "-."), color=col, lw=1.4)
                texts.append((f"{tag}{src} {pr.fmt_si(W, 'B/s')}", (-0.45, W), offsets, col))
    ax.set_yscale("log")
    lo = min(ys + ws) / 3 if ys + ws else 1e6
    hi = max(ys + ws) * 3 if ys + ws else 1e12
    ax.set_ylim(lo, hi)
    ax.set_xlim(-0.6, max(x, 1) - 0.4)
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, rotation=60, ha="right", fontsize=7)
    ax.yaxis.set_major_formatter(EngFormatter(unit="B/s"))
    _minor_labels(ax, "B/s")
    ax.set_ylabel("achieved bandwidth (minimum bytes / median time)")
    ax.set_title("0-FLOP ops: bandwidth only", fontsize=10)
    ax.grid(True, axis="y", alpha=0.3)
    return texts


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


#: The crossings strip above the decode-linear plot: the predicted crossings' marker per ceiling source
#: (hollow; the measured crossing is a filled triangle, "> B" an arrow at the largest batch).
PREDICTED_MARKERS = {"measured": "o", "datasheet": "s", "theoretical": "D"}


def decode_linear_figure(results: list, title: str | None = None):
    """Achieved FLOP/s against batch for the decode linear layers; one panel per file and dtype.

    Each panel has a strip above it with one row per layer holding its crossings (measured: a filled
    triangle, predicted: a hollow marker per ceiling source), so crossings at the same batch never hide
    each other and no vertical line crosses the points; a point is filled where our kernel was the
    fastest at that batch, hollow where the vendor library was.
    """
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
    rows = max(len(series) for _, _, series in panels)
    fig, axes = plt.subplots(2, n, figsize=(max(9, 8 * n), 8.5 + 0.18 * rows), squeeze=False, sharex="col",
                             gridspec_kw={"height_ratios": [0.6 + 0.22 * rows, 6]})
    names = dict(zip((id(r) for r in results), file_names(results)))
    for col_i, (r, dtype, series) in enumerate(panels):
        strip, ax = axes[0][col_i], axes[1][col_i]
        all_b = sorted({b for x in series for b in x["batches"]})
        sources = []  # predicted-crossing sources drawn in this panel, for the legend
        for si, x in enumerate(series):
            col = SERIES_COLORS[si % len(SERIES_COLORS)]
            ys = [p.flops_per_s for p in x["points"]]
            ax.plot(x["batches"], ys, "-", color=col, lw=1.4, label=crossing_label(r, x), zorder=2)
            # The fastest implementation's marker at each batch (filled ours, hollow a library's).
            by_impl: dict = {}
            for b, y, p in zip(x["batches"], ys, x["points"]):
                by_impl.setdefault(p.key.impl, []).append((b, y))
            for impl, bys in by_impl.items():
                scatter(ax, [b for b, _ in bys], [y for _, y in bys], impl, col, True, size=26)
            c = r.crossing(x["model"], x["target"], dtype)
            row = len(series) - 1 - si  # the first layer on top
            if c is None:
                continue
            m = c["measured"]
            if m["batch"] is not None:
                strip.scatter([m["batch"]], [row], marker="v", s=48, color=col, zorder=3)
            elif m["text"].startswith(">") and all_b:
                strip.scatter([all_b[-1]], [row], marker=">", s=48, color=col, zorder=3)
            for k, (src, v) in enumerate(c["predicted"].items()):
                if v["batch"] is not None:
                    strip.scatter([v["batch"]], [row + 0.22 * (k - 1)], marker=PREDICTED_MARKERS.get(src, "P"), s=30,
                                  facecolors="none", edgecolors=col, linewidths=1.2, zorder=3)
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
            ax.plot(bs, att, color="#888888", lw=2.2, alpha=0.5, zorder=1,
                    label=f"attainable min(P, I(B)*W), {src} ceilings ({x0['target']})")
            ax.axhline(P, color="#888888", ls=SOURCE_STYLES.get(src, "-."), lw=1, zorder=1)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(all_b)
        ax.set_xticklabels([str(b) for b in all_b])
        ax.yaxis.set_major_formatter(EngFormatter(unit="FLOP/s"))
        ax.set_xlabel("batch (sequences; M = batch in decode)")
        ax.set_ylabel("achieved FLOP/s (fastest implementation per batch)")
        ax.grid(True, alpha=0.3)
        strip.set_ylim(-0.7, len(series) - 0.3)
        strip.set_yticks(range(len(series)))
        strip.set_yticklabels([x["target"] or x["model"] for x in reversed(series)], fontsize=7)
        strip.grid(True, axis="x", alpha=0.3)
        strip.tick_params(axis="x", labelbottom=False)
        strip.set_title(title or f"Decode linear layers, {dtype}: {names[id(r)]} ({r.device_name}, {r.backend})",
                        fontsize=10.5)
        if not r.crossings_recorded:
            strip.text(0.5, 0.5, f"ridge crossings {r.crossings_absent_text}", transform=strip.transAxes,
                       ha="center", va="center", fontsize=8, color="#aa0000")
        handles, _ = ax.get_legend_handles_labels()
        for h in impl_handles([p for x in series for p in x["points"]]):
            h.set_label(f"{h.get_label()} fastest")
            handles.append(h)
        if r.crossings_recorded:
            handles.append(Line2D([], [], ls="", marker="v", color="#333333",
                                  label="strip: measured crossing (> : beyond the largest batch)"))
            for src in sources:
                handles.append(Line2D([], [], ls="", marker=PREDICTED_MARKERS.get(src, "P"), markerfacecolor="none",
                                      markeredgecolor="#333333", label=f"strip: predicted crossing, {src} ceilings"))
        else:
            handles.append(Line2D([], [], ls="none", label=f"ridge crossings {r.crossings_absent_text}"))
        ax.legend(handles=handles, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.11), ncol=2,
                  framealpha=0.85)
        _minor_labels(ax, "FLOP/s")
    fig.tight_layout()
    return fig


# --------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------

def save(fig, base: str, formats: list) -> list:
    """The figure in each format, each file written by write-then-rename (cli.write_file)."""
    out = []
    for f in formats:
        path = f"{base}.{f}"
        buf = io.BytesIO()
        fig.savefig(buf, format=f, dpi=110 if f == "png" else None)
        cli.write_file(path, buf.getvalue(), "plot")
        out.append(path)
    plt.close(fig)
    return out


def main(argv: list | None = None) -> int:
    ap = cli.Parser(description="Roofline and decode-linear plots (PNG + SVG).",
                    epilog="exit status: 0 fine, 2 bad input (a file that cannot be read, or an output that must "
                           "not or cannot be written: one line on stderr)")
    ap.add_argument("files", nargs="+", metavar="FILE", help="results JSON written by `phasebench run`")
    ap.add_argument("--out-dir", default="plots", help="where the images go, created if missing (default: ./plots)")
    ap.add_argument("--formats", default="png,svg", help="comma-separated: png, svg, pdf (default png,svg)")
    ap.add_argument("--overlay-name", default="overlay", help="file name stem of the multi-device overlays")
    ap.add_argument("--no-overlay", action="store_true", help="with several files, skip the overlay plots")
    ap.add_argument("--overwrite", action="store_true",
                    help="let a plot replace an input or an existing results file of the same name")
    return cli.run(ap, lambda a: _main(ap, a), argv)


def _main(ap, a) -> int:
    formats = [f.strip() for f in a.formats.split(",") if f.strip()]
    bad_fmt = [f for f in formats if f not in ("png", "svg", "pdf")]
    if bad_fmt or not formats:
        ap.error(f"unsupported --formats {','.join(bad_fmt) or a.formats!r}; use png, svg, pdf")
    if not a.overlay_name or os.sep in a.overlay_name or a.overlay_name in (".", ".."):
        ap.error(f"--overlay-name takes a file name stem, not {a.overlay_name!r}")
    prog = ap.prog  # roofline.py from scripts/, phasebench-roofline as a console script
    results, errors = pr.load_many(a.files)
    for e in errors:
        print(f"{prog}: error: {e}", file=sys.stderr)
    if not results:
        return 2
    cli.check_output_dir(a.out_dir, "--out-dir")
    stems = _unique_stems(results)
    overlay = len(results) > 1 and not a.no_overlay
    # Every file this run writes, checked before the first is written.
    bases = [os.path.join(a.out_dir, f"{s}.{kind}") for s in stems + ([a.overlay_name] if overlay else [])
             for kind in ("roofline", "decode-linear")]
    for b in bases:
        for f in formats:
            cli.check_output(f"{b}.{f}", "--out-dir", a.files, a.overwrite)
    written = []
    for r, stem in zip(results, stems):
        for w in r.warnings:
            print(f"{prog}: warning: {w}", file=sys.stderr)
        if not r.crossings_recorded and decode_linear_series(r):
            print(f"{prog}: note: {r.path}: decode-linear ridge crossings {r.crossings_absent_text}; "
                  f"the plot shows the points without them", file=sys.stderr)
        written += save(roofline_figure([r]), os.path.join(a.out_dir, f"{stem}.roofline"), formats)
        written += save(decode_linear_figure([r]), os.path.join(a.out_dir, f"{stem}.decode-linear"), formats)
    if overlay:
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
