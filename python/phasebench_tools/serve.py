"""Serve files (`phasebench serve -o serve.json`): loader, Pareto chart and two-file comparison
(python/phasebench_tools/serve.py).

Run as `phasebench-pareto` or `.venv/bin/python scripts/pareto.py` (a thin wrapper):

    phasebench-pareto SERVE.json [MORE.json ...] -o CHART.png|.svg|.pdf [--overwrite] [--title TEXT]

The chart: x = output tokens/s per user, y = output tokens/s per GPU, one marker per sweep point
labelled with its concurrency ("c=8") or request rate ("2.0 req/s"), filled where the point meets
the file's SLO and hollow where it does not, and the file's Pareto frontier (its points marked
pareto) joined by a line; one colour per file. compare.py (two serve files: the side-by-side
table) and report.py (the serve page) call in here. The loader and the table need only the
standard library; matplotlib is imported when a chart is drawn.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import sys
from dataclasses import dataclass

from . import cli
from . import results as pr

KIND = "phasebench serve"
SCHEMA_VERSION = 1
CHART_FORMATS = ("png", "svg", "pdf")
SWEEPS = ("concurrency", "rate", "trace")

#: The figures of a point, each a number >= 0 or null (not defined: every request had one token, ...).
FIGURES = ("requests", "completed", "duration_s", "gpus", "request_rate", "output_tokens_per_s",
           "output_tokens_per_s_per_gpu", "output_tokens_per_s_per_user", "goodput_rps", "slo_attainment",
           "preemptions", "steps", "mean_batch")
LATENCIES = ("ttft_s", "tpot_s", "itl_s", "e2e_s")
STATS = ("mean", "p50", "p90", "p99")


# --------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------

@dataclass
class Serve:
    """One validated serve file: the document as written (unknown fields kept, never read) and its path."""

    path: str
    doc: dict

    @property
    def points(self) -> list:
        return self.doc["points"]

    @property
    def sweep(self) -> str:
        """What the points were swept over: concurrency, rate or trace."""
        return self.doc["workload"]["kind"]

    @property
    def mode(self) -> str:
        e = self.doc["engine"]
        if e["mode"] == "disaggregated":  # xPyD, as engines name it
            return f"disaggregated {e.get('prefill_replicas')}P{e.get('decode_replicas')}D"
        return e["mode"]

    def label(self, with_mode: bool = True) -> str:
        """Device key, dtype and TP (and the engine mode): how a series is named on a chart or in a table."""
        d = self.doc
        return f"{d['device']['key']} {d['dtype']} TP{d['tp']}" + (f" {self.mode}" if with_mode else "")


def is_serve_doc(doc) -> bool:
    return isinstance(doc, dict) and doc.get("kind") == KIND


def is_serve_file(path: str) -> bool | None:
    """Whether `path` holds a serve file; None when it cannot be read as JSON (the loader then says why)."""
    try:
        return is_serve_doc(json.loads(cli.read_bytes(path).decode("utf-8")))
    except (cli.FileError, ValueError):
        return None


def all_serve_files(files: list, advice: str) -> bool:
    """True when every file is a serve file, False when none is (an unreadable one counts as neither: its
    loader says why); serve files mixed with others: a ToolError ending in `advice`."""
    is_serve = [is_serve_file(f) for f in files]
    if not any(is_serve):
        return False
    if False in is_serve:
        raise cli.ToolError(f"serve files ({', '.join(f for f, s in zip(files, is_serve) if s)}) mixed with "
                            f"others ({', '.join(f for f, s in zip(files, is_serve) if s is False)}); {advice}")
    return True


def _shown(v) -> str:
    return json.dumps(v) if not isinstance(v, (dict, list)) else ("an object" if isinstance(v, dict) else "a list")


class _Checker:
    """Field checks that name the file and the field (points[2].ttft_s.p99) in their one line."""

    def __init__(self, path: str):
        self.path = path

    def fail(self, field: str, what: str):
        raise cli.FileError(self.path, f"{field} {what}")

    def obj(self, parent: dict, key: str, where: str = "") -> dict:
        v = parent.get(key)
        if not isinstance(v, dict):
            self.fail(where + key, "is missing" if v is None else f"is {_shown(v)}, not an object")
        return v

    def text(self, parent: dict, key: str, where: str = "", choices: tuple = ()) -> str:
        v = parent.get(key)
        if not isinstance(v, str) or not v or (choices and v not in choices):
            want = " or ".join(f'"{c}"' for c in choices) if choices else "a non-empty string"
            self.fail(where + key, "is missing" if v is None else f"is {_shown(v)}, not {want}")
        return v

    def number(self, parent: dict, key: str, where: str = "", required: bool = False) -> float | None:
        """A finite number >= 0 (null allowed unless `required`; a missing field reads as null)."""
        v = parent.get(key)
        if v is None and not required:
            return None
        if pr._num(v) is None or v < 0:
            self.fail(where + key, "is missing" if v is None else f"is {_shown(v)}, not a number >= 0")
        return v

    def whole(self, parent: dict, key: str, where: str = "") -> int:
        """A whole number >= 1 (a count of GPUs or replicas)."""
        v = parent.get(key)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            self.fail(where + key, "is missing" if v is None else f"is {_shown(v)}, not a whole number >= 1")
        return v

    def flag(self, parent: dict, key: str, where: str = "") -> None:
        v = parent.get(key)
        if v is not None and not isinstance(v, bool):
            self.fail(where + key, f"is {_shown(v)}, not true, false or null")


def parse(doc, path: str) -> Serve:
    """The serve document `doc` read from `path`, checked field by field; FileError naming the field."""
    c = _Checker(path)
    if not is_serve_doc(doc):
        kind = doc.get("kind") if isinstance(doc, dict) else None
        raise cli.FileError(path, f"not a serve file (its \"kind\" is {_shown(kind)}, not \"{KIND}\"); serve files "
                                  f"are written by `phasebench serve -o FILE`")
    version = doc.get("schema_version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        c.fail("schema_version", "is missing" if version is None else f"is {_shown(version)}, not a version number")
    if version > SCHEMA_VERSION:
        raise cli.FileError(path, f"serve schema_version {version} is newer than this tool reads ({SCHEMA_VERSION}); "
                                  f"update phasebench_tools")
    c.text(doc, "model")
    dev = c.obj(doc, "device")
    c.text(dev, "key", "device.")
    c.text(dev, "name", "device.")
    c.text(doc, "dtype")
    c.whole(doc, "tp")
    engine = c.obj(doc, "engine")
    if c.text(engine, "mode", "engine.", ("colocated", "disaggregated")) == "disaggregated":
        for k in ("prefill_replicas", "decode_replicas"):  # xPyD names the series
            c.whole(engine, k, "engine.")
    sweep = c.text(c.obj(doc, "workload"), "kind", "workload.", SWEEPS)
    slo = c.obj(doc, "slo")
    for k in ("ttft_s", "tpot_s", "attainment"):
        c.number(slo, k, "slo.")
    steps = c.obj(doc, "step_times")
    c.text(steps, "source", "step_times.", ("analytical", "measured"))
    ops = steps.get("ops", [])
    if not isinstance(ops, list):
        c.fail("step_times.ops", f"is {_shown(ops)}, not a list")
    for i, op in enumerate(ops):
        where = f"step_times.ops[{i}]."
        if not isinstance(op, dict):
            c.fail(where[:-1], f"is {_shown(op)}, not an object")
        c.text(op, "op", where)
        c.number(op, "measured_share", where)
        c.number(op, "time_share", where)
    points = doc.get("points")
    if not isinstance(points, list) or not points:
        c.fail("points", "is missing" if points is None else
               "is empty (no sweep point)" if points == [] else f"is {_shown(points)}, not a list")
    for i, p in enumerate(points):
        where = f"points[{i}]."
        if not isinstance(p, dict):
            c.fail(where[:-1], f"is {_shown(p)}, not an object")
        if sweep != "trace":  # the value the points were swept over, and matched on by compare
            c.number(p, sweep, where, required=True)
        for k in FIGURES:
            c.number(p, k, where)
        for k in LATENCIES:
            if p.get(k) is not None:
                for s in STATS:
                    c.number(c.obj(p, k, where), s, f"{where}{k}.")
        for k in ("meets_slo", "pareto"):
            c.flag(p, k, where)
    return Serve(path=path, doc=doc)


def load(path: str) -> Serve:
    """Read and check one serve file; FileError (one line: the file, then the field and why) when unusable."""
    try:
        text = cli.read_bytes(path).decode("utf-8")
    except UnicodeDecodeError:
        raise cli.FileError(path, "not JSON: the file is binary (not UTF-8 text)") from None
    return parse(pr._check_json_text(path, text), path)  # the results loader's strict-JSON checks and messages


# --------------------------------------------------------------------------------------
# Reading a point
# --------------------------------------------------------------------------------------

def latency(p: dict, name: str, stat: str) -> float | None:
    return (p.get(name) or {}).get(stat)


def rate_text(rate: float) -> str:
    s = f"{rate:.3g}"
    return s if "." in s or "e" in s else s + ".0"  # 2 -> "2.0": a rate, not a count


def sweep_value(s: Serve, i: int):
    """The value point i was swept at (its concurrency or rate; its position in a trace)."""
    return i if s.sweep == "trace" else s.points[i][s.sweep]


def point_tag(s: Serve, i: int) -> str:
    """How a point is labelled: "c=8", "2.0 req/s", or "#1" in a trace."""
    v = sweep_value(s, i)
    return {"concurrency": lambda: f"c={v:g}", "rate": lambda: f"{rate_text(v)} req/s",
            "trace": lambda: f"#{v + 1}"}[s.sweep]()


def slo_text(slo: dict) -> str:
    """A file's SLOs in words ("SLO: TTFT <= 1 s, TPOT <= 50 ms for 90% of requests")."""
    from .compare import fmt_time

    parts = [f"{name} <= {fmt_time(slo[key])}" for name, key in (("TTFT", "ttft_s"), ("TPOT", "tpot_s"))
             if slo.get(key) is not None]
    if not parts:
        return "none"
    att = slo.get("attainment")
    return ", ".join(parts) + ("" if att is None else f" for {att * 100:g}% of requests")


# --------------------------------------------------------------------------------------
# The Pareto chart
# --------------------------------------------------------------------------------------

def _plt():
    try:
        from . import roofline  # sets matplotlib's Agg backend, as every chart of the package uses
    except ImportError as e:
        raise cli.ToolError(f"the Pareto chart needs matplotlib ({e}); install scripts/requirements.txt") from None
    return roofline.plt


def _common(files: list, field) -> set:
    return {field(s) for s in files}


def series_labels(files: list) -> list:
    """Each file's series name (Serve.label; the mode only where the files' modes differ), with the file's
    name added where two files would otherwise share one (two runs of one device)."""
    with_mode = len(_common(files, lambda s: s.mode)) > 1
    labels = [s.label(with_mode or len(files) == 1) for s in files]
    return [f"{lab} ({os.path.basename(s.path)})" if labels.count(lab) > 1 else lab for lab, s in zip(labels, files)]


def chart_title(files: list) -> str:
    models = _common(files, lambda s: s.doc["model"])
    if len(files) == 1:
        s = files[0]
        d = s.doc
        return f"{d['model']} on {d['device']['name']}: {d['dtype']}, TP{d['tp']}, {s.mode}"
    modes = _common(files, lambda s: s.mode)
    return (f"{', '.join(sorted(models))}: " + " vs ".join(series_labels(files))
            + (f" ({modes.pop()})" if len(modes) == 1 else ""))


def _log_tick(v: float, _pos) -> str:
    """Plain numbers at 1, 2 and 5 of each decade of a log axis (not 6x10^3, and not every minor tick)."""
    if v <= 0:
        return ""
    lead = round(v / 10 ** math.floor(math.log10(v) + 1e-9))
    return f"{v:g}" if lead in (1, 2, 5) else ""


def pareto_figure(files: list, title: str | None = None):
    """The files' points on one chart (see the module docstring); one colour and legend entry per file."""
    plt = _plt()
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FuncFormatter

    fig, ax = plt.subplots(figsize=(10, 6.5))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    labels = series_labels(files)
    handles, xs_all, ys_all, left_out = [], [], [], 0
    for n, s in enumerate(files):
        color = colors[n % len(colors)]
        drawn = []
        for i, p in enumerate(s.points):
            x, y = p.get("output_tokens_per_s_per_user"), p.get("output_tokens_per_s_per_gpu")
            if x is None or y is None:  # not defined for this point: nothing to place
                left_out += 1
                continue
            drawn.append((x, y, p))
            ax.scatter([x], [y], s=55, zorder=3, edgecolors=color, linewidths=1.6,
                       facecolors=color if p.get("meets_slo") else "none")
            ax.annotate(point_tag(s, i), (x, y), xytext=(5, 5), textcoords="offset points", fontsize=8, color=color)
        front = sorted((x, y) for x, y, p in drawn if p.get("pareto"))
        if front:
            ax.plot([f[0] for f in front], [f[1] for f in front], color=color, linewidth=1.4, zorder=2)
        xs_all += [d[0] for d in drawn]
        ys_all += [d[1] for d in drawn]
        handles.append(Line2D([], [], color=color, marker="o", label=f"{labels[n]}: Pareto frontier"))
    handles += [Line2D([], [], linestyle="", marker="o", color="0.3", label="meets its SLO (filled)"),
                Line2D([], [], linestyle="", marker="o", color="0.3", markerfacecolor="none",
                       label="misses its SLO (hollow)")]
    # The SLOs each file judged by: one note when they agree, else one per file.
    slos = [slo_text(s.doc["slo"]) for s in files]
    notes = [f"SLO: {slos[0]}"] if len(set(slos)) == 1 else [f"SLO of {lab}: {t}" for lab, t in zip(labels, slos)]
    handles += [Line2D([], [], linestyle="", label=t) for t in notes]
    if left_out:
        handles.append(Line2D([], [], linestyle="", label=f"{left_out} point(s) without both figures left out"))
    for set_scale, axis, vals in ((ax.set_xscale, ax.xaxis, xs_all), (ax.set_yscale, ax.yaxis, ys_all)):
        pos = [v for v in vals if v > 0]
        if pos and max(pos) / min(pos) > 20:  # a sweep from c=1 to c=256 spans decades
            set_scale("log")
            axis.set_major_formatter(FuncFormatter(_log_tick))
            axis.set_minor_formatter(FuncFormatter(_log_tick))
    ax.set_xlabel("output tokens/s per user")
    ax.set_ylabel("output tokens/s per GPU")
    ax.set_title(title or chart_title(files), fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8, frameon=False)
    fig.tight_layout()
    return fig


def chart_bytes(files: list, path: str, title: str | None = None) -> bytes:
    """pareto_figure's chart in the format `path` ends in (png, svg, pdf)."""
    fig = pareto_figure(files, title)
    fmt = os.path.splitext(path)[1].lower().lstrip(".")
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, dpi=110 if fmt == "png" else None)
    _plt().close(fig)
    return buf.getvalue()


def check_chart_path(ap: argparse.ArgumentParser, given: str, flag: str, inputs: list, overwrite: bool) -> str:
    """The checked output path of a chart (cli.check_output), which must end in .png, .svg or .pdf."""
    real = cli.check_output(given, flag, inputs, overwrite)  # an input first: say that
    if os.path.splitext(given)[1].lower().lstrip(".") not in CHART_FORMATS:
        ap.error(f"{flag} {given!r}: give a path ending in .png, .svg or .pdf (the chart's format)")
    return real


# --------------------------------------------------------------------------------------
# Two serve files side by side (phasebench-compare A.json B.json)
# --------------------------------------------------------------------------------------

def _cells(p: dict | None) -> dict | None:
    if p is None:
        return None
    return {"output_tokens_per_s_per_gpu": p.get("output_tokens_per_s_per_gpu"),
            "output_tokens_per_s_per_user": p.get("output_tokens_per_s_per_user"),
            "ttft_p50_s": latency(p, "ttft_s", "p50"), "ttft_p99_s": latency(p, "ttft_s", "p99"),
            "tpot_p50_s": latency(p, "tpot_s", "p50"), "tpot_p99_s": latency(p, "tpot_s", "p99"),
            "goodput_rps": p.get("goodput_rps"), "meets_slo": p.get("meets_slo")}


def _ratio(a: dict | None, b: dict | None, key: str) -> float | None:
    x, y = (a or {}).get(key), (b or {}).get(key)
    return y / x if x and y is not None else None


def build_comparison(a: Serve, b: Serve) -> dict:
    """A's and B's points matched on the sweep value; B / A ratios of tokens/s per GPU and per user.
    ToolError when the files were swept over different things (nothing to match)."""
    if a.sweep != b.sweep:
        raise cli.ToolError(f"{a.path} sweeps {a.sweep} and {b.path} {b.sweep}; compare serve files swept over "
                            f"the same thing")
    by_value = [{sweep_value(s, i): p for i, p in enumerate(s.points)} for s in (a, b)]
    values = sorted(set(by_value[0]) | set(by_value[1]))
    rows = []
    for v in values:
        pa, pb = _cells(by_value[0].get(v)), _cells(by_value[1].get(v))
        rows.append({a.sweep: v, "in": "both" if pa and pb else ("A only" if pa else "B only"), "A": pa, "B": pb,
                     "B_over_A": {k: _ratio(pa, pb, k) for k in ("output_tokens_per_s_per_gpu",
                                                                 "output_tokens_per_s_per_user")}})
    files = [{"label": lab, "path": s.path, "model": s.doc["model"], "device": s.doc["device"]["name"],
              "device_key": s.doc["device"]["key"], "dtype": s.doc["dtype"], "tp": s.doc["tp"], "mode": s.mode,
              "slo": s.doc["slo"], "series": s.label()} for lab, s in (("A", a), ("B", b))]
    return {"kind": "phasebench serve comparison", "sweep": a.sweep, "files": files, "points": rows}


def yes_no(v) -> str:
    return "-" if v is None else ("yes" if v else "NO")


def comparison_rows(cmp: dict) -> tuple[list, list]:
    """The side-by-side table: per sweep value, each figure for A then B, then the B/A ratios."""
    from .compare import fmt_num, fmt_time

    sweep = cmp["sweep"]
    cols = [("tok/s/GPU", "output_tokens_per_s_per_gpu", fmt_num),
            ("tok/s/user", "output_tokens_per_s_per_user", fmt_num),
            ("TTFT p50", "ttft_p50_s", fmt_time), ("TTFT p99", "ttft_p99_s", fmt_time),
            ("TPOT p50", "tpot_p50_s", fmt_time), ("TPOT p99", "tpot_p99_s", fmt_time),
            ("goodput req/s", "goodput_rps", fmt_num), ("meets SLO", "meets_slo", yes_no)]
    header = [{"concurrency": "concurrency", "rate": "rate req/s", "trace": "point"}[sweep], "in"]
    header += [f"{name} {lab}" for name, _, _ in cols for lab in ("A", "B")]
    header += ["tok/s/GPU B/A", "tok/s/user B/A"]
    rows = []
    for r in cmp["points"]:
        v = r[sweep]
        row = [f"{v:g}" if sweep == "concurrency" else rate_text(v) if sweep == "rate" else f"#{v + 1}", r["in"]]
        for _, key, fmt in cols:
            row += ["-" if r[lab] is None else fmt(r[lab][key]) for lab in ("A", "B")]
        row += ["-" if x is None else f"{x:.3f}x" for x in r["B_over_A"].values()]
        rows.append(row)
    return header, rows


def render_comparison(cmp: dict, fmt: str) -> str:
    """The comparison as compare --format writes it: table, markdown, csv or json."""
    from .compare import render_markdown_table, render_text_table

    if fmt == "json":
        return json.dumps(cmp, indent=2, allow_nan=False) + "\n"
    header, rows = comparison_rows(cmp)
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(header)
        w.writerows(rows)
        return buf.getvalue()
    markdown = fmt == "markdown"
    files = [[f["label"], f["path"], f["model"], f["device"], f["dtype"], str(f["tp"]), f["mode"]]
             for f in cmp["files"]]
    table = render_markdown_table if markdown else render_text_table
    head = (lambda s: f"## {s}") if markdown else (lambda s: f"{s}\n{'=' * len(s)}")
    slos = [slo_text(f["slo"]) for f in cmp["files"]]
    slos = (f"SLO of both: {slos[0]}" if slos[0] == slos[1] else
            "SLO " + "; ".join(f"of {f['label']}: {t}" for f, t in zip(cmp["files"], slos)))
    return "\n".join([head("Serve files"), table(["file", "path", "model", "device", "dtype", "tp", "mode"], files), "",
                      head(f"Points matched on {cmp['sweep']} (B/A: B's figure over A's)"), table(header, rows), "",
                      slos]) + "\n"


# Options of phasebench-compare that judge results files' timings; with serve files they are refused.
RESULTS_ONLY_OPTIONS = {"fail_on_regression": "--fail-on-regression", "alpha": "--alpha",
                        "same_within": "--same-within", "significance": "--significance",
                        "verdicts_on": "--verdicts-on", "filter": "--filter", "impl": "--impl", "against": "--against"}


def compare_main(ap: argparse.ArgumentParser, a: argparse.Namespace) -> int:
    """phasebench-compare on serve files: the side-by-side table, and with --roofline the Pareto chart of both."""
    given = [flag for dest, flag in RESULTS_ONLY_OPTIONS.items() if getattr(a, dest) != ap.get_default(dest)]
    if given:
        one = len(given) == 1
        raise cli.ToolError(f"{', '.join(given)} appl{'ies' if one else 'y'} to results files (their timings), not "
                            f"to serve files; leave {'it' if one else 'them'} out")
    if len(a.files) != 2:
        raise cli.ToolError(f"serve files are compared two at a time (A, then B); got {len(a.files)}")
    files = [load(f) for f in a.files]
    cmp = build_comparison(*files)
    chart = chart_bytes(files, a.roofline) if a.roofline else None  # before any output, as compare does
    text = render_comparison(cmp, a.format)
    if a.output:
        cli.write_file(a.output, text)
    else:
        sys.stdout.write(text)
    if chart is not None:
        cli.write_file(a.roofline, chart, "Pareto chart")
    return 0


# --------------------------------------------------------------------------------------
# CLI: phasebench-pareto
# --------------------------------------------------------------------------------------

def main(argv: list | None = None) -> int:
    ap = cli.Parser(description="Pareto chart of `phasebench serve` files: output tokens/s per GPU against per user, "
                                "one series per file.",
                    epilog="exit status: 0 fine, 2 bad input (one line on stderr)")
    ap.add_argument("files", nargs="+", metavar="SERVE.json", help="serve JSON written by `phasebench serve -o`")
    ap.add_argument("-o", "--output", metavar="CHART",
                    help="the chart to write (.png, .svg or .pdf); never over an input or a results or serve file "
                         "unless --overwrite")
    ap.add_argument("--overwrite", action="store_true", help="let --output replace an input or a results file")
    ap.add_argument("--title", help="chart title (default: model, device, dtype, TP and engine mode)")
    return cli.run(ap, lambda a: _main(ap, a), argv)  # pareto.py from scripts/, or phasebench-pareto


def _main(ap: argparse.ArgumentParser, a: argparse.Namespace) -> int:
    if a.output is None:  # no default name: a default could land on a chart someone keeps
        ap.error("give the chart to write with -o CHART.png (or .svg, .pdf)")
    out = check_chart_path(ap, a.output, "--output", a.files, a.overwrite)
    files = [load(f) for f in a.files]
    cli.write_file(out, chart_bytes(files, out, a.title), "Pareto chart")
    print(a.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
