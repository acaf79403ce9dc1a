"""One self-contained HTML page for a results file, or for a comparison of several
(python/phasebench_tools/report.py).

Run as `phasebench-report` or `.venv/bin/python scripts/report.py` (a thin wrapper):

    phasebench-report a.json [b.json ...] [-o report.html]

The page holds the device, the ceilings with their sources, the roofline and decode-linear
plots (embedded as base64 PNG: no external file, script or font), the ridge crossings the run
recorded (schema 2; a schema 1 file says they are not recorded) and every point; with several files also the comparison against the first (compare.py's tables) and the
overlay plots. Unreadable files are listed on the page and make the exit status 2; the other
files are still reported.

Given serve files (`phasebench serve -o`; only serve files: mixed with results files is one line
and status 2), the page holds each run's settings (model, device, dtype, TP, engine, workload,
SLOs, where the step times came from with each operation's measured share), the Pareto chart of
all of them (serve.py), two files side by side as phasebench-compare sets them, and every point.
"""

from __future__ import annotations

import base64
import datetime as _dt
import html
import io
import os
import sys

from . import cli, compare, crossdevice, roofline, serve
from . import results as pr

CSS = """
body { font-family: -apple-system, 'Segoe UI', 'DejaVu Sans', Arial, sans-serif; margin: 24px auto; max-width: 1500px;
       color: #1b1b1b; background: #ffffff; padding: 0 16px; }
h1 { font-size: 1.6em; border-bottom: 3px solid #d62728; padding-bottom: 6px; }
h2 { font-size: 1.3em; margin-top: 1.8em; border-bottom: 1px solid #ccc; }
h3 { font-size: 1.1em; margin-top: 1.4em; }
table { border-collapse: collapse; margin: 8px 0 16px; font-size: 0.85em; }
th, td { border: 1px solid #d0d0d0; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f0f0f3; }
tr:nth-child(even) td { background: #fafafa; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.err { color: #a00000; background: #fff0f0; border-left: 4px solid #a00000; padding: 6px 10px; margin: 6px 0; }
.warn { color: #7a5200; background: #fff8e6; border-left: 4px solid #e0a000; padding: 6px 10px; margin: 6px 0; }
.reg { color: #a00000; font-weight: bold; }
.good { color: #006400; }
img.plot { max-width: 100%; border: 1px solid #ddd; margin: 6px 0; }
code { background: #f3f3f3; padding: 1px 4px; }
.small { font-size: 0.85em; color: #555; }
"""


def esc(v) -> str:
    return html.escape("" if v is None else str(v))


def table(header: list, rows: list, numeric: set | None = None) -> str:
    numeric = numeric or set()
    out = ["<table><thead><tr>" + "".join(f"<th>{esc(h)}</th>" for h in header) + "</tr></thead><tbody>"]
    for r in rows:
        cells = []
        for i, c in enumerate(r):
            cls = ' class="num"' if i in numeric else ""
            cells.append(f"<td{cls}>{c if isinstance(c, Raw) else esc(c)}</td>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</tbody></table>")
    return "\n".join(out)


class Raw(str):
    """Already-escaped HTML for a table cell."""


def fig_img(fig, alt: str) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    roofline.plt.close(fig)
    data = base64.b64encode(buf.getvalue()).decode("ascii")
    return f'<img class="plot" alt="{esc(alt)}" src="data:image/png;base64,{data}">'


def device_section(r: pr.Results) -> str:
    d = r.device
    rows = [["name", d.get("name")], ["backend", r.backend], ["slug", d.get("slug")]]
    if d.get("memory_bytes"):
        rows.append(["memory", f"{d['memory_bytes'] / 2**30:.1f} GiB"])
    if d.get("cache_bytes"):
        rows.append(["cache (L2 / LLC)", f"{d['cache_bytes'] / 2**20:.1f} MiB"])
    spec = d.get("spec")
    rows.append(["spec table entry", spec.get("name") if isinstance(spec, dict) else "none (no datasheet ceilings)"])
    for k, v in d.items():
        if k in ("name", "slug", "backend", "memory_bytes", "cache_bytes", "spec"):
            continue
        rows.append([k, v if not isinstance(v, (dict, list)) else ", ".join(f"{a}={b}" for a, b in v.items())
                     if isinstance(v, dict) else ", ".join(map(str, v))])
    rows += [["run date", r.date], ["complete", "yes" if r.complete else "NO (interrupted)"],
             ["cache mode", r.pb.get("cache")], ["percentages use", f"{r.ceiling_used} ceilings"],
             ["command", Raw(f"<code>{esc(r.pb.get('command_line', ''))}</code>")]]
    return "<h3>Device</h3>" + table(["field", "value"], rows)


def ceilings_section(r: pr.Results) -> str:
    """The device's ceilings that apply to this run: compute ceilings of the dtypes its points use."""
    rows = []
    used = {p.dtype for p in r.points}
    compute = r.compute_ceilings()
    unused = sorted(dt for dt in compute if used and dt not in used)
    for dt, lst in sorted(compute.items()):
        if dt in unused:
            continue
        for c in lst:
            rows.append(["compute", dt, pr.fmt_si(c["flops_per_s"], "FLOP/s"), c.get("source"), c.get("method", "")])
    for c in r.bandwidth_ceilings():
        rows.append(["bandwidth", "", pr.fmt_si(c["bytes_per_s"], "B/s"), c.get("source"), c.get("method", "")])
    if not rows:
        return "<h3>Ceilings</h3><p>No ceilings in this file (it was run with <code>--no-calibrate</code> on a " \
               "device without a spec-table entry), so no fractions of roofline.</p>"
    note = (f"<p>Compute ceilings of types no point of this run uses are left out: {', '.join(unused)}.</p>"
            if unused else "")
    return "<h3>Ceilings</h3>" + table(["kind", "dtype", "value", "source", "method"], rows, {2}) + note


def crossings_section(r: pr.Results) -> str:
    """The ridge crossings of the decode linear layers, as `phasebench run` recorded them."""
    head = "<h3>Decode linear layers: where they cross the ridge</h3>"
    rows = r.decode_linear_crossings
    if rows is None:
        return head + f"<p>Ridge crossings: {esc(r.crossings_absent_text)}.</p>"
    if not rows:
        return head + "<p>Ridge crossings: none recorded in this file.</p>"
    srcs = [s for s in pr.CEILING_SOURCES if any(s in x["predicted"] for x in rows)]
    header = ["layer", "dtype", "batches", "measured crossing"] + [f"predicted ({s} ceilings)" for s in srcs] + \
        ["ceilings in use", "best FLOP/s", "best B/s"]
    body = []
    for x in rows:
        m = x["measured"]
        body.append([x.get("layer") or f"{x['model']}.{x['target']}", x["dtype"], ", ".join(map(pr.fmt_arg, x["batches"])),
                     m["text"]] + [_predicted_cell(x["predicted"].get(s)) for s in srcs] +
                    [x.get("ceiling_used") or "-", pr.fmt_si(m["peak_flops_per_s"], "FLOP/s"),
                     pr.fmt_si(m["bandwidth_bytes_per_s"], "B/s")])
    return (head + "<p class='small'>As recorded by <code>phasebench run</code>. Predicted: the smallest batch whose "
            "intensity 2MNK / (wNK + aMK + aMN) reaches the ridge P/W. Measured: the batch where the layer's own "
            "achieved roofline bends (intensity = best achieved FLOP/s / best achieved B/s).</p>" + table(header, body))


def _predicted_cell(v: dict | None) -> str:
    if v is None:
        return "-"
    ridge = v["ridge_flop_per_byte"]
    return roofline.batch_text(v["batch"]) + ("" if ridge is None else f" (ridge {ridge:.4g} FLOP/B)")


def points_section(r: pr.Results) -> str:
    rows = []
    for p in r.points:
        t = p.time or {}
        if p.ok:
            rows.append([p.name, "ok", compare.fmt_time(p.median_s), compare.fmt_num(p.tflops), compare.fmt_num(p.gbps),
                         compare.fmt_num(p.intensity), compare.fmt_pct(p.fraction), p.bound or "-",
                         compare.fmt_pct(t.get("cv")), t.get("samples", "-"),
                         f"above its roofline: {p.above_roofline.get('likely_cause', '')}" if p.above_roofline else ""])
        else:
            rows.append([p.name, p.status] + ["-"] * 8 + [p.message])
    return f"<h3>Points ({len(r.points)})</h3>" + table(
        ["point", "status", "median time", "TFLOP/s", "GB/s", "FLOP/B", "% roofline", "bound", "cv", "samples",
         "message"], rows, {2, 3, 4, 5, 6, 8, 9})


def file_section(r: pr.Results, label: str | None = None) -> str:
    head = f"{label}: " if label else ""
    out = [f"<h2>{esc(head)}{esc(r.device_name)} <span class='small'>({esc(os.path.basename(r.path))})</span></h2>"]
    for w in r.warnings:
        out.append(f"<div class='warn'>{esc(w)}</div>")
    out.append(device_section(r))
    out.append(ceilings_section(r))
    out.append("<h3>Roofline</h3>")
    out.append("<p class='small'>Log-log; ceilings: measured solid, datasheet dashed, theoretical dotted. Points at "
               "(intensity, achieved FLOP/s from the median time), coloured by operation, marked by implementation ("
               + esc(roofline.impl_legend_text()) + "; filled: our kernel, hollow: a library). 0-FLOP "
               "operations (KV append) sit in the bandwidth-only panel on the right.</p>")
    out.append(fig_img(roofline.roofline_figure([r]), f"roofline of {r.path}"))
    if roofline.decode_linear_series(r):
        out.append("<h3>Decode linear layers against batch</h3>")
        out.append(fig_img(roofline.decode_linear_figure([r]), f"decode linear layers of {r.path}"))
        out.append(crossings_section(r))
    out.append(points_section(r))
    return "\n".join(out)


def comparison_section(cmp: dict, results: list) -> str:
    out = ["<h2>Comparison against " + esc(cmp["reference"]) + "</h2>"]
    out.append(table(["file", "path", "device", "backend", "date", "cache"],
                     [[f["label"], f["path"], f["device"], f["backend"], f["date"], f["cache"]] for f in cmp["files"]]))
    out.append("<h3>Machines (measured ceilings; load average and CPU shares around each run)</h3>")
    out.append(table(*compare.machine_rows(cmp)))
    for w in cmp["warnings"]:
        out.append(f"<div class='warn'>{esc(w)}</div>")
    out.append("<h3>Per-phase summary (geometric means, verdict counts)</h3>")
    out.append(table(*compare.summary_rows(cmp), numeric={3, 4, 5, 6, 7, 8, 9, 10, 11}))
    out.append("".join(f"<p>{esc(line)}.</p>" for line in compare.counts_text(cmp).splitlines()))
    if cmp["bound_changes"]:
        out.append(bound_changes_section(cmp["bound_changes"]))
        out.append("<h3>Roofline across devices</h3>")
        out.append("<p class='small'>Each file's points against its own device's ceilings, in the device's colour "
                   "(ceilings: measured solid, datasheet dashed, theoretical dotted, each labelled with its device); "
                   "marked by implementation (" + esc(roofline.impl_legend_text()) + "; filled: our kernel, hollow: "
                   "a library). A point whose bound changed between the devices is ringed on both, with an arrow "
                   "from the first file's point to the other's.</p>")
        out.append(fig_img(roofline.cross_device_figure(results, cmp["bound_changes"]), "roofline across devices"))
    else:
        out.append("<h3>Roofline overlay</h3>")
        out.append("<p class='small'>Coloured by file, marked by implementation (" + esc(roofline.impl_legend_text())
                   + "; filled: our kernel, hollow: a library); the labels name the operations.</p>")
        out.append(fig_img(roofline.roofline_figure(results), "roofline overlay"))
    if any(roofline.decode_linear_series(r) for r in results):
        out.append("<h3>Decode linear layers, all files</h3>")
        out.append(fig_img(roofline.decode_linear_figure(results), "decode linear overlay"))
    header, rows = compare.point_rows(cmp)
    out.append(f"<h3>Points ({len(cmp['points'])})</h3>")
    out.append(table(header, rows, numeric={3, 4, 5, 6, 7, 8, 10}))
    if cmp["only_in_some"]:
        out.append(f"<h3>Points not in every file ({len(cmp['only_in_some'])})</h3>")
        out.append(table(["point", "in", "missing from"],
                         [[o["name"], ", ".join(o["present_in"]), ", ".join(o["missing_from"])]
                          for o in cmp["only_in_some"]]))
    if cmp["status_changes"]:
        out.append("<h3>Status changes</h3>")
        out.append(table(["point", "file", "reference", "now", "message"],
                         [[s["name"], s["file"], s["from"], s["to"], s.get("message", "")]
                          for s in cmp["status_changes"]]))
    return "\n".join(out)


def bound_changes_section(bc: dict) -> str:
    """Per file from another device than the first: the matched points whose bound changed (crossdevice.py)."""
    out = ["<h3>Bound changes between devices</h3>",
           "<p class='small'>Each matched point against its own device's ceilings: the bound it records (against "
           "the ceilings its run used), else its intensity against that device's ridge for its dtype. Ridges in "
           "FLOP/byte with the ceilings they come from; time: this file's median over the first file's.</p>"]
    for pair in bc["pairs"]:
        out.append(f"<p>{esc(crossdevice.pair_title(pair))}: {esc(crossdevice.pair_counts_text(pair))}.</p>")
        if pair["changed"]:
            out.append(table(*crossdevice.change_rows(pair), numeric={2, 3, 4, 5, 6, 7, 8}))
    return "\n".join(out)


def build_report(results: list, errors: list, title: str | None = None) -> tuple[str, list]:
    """(the HTML page, the error messages shown on it)."""
    if title is None:
        # The files, not only the devices: two runs on one machine are told apart.
        title = ("phasebench report: " + roofline.files_title(results) if len(results) == 1 else
                 "phasebench comparison: " + roofline.files_title(results)) if results else "phasebench report"
    body = [f"<h1>{esc(title)}</h1>", generated_line([r.path for r in results])]
    all_errors = [str(e) for e in errors]
    cmp = None
    if len(results) > 1:
        cmp = compare.build_comparison(results, errors)
        all_errors += [e["message"] for e in cmp["errors"][len(errors):]]
    for e in all_errors:
        body.append(f"<div class='err'>error: {esc(e)}</div>")
    notes = {r.pb.get("notes") for r in results if r.pb.get("notes")}
    for n in notes:
        body.append(f"<p class='small'>{esc(n)}</p>")
    if cmp is not None:
        body.append(comparison_section(cmp, results))
    labels = pr.file_labels(len(results))
    for lab, r in zip(labels, results):
        body.append(file_section(r, lab if len(results) > 1 else None))
    return page(title, body), all_errors


def page(title: str, body: list) -> str:
    """The self-contained page around `body` (HTML fragments)."""
    return ("<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
            f"<meta name='viewport' content='width=device-width, initial-scale=1'><title>{esc(title)}</title>"
            f"<style>{CSS}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")


def generated_line(paths: list) -> str:
    now = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (f"<p class='small'>Generated {now} by phasebench-report from "
            + ", ".join(f"<code>{esc(p)}</code>" for p in paths) + ".</p>")


# --------------------------------------------------------------------------------------
# Serve files (`phasebench serve -o`)
# --------------------------------------------------------------------------------------

def _fields(d: dict, skip: tuple = ()) -> str:
    """key=value, ... of an object's plain fields (null as '-'), without those in `skip`."""
    return ", ".join(f"{k}={'-' if v is None else v}" for k, v in d.items()
                     if k not in skip and not isinstance(v, (dict, list)))


def serve_settings(s: serve.Serve) -> str:
    d = s.doc
    st = d["step_times"]
    rows = [["model", d["model"]], ["device", f"{d['device']['name']} ({_fields(d['device'], ('name',))})"],
            ["dtype", d["dtype"]], ["KV cache dtype", d.get("kv_dtype")], ["tensor parallel", d["tp"]],
            ["engine", f"{s.mode}: {_fields(d['engine'], ('mode',))}"], ["workload", _fields(d["workload"])],
            ["SLO", serve.slo_text(d["slo"])], ["TPOT", d.get("tpot_definition")],
            ["step times", _fields({k: st.get(k) for k in ("source", "results_file", "efficiency")})],
            ["command", Raw(f"<code>{esc(d.get('command_line', ''))}</code>")]]
    out = ["<h3>Settings</h3>", table(["field", "value"], rows)]
    if st.get("ops"):
        out.append("<h3>Step times per operation</h3><p class='small'>measured share: the fraction of the "
                   "operation's step-time lookups served by measured points (the rest analytical, scaled by the "
                   "efficiency); time share: its share of all simulated operation time.</p>")
        out.append(table(["operation", "measured share", "time share"],
                         [[o["op"], compare.fmt_pct(o.get("measured_share")), compare.fmt_pct(o.get("time_share"))]
                          for o in st["ops"]], {1, 2}))
    return "\n".join(out)


def serve_points(s: serve.Serve) -> str:
    f, t = compare.fmt_num, compare.fmt_time
    lat = serve.latency
    rows = [[serve.point_tag(s, i), p.get("completed"), p.get("requests"), f(p.get("duration_s")),
             f(p.get("output_tokens_per_s_per_gpu")), f(p.get("output_tokens_per_s_per_user")),
             f(p.get("request_rate")),
             t(lat(p, "ttft_s", "p50")), t(lat(p, "ttft_s", "p99")), t(lat(p, "tpot_s", "p50")),
             t(lat(p, "tpot_s", "p99")), t(lat(p, "itl_s", "p99")), t(lat(p, "e2e_s", "p50")), f(p.get("goodput_rps")),
             compare.fmt_pct(p.get("slo_attainment")), serve.yes_no(p.get("meets_slo")), serve.yes_no(p.get("pareto")),
             p.get("preemptions"), f(p.get("mean_batch"))] for i, p in enumerate(s.points)]
    return f"<h3>Points ({len(rows)})</h3>" + table(
        ["point", "completed", "requests", "duration s", "tok/s/GPU", "tok/s/user", "req/s", "TTFT p50", "TTFT p99",
         "TPOT p50", "TPOT p99", "ITL p99", "E2E p50", "goodput req/s", "SLO attainment", "meets SLO", "Pareto",
         "preemptions", "mean batch"], rows, set(range(1, 15)) | {17, 18})


def build_serve_report(files: list, title: str | None = None) -> str:
    title = title or "phasebench serve report: " + serve.chart_title(files)
    body = [f"<h1>{esc(title)}</h1>", generated_line([s.path for s in files]), "<h2>Pareto chart</h2>",
            "<p class='small'>Output tokens/s per GPU against per user, one marker per point (filled: meets its "
            "file's SLO; hollow: misses it), each file's Pareto frontier joined by a line.</p>",
            fig_img(serve.pareto_figure(files), "Pareto chart")]
    if len(files) == 2 and files[0].sweep == files[1].sweep:
        cmp = serve.build_comparison(*files)
        body += [f"<h2>A ({esc(files[0].label())}) and B ({esc(files[1].label())}) matched on {esc(cmp['sweep'])}</h2>",
                 table(*serve.comparison_rows(cmp), numeric=set(range(2, 16)) | {18, 19})]
    labels = serve.series_labels(files)
    for lab, s in zip(labels, files):
        body += [f"<h2>{esc(lab)} <span class='small'>({esc(os.path.basename(s.path))})</span></h2>",
                 serve_settings(s), serve_points(s)]
    return page(title, body)


def main(argv: list | None = None) -> int:
    ap = cli.Parser(description="Self-contained HTML report of phasebench results.",
                    epilog="exit status: 0 fine, 2 bad input (a file that cannot be read or an output that "
                           "must not or cannot be written: one line on stderr)")
    ap.add_argument("files", nargs="+", metavar="FILE",
                    help="results JSON written by `phasebench run`, or serve JSON written by `phasebench serve -o` "
                         "(not both kinds in one report)")
    ap.add_argument("-o", "--output", default="report.html",
                    help="HTML file to write (default: report.html); never over an input or a results file "
                         "unless --overwrite")
    ap.add_argument("--overwrite", action="store_true",
                    help="let --output replace an input or an existing results file")
    ap.add_argument("--title", help="page title")
    return cli.run(ap, lambda a: _main(a, ap.prog), argv)  # report.py from scripts/, or phasebench-report


def _main(a, prog: str) -> int:
    out = cli.check_output(a.output, "--output", a.files, a.overwrite)  # before the work, not after it
    if serve.all_serve_files(a.files, "report serve files and results files separately"):
        cli.write_file(out, build_serve_report([serve.load(f) for f in a.files], a.title), "report")
        print(a.output)
        return 0
    results, errors = pr.load_many(a.files)
    for e in errors:
        print(f"{prog}: error: {e}", file=sys.stderr)
    if not results:  # each file has had its line; no report is written
        return 2
    page, shown_errors = build_report(results, errors, a.title)
    cli.write_file(out, page, "report")
    print(a.output)
    for e in shown_errors[len(errors):]:
        print(f"{prog}: error: {e}", file=sys.stderr)
    return 2 if shown_errors else 0


if __name__ == "__main__":
    sys.exit(main())
