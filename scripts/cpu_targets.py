#!/usr/bin/env python3
"""The CPU backend's speed targets, read off results files of `phasebench run`.

  decode GEMV, batch 1, weights >= 4x the last-level cache:  >= 80% of the read bandwidth
  decode attention (contiguous), KV cache of the same size:  >= 70% of the read bandwidth
  paged decode attention:                                    time within 10% of contiguous

Each bandwidth target is judged twice: against the run's measured ceiling (the streaming
read timed once, best of 12, at the start of the run) and against the paired reads
(`paired_read`: a streaming read timed right before every sample; see the README). On a
shared machine the first moves with the machine's bandwidth, the second is time-matched.
Paged and contiguous points are compared on the same shape within one file (run them
interleaved: --benchmark_repetitions=3 --benchmark_enable_random_interleaving=true).

A target holds when the median over its points meets it; the counts of points that meet
it are printed beside. Exit status: 0 when every target holds on the paired reads, 1 when
one does not, 2 for unusable input.

  scripts/cpu_targets.py results/cpu-targets/<time>/run*.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

GEMV_TARGET = 0.80
ATTENTION_TARGET = 0.70
PAGED_SLOWDOWN = 1.10  # paged time / contiguous time at most


class InputError(Exception):
    pass


def load(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except OSError as e:
        raise InputError(f"{path}: cannot read it ({e.strerror})") from e
    except json.JSONDecodeError as e:
        raise InputError(f"{path}: not valid JSON (line {e.lineno}: {e.msg}); is it a phasebench results file?") from e
    pb = doc.get("context", {}).get("phasebench") if isinstance(doc, dict) else None
    if not isinstance(pb, dict) or not isinstance(doc.get("benchmarks"), list):
        raise InputError(f"{path}: no context.phasebench or benchmarks: not a phasebench results file")
    return doc


def points(doc: dict) -> list:
    """One entry per point (repetitions and aggregates carry the same pooled fields)."""
    seen = {}
    for b in doc["benchmarks"]:
        p = b.get("phasebench")
        if not isinstance(p, dict) or p.get("status") != "ok":
            continue
        seen[b.get("run_name", b.get("name"))] = (b.get("name", ""), p)
    return list(seen.values())


def check(paths: list) -> tuple:
    gemv, attention, paged_ratio, lines = [], [], [], []
    for path in paths:
        doc = load(path)
        llc = doc["context"]["phasebench"].get("device", {}).get("cache_bytes") or 0
        if not llc:
            raise InputError(f"{path}: the device has no last-level cache size; these targets are for the CPU backend")
        times = {}
        for name, p in points(doc):
            big = p.get("bytes", {}).get("total", 0) >= 4 * llc
            shape = p.get("shape", {})
            frac = p.get("fraction_of_roofline")
            paired = (p.get("paired_read") or {}).get("fraction_median")
            row = None
            if big and p.get("op") == "gemv" and p.get("impl") == "own" and shape.get("M") == 1:
                row = gemv
            elif big and p.get("op") == "attention":
                row = attention
            if row is not None and frac is not None:
                row.append((frac, paired))
                label = name.split("/manual_time")[0]
                lines.append(f"  {label[:72]:72s} {100 * frac:5.1f}%  paired " +
                             (f"{100 * paired:5.1f}%" if paired is not None else "    -"))
            if big and p.get("op") in ("attention", "attention_paged"):
                key = (p.get("model"), p.get("dtype"), shape.get("B"), shape.get("L"), shape.get("Hq"), shape.get("D"))
                times.setdefault(key, {})[p["op"]] = p["time"]["median_s"]
        for key, t in sorted(times.items(), key=str):
            if "attention" in t and "attention_paged" in t:
                paged_ratio.append(t["attention_paged"] / t["attention"])
    return gemv, attention, paged_ratio, lines


def verdict(values: list, target: float, at_least: bool = True) -> str:
    vals = [v for v in values if v is not None]
    if not vals:
        return "no points"
    med = statistics.median(vals)
    meets = sum((v >= target) if at_least else (v <= target) for v in vals)
    ok = med >= target if at_least else med <= target
    return f"median {med:.3f} [{min(vals):.3f}..{max(vals):.3f}], {meets}/{len(vals)} points meet it: {'holds' if ok else 'MISSED'}"


def main(argv: list) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+", help="results files of `phasebench run` on the CPU backend")
    args = ap.parse_args(argv)
    try:
        gemv, attention, paged, lines = check(args.files)
    except InputError as e:
        print(f"cpu_targets: {e}", file=sys.stderr)
        return 2
    print("points (fraction of the run's read ceiling; of the paired reads):")
    print("\n".join(lines) if lines else "  none of >= 4x LLC")
    print(f"\ndecode GEMV batch 1 >= {GEMV_TARGET:.0%} of the read bandwidth")
    print("  run ceiling:  " + verdict([f for f, _ in gemv], GEMV_TARGET))
    print("  paired reads: " + verdict([p for _, p in gemv], GEMV_TARGET))
    print(f"decode attention >= {ATTENTION_TARGET:.0%} of the read bandwidth")
    print("  run ceiling:  " + verdict([f for f, _ in attention], ATTENTION_TARGET))
    print("  paired reads: " + verdict([p for _, p in attention], ATTENTION_TARGET))
    print(f"paged attention time / contiguous time <= {PAGED_SLOWDOWN:.2f}")
    print("  same shapes:  " + verdict(paged, PAGED_SLOWDOWN, at_least=False))
    held = [verdict([p for _, p in gemv], GEMV_TARGET), verdict([p for _, p in attention], ATTENTION_TARGET),
            verdict(paged, PAGED_SLOWDOWN, at_least=False)]
    return 0 if all(v.endswith("holds") for v in held) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
