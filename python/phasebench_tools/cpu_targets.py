"""The CPU backend's speed targets, read off results files (python/phasebench_tools/cpu_targets.py).

Run as `phasebench-cpu-targets` or `scripts/cpu_targets.py` (a thin wrapper, which
scripts/cpu-targets calls after its runs). Standard library only, like the loader.

  decode GEMV, batch 1, beyond the caches (>= 4x the LLC):    >= 80% of the read bandwidth
  decode attention (contiguous), KV cache of the same size:  >= 70% of the read bandwidth
  paged decode attention:                                    time within 10% of contiguous

Each bandwidth target is judged twice: against the run's measured ceiling (the streaming
read timed once, best of 12, at the start of the run) and against the paired reads
(`paired_read`: a streaming read timed right before every sample; see the README). On a
shared machine the first moves with the machine's bandwidth, the second is time-matched.
Paged and contiguous points are compared on the same shape within one file (run them
interleaved: --benchmark_repetitions=3 --benchmark_enable_random_interleaving=true). Each
point is read under the loader's repetition rule (results.py).

A target holds when the median over its points meets it; the counts of points that meet
it are printed beside. Exit status: 0 when every target holds on the paired reads, 1 when
one does not, 2 for unusable input.

  scripts/cpu_targets.py results/cpu-targets/<time>/run*.json
"""

from __future__ import annotations

import argparse
import statistics
import sys

from .results import ResultsError, load_results

GEMV_TARGET = 0.80
ATTENTION_TARGET = 0.70
PAGED_SLOWDOWN = 1.10  # paged time / contiguous time at most


def check(paths: list) -> tuple:
    """(gemv, attention, paged_ratio, lines, warnings) over the files; raises ResultsError on unusable input."""
    gemv, attention, paged_ratio, lines, warnings = [], [], [], [], []
    for path in paths:
        r = load_results(path)
        warnings += r.warnings
        llc = r.device.get("cache_bytes") or 0
        if not llc:
            raise ResultsError(path, "the device has no last-level cache size; these targets are for the CPU backend")
        times = {}
        for p in r.ok_points():
            big = p.pb.get("beyond_caches")
            if big is None:  # schema 1 files: the run's rule (bench/fixture.hpp, kBeyondCachesFactor = 4)
                big = (p.bytes_total or 0) >= 4 * llc
            shape = p.shape()
            frac = p.fraction
            pr = p.pb.get("paired_read") or {}
            # A suspect paired fraction (above the read it was paired with) is not a result.
            paired = None if pr.get("suspect") else pr.get("fraction_median")
            row = None
            if big and p.phase == "decode" and p.op == "linear" and p.key.impl == "own" and shape.get("M") == 1:
                row = gemv
            elif big and p.op == "decode_attention":
                row = attention
            if row is not None and frac is not None:
                row.append((frac, paired))
                lines.append(f"  {p.name[:72]:72s} {100 * frac:5.1f}%  paired " +
                             (f"{100 * paired:5.1f}%" if paired is not None else "    -"))
            if big and p.op in ("decode_attention", "decode_attention_paged"):
                key = (p.key.model, p.dtype, shape.get("B"), shape.get("L"), shape.get("Hq"), shape.get("D"))
                times.setdefault(key, {})[p.op] = p.median_s
        for key, t in sorted(times.items(), key=str):
            if "decode_attention" in t and "decode_attention_paged" in t:
                paged_ratio.append(t["decode_attention_paged"] / t["decode_attention"])
    return gemv, attention, paged_ratio, lines, warnings


def verdict(values: list, target: float, at_least: bool = True) -> str:
    vals = [v for v in values if v is not None]
    if not vals:
        return "no points"
    med = statistics.median(vals)
    meets = sum((v >= target) if at_least else (v <= target) for v in vals)
    ok = med >= target if at_least else med <= target
    return f"median {med:.3f} [{min(vals):.3f}..{max(vals):.3f}], {meets}/{len(vals)} points meet it: {'holds' if ok else 'MISSED'}"


def main(argv: list | None = None) -> int:
    ap = argparse.ArgumentParser(description="The CPU backend's speed targets, read off results files of "
                                             "`phasebench run`.")
    ap.add_argument("files", nargs="+", help="results files of `phasebench run` on the CPU backend")
    args = ap.parse_args(argv)
    try:
        gemv, attention, paged, lines, warnings = check(args.files)
    except ResultsError as e:
        print(f"{ap.prog}: {e}", file=sys.stderr)
        return 2
    for w in warnings:
        print(f"{ap.prog}: warning: {w}", file=sys.stderr)
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
    sys.exit(main())
