"""Compare two or more phasebench results files (python/phasebench_tools/compare.py).

Run as `phasebench-compare` or `.venv/bin/python scripts/compare.py` (a thin wrapper):

    phasebench-compare a.json b.json [c.json ...]
        [--format table|markdown|csv|json] [--output FILE]
        [--fail-on-regression PCT] [--alpha 0.05] [--same-within 2]
        [--significance auto|mannwhitney|minmax] [--filter REGEX]
        [--verdicts-on time|fraction] [--roofline CHART.png|svg|pdf]
    phasebench-compare FILE --impl own --against flashinfer [same options]

The first file is the reference. With --impl A --against B, one file's points of implementation A
are compared with the same points (same key but impl) of B in that file, B being the reference:
SLOWER means A (ours) is slower than B (the library), and --fail-on-regression gates on that;
only the operations both implementations run are compared (implementations_of). Points are matched on their structured key (phase, op,
model, target, dtype, impl, args), never on names. For every matched point and file: the
median time, TFLOP/s, GB/s and fraction of the file's own roofline, and against the first
file the speedup (reference time / this time), the change in time, a verdict and its
p-value. Per phase: geometric means of the speedups and of the fractions of roofline, and
the count of each verdict. Points that are not in every file are listed.

Verdicts (a same-GPU regression check; across GPUs they only restate the speedup). With
ratio = median time / reference median time, band = --same-within / 100 (default 2%) and
alpha = --alpha (default 0.05):

  * method "mannwhitney", when both points have raw samples (time.samples_s, schema 3):
    scipy.stats.mannwhitneyu(this, reference, alternative="two-sided"), as Google
    Benchmark's tools/compare.py runs it, gives p.
      - AMBIGUOUS when the sample counts are too small for the test ever to reach alpha:
        its smallest p (no sample of one side overlapping the other; 2 / C(n1+n2, n1) for
        the exact test, e.g. 0.1 for 3 vs 3) is >= alpha;
      - p < alpha: SLOWER if ratio > 1 + band, FASTER if ratio < 1 - band, else SAME (a
        real but negligible change); AMBIGUOUS instead of SLOWER/FASTER when the ranks (U)
        and the medians move in opposite directions;
      - p >= alpha: SAME when both points are tight (IQR / median <= band) and the ratio is
        within 1 +/- band; else AMBIGUOUS (too noisy to tell, or a change of the medians
        the test cannot confirm).
  * method "minmax", when either file has no raw samples (schema 1 and 2): the same rule
    with "the [min_s, max_s] ranges do not overlap" in place of p < alpha and the recorded
    cv (stddev / mean; the range itself widens with every sample) as the spread; p-value
    none. Overlapping ranges with a large spread are AMBIGUOUS.

`--significance mannwhitney` forces the U test (AMBIGUOUS without raw samples),
`--significance minmax` the ranges (no scipy needed). `--fail-on-regression PCT` exits 1
when some point is SLOWER than the reference by more than PCT percent (so a slowdown must
also be significant and beyond the band: a large change the test cannot confirm is
AMBIGUOUS and does not fail), or a point that ran in the reference now fails with an error.

Noisy machines. Each file's measured ceilings (the read bandwidth, the compute peak per dtype)
and what it says about the machine (the load average before and after, the share of the CPU time
other processes used and the hypervisor stole over the run, the CPU or SM clock) are shown above
the points. Where a file's measured ceilings differ from the reference's by more than the
--same-within band, the machine changed between the runs, not only the code: the output says so
above the verdicts, and gives every point a second verdict on the fraction of each file's own
measured roofline (the same test, with this file's samples scaled by T_ref / T_this, where T is the
point's roofline time max(FLOPs / P, bytes / W) against that file's measured ceilings; SLOWER then
means a smaller fraction of its own roofline). `--verdicts-on fraction` makes those the verdicts
(counts, AMBIGUOUS list, regression gate; a point without measured ceilings in both files is then
AMBIGUOUS); the default, `time`, judges the times as measured. --fail-on-regression says which.

Across devices (files whose device slug, context.phasebench.device.slug, differs from the reference's):
each matched point is placed against its own device's ceilings, and the points whose bound changed
(memory -> compute or back) are listed per file with both sides' intensity, the ridge of each device
for the point's dtype, both fractions of roofline and the time ratio (crossdevice.py). The bound is the
one each point records (against the ceilings its run used), else intensity against that file's ridge.
`--roofline PATH` draws the files on one chart (roofline.cross_device_figure: each device's own
ceilings in its colour, named after the device, and an arrow from the reference's point to the other
file's for each change; files of one device get phasebench-roofline's overlay).

Two serve files (`phasebench serve -o`) are set side by side instead (serve.py): their points matched
on the sweep value (concurrency or rate), tokens/s per GPU and per user, TTFT and TPOT p50/p99,
goodput and SLO for A and B, and B/A ratios of the two throughputs; --roofline PATH draws both on
the Pareto chart. The verdict and regression options do not apply to them and are refused.

Two counters files (`phasebench counters`) are diffed instead (counters.py): every count of
every matched point, SAME or CHANGED with the counters that differ, and the estimate's
headline figures side by side; --fail-on-regression PCT then fails on DRAM bytes grown or an
estimated fraction fallen by more than PCT.

Exit status: 0 fine; 1 regression beyond the threshold; 2 bad input (a file that cannot be
read, fewer than two usable files, files with no benchmark in common, or a bad option
value; with --impl: an implementation with no point in the file, --against without --impl or
the reverse, more than one file, or no point of one on the key of a point of the other; each
one line on stderr). The files that can be read are still compared and
reported when another one is bad.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import functools
import io
import json
import math
import os
import re
import statistics
import sys

from . import cli
from . import counters as pc
from . import crossdevice
from . import results as pr

EXIT_OK, EXIT_REGRESSION, EXIT_BAD_INPUT = 0, 1, cli.EXIT_BAD_INPUT
DEFAULT_ALPHA = 0.05
DEFAULT_SAME_WITHIN_PCT = 2.0


# --------------------------------------------------------------------------------------
# Verdicts
# --------------------------------------------------------------------------------------

VERDICTS = ("FASTER", "SLOWER", "SAME", "AMBIGUOUS")
METHODS = ("auto", "mannwhitney", "minmax")


def relative_iqr(xs: list) -> float | None:
    """Interquartile range / median of raw samples (None below 2 samples: no spread to judge)."""
    if len(xs) < 2:
        return None
    q1, med, q3 = statistics.quantiles(xs, n=4, method="inclusive")
    return (q3 - q1) / med


def mannwhitney(a: list, b: list) -> tuple[float, float]:
    """(two-sided p-value, U of b) of scipy's Mann-Whitney U test, as Google Benchmark's compare.py calls it."""
    from scipy import stats  # imported here: --significance minmax runs without scipy

    r = stats.mannwhitneyu(b, a, alternative="two-sided")
    p = float(r.pvalue)
    return (p if math.isfinite(p) else 1.0), float(r.statistic)  # all samples equal: no evidence of a change


@functools.lru_cache(maxsize=None)
def min_p_value(na: int, nb: int) -> float:
    """The smallest p the U test can give with these sample counts: every sample of one side below the other's."""
    return mannwhitney(list(range(na)), list(range(na, na + nb)))[0]


def _decide(ratio: float, band: float, significant: bool, spreads: tuple, spread_kind: str) -> tuple[str, str]:
    """(verdict, why) once the test has spoken; shared by both methods so that they judge alike."""
    change = f"{(ratio - 1) * 100:+.1f}%"
    if significant:
        if ratio > 1 + band:
            return "SLOWER", f"{change} beyond +/-{band * 100:g}%"
        if ratio < 1 - band:
            return "FASTER", f"{change} beyond +/-{band * 100:g}%"
        return "SAME", f"a real but negligible change: {change} within +/-{band * 100:g}%"
    tight = all(x is not None and x <= band for x in spreads)
    shown = " and ".join("-" if x is None else f"{x * 100:.1f}%" for x in spreads)
    if tight and abs(ratio - 1) <= band:
        return "SAME", f"both spreads ({spread_kind} {shown}) and the change ({change}) within +/-{band * 100:g}%"
    if tight:
        return "AMBIGUOUS", f"tight spreads ({spread_kind} {shown}) but a {change} change the test cannot confirm"
    return "AMBIGUOUS", f"too noisy to tell: spread ({spread_kind}) {shown} against +/-{band * 100:g}%"


def verdict(a: pr.Point, b: pr.Point, alpha: float, band: float, method: str = "auto") -> dict:
    """The verdict on b's time against the reference a's (both ok points); see the module docstring.

    Returns {verdict, method, significant, p_value, why, ...}: p_value is None for minmax.
    """
    ratio = b.median_s / a.median_s
    sa, sb = a.samples_s, b.samples_s
    if method == "mannwhitney" or (method == "auto" and sa is not None and sb is not None):
        if sa is None or sb is None:
            return {"verdict": "AMBIGUOUS", "method": "mannwhitney", "significant": None, "p_value": None,
                    "why": "no raw samples (time.samples_s, schema 3) in "
                           + " and ".join(x for x, s in (("the reference", sa), ("this file", sb)) if s is None)}
        p, u_b = mannwhitney(sa, sb)
        best = min_p_value(len(sa), len(sb))
        spreads = (relative_iqr(sa), relative_iqr(sb))
        out = {"method": "mannwhitney", "significant": p < alpha, "p_value": p, "min_p_value": best,
               "samples": [len(sa), len(sb)], "spread": list(spreads)}
        if best >= alpha:
            return {**out, "verdict": "AMBIGUOUS",
                    "why": f"too few samples ({len(sa)} vs {len(sb)}): the U test cannot reach p < {alpha:g} "
                           f"(its smallest p is {best:.2g}, when no sample of one side overlaps the other)"}
        v, why = _decide(ratio, band, p < alpha, spreads, "IQR/median")
        # The U test compares ranks, the ratio medians: a verdict needs both to agree on the direction.
        ranks_slower = u_b > len(sa) * len(sb) / 2
        if v in ("SLOWER", "FASTER") and ranks_slower != (v == "SLOWER"):
            v, why = "AMBIGUOUS", (f"the ranks say {'slower' if ranks_slower else 'faster'} but the median "
                                   f"moved {(ratio - 1) * 100:+.1f}%")
        return {**out, "verdict": v, "why": f"U test p={p:.2g} ({'<' if p < alpha else '>='} {alpha:g}); {why}"}
    ta, tb = a.time or {}, b.time or {}
    lo_a, hi_a = pr._num(ta.get("min_s")) or a.median_s, pr._num(ta.get("max_s")) or a.median_s
    lo_b, hi_b = pr._num(tb.get("min_s")) or b.median_s, pr._num(tb.get("max_s")) or b.median_s
    disjoint = lo_b > hi_a or hi_b < lo_a
    # The recorded cv, not the min..max range, is the spread: a range widens with every sample taken.
    spreads = (a.cv, b.cv)
    v, why = _decide(ratio, band, disjoint, spreads, "cv")
    return {"verdict": v, "method": "minmax", "significant": disjoint, "p_value": None, "spread": list(spreads),
            "why": f"min..max ranges {'do not overlap' if disjoint else 'overlap'}; {why}"}


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
                  "fraction_of_roofline_by_source": {s: f for s, f in by_source.items() if f is not None},
                  "raw_samples": p.samples_s is not None, "converged": t.get("converged"), "noise": t.get("noise"),
                  "stop_reason": t.get("stop_reason")})
    return d


VERDICTS_ON = ("time", "fraction")
VERDICTS_ON_TEXT = {"time": "on times", "fraction": "on fractions of each file's own measured roofline"}


class _Scaled:
    """A point's timing with every sample multiplied by k: what verdict() reads of a point."""

    def __init__(self, p: pr.Point, k: float):
        t = p.time or {}
        self.median_s = p.median_s * k
        self.samples_s = None if p.samples_s is None else [x * k for x in p.samples_s]
        self.time = {key: t[key] * k for key in ("min_s", "max_s") if pr._num(t.get(key)) is not None}
        self.cv = p.cv


def normalised_verdict(a: pr.Point, b: pr.Point, alpha: float, band: float, method: str = "auto") -> dict:
    """The verdict on b's fraction of its own measured roofline against a's (see the module docstring).

    b's samples are scaled by T_a / T_b (T: the roofline time against each file's measured ceilings), so
    the time test judges the fractions; change_pct is the time change after that scaling.
    """
    ta, tb = a.roofline_time("measured"), b.roofline_time("measured")
    if ta is None or tb is None:
        missing = " and ".join(x for x, t in (("the reference", ta), ("this file", tb)) if t is None)
        return {"verdict": "AMBIGUOUS", "method": method, "significant": None, "p_value": None, "change_pct": None,
                "fraction_ratio": None, "why": f"no measured roofline for this point in {missing} to normalise by"}
    k = ta / tb
    v = verdict(a, _Scaled(b, k), alpha, band, method)
    return {**v, "change_pct": (b.median_s * k / a.median_s - 1) * 100, "scale": k,
            "fraction_ratio": (tb / b.median_s) / (ta / a.median_s)}


def ceilings_of(r: pr.Results, dtypes: list) -> dict:
    """The file's measured read bandwidth and compute peaks (for `dtypes`), None where not measured."""
    return {"read_bytes_per_s": r.bandwidth_ceiling("measured"),
            "compute_flops_per_s": {d: r.compute_ceiling(d, "measured") for d in dtypes}}


def ceiling_changes(ceilings: list, labels: list, band: float) -> list:
    """Each measured ceiling of a file that differs from the reference's by more than the band."""
    out = []
    ref = ceilings[0]
    for lab, c in zip(labels[1:], ceilings[1:]):
        pairs = [("read", "B/s", ref["read_bytes_per_s"], c["read_bytes_per_s"])]
        pairs += [(f"{d} compute", "FLOP/s", ref["compute_flops_per_s"].get(d), v)
                  for d, v in c["compute_flops_per_s"].items()]
        for name, unit, x, y in pairs:
            if x and y and abs(y / x - 1) > band:
                out.append({"file": lab, "ceiling": name, "unit": unit, "reference": x, "value": y,
                            "change_pct": (y / x - 1) * 100})
    return out


def _no_counts() -> dict:
    return {**{v.lower(): 0 for v in VERDICTS}, "not_compared": 0}


def build_comparison(results: list, errors: list, alpha: float = DEFAULT_ALPHA, method: str = "auto",
                     fail_pct: float | None = None, name_filter: str | None = None,
                     same_within_pct: float = DEFAULT_SAME_WITHIN_PCT, verdicts_on: str = "time",
                     labels: list | None = None, within: dict | None = None) -> dict:
    """The comparison of `results` against the first; `labels` names each (default A, B, ...; the
    implementations when one file's implementations are compared, implementations_of)."""
    if verdicts_on not in VERDICTS_ON:
        raise ValueError(f"verdicts_on must be one of {VERDICTS_ON}, not {verdicts_on!r}")
    labels = list(labels) if labels is not None else pr.file_labels(len(results))
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
    # Cold GPU points timed by different methods (a rotating graph over copies of
    # the data vs single launches) differ by the fixed launch cost, not the kernel.
    def timed_by(p):  # files before time.method: several runs per sample were a hot graph
        t = p.time or {}
        return t.get("method") or ("graph" if (t.get("runs_per_sample") or 1) > 1 else "single")
    mixed = [k for k in keys
             if len({timed_by(p) for p in m.table[k] if p is not None and p.time}) > 1]
    if mixed:
        first = next(p for p in m.table[mixed[0]] if p is not None and p.time)
        warnings.append(f"{len(mixed)} matched point(s) were timed by different methods, e.g. {first.name}: " +
                        ", ".join(f"{lab}: {timed_by(p)}" for lab, p in zip(labels, m.table[mixed[0]])
                                  if p is not None and p.time) +
                        "; a rotating graph leaves out the fixed launch cost a single launch pays "
                        "(phasebench run --cold-timing)")
    if fail_pct is not None and len({r.device_slug for r in results}) > 1:
        warnings.append("--fail-on-regression compares different devices (" +
                        ", ".join(f"{lab}: {r.device_name}" for lab, r in zip(labels, results)) +
                        "); a regression check is meant for the same GPU")
    new_errors = [{"path": e.path, "message": str(e)} for e in errors]

    # The machines: measured ceilings and what each file says about the load around it.
    band = same_within_pct / 100
    dtypes = sorted({k.dtype for k in keys if k.dtype})
    ceilings = [ceilings_of(r, dtypes) for r in results]
    machines = [{"label": lab, **ceilings[i], **r.machine()} for i, (lab, r) in enumerate(zip(labels, results))]
    changes = ceiling_changes(ceilings, labels, band)
    unmeasured = [lab for lab, c in zip(labels, ceilings) if c["read_bytes_per_s"] is None]
    for mc in machines:
        if mc["busy"]:
            warnings.append(f"{mc['label']}: the machine was busy while it ran ({mc['why']}); its times and "
                            f"measured ceilings moved with that")
    ceilings_note = None
    if changes:
        shown = "; ".join(f"{c['file']}'s {c['ceiling']} {pr.fmt_si(c['value'], c['unit'])} against "
                          f"{pr.fmt_si(c['reference'], c['unit'])} ({c['change_pct']:+.1f}%)" for c in changes)
        # Files from different GPUs differ by design; the same GPU's differ because the machine did.
        why = ("The files come from different devices: verdicts on times compare the GPUs"
               if len({r.device_slug for r in results}) > 1 else
               "The machine changed between the runs, not only the code: verdicts on times include that change")
        ceilings_note = (f"the measured ceilings differ by more than the +/-{same_within_pct:g}% band: {shown}. {why}"
                         f"; verdicts on fractions of each file's own measured roofline take it out "
                         + ("(used here: --verdicts-on fraction)" if verdicts_on == "fraction"
                            else "(shown beside them; --verdicts-on fraction to judge on them)"))
        if unmeasured:
            ceilings_note += f"; {', '.join(unmeasured)} without measured ceilings cannot be normalised"
        warnings.insert(0, ceilings_note)
    elif verdicts_on == "fraction" and unmeasured:
        warnings.append(f"--verdicts-on fraction: {', '.join(unmeasured)} ha{'s' if len(unmeasured) == 1 else 've'} "
                        f"no measured ceilings (run without --no-calibrate); their points are AMBIGUOUS")

    # Files that share nothing with the reference are errors (reported, not compared).
    ref_keys = {k for k in keys if m.table[k][0] is not None}
    for i in range(1, len(results)):
        if not any(m.table[k][i] is not None for k in ref_keys):
            new_errors.append({"path": results[i].path,
                               "message": f"{results[i].path}: no benchmark in common with the reference "
                                          f"{results[0].path} (different models, ops, dtypes or sweep arguments?)"})

    points, only_some, status_changes, regressions, ambiguous = [], [], [], [], []
    counts, other_counts = _no_counts(), _no_counts()
    other = "time" if verdicts_on == "fraction" else "fraction"
    show_other = verdicts_on == "fraction" or bool(changes)
    phase_counts: dict = {}  # (phase, file label) -> counts like `counts`
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
            tally = phase_counts.setdefault((k.phase, labels[i]), _no_counts())
            if ref.ok and not p.ok:
                change = {"name": name, "file": labels[i], "from": ref.status, "to": p.status, "message": p.message}
                status_changes.append(change)
                if p.status == "error" and fail_pct is not None:
                    regressions.append({**change, "kind": "error"})
                counts["not_compared"] += 1
                tally["not_compared"] += 1
                continue
            if not (ref.ok and p.ok):
                if ref.status != p.status:
                    status_changes.append({"name": name, "file": labels[i], "from": ref.status, "to": p.status,
                                           "message": p.message or ref.message})
                counts["not_compared"] += 1
                tally["not_compared"] += 1
                continue
            speedup = ref.median_s / p.median_s
            change_pct = (p.median_s / ref.median_s - 1) * 100
            by = {"time": {**verdict(ref, p, alpha, band, method), "change_pct": change_pct},
                  "fraction": normalised_verdict(ref, p, alpha, band, method)}
            v = by[verdicts_on]
            frac_ratio = (p.fraction / ref.fraction) if (p.fraction and ref.fraction) else None
            entry["vs_first"][labels[i]] = {"speedup": speedup, "time_change_pct": change_pct,
                                            "fraction_ratio": frac_ratio, **v, "verdicts_on": verdicts_on,
                                            other: by[other] if show_other else None}
            counts[v["verdict"].lower()] += 1
            other_counts[by[other]["verdict"].lower()] += 1
            tally[v["verdict"].lower()] += 1
            judged_change = v["change_pct"]
            if v["verdict"] == "AMBIGUOUS":
                ambiguous.append({"name": name, "file": labels[i], "time_change_pct": judged_change, "why": v["why"]})
            if fail_pct is not None and v["verdict"] == "SLOWER" and judged_change > fail_pct:
                regressions.append({"name": name, "file": labels[i], "kind": "slower", "time_change_pct": judged_change,
                                    "reference_median_s": ref.median_s, "median_s": p.median_s, "why": v["why"],
                                    "verdicts_on": verdicts_on})
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
                            "geomean_fraction_of_roofline": pr.geomean(fr),
                            "verdicts": phase_counts.get((ph, lab), _no_counts()) if i > 0 else None})
    return {"files": files, "reference": labels[0] if labels else None, "alpha": alpha, "significance": method,
            "same_within_pct": same_within_pct, "fail_on_regression_pct": fail_pct, "points": points,
            "summary": summary, "only_in_some": only_some, "status_changes": status_changes,
            "regressions": regressions, "ambiguous": ambiguous, "counts": counts,
            "verdicts_on": verdicts_on, "other_counts": other_counts if show_other else None,
            "machines": machines, "ceiling_changes": changes, "ceilings_note": ceilings_note,
            "bound_changes": crossdevice.bound_changes(results, labels, keys),
            "warnings": warnings, "errors": new_errors, "within": within}


# --------------------------------------------------------------------------------------
# Implementations within one file (--impl A --against B)
# --------------------------------------------------------------------------------------

def implementations(r: pr.Results) -> list:
    """The implementations the file's points name, in first-seen order."""
    out = []
    for p in r.points:
        if p.key.impl not in out:
            out.append(p.key.impl)
    return out


def one_implementation(r: pr.Results, impl: str, ops: set, warnings: list) -> pr.Results:
    """The file's points of `impl` in the operations `ops` ((phase, op) pairs) as a Results of their own,
    each keyed (and named) without its impl, so that the same point of two implementations matches as the
    same point of two files does."""
    points = []
    for p in r.points:
        if p.key.impl == impl and (p.phase, p.op) in ops:
            key = dataclasses.replace(p.key, impl="")
            points.append(pr.Point(key=key, name=key.label(), pb=p.pb, entries=p.entries))
    return pr.Results(path=r.path, context=r.context, pb=r.pb, points=points, warnings=warnings)


def implementations_of(r: pr.Results, impl: str, against: str) -> tuple:
    """([against's points, impl's points], labels, ops left out): the library as the reference, ours compared
    with it, so SLOWER (and --fail-on-regression) is ours slower than the library. Only the operations both
    run: the others' points could never match (a library that has no KV append is not missing 30 points).
    ToolError when either implementation has no point, or they share no key."""
    have = implementations(r)
    shown = ", ".join(i or "(none)" for i in have)
    for i, opt in ((impl, "--impl"), (against, "--against")):
        if i not in have:
            raise cli.ToolError(f"{r.path}: no point of implementation {i!r} ({opt}); the file's implementations: "
                                f"{shown}")
    ops_of = {i: {(p.phase, p.op) for p in r.points if p.key.impl == i} for i in (impl, against)}
    both = ops_of[impl] & ops_of[against]
    alone = sorted((ops_of[impl] | ops_of[against]) - both)
    ref, this = one_implementation(r, against, both, r.warnings), one_implementation(r, impl, both, [])
    if not set(ref.by_key) & set(this.by_key):
        raise cli.ToolError(f"{r.path}: no point of {impl!r} has a point of {against!r} with the same key "
                            f"(phase, op, model, target, dtype, args); nothing to compare")
    return [ref, this], [against, impl], [f"{ph}/{op}" for ph, op in alone]


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
              "time change", "verdict", "p-value"]
    other = "time" if cmp["verdicts_on"] == "fraction" else "fraction"
    if cmp["other_counts"] is not None:  # the second verdict: change and verdict
        header.append("on own roofline" if other == "fraction" else "on times")
    rows = []
    for e in cmp["points"]:
        first = True
        for lab, c in e["files"].items():
            row = [e["name"] if first else "", lab]
            first = False
            if c is None:
                rows.append(row + ["absent"] + ["-"] * 8)
                continue
            if c["status"] != "ok":
                rows.append(row + [c["status"]] + ["-"] * 8)
                continue
            v = e["vs_first"].get(lab)
            p = "-"
            if v:  # minmax has no p-value: the column names the method instead
                p = f"{v['p_value']:.2g}" if v["p_value"] is not None else v["method"]
            cells = ["ok", fmt_time(c["median_s"]), fmt_num(c["tflops"]), fmt_num(c["gbps"]),
                     fmt_pct(c["fraction_of_roofline"]),
                     f"{v['speedup']:.3f}x" if v else "-", fmt_pct(v["time_change_pct"], True) if v else "-",
                     v["verdict"] if v else "-", p]
            if cmp["other_counts"] is not None:
                o = (v or {}).get(other)
                cells.append(f"{fmt_pct(o['change_pct'], True)} {o['verdict']}" if o else "-")
            rows.append(row + cells)
    return header, rows


def machine_rows(cmp: dict) -> tuple[list, list]:
    """Per file: its measured ceilings and what it says about the machine around the run."""
    dtypes = sorted({d for m in cmp["machines"] for d in m["compute_flops_per_s"]})
    header = ["file", "measured read", *[f"{d} compute" for d in dtypes], "load before", "load after",
              "others' CPU", "steal", "clock", "busy"]

    def share(x):
        return "-" if x is None else f"{x * 100:.0f}%"

    rows = []
    for m in cmp["machines"]:
        load = [("-" if x is None else f"{x:.2f}") for x in (m["load_before"], m["load_after"])]
        clock = "-" if m["clock_mhz"] is None else f"{m['clock_mhz']:.0f} MHz"
        busy = "-" if m["busy"] is None else ("BUSY" if m["busy"] else "no")
        rows.append([m["label"], pr.fmt_si(m["read_bytes_per_s"], "B/s"),
                     *[pr.fmt_si(m["compute_flops_per_s"].get(d), "FLOP/s") for d in dtypes],
                     *load, share(m["others_share"]), share(m["steal_share"]), clock, busy])
    return header, rows


def summary_rows(cmp: dict) -> tuple[list, list]:
    ref = cmp["reference"] or "A"
    header = ["phase", "file", "device", "points vs " + ref, f"geomean speedup vs {ref}", "geomean % roofline",
              "points in all files", *VERDICTS, "not compared"]
    dev = {f["label"]: f["device"] for f in cmp["files"]}
    rows = []
    for s in cmp["summary"]:
        g, n = s["geomean_speedup_vs_first"], s["verdicts"]
        tally = [str(n[v.lower()]) for v in VERDICTS] + [str(n["not_compared"])] if n else ["-"] * (len(VERDICTS) + 1)
        rows.append([s["phase"], s["file"], dev.get(s["file"], ""), str(s["points"]), "-" if g is None else f"{g:.3f}x",
                     fmt_pct(s["geomean_fraction_of_roofline"]), str(s["points_in_all_files"]), *tally])
    return header, rows


def counts_text(cmp: dict) -> str:
    """How many verdicts of each kind against the reference, over every file and phase (and the other kind's)."""
    c = cmp["counts"]
    out = (f"verdicts against {cmp['reference']} {VERDICTS_ON_TEXT[cmp['verdicts_on']]}: "
           + ", ".join(f"{c[v.lower()]} {v}" for v in VERDICTS)
           + f", {c['not_compared']} not compared (method {cmp['significance']}, alpha {cmp['alpha']:g}, "
             f"SAME within +/-{cmp['same_within_pct']:g}%)")
    o = cmp["other_counts"]
    if o is not None:
        other = "time" if cmp["verdicts_on"] == "fraction" else "fraction"
        out += (f"\n{VERDICTS_ON_TEXT[other]} instead: " + ", ".join(f"{o[v.lower()]} {v}" for v in VERDICTS)
                + (" (--verdicts-on fraction to judge on them)" if other == "fraction" else ""))
    return out


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


def bound_changes_text(bc: dict, table) -> str:
    """Per file from another device than the reference: the count line, then its changed points' table."""
    out = []
    for pair in bc["pairs"]:
        if out:
            out.append("")
        out.append(f"{crossdevice.pair_title(pair)}: {crossdevice.pair_counts_text(pair)}")
        if pair["changed"]:
            out.append(table(*crossdevice.change_rows(pair)))
    return "\n".join(out)


def render_text(cmp: dict, markdown: bool) -> str:
    table = render_markdown_table if markdown else render_text_table
    h = (lambda s: f"## {s}") if markdown else (lambda s: f"{s}\n{'=' * len(s)}")
    out = []
    w = cmp.get("within")
    if w:
        out.append(f"implementations within {w['path']}: {w['impl']} against {w['against']} (the reference: "
                   f"SLOWER means {w['impl']} is slower than {w['against']})")
        if w["operations_of_one_only"]:
            out.append(f"left out, run by only one of them: {', '.join(w['operations_of_one_only'])}")
        out.append("")
    out.append(h("Files"))
    fh = ["file", "path", "device", "backend", "date", "cache", "ceilings"]
    fr = [[f["label"], f["path"], f["device"], f["backend"], f["date"] + ("" if f["complete"] else " (INCOMPLETE)"),
           str(f["cache"] or "-"), f["ceiling_used"] or "-"] for f in cmp["files"]]
    out.append(table(fh, fr))
    out.append("")
    out.append(h("Machines (measured ceilings; load average and CPU shares around each run)"))
    out.append(table(*machine_rows(cmp)))
    for w in cmp["warnings"]:
        out.append(("> " if markdown else "") + f"warning: {w}")
    for e in cmp["errors"]:
        out.append(("> " if markdown else "") + f"error: {e['message']}")
    out.append("")
    out.append(h(f"Points (ratios against {cmp['reference']}; time is the median; verdicts "
                 f"{VERDICTS_ON_TEXT[cmp['verdicts_on']]}: method {cmp['significance']}, alpha {cmp['alpha']:g}, "
                 f"SAME within +/-{cmp['same_within_pct']:g}%)"))
    out.append(table(*point_rows(cmp)))
    out.append("")
    out.append(h("Per-phase summary (geometric means, verdict counts)"))
    out.append(table(*summary_rows(cmp)))
    out.append("")
    out.append(counts_text(cmp))
    if cmp["bound_changes"]:
        out.append("")
        out.append(h("Bound changes between devices (each point against its own device's ceilings)"))
        out.append(bound_changes_text(cmp["bound_changes"], table))
    if cmp["ambiguous"]:
        out.append("")
        out.append(h(f"AMBIGUOUS points ({len(cmp['ambiguous'])}): too noisy or too few samples to tell"))
        out.append(table(["point", "file", "time change", "why"],
                         [[a["name"], a["file"], fmt_pct(a["time_change_pct"], True), a["why"]]
                          for a in cmp["ambiguous"]]))
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
        on = VERDICTS_ON_TEXT[cmp["verdicts_on"]]
        if cmp["regressions"]:
            out.append(h(f"REGRESSIONS (SLOWER by more than {thr:g}%, verdicts {on}, or now failing)"))
            out.append(table(["point", "file", "kind", "time change", "why"],
                             [[r["name"], r["file"], r["kind"], fmt_pct(r.get("time_change_pct"), True),
                               r.get("why", r.get("message", ""))] for r in cmp["regressions"]]))
        else:
            out.append(f"no regression beyond {thr:g}% against {cmp['reference']} (verdicts {on})")
        if cmp["ambiguous"]:  # the gate cannot see through noise: say so rather than pass silently
            out.append(f"{len(cmp['ambiguous'])} AMBIGUOUS point(s) could not be checked")
    return "\n".join(out) + "\n"


CSV_FIELDS = ["name", "phase", "op", "model", "target", "dtype", "impl", "args", "file", "path", "device", "status",
              "median_s", "mean_s", "stddev_s", "samples", "min_s", "max_s", "tflops", "gbps", "intensity",
              "fraction_of_roofline", "bound", "speedup_vs_first", "time_change_pct", "verdict", "p_value",
              "method", "significant", "why", "present_in", "verdicts_on", "other_change_pct", "other_verdict",
              "bound_change"]


def render_csv(cmp: dict) -> str:
    """Long (tidy) CSV: one row per point and file; absent points have status 'absent'."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_FIELDS, lineterminator="\n")
    w.writeheader()
    files = {f["label"]: f for f in cmp["files"]}
    # A point whose bound changed against a reference from another device: "memory -> compute" on its row.
    moved = {(pair["file"], c["name"]): c["change"] for pair in (cmp["bound_changes"] or {}).get("pairs", [])
             for c in pair["changed"]}
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
                            "verdict": v["verdict"], "p_value": "" if v["p_value"] is None else v["p_value"],
                            "method": v["method"], "why": v["why"],
                            "significant": "" if v["significant"] is None else str(v["significant"]).lower(),
                            "verdicts_on": v["verdicts_on"]})
                o = v.get("fraction" if v["verdicts_on"] == "time" else "time")
                if o:
                    row.update({"other_change_pct": "" if o["change_pct"] is None else o["change_pct"],
                                "other_verdict": o["verdict"]})
            if (lab, e["name"]) in moved:
                row["bound_change"] = moved[(lab, e["name"])]
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
    ap = cli.Parser(
        description="Compare phasebench results files (ratios against the first), across GPUs or as a same-GPU "
                    "regression check. Each point gets a verdict against the first file: FASTER, SLOWER, SAME or "
                    "AMBIGUOUS (too noisy or too few samples to tell).",
        epilog="exit status: 0 fine, 1 regression beyond --fail-on-regression, 2 bad input")
    ap.add_argument("files", nargs="+", metavar="FILE",
                    help="results JSON written by `phasebench run` (2 or more; one with --impl), or two serve files "
                         "(`phasebench serve -o`): their points side by side, matched on concurrency or rate")
    ap.add_argument("--format", choices=("table", "markdown", "csv", "json"), default="table",
                    help="output format (default: a terminal table)")
    ap.add_argument("--output", "-o", metavar="PATH",
                    help="write the output here instead of stdout; never over an input or a results file "
                         "unless --overwrite")
    ap.add_argument("--overwrite", action="store_true",
                    help="let --output or --roofline replace an input or an existing results file")
    ap.add_argument("--roofline", metavar="PATH",
                    help="also draw the files on one roofline chart (.png, .svg or .pdf): files from different "
                         "devices each against their own device's ceilings, with an arrow for every point whose "
                         "bound changed between them (with serve files: their Pareto chart); never over an input or "
                         "a results file unless --overwrite")
    ap.add_argument("--fail-on-regression", type=float, metavar="PCT", default=None,
                    help="exit 1 if a point is SLOWER than in the first file (significant, beyond --same-within) by "
                         "more than PCT percent, or ran there and now fails with an error")
    ap.add_argument("--alpha", type=float, default=DEFAULT_ALPHA,
                    help=f"significance level of the Mann-Whitney U test, in (0, 1) (default {DEFAULT_ALPHA:g})")
    ap.add_argument("--same-within", type=float, metavar="PCT", default=DEFAULT_SAME_WITHIN_PCT,
                    help="a change of the median time within +/-PCT percent is SAME, and a spread within it is tight "
                         f"(default {DEFAULT_SAME_WITHIN_PCT:g})")
    ap.add_argument("--significance", choices=METHODS, default="auto",
                    help="auto: the Mann-Whitney U test on the raw samples (schema 3) where both points have them, "
                         "else non-overlapping min..max ranges (default); mannwhitney: only the U test (AMBIGUOUS "
                         "without raw samples); minmax: only min..max ranges (needs no scipy)")
    ap.add_argument("--filter", metavar="REGEX", help="only points whose name (or key label) matches")
    ap.add_argument("--verdicts-on", choices=VERDICTS_ON, default="time",
                    help="time: judge the median times as measured (default); fraction: judge each point's fraction "
                         "of its own file's measured roofline (the samples scaled by the ratio of the two files' "
                         "roofline times), which takes out a machine whose measured ceilings moved between the runs")
    ap.add_argument("--impl", metavar="IMPL",
                    help="compare implementations within ONE file: its points of IMPL (e.g. own, our kernels) "
                         "against the same points (same key but impl) of --against")
    ap.add_argument("--against", metavar="IMPL",
                    help="with --impl: the implementation to compare with (e.g. blas, flashinfer, cudnn). It is the "
                         "reference, so SLOWER means IMPL is slower than it and --fail-on-regression PCT exits 1 "
                         "when a point of IMPL is slower than the same point of --against by more than PCT percent")
    return ap


def check_args(ap: argparse.ArgumentParser, a: argparse.Namespace) -> argparse.Namespace:
    """The option values argparse cannot check, then the output path: all before any file is read."""
    if a.against is not None and a.impl is None:
        ap.error("--against needs --impl (the implementation compared with it)")
    if a.impl is not None:
        if a.against is None:
            ap.error("--impl needs --against (the implementation to compare it with)")
        if a.impl == a.against:
            ap.error(f"--impl and --against name the same implementation ({a.impl!r})")
        if len(a.files) != 1:
            ap.error(f"--impl compares the implementations within one file; got {len(a.files)} files")
    elif len(a.files) < 2:
        ap.error("give two or more results files (the first is the reference), or one file with --impl and "
                 "--against")
    if a.fail_on_regression is not None and not (math.isfinite(a.fail_on_regression) and a.fail_on_regression >= 0):
        ap.error(f"--fail-on-regression takes a percentage >= 0, not {a.fail_on_regression:g}")
    if not 0 < a.alpha < 1:
        ap.error(f"--alpha must be strictly between 0 and 1, not {a.alpha:g}")
    if not 0 <= a.same_within < 100:
        ap.error(f"--same-within takes a percentage >= 0 and below 100, not {a.same_within:g}")
    if a.filter is not None:
        cli.compile_regex(a.filter, "--filter")
    if a.roofline is not None:
        if a.impl is not None:
            ap.error("--roofline draws two or more files on one chart; --impl compares within one file")
        given = a.roofline
        a.roofline = cli.check_output(given, "--roofline", a.files, a.overwrite)  # an input first: say that
        if os.path.splitext(given)[1].lower().lstrip(".") not in CHART_FORMATS:
            ap.error(f"--roofline {given!r}: give a path ending in .png, .svg or .pdf (the chart's format)")
    if a.output is not None:
        a.output = cli.check_output(a.output, "--output", a.files, a.overwrite)
        if a.output == a.roofline:
            ap.error("--output and --roofline name the same file; give each its own")
    return a


CHART_FORMATS = ("png", "svg", "pdf")


def _roofline_module():
    try:
        from . import roofline  # matplotlib, which only the chart needs
    except ImportError as e:
        raise cli.ToolError(f"--roofline needs matplotlib ({e}); install scripts/requirements.txt") from None
    return roofline


def roofline_chart_figure(results: list, cmp: dict, name_filter: str | None):
    """The compared files on one roofline: from different devices, each file's points against its own
    device's ceilings with the bound changes as arrows (roofline.cross_device_figure); from one device, the
    overlay phasebench-roofline draws. Only the points --filter kept."""
    roofline = _roofline_module()
    if name_filter:
        rx = re.compile(name_filter)
        m = pr.match(results)
        kept = {k for k in m.keys if any(p is not None and (rx.search(p.name) or rx.search(k.label()))
                                         for p in m.table[k])}
        results = [pr.Results(path=r.path, context=r.context, pb=r.pb, points=[p for p in r.points if p.key in kept])
                   for r in results]
    return (roofline.cross_device_figure(results, cmp["bound_changes"]) if cmp["bound_changes"]
            else roofline.roofline_figure(results))


def roofline_chart(results: list, cmp: dict, name_filter: str | None, path: str) -> bytes:
    """roofline_chart_figure's chart in the format `path` ends in (png, svg, pdf)."""
    roofline = _roofline_module()
    fig = roofline_chart_figure(results, cmp, name_filter)
    fmt = os.path.splitext(path)[1].lower().lstrip(".")
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, dpi=110 if fmt == "png" else None)
    roofline.plt.close(fig)
    return buf.getvalue()


def compare_counters(a: argparse.Namespace, prog: str) -> int:
    """Two counters files (`phasebench counters`): their counts diffed, point by point."""
    if len(a.files) != 2:
        print(f"{prog}: error: counters files are compared two at a time (reference, then the other); got "
              f"{len(a.files)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        ref, other = pc.load(a.files[0]), pc.load(a.files[1])
    except pr.ResultsError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    cmp = pc.diff(ref, other, fail_pct=a.fail_on_regression)
    if a.filter:
        rx = cli.compile_regex(a.filter, "--filter")
        cmp["rows"] = [r for r in cmp["rows"] if rx.search(r["point"])]
        cmp["regressions"] = [x for x in cmp["regressions"] if rx.search(x["point"])]
    for w in cmp["warnings"]:
        print(f"{prog}: warning: {w}", file=sys.stderr)
    if not any(r["verdict"] in ("SAME", "CHANGED") for r in cmp["rows"]):
        print(f"{prog}: error: the files have no counted point in common; nothing to compare", file=sys.stderr)
        return EXIT_BAD_INPUT
    _write(pc.render(cmp, a.format), a.output)
    if a.fail_on_regression is not None and cmp["regressions"]:
        print(f"{prog}: {len(cmp['regressions'])} regression(s) beyond {a.fail_on_regression:g}% against "
              f"{a.files[0]}", file=sys.stderr)
        return EXIT_REGRESSION
    return EXIT_OK


def main(argv: list | None = None) -> int:
    ap = parser()
    # compare.py from scripts/, phasebench-compare as a console script
    return cli.run(ap, lambda a: _main(check_args(ap, a), ap.prog, ap), argv)


def _main(a: argparse.Namespace, prog: str, ap: argparse.ArgumentParser) -> int:
    from . import serve  # imported here: serve.py uses this module's formatting helpers

    if serve.all_serve_files(a.files, "both must be serve files (or both results files)"):
        return serve.compare_main(ap, a)
    kinds = [pc.file_kind(f) for f in a.files]
    if pc.KIND in kinds:
        if any(k == "results" for k in kinds):
            print(f"{prog}: error: {', '.join(f for f, k in zip(a.files, kinds) if k == pc.KIND)} hold(s) counters "
                  f"(`phasebench counters`) and the others timed results; compare counters with counters and "
                  f"results with results", file=sys.stderr)
            return EXIT_BAD_INPUT
        if a.impl is not None:
            print(f"{prog}: error: {a.files[0]} holds counters (`phasebench counters`); --impl compares the "
                  f"implementations of a results file", file=sys.stderr)
            return EXIT_BAD_INPUT
        if a.roofline is not None:
            print(f"{prog}: error: counters files (`phasebench counters`) have no times to place on a roofline; "
                  f"--roofline draws results files", file=sys.stderr)
            return EXIT_BAD_INPUT
        return compare_counters(a, prog)
    if a.impl is not None:
        return compare_implementations(a, prog)
    results, errors = pr.load_many(a.files)
    for e in errors:
        print(f"{prog}: error: {e}", file=sys.stderr)
    if len(results) < 2:  # each unusable file has had its line: nothing to add but the status
        return EXIT_BAD_INPUT
    try:
        cmp = build_comparison(results, errors, alpha=a.alpha, method=a.significance, fail_pct=a.fail_on_regression,
                               name_filter=a.filter, same_within_pct=a.same_within, verdicts_on=a.verdicts_on)
    except ImportError as e:  # scipy, which only the U test needs
        print(f"{prog}: error: the Mann-Whitney U test needs scipy ({e}); install scripts/requirements.txt, "
              f"or use --significance minmax", file=sys.stderr)
        return EXIT_BAD_INPUT
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
    chart = roofline_chart(results, cmp, a.filter, a.roofline) if a.roofline else None  # before any output
    _write(render(cmp, a.format), a.output)
    if chart is not None:
        cli.write_file(a.roofline, chart, "roofline chart")
    regressed = a.fail_on_regression is not None and bool(cmp["regressions"])
    if regressed:
        n = len(cmp["regressions"])
        print(f"{prog}: {n} regression(s) beyond {a.fail_on_regression:g}% against {a.files[0]} (verdicts "
              f"{VERDICTS_ON_TEXT[a.verdicts_on]})", file=sys.stderr)
    if cmp["errors"]:
        return EXIT_BAD_INPUT
    return EXIT_REGRESSION if regressed else EXIT_OK


def compare_implementations(a: argparse.Namespace, prog: str) -> int:
    """One file's points of --impl against the same points of --against (the reference)."""
    r = pr.load_results(a.files[0])  # a ResultsError is one line and status 2 (cli.run)
    results, labels, alone = implementations_of(r, a.impl, a.against)
    try:
        cmp = build_comparison(results, [], alpha=a.alpha, method=a.significance, fail_pct=a.fail_on_regression,
                               name_filter=a.filter, same_within_pct=a.same_within, verdicts_on=a.verdicts_on,
                               labels=labels, within={"path": r.path, "impl": a.impl, "against": a.against,
                                                      "operations_of_one_only": alone})
    except ImportError as e:
        print(f"{prog}: error: the Mann-Whitney U test needs scipy ({e}); install scripts/requirements.txt, "
              f"or use --significance minmax", file=sys.stderr)
        return EXIT_BAD_INPUT
    for w in cmp["warnings"]:
        print(f"{prog}: warning: {w}", file=sys.stderr)
    _write(render(cmp, a.format), a.output)
    if a.fail_on_regression is not None and cmp["regressions"]:
        print(f"{prog}: {len(cmp['regressions'])} regression(s) of {a.impl} beyond {a.fail_on_regression:g}% against "
              f"{a.against} in {r.path} (verdicts {VERDICTS_ON_TEXT[a.verdicts_on]})", file=sys.stderr)
        return EXIT_REGRESSION
    return EXIT_OK


def _write(text: str, path: str | None) -> None:
    if path:
        cli.write_file(path, text)  # checked by check_args before any file was read
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    sys.exit(main())
