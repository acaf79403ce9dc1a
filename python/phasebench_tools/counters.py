"""Counters files (`phasebench counters`) and their diff (python/phasebench_tools/counters.py).

A counters file is written by `phasebench counters` (bench/counters.cpp): results-file
framing (context.phasebench with kind "counters", benchmarks with a "phasebench" object
per point) whose points carry, instead of times, "counters" (the launches of one run() as
the emulation's counting build counted them) and "estimate" (the speed-of-light model for
context.phasebench.gpu). Counts are deterministic: any difference between two files of the
same code and sweep is a change of the code.

`phasebench-compare a.json b.json` hands two counters files to diff() here: points are
matched on the same structured key as results (results.make_key); each matched point is
SAME (every count equal) or CHANGED (the counters that differ are listed), or only in one
file. `--fail-on-regression PCT` fails (exit 1) when a point's counted DRAM bytes grew, or
its estimated fraction fell, by more than PCT percent, or a point that was counted now
ends in an error.
"""

from __future__ import annotations

import json
import math
from typing import Any

from . import results as pr

KIND = "counters"
SUPPORTED_COUNTERS_SCHEMA = (1,)

#: The estimate's headline figures, in the order the table shows them.
HEADLINE = ("dram_bytes", "excess", "sector_efficiency", "bank_conflicts", "occupancy", "waves",
            "inflight_bytes_per_sm", "estimated_fraction")


def file_kind(path: str) -> str | None:
    """"counters" or "results" for a readable JSON file (None when it cannot be read: the
    results loader then says why)."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return None
    ctx = doc.get("context", {}) if isinstance(doc, dict) else {}
    pb = ctx.get("phasebench", {}) if isinstance(ctx, dict) else {}
    return KIND if isinstance(pb, dict) and pb.get("kind") == KIND else "results"


def load(path: str) -> dict:
    """{"path", "context", "points": {Key: point}} of a counters file; ResultsError when unusable."""
    try:
        with open(path, "rb") as f:
            text = f.read().decode("utf-8")
    except FileNotFoundError:
        raise pr.ResultsError(path, "no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise pr.ResultsError(path, f"cannot be read as text: {e}") from None
    doc = pr._check_json_text(path, text)  # the loader's own strict-JSON checks and messages
    ctx = doc.get("context", {}).get("phasebench", {}) if isinstance(doc, dict) else {}
    if ctx.get("kind") != KIND:
        raise pr.ResultsError(path, "not a counters file (context.phasebench.kind is not \"counters\"); "
                                    "it is written by `phasebench counters --out FILE`")
    version = ctx.get("counters_schema_version")
    if version not in SUPPORTED_COUNTERS_SCHEMA:
        raise pr.ResultsError(path, f"counters schema version {version!r} is not one this tool reads "
                                    f"({', '.join(map(str, SUPPORTED_COUNTERS_SCHEMA))})")
    points = {}
    for b in doc.get("benchmarks", []):
        pb = b.get("phasebench") if isinstance(b, dict) else None
        if isinstance(pb, dict):
            # Today's names, so a table counted before an operation was renamed still
            # matches (and its names select today's points: phasebench-ncu plan).
            name = pr.current_point_name(str(b.get("name", "")), pb)
            pb = pr.current_names(pb)
            points[pr.make_key(pb)] = {"name": name, **pb}
    if not points:
        raise pr.ResultsError(path, "holds no counted point")
    return {"path": path, "context": ctx, "points": points}


def _leaves(v: Any, at: str = "") -> dict:
    """Every number and string under `v`, by JSON path (lists by index)."""
    out = {}
    if isinstance(v, dict):
        for k, x in v.items():
            out.update(_leaves(x, f"{at}.{k}" if at else str(k)))
    elif isinstance(v, list):
        for i, x in enumerate(v):
            out.update(_leaves(x, f"{at}[{i}]"))
    else:
        out[at] = v
    return out


def _rel(a: Any, b: Any) -> float | None:
    if not isinstance(a, (int, float)) or not isinstance(b, (int, float)) or isinstance(a, bool):
        return None
    if a == 0:
        return None if b == 0 else math.inf
    return b / a - 1


def diff(a: dict, b: dict, fail_pct: float | None = None) -> dict:
    """The comparison of two loaded counters files: rows per point and the regressions."""
    rows, regressions = [], []
    if a["context"].get("gpu", {}).get("key") != b["context"].get("gpu", {}).get("key"):
        warnings = [f"the files estimate for different GPUs ({a['context'].get('gpu', {}).get('key')} and "
                    f"{b['context'].get('gpu', {}).get('key')}): counts compare, estimates do not"]
    else:
        warnings = []
    keys = list(a["points"]) + [k for k in b["points"] if k not in a["points"]]
    for k in keys:
        pa, pb_ = a["points"].get(k), b["points"].get(k)
        row = {"point": k.label(), "key": k.as_dict()}
        if pa is None or pb_ is None:
            row["verdict"] = "NEW" if pa is None else "GONE"
            rows.append(row)
            continue
        sa, sb = pa.get("status"), pb_.get("status")
        row["status"] = [sa, sb]
        if sa != "ok" or sb != "ok":
            row["verdict"] = "SAME" if sa == sb else "CHANGED"
            row["changed"] = [] if sa == sb else [f"status {sa} -> {sb}"]
            if sa == "ok" and sb == "error":
                regressions.append({"point": row["point"], "why": f"now an error: {pb_.get('message', '')}"})
            rows.append(row)
            continue
        la, lb = _leaves(pa.get("counters")), _leaves(pb_.get("counters"))
        changed = [p for p in sorted(set(la) | set(lb)) if la.get(p) != lb.get(p)]
        ea, eb = pa.get("estimate", {}), pb_.get("estimate", {})
        row["verdict"] = "CHANGED" if changed else "SAME"
        row["changed"] = changed
        row["headline"] = {h: [ea.get(h), eb.get(h)] for h in HEADLINE}
        if fail_pct is not None:
            grew = _rel(ea.get("dram_bytes"), eb.get("dram_bytes"))
            fell = _rel(ea.get("estimated_fraction"), eb.get("estimated_fraction"))
            if grew is not None and grew * 100 > fail_pct:
                regressions.append({"point": row["point"], "why": f"DRAM bytes +{100 * grew:.1f}%"})
            elif fell is not None and -fell * 100 > fail_pct:
                regressions.append({"point": row["point"], "why": f"estimated fraction {100 * fell:+.1f}%"})
        rows.append(row)
    counts = {v: sum(1 for r in rows if r["verdict"] == v) for v in ("SAME", "CHANGED", "NEW", "GONE")}
    return {"reference": a["path"], "other": b["path"], "gpu": [a["context"].get("gpu"), b["context"].get("gpu")],
            "rows": rows, "counts": counts, "regressions": regressions, "warnings": warnings}


def _fmt(h: str, v: Any) -> str:
    if v is None:
        return "-"
    if h in ("excess", "sector_efficiency", "occupancy", "estimated_fraction"):
        return f"{100 * v:.1f}%"
    if h == "dram_bytes":
        return f"{v / 1e6:.2f} MB"
    if h == "inflight_bytes_per_sm":
        return f"{v / 1024:.1f} KiB"
    if h == "waves":
        return f"{v:.2f}"
    return str(v)


def table_rows(cmp: dict) -> tuple[list, list]:
    header = ["point", "verdict"] + list(HEADLINE) + ["changed counters"]
    rows = []
    for r in cmp["rows"]:
        cells = [r["point"], r["verdict"]]
        head = r.get("headline", {})
        for h in HEADLINE:
            a, b = head.get(h, [None, None])
            cells.append(_fmt(h, a) if a == b else f"{_fmt(h, a)} -> {_fmt(h, b)}")
        ch = r.get("changed", [])
        cells.append("" if not ch else f"{len(ch)}: " + ", ".join(ch[:3]) + (" ..." if len(ch) > 3 else ""))
        rows.append(cells)
    return header, rows


def render(cmp: dict, fmt: str) -> str:
    """table, markdown, csv or json."""
    if fmt == "json":
        return json.dumps(cmp, indent=2) + "\n"
    header, rows = table_rows(cmp)
    if fmt == "csv":
        import csv
        import io
        buf = io.StringIO()
        w = csv.writer(buf)
        w.writerow(header)
        w.writerows(rows)
        return buf.getvalue()
    if fmt == "markdown":
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows]
    else:
        widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]
        lines = ["  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip() for row in [header] + rows]
    c = cmp["counts"]
    lines.append("")
    lines.append(f"counters of {cmp['other']} against {cmp['reference']}: {c['SAME']} same, {c['CHANGED']} changed, "
                 f"{c['NEW']} new, {c['GONE']} gone (counts are deterministic: a change is a change of the code)")
    return "\n".join(lines) + "\n"
