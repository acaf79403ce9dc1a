"""Results files from different devices side by side (python/phasebench_tools/crossdevice.py): each
matched point judged against its own device's ceilings, and the points whose bound (memory or
compute) changed between the devices. compare.py and report.py use it; roofline.cross_device_figure draws it.

Standard library only: compare runs without the plotting dependencies.
"""

from __future__ import annotations

from . import results as pr


def device_key(r: pr.Results) -> str:
    """What tells devices apart: the device's slug in the file's context (h200-sxm), else its name."""
    return r.device_slug


def devices_differ(results: list) -> bool:
    return len({device_key(r) for r in results}) > 1


def device_tags(results: list, labels: list) -> list:
    """Each file's name on a chart: its device's name, with the file's label where two files share a device
    (A and C both from an H200 must stay apart)."""
    names = [r.device_name for r in results]
    return [n if names.count(n) == 1 else f"{lab} {n}" for lab, n in zip(labels, names)]


def _sources_text(compute: str | None, bandwidth: str | None) -> str:
    if compute and compute == bandwidth:
        return compute
    return f"{compute or '?'} compute / {bandwidth or '?'} read"


def file_ridge(r: pr.Results, dtype: str) -> tuple[float | None, str | None]:
    """(P / W, its sources) of the file's own ceilings for `dtype`: the ceilings the run used first, then
    measured, datasheet, theoretical, each ceiling on its own, as the run picks them (roofline.cpp's pick)."""
    order = [s for s in [r.ceiling_used, *pr.CEILING_SOURCES] if s]
    P = next(((r.compute_ceiling(dtype, s), s) for s in order if r.compute_ceiling(dtype, s)), (None, None))
    W = next(((r.bandwidth_ceiling(s), s) for s in order if r.bandwidth_ceiling(s)), (None, None))
    if P[0] is None or W[0] is None:
        return None, None
    return P[0] / W[0], _sources_text(P[1], W[1])


def point_bound(p: pr.Point, r: pr.Results) -> dict:
    """{bound, ridge, ridge_sources, how} of an ok point against its own file's ceilings.

    The bound the point records (its roofline's, against the ceilings the run used) when there is one, so
    compare says what the run said; else the run's rule computed here: memory-bound iff intensity < ridge
    for the point's dtype, a 0-FLOP point memory-bound whatever the ceilings. bound is None when neither
    the point nor its file's ceilings say (a run with --no-calibrate on a device without a spec entry).
    """
    roof = p.roofline or {}
    ridge = pr._num(roof.get("ridge_flop_per_byte"))
    P, W = pr._num(roof.get("peak_flops_per_s")), pr._num(roof.get("bandwidth_bytes_per_s"))
    if ridge is None and P and W:
        ridge = P / W
    if ridge is not None:
        sources = _sources_text(roof.get("compute_ceiling_source"), roof.get("bandwidth_ceiling_source"))
    else:
        ridge, sources = file_ridge(r, p.dtype)
    if p.bound:
        return {"bound": p.bound, "ridge": ridge, "ridge_sources": sources, "how": "recorded"}
    if not (p.flops or 0) > 0:
        return {"bound": "memory", "ridge": ridge, "ridge_sources": sources, "how": "computed (no FLOPs)"}
    if ridge is None or p.intensity is None:
        return {"bound": None, "ridge": ridge, "ridge_sources": sources, "how": "no ceilings"}
    return {"bound": "memory" if p.intensity < ridge else "compute", "ridge": ridge, "ridge_sources": sources,
            "how": "computed"}


def bound_changes(results: list, labels: list, keys: list | None = None) -> dict | None:
    """Each file from another device than the reference (the first) against it: the matched ok points whose
    bound changed, and how many kept theirs. None when every file comes from the reference's device.

    Points are matched on their structured key (results.match), which names no device. `keys` limits the
    points (compare's --filter). Each change carries both sides' intensity, ridge (of that device's
    ceilings for the point's dtype), fraction of roofline and achieved FLOP/s, and time = this / reference.
    """
    if not results or not devices_differ(results):
        return None
    m = pr.match(results)
    keys = m.keys if keys is None else keys
    ref, ref_lab = results[0], labels[0]
    pairs = []
    for i in range(1, len(results)):
        r = results[i]
        if device_key(r) == device_key(ref):
            continue  # the same device: the verdicts say what changed, not the bounds
        pair = {"reference": ref_lab, "file": labels[i], "reference_device": ref.device_name,
                "device": r.device_name, "matched": 0, "memory_on_both": 0, "compute_on_both": 0,
                "other_on_both": 0, "without_bound": [], "changed": []}
        for k in keys:
            a, b = m.table[k][0], m.table[k][i]
            if a is None or b is None or not (a.ok and b.ok):
                continue
            pair["matched"] += 1
            ba, bb = point_bound(a, ref), point_bound(b, r)
            if ba["bound"] is None or bb["bound"] is None:
                pair["without_bound"].append(a.name)
                continue
            if ba["bound"] == bb["bound"]:
                slot = f"{ba['bound']}_on_both"
                pair[slot if slot in pair else "other_on_both"] += 1
                continue
            pair["changed"].append({
                "name": a.name, "label": k.label(), "key": k.as_dict(), "dtype": k.dtype,
                "change": f"{ba['bound']} -> {bb['bound']}",
                "bound": [ba["bound"], bb["bound"]], "how": [ba["how"], bb["how"]],
                "intensity": [a.intensity, b.intensity], "ridge": [ba["ridge"], bb["ridge"]],
                "ridge_sources": [ba["ridge_sources"], bb["ridge_sources"]],
                "fraction_of_roofline": [a.fraction, b.fraction],
                "flops_per_s": [a.flops_per_s, b.flops_per_s],
                "median_s": [a.median_s, b.median_s], "time_ratio": b.median_s / a.median_s})
        pairs.append(pair)
    return {"by_key": "device slug (context.phasebench.device.slug), else its name", "pairs": pairs}


def _num(v, digits: int = 4) -> str:
    return "-" if v is None else f"{v:.{digits}g}"


def _pct(v) -> str:
    return "-" if v is None else f"{v * 100:.1f}%"


def pair_title(pair: dict) -> str:
    return (f"{pair['reference']} ({pair['reference_device']}) -> {pair['file']} ({pair['device']})")


def pair_counts_text(pair: dict) -> str:
    """One line: how many matched points were compared, and how many kept or changed their bound."""
    out = (f"{pair['matched']} matched point(s): {len(pair['changed'])} changed bound, "
           f"{pair['memory_on_both']} memory-bound on both, {pair['compute_on_both']} compute-bound on both")
    if pair["other_on_both"]:
        out += f", {pair['other_on_both']} with another bound on both"
    if pair["without_bound"]:
        out += f", {len(pair['without_bound'])} without a bound (no ceilings in a file)"
    return out


def change_rows(pair: dict) -> tuple[list, list]:
    """The table of one pair's changed points: both sides' intensity, ridge, fraction of roofline, the time ratio."""
    a, b = pair["reference"], pair["file"]
    header = ["point", "change", f"FLOP/B {a}", f"FLOP/B {b}", f"ridge {a}", f"ridge {b}", f"% roofline {a}",
              f"% roofline {b}", f"time {b}/{a}"]
    rows = []
    for c in pair["changed"]:
        ridges = [f"{_num(x)} ({s})" if x is not None else "-" for x, s in zip(c["ridge"], c["ridge_sources"])]
        rows.append([c["name"], c["change"], _num(c["intensity"][0]), _num(c["intensity"][1]), *ridges,
                     _pct(c["fraction_of_roofline"][0]), _pct(c["fraction_of_roofline"][1]),
                     f"{c['time_ratio']:.3f}"])
    return header, rows
