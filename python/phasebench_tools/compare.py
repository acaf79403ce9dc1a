"""Compare two or more phasebench results files (python/phasebench_tools/compare.py).

Run as `phasebench-compare` or `.venv/bin/python scripts/compare.py` (a thin wrapper):

    phasebench-compare a.json b.json [c.json ...]
        [--format table|markdown|csv|json] [--output FILE]
        [--fail-on-regression PCT] [--alpha 0.01] [--significance auto|welch|minmax]
        [--filter REGEX]

The first file is the reference. Points are matched on their structured key (phase, op,
model, target, dtype, impl, args), never on names. For every matched point and file: the
median time, TFLOP/s, GB/s and fraction of the file's own roofline, and against the first
file the speedup (reference time / this time), the change in time, and whether the change
is significant. Per phase: geometric means of the speedups and of the fractions of
roofline. Points that are not in every file are listed.

Significance (a same-GPU regression check) uses the spread of the repetitions recorded in
each file: a Welch t-test on (mean_s, stddev_s, samples) when both points have 2 samples or
more, else non-overlapping [min_s, max_s] ranges. `--fail-on-regression PCT` exits 1 when
some point is significantly slower than the reference by more than PCT percent (or a point
that ran in the reference now fails with an error).

Exit status: 0 fine; 1 regression beyond the threshold; 2 bad input (a file that cannot be
read, fewer than two usable files, or files with no benchmark in common). The files that can
be read are still compared and reported when another one is bad.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import re
import sys

from . import results as pr

EXIT_OK, EXIT_REGRESSION, EXIT_BAD_INPUT = 0, 1, 2


# --------------------------------------------------------------------------------------
# Statistics
# --------------------------------------------------------------------------------------

def welch_p_value(m1: float, s1: float, n1: int, m2: float, s2: float, n2: int) -> float:
    """Two-sided Welch t-test p-value from summary statistics."""
    v1, v2 = s1 * s1 / n1, s2 * s2 / n2
    if v1 + v2 == 0:
        return 0.0 if m1 != m2 else 1.0
    from scipy import stats  # imported here: only this function needs it

    t = (m1 - m2) / math.sqrt(v1 + v2)
    df = (v1 + v2) ** 2 / ((v1 * v1 / (n1 - 1) if n1 > 1 else 0) + (v2 * v2 / (n2 - 1) if n2 > 1 else 0))
    return float(2 * stats.t.sf(abs(t), df))


def significance(a: pr.Point, b: pr.Point, alpha: float, method: str = "auto") -> dict:
    """Whether b's time differs from a's beyond the noise. Returns {significant, method, p_value, why}."""
    ta, tb = a.time or {}, b.time or {}
    na, nb = int(ta.get("samples") or 1), int(tb.get("samples") or 1)
    sa, sb = ta.get("stddev_s"), tb.get("stddev_s")
    ma, mb = ta.get("mean_s", ta.get("median_s")), tb.get("mean_s", tb.get("median_s"))
    can_welch = na >= 2 and nb >= 2 and sa is not None and sb is not None and ma is not None and mb is not None
    if method == "welch" or (method == "auto" and can_welch):
        if not can_welch:
            return {"significant": None, "method": "welch", "p_value": None,
                    "why": "needs 2+ samples with a standard deviation in both files"}
        p = welch_p_value(ma, sa, na, mb, sb, nb)
        if not math.isfinite(p):
            p = 1.0
        # Only a shift in the same direction as the medians counts (the mean can be dragged by outliers).
        same_dir = (mb - ma) * (tb["median_s"] - ta["median_s"]) > 0
        why = f"Welch t-test p={p:.3g} ({'<' if p < alpha else '>='} alpha {alpha:g})"
        if p < alpha and not same_dir:
            why += ", but the means and the medians moved in opposite directions"
        return {"significant": bool(p < alpha and same_dir), "method": "welch", "p_value": p, "why": why,
                "opposite": bool(p < alpha and not same_dir)}
    lo_a, hi_a = ta.get("min_s", ta.get("median_s")), ta.get("max_s", ta.get("median_s"))
    lo_b, hi_b = tb.get("min_s", tb.get("median_s")), tb.get("max_s", tb.get("median_s"))
    disjoint = lo_b > hi_a or hi_b < lo_a
    return {"significant": bool(disjoint), "method": "minmax", "p_value": None,
            "why": "min..max ranges " + ("do not overlap" if disjoint else "overlap")}


# --------------------------------------------------------------------------------------
# The comparison, as one JSON-able structure every output format renders
# --------------------------------------------------------------------------------------

def _point_cells(p: pr.Point | None) -> dict | None:
    if p is None:
        return None
    d = {"status": p.status, "name": p.name}
    if p.message:
        d["message"] = p.message
    if p.ok:
        t = p.time or {}
        by_source = {s: p.fraction_by_source(s) for s in pr.CEILING_SOURCES}
        d.update({"median_s": p.median_s, "mean_s": t.get("mean_s"), "stddev_s": t.get("stddev_s"),
                  "cv": t.get("cv"), "samples": t.get("samples"), "min_s": t.get("min_s"), "max_s": t.get("max_s"),
                  "tflops": p.tflops, "gbps": p.gbps, "intensity": p.intensity,
                  "fraction_of_roofline": p.fraction, "bound": p.bound,
                  "fraction_of_roofline_by_source": {s: f for s, f in by_source.items() if f is not None}})
    return d


def build_comparison(results: list, errors: list, alpha: float = 0.01, method: str = "auto",
                     fail_pct: float | None = None, name_filter: str | None = None) -> dict:
    labels = pr.file_labels(len(results))
    m = pr.match(results)
    keys = m.keys
    if name_filter:
        rx = re.compile(name_filter)
        keys = [k for k in keys if any(p is not None and (rx.search(p.name) or rx.search(k.label()))
                                       for p in m.table[k])]
    files = [{"label": lab, "path": r.path, "device": r.device_name, "slug": r.device_slug, "backend": r.backend,
              "date": r.date, "complete": r.complete, "cache": r.pb.get("cache"), "ceiling_used": r.ceiling_used}
             for lab, r in zip(labels, results)]
    warnings = [w for r in results for w in r.warnings]
    caches = {r.pb.get("cache") for r in results}
    if len(caches) > 1:
        warnings.append("the files were measured with different cache modes (" +
                        ", ".join(f"{lab}: {r.pb.get('cache')}" for lab, r in zip(labels, results)) + ")")
    if fail_pct is not None and len({r.device_slug for r in results}) > 1:
        warnings.append("--fail-on-regression compares different devices (" +
                        ", ".join(f"{lab}: {r.device_name}" for lab, r in zip(labels, results)) +
                        "); a regression check is meant for the same GPU")
    new_errors = [{"path": e.path, "message": str(e)} for e in errors]

    # Files that share nothing with the reference are errors (reported, not compared).
    ref_keys = {k for k in keys if m.table[k][0] is not None}
    for i in range(1, len(results)):
        if not any(m.table[k][i] is not None for k in ref_keys):
            new_errors.append({"path": results[i].path,
                               "message": f"{results[i].path}: no benchmark in common with the reference "
                                          f"{results[0].path} (different models, ops, dtypes or sweep arguments?)"})

    points, only_some, status_changes, regressions = [], [], [], []
    counts = {"slower": 0, "faster": 0, "unchanged": 0, "not_compared": 0}
    for k in keys:
        row = m.table[k]
        present = [labels[i] for i, p in enumerate(row) if p is not None]
        name = next(p.name for p in row if p is not None)
        if len(present) < len(results):
            only_some.append({"name": name, "key": k.as_dict(), "present_in": present,
                              "missing_from": [labels[i] for i, p in enumerate(row) if p is None]})
        entry = {"name": name, "label": k.label(), "key": k.as_dict(),
                 "files": {labels[i]: _point_cells(p) for i, p in enumerate(row)}, "vs_first": {}}
        ref = row[0]
        for i in range(1, len(row)):
            p = row[i]
            if ref is None or p is None:
                continue
            if ref.ok and not p.ok:
                change = {"name": name, "file": labels[i], "from": ref.status, "to": p.status, "message": p.message}
                status_changes.append(change)
                if p.status == "error" and fail_pct is not None:
                    regressions.append({**change, "kind": "error"})
                counts["not_compared"] += 1
                continue
            if not (ref.ok and p.ok):
                if ref.status != p.status:
                    status_changes.append({"name": name, "file": labels[i], "from": ref.status, "to": p.status,
                                           "message": p.message or ref.message})
                counts["not_compared"] += 1
                continue
            speedup = ref.median_s / p.median_s
            change_pct = (p.median_s / ref.median_s - 1) * 100
            sig = significance(ref, p, alpha, method)
            frac_ratio = (p.fraction / ref.fraction) if (p.fraction and ref.fraction) else None
            entry["vs_first"][labels[i]] = {"speedup": speedup, "time_change_pct": change_pct,
                                            "fraction_ratio": frac_ratio, **sig}
            if sig["significant"]:
                counts["slower" if change_pct > 0 else "faster"] += 1
            else:
                counts["unchanged"] += 1
            if fail_pct is not None and sig["significant"] and change_pct > fail_pct:
                regressions.append({"name": name, "file": labels[i], "kind": "slower", "time_change_pct": change_pct,
                                    "reference_median_s": ref.median_s, "median_s": p.median_s, "why": sig["why"]})
        points.append(entry)

    # Per-phase geometric means over the points each file shares with the reference.
    summary = []
    phases = []
    for k in keys:
        if k.phase not in phases:
            phases.append(k.phase)
    for ph in phases:
        pk = [k for k in keys if k.phase == ph]
        all_ok = [k for k in pk if all(p is not None and p.ok for p in m.table[k])]
        for i, lab in enumerate(labels):
            shared = [k for k in pk if m.table[k][0] is not None and m.table[k][0].ok
                      and m.table[k][i] is not None and m.table[k][i].ok]
            sp = [m.table[k][0].median_s / m.table[k][i].median_s for k in shared]
            fr = [m.table[k][i].fraction for k in all_ok]
            summary.append({"phase": ph, "file": lab, "points": len(shared),
                            "geomean_speedup_vs_first": pr.geomean(sp) if i > 0 else (1.0 if shared else None),
                            "points_in_all_files": len(all_ok),
                            "geomean_fraction_of_roofline": pr.geomean(fr)})
    return {"files": files, "reference": labels[0] if labels else None, "alpha": alpha, "significance": method,
            "fail_on_regression_pct": fail_pct, "points": points, "summary": summary, "only_in_some": only_some,
            "status_changes": status_changes, "regressions": regressions, "counts": counts,
            "warnings": warnings, "errors": new_errors}


# --------------------------------------------------------------------------------------
# Rendering
# --------------------------------------------------------------------------------------

def fmt_time(s: float | None) -> str:
    if s is None:
        return "-"
    for scale, unit in ((1, "s"), (1e-3, "ms"), (1e-6, "us"), (1e-9, "ns")):
        if s >= scale:
            return f"{s / scale:.4g} {unit}"
    return f"{s * 1e9:.3g} ns"


def fmt_num(v: float | None, digits: int = 4) -> str:
    if v is None:
        return "-"
    if v == 0:
        return "0"
    if abs(v) >= 1e5 or abs(v) < 1e-3:
        return f"{v:.3e}"
    return f"{v:.{digits}g}"


def fmt_pct(v: float | None, signed: bool = False) -> str:
    if v is None:
        return "-"
    return f"{v:+.1f}%" if signed else f"{v * 100:.1f}%"


def point_rows(cmp: dict) -> tuple[list, list]:
    """The points table in long form: one row per point and file."""
    header = ["point", "file", "status", "time", "TFLOP/s", "GB/s", "% roofline", "speedup vs " + (cmp["reference"] or "A"),
              "time change", "significant"]
    rows = []
    for e in cmp["points"]:
        first = True
        for lab, c in e["files"].items():
            row = [e["name"] if first else "", lab]
            first = False
            if c is None:
                rows.append(row + ["absent"] + ["-"] * 7)
                continue
            if c["status"] != "ok":
                rows.append(row + [c["status"]] + ["-"] * 7)
                continue
            v = e["vs_first"].get(lab)
            sig = "-"
            if v:
                if v["significant"] is None:
                    sig = "unknown"
                else:
                    sig = ("yes" if v["significant"] else "no") + (f" (p={v['p_value']:.2g})" if v["p_value"] is not None
                                                                   else f" ({v['method']})")
                    if v.get("opposite"):
                        sig += " mean/median disagree"
            rows.append(row + ["ok", fmt_time(c["median_s"]), fmt_num(c["tflops"]), fmt_num(c["gbps"]),
                               fmt_pct(c["fraction_of_roofline"]),
                               f"{v['speedup']:.3f}x" if v else "-", fmt_pct(v["time_change_pct"], True) if v else "-",
                               sig])
    return header, rows


def summary_rows(cmp: dict) -> tuple[list, list]:
    ref = cmp["reference"] or "A"
    header = ["phase", "file", "device", "points vs " + ref, f"geomean speedup vs {ref}", "geomean % roofline",
              "points in all files"]
    dev = {f["label"]: f["device"] for f in cmp["files"]}
    rows = []
    for s in cmp["summary"]:
        g = s["geomean_speedup_vs_first"]
        rows.append([s["phase"], s["file"], dev.get(s["file"], ""), str(s["points"]), "-" if g is None else f"{g:.3f}x",
                     fmt_pct(s["geomean_fraction_of_roofline"]), str(s["points_in_all_files"])])
    return header, rows


def render_text_table(header: list, rows: list) -> str:
    widths = [len(h) for h in header]
    for r in rows:
        for i, c in enumerate(r):
            widths[i] = max(widths[i], len(c))
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    out = [line(header), line(["-" * w for w in widths])]
    out += [line(r) for r in rows]
    return "\n".join(out)


def render_markdown_table(header: list, rows: list) -> str:
    esc = lambda s: s.replace("|", "\\|")  # noqa: E731
    out = ["| " + " | ".join(esc(h) for h in header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    out += ["| " + " | ".join(esc(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def render_text(cmp: dict, markdown: bool) -> str:
    table = render_markdown_table if markdown else render_text_table
    h = (lambda s: f"## {s}") if markdown else (lambda s: f"{s}\n{'=' * len(s)}")
    out = []
    out.append(h("Files"))
    fh = ["file", "path", "device", "backend", "date", "cache", "ceilings"]
    fr = [[f["label"], f["path"], f["device"], f["backend"], f["date"] + ("" if f["complete"] else " (INCOMPLETE)"),
           str(f["cache"] or "-"), f["ceiling_used"] or "-"] for f in cmp["files"]]
    out.append(table(fh, fr))
    for w in cmp["warnings"]:
        out.append(("> " if markdown else "") + f"warning: {w}")
    for e in cmp["errors"]:
        out.append(("> " if markdown else "") + f"error: {e['message']}")
    out.append("")
    out.append(h(f"Points (ratios against {cmp['reference']}; time is the median; significance: "
                 f"{cmp['significance']}, alpha {cmp['alpha']:g})"))
    out.append(table(*point_rows(cmp)))
    out.append("")
    out.append(h("Per-phase summary (geometric means)"))
    out.append(table(*summary_rows(cmp)))
    c = cmp["counts"]
    out.append("")
    out.append(f"changes against {cmp['reference']}: {c['slower']} significantly slower, {c['faster']} significantly "
               f"faster, {c['unchanged']} not significant, {c['not_compared']} not compared")
    if cmp["only_in_some"]:
        out.append("")
        out.append(h(f"Points not in every file ({len(cmp['only_in_some'])})"))
        out.append(table(["point", "in", "missing from"],
                         [[o["name"], ", ".join(o["present_in"]), ", ".join(o["missing_from"])] for o in cmp["only_in_some"]]))
    if cmp["status_changes"]:
        out.append("")
        out.append(h("Status changes"))
        out.append(table(["point", "file", "reference", "now", "message"],
                         [[s["name"], s["file"], s["from"], s["to"], s.get("message", "")] for s in cmp["status_changes"]]))
    if cmp["fail_on_regression_pct"] is not None:
        out.append("")
        thr = cmp["fail_on_regression_pct"]
        if cmp["regressions"]:
            out.append(h(f"REGRESSIONS (significantly slower by more than {thr:g}%, or now failing)"))
            out.append(table(["point", "file", "kind", "time change", "why"],
                             [[r["name"], r["file"], r["kind"], fmt_pct(r.get("time_change_pct"), True),
                               r.get("why", r.get("message", ""))] for r in cmp["regressions"]]))
        else:
            out.append(f"no regression beyond {thr:g}% against {cmp['reference']}")
    return "\n".join(out) + "\n"


CSV_FIELDS = ["name", "phase", "op", "model", "target", "dtype", "impl", "args", "file", "path", "device", "status",
              "median_s", "mean_s", "stddev_s", "samples", "min_s", "max_s", "tflops", "gbps", "intensity",
              "fraction_of_roofline", "bound", "speedup_vs_first", "time_change_pct", "significant", "p_value",
              "significance_method", "present_in"]


def render_csv(cmp: dict) -> str:
    """Long (tidy) CSV: one row per point and file; absent points have status 'absent'."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_FIELDS, lineterminator="\n")
    w.writeheader()
    files = {f["label"]: f for f in cmp["files"]}
    for e in cmp["points"]:
        present = " ".join(lab for lab, c in e["files"].items() if c is not None)
        for lab, c in e["files"].items():
            k = e["key"]
            row = {"name": e["name"], "phase": k["phase"], "op": k["op"], "model": k["model"], "target": k["target"],
                   "dtype": k["dtype"], "impl": k["impl"], "args": json.dumps(k["args"], sort_keys=True), "file": lab,
                   "path": files[lab]["path"], "device": files[lab]["device"], "present_in": present,
                   "status": "absent" if c is None else c["status"]}
            if c and c["status"] == "ok":
                for f in ("median_s", "mean_s", "stddev_s", "samples", "min_s", "max_s", "tflops", "gbps", "intensity",
                          "fraction_of_roofline", "bound"):
                    row[f] = "" if c.get(f) is None else c.get(f)
            v = e["vs_first"].get(lab)
            if v:
                row.update({"speedup_vs_first": v["speedup"], "time_change_pct": v["time_change_pct"],
                            "significant": "" if v["significant"] is None else str(v["significant"]).lower(),
                            "p_value": "" if v["p_value"] is None else v["p_value"],
                            "significance_method": v["method"]})
            w.writerow(row)
    return buf.getvalue()


def render(cmp: dict, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(cmp, indent=2, allow_nan=False) + "\n"
    if fmt == "csv":
        return render_csv(cmp)
    return render_text(cmp, markdown=(fmt == "markdown"))


# --------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------

def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        description="Compare phasebench results files (ratios against the first), across GPUs or as a same-GPU "
                    "regression check.",
        epilog="exit status: 0 fine, 1 regression beyond --fail-on-regression, 2 bad input")
    ap.add_argument("files", nargs="+", metavar="FILE", help="results JSON written by `phasebench run` (2 or more)")
    ap.add_argument("--format", choices=("table", "markdown", "csv", "json"), default="table",
                    help="output format (default: a terminal table)")
    ap.add_argument("--output", "-o", metavar="PATH", help="write the output here instead of stdout")
    ap.add_argument("--fail-on-regression", type=float, metavar="PCT", default=None,
                    help="exit 1 if a point is significantly slower than in the first file by more than PCT percent")
    ap.add_argument("--alpha", type=float, default=0.01, help="significance level of the Welch t-test (default 0.01)")
    ap.add_argument("--significance", choices=("auto", "welch", "minmax"), default="auto",
                    help="auto: Welch t-test from mean/stddev/samples where both points have 2+ samples, else "
                         "non-overlapping min..max ranges (default)")
    ap.add_argument("--filter", metavar="REGEX", help="only points whose name (or key label) matches")
    return ap


def parse_args(ap: argparse.ArgumentParser, argv: list | None = None) -> argparse.Namespace:
    a = ap.parse_args(argv)
    if len(a.files) < 2:
        ap.error("give two or more results files (the first is the reference)")
    if a.fail_on_regression is not None and a.fail_on_regression < 0:
        ap.error("--fail-on-regression takes a percentage >= 0")
    if not 0 < a.alpha < 1:
        ap.error("--alpha must be between 0 and 1")
    return a


def main(argv: list | None = None) -> int:
    ap = parser()
    a = parse_args(ap, argv)
    prog = ap.prog  # compare.py from scripts/, phasebench-compare as a console script
    results, errors = pr.load_many(a.files)
    for e in errors:
        print(f"{prog}: error: {e}", file=sys.stderr)
    if len(results) < 2:
        print(f"{prog}: error: {len(results)} usable file(s) of {len(a.files)}; need two to compare",
              file=sys.stderr)
        return EXIT_BAD_INPUT
    cmp = build_comparison(results, errors, alpha=a.alpha, method=a.significance, fail_pct=a.fail_on_regression,
                           name_filter=a.filter)
    for w in cmp["warnings"]:
        print(f"{prog}: warning: {w}", file=sys.stderr)
    for e in cmp["errors"][len(errors):]:
        print(f"{prog}: error: {e['message']}", file=sys.stderr)
    if not any(e["vs_first"] for e in cmp["points"]) and not any(
            all(c is not None for c in e["files"].values()) for e in cmp["points"]):
        print(f"{prog}: error: the files have no benchmark in common; nothing to compare", file=sys.stderr)
        text = render(cmp, a.format)
        _write(text, a.output)
        return EXIT_BAD_INPUT
    _write(render(cmp, a.format), a.output)
    regressed = a.fail_on_regression is not None and bool(cmp["regressions"])
    if regressed:
        n = len(cmp["regressions"])
        print(f"{prog}: {n} regression(s) beyond {a.fail_on_regression:g}% against {a.files[0]}", file=sys.stderr)
    if cmp["errors"]:
        return EXIT_BAD_INPUT
    return EXIT_REGRESSION if regressed else EXIT_OK


def _write(text: str, path: str | None) -> None:
    if path:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    sys.exit(main())
