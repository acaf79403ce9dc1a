"""Loading, validating and matching phasebench results files.

A results file is written by `phasebench run` (bench/results.cpp, bench/fixture.cpp): a
superset of Google Benchmark's JSON whose context carries a "phasebench" object (schema
version, backend, device, ceilings) and whose every benchmark entry carries a "phasebench"
object (phase, op, model, target, dtype, impl, args, shape, flops, bytes, time statistics,
roofline placement).

Points are matched across files on their structured key (phase, op, model, target, dtype,
impl, args), never on the benchmark's name string.

Everything here is plain Python (no third-party imports) so that every script can use it.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from typing import Any, Iterable

#: Schema versions of context.phasebench.schema_version this module understands.
SUPPORTED_SCHEMA_VERSIONS = (1,)

#: Ceiling sources, in the order of preference used when a figure needs "the" ceiling.
CEILING_SOURCES = ("measured", "datasheet", "theoretical")


class ResultsError(Exception):
    """A results file that cannot be used; the message says which file and why."""

    def __init__(self, path: str, message: str):
        super().__init__(f"{path}: {message}")
        self.path = path
        self.reason = message


@dataclass(frozen=True)
class Key:
    """The structured identity of a benchmark point, the same across devices."""

    phase: str
    op: str
    model: str
    target: str
    dtype: str
    impl: str
    args: tuple  # sorted (name, value) pairs

    def args_dict(self) -> dict:
        return dict(self.args)

    def label(self) -> str:
        """A readable one-line label (built from the key, so it is stable across files)."""
        model = self.model + (f".{self.target}" if self.target else "")
        parts = [self.phase, self.op, model, self.dtype]
        parts += [f"{k}:{_fmt_arg(v)}" for k, v in self.args]
        if self.impl:
            parts.append(f"impl:{self.impl}")
        return "/".join(p for p in parts if p != "")

    def as_dict(self) -> dict:
        return {"phase": self.phase, "op": self.op, "model": self.model, "target": self.target,
                "dtype": self.dtype, "impl": self.impl, "args": self.args_dict()}


def _fmt_arg(v: Any) -> str:
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def _freeze(v: Any) -> Any:
    if isinstance(v, dict):
        return tuple(sorted((str(k), _freeze(x)) for k, x in v.items()))
    if isinstance(v, list):
        return tuple(_freeze(x) for x in v)
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return v


def make_key(pb: dict) -> Key:
    args = pb.get("args") or {}
    if not isinstance(args, dict):
        args = {"args": args}
    return Key(phase=str(pb.get("phase", "")), op=str(pb.get("op", "")), model=str(pb.get("model", "")),
               target=str(pb.get("target", "") or ""), dtype=str(pb.get("dtype", "")),
               impl=str(pb.get("impl", "") or ""), args=_freeze(args))


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, (int, float)) and math.isfinite(v):
        return float(v)
    return None


@dataclass
class Point:
    """One benchmark point of one file (repetitions of the same point merged)."""

    key: Key
    name: str  # the benchmark name without the "/manual_time" suffix
    pb: dict  # the entry's "phasebench" object (of the first repetition)
    entries: list = field(default_factory=list)  # the Google Benchmark entries (one per repetition)
    time: dict | None = None  # merged time statistics (median_s, mean_s, stddev_s, samples, min_s, max_s, cv)

    # Convenience accessors; None when not available (skipped/error point, no ceilings, ...).
    @property
    def status(self) -> str:
        return str(self.pb.get("status", "ok"))

    @property
    def ok(self) -> bool:
        return self.status == "ok" and self.median_s is not None and self.median_s > 0

    @property
    def message(self) -> str:
        return str(self.pb.get("message", "") or "")

    @property
    def phase(self) -> str:
        return self.key.phase

    @property
    def op(self) -> str:
        return self.key.op

    @property
    def op_kind(self) -> str:
        return str(self.pb.get("op_kind", self.key.op))

    @property
    def dtype(self) -> str:
        return self.key.dtype

    @property
    def median_s(self) -> float | None:
        return _num((self.time or {}).get("median_s"))

    @property
    def flops(self) -> float | None:
        return _num(self.pb.get("flops"))

    @property
    def bytes_total(self) -> float | None:
        b = self.pb.get("bytes")
        if isinstance(b, dict):
            return _num(b.get("total"))
        return _num(b)

    @property
    def intensity(self) -> float | None:
        v = _num(self.pb.get("intensity"))
        if v is None and self.flops is not None and self.bytes_total:
            v = self.flops / self.bytes_total
        return v

    @property
    def flops_per_s(self) -> float | None:
        """Achieved FLOP/s, from FLOPs and the median time (recomputed so merged repetitions agree)."""
        t = self.median_s
        if not t or self.flops is None:
            return None
        return self.flops / t

    @property
    def tflops(self) -> float | None:
        f = self.flops_per_s
        return None if f is None else f / 1e12

    @property
    def bytes_per_s(self) -> float | None:
        t = self.median_s
        if not t or self.bytes_total is None:
            return None
        return self.bytes_total / t

    @property
    def gbps(self) -> float | None:
        b = self.bytes_per_s
        return None if b is None else b / 1e9

    @property
    def roofline(self) -> dict | None:
        r = self.pb.get("roofline")
        return r if isinstance(r, dict) else None

    @property
    def fraction(self) -> float | None:
        """Fraction of the roofline (the ceilings the file says it used), recomputed from the median."""
        r = self.roofline
        if not r:
            return _num(self.pb.get("fraction_of_roofline"))
        return fraction_against(self, _num(r.get("peak_flops_per_s")), _num(r.get("bandwidth_bytes_per_s")))

    @property
    def bound(self) -> str | None:
        r = self.roofline
        v = (r or {}).get("bound", self.pb.get("bound"))
        return str(v) if v else None

    def shape(self) -> dict:
        s = self.pb.get("shape")
        return s if isinstance(s, dict) else {}

    def args(self) -> dict:
        return self.key.args_dict()


def fraction_against(p: Point, peak: float | None, bw: float | None) -> float | None:
    """Achieved / attainable for ceilings peak (FLOP/s) and bw (bytes/s); bandwidth fraction for 0-FLOP ops."""
    t = p.median_s
    if not t or bw is None or bw <= 0:
        return None
    flops, nbytes = p.flops or 0.0, p.bytes_total or 0.0
    if flops <= 0:
        return (nbytes / t) / bw if nbytes > 0 else None
    if peak is None or peak <= 0:
        return None
    attainable = min(peak, flops / nbytes * bw) if nbytes > 0 else peak
    return (flops / t) / attainable


def _merge_times(times: list[dict]) -> dict | None:
    """Merge the time statistics of several repetitions of one point.

    Samples and means are pooled exactly (total mean and variance of all samples); the median is
    the median of the repetitions' medians (the individual samples are not in the file). Blocks
    that are identical (phasebench repeats the point's pooled statistics on every repetition's
    entry) count once.
    """
    ts = [t for t in times if isinstance(t, dict) and _num(t.get("median_s")) is not None]
    # phasebench writes the point's pooled statistics on every repetition's entry:
    # identical blocks are one pool, not repetitions to pool again.
    unique: dict[str, dict] = {}
    for t in ts:
        unique.setdefault(json.dumps(t, sort_keys=True), t)
    ts = list(unique.values())
    if not ts:
        return None
    if len(ts) == 1:
        return dict(ts[0])
    ns = [max(1, int(_num(t.get("samples")) or 1)) for t in ts]
    means = [_num(t.get("mean_s")) or _num(t.get("median_s")) for t in ts]
    sds = [_num(t.get("stddev_s")) or 0.0 for t in ts]
    n = sum(ns)
    mean = sum(k * m for k, m in zip(ns, means)) / n
    ss = sum((k - 1) * s * s + k * (m - mean) ** 2 for k, m, s in zip(ns, means, sds))
    sd = math.sqrt(ss / (n - 1)) if n > 1 else 0.0
    meds = sorted(_num(t["median_s"]) for t in ts)
    k = len(meds)
    med = meds[k // 2] if k % 2 else 0.5 * (meds[k // 2 - 1] + meds[k // 2])
    mins = [_num(t.get("min_s")) for t in ts if _num(t.get("min_s")) is not None]
    maxs = [_num(t.get("max_s")) for t in ts if _num(t.get("max_s")) is not None]
    return {"median_s": med, "mean_s": mean, "stddev_s": sd, "cv": sd / mean if mean else 0.0, "samples": n,
            "min_s": min(mins) if mins else med, "max_s": max(maxs) if maxs else med,
            "runs_per_sample": ts[0].get("runs_per_sample", 1), "repetitions": len(ts)}


@dataclass
class Results:
    path: str
    context: dict
    pb: dict  # context.phasebench
    points: list  # list[Point], in file order
    warnings: list = field(default_factory=list)

    def __post_init__(self):
        self.by_key = {p.key: p for p in self.points}

    @property
    def device(self) -> dict:
        d = self.pb.get("device")
        return d if isinstance(d, dict) else {}

    @property
    def device_name(self) -> str:
        return str(self.device.get("name") or "unknown device")

    @property
    def device_slug(self) -> str:
        return str(self.device.get("slug") or self.device_name)

    @property
    def backend(self) -> str:
        return str(self.pb.get("backend") or self.device.get("backend") or "?")

    @property
    def date(self) -> str:
        return str(self.context.get("date") or "")

    @property
    def complete(self) -> bool:
        return bool(self.pb.get("complete", True))

    @property
    def ceiling_used(self) -> str:
        return str(self.pb.get("ceiling_used") or "")

    @property
    def stem(self) -> str:
        base = os.path.basename(self.path)
        return base[:-5] if base.endswith(".json") else base

    def describe(self) -> str:
        s = f"{self.device_name} ({self.backend})"
        if self.date:
            s += f", {self.date}"
        if not self.complete:
            s += ", INCOMPLETE run"
        return s

    # Ceilings --------------------------------------------------------------------------
    def compute_ceilings(self) -> dict:
        """{dtype: [{"flops_per_s", "source", "method"}, ...]} with finite positive values only."""
        c = (self.pb.get("ceilings") or {}).get("compute") or {}
        out = {}
        if isinstance(c, dict):
            for dt, lst in c.items():
                good = [x for x in (lst or []) if isinstance(x, dict) and (_num(x.get("flops_per_s")) or 0) > 0]
                if good:
                    out[str(dt)] = good
        return out

    def bandwidth_ceilings(self) -> list:
        c = (self.pb.get("ceilings") or {}).get("bandwidth") or []
        return [x for x in c if isinstance(x, dict) and (_num(x.get("bytes_per_s")) or 0) > 0]

    def compute_ceiling(self, dtype: str, source: str) -> float | None:
        """The compute ceiling of a dtype from one source (the highest if several)."""
        vals = [_num(x["flops_per_s"]) for x in self.compute_ceilings().get(dtype, []) if x.get("source") == source]
        return max(vals) if vals else None

    def bandwidth_ceiling(self, source: str) -> float | None:
        """The bandwidth ceiling of a source the points use; else the highest of that source."""
        for p in self.points:
            for r in [p.roofline] + [((p.pb.get("roofline_by_source") or {}).get(source))]:
                if r and r.get("bandwidth_ceiling_source") == source and _num(r.get("bandwidth_bytes_per_s")):
                    return _num(r.get("bandwidth_bytes_per_s"))
        vals = [_num(x["bytes_per_s"]) for x in self.bandwidth_ceilings() if x.get("source") == source]
        return max(vals) if vals else None

    def ok_points(self) -> list:
        return [p for p in self.points if p.ok]


def _check_json_text(path: str, text: str) -> Any:
    if not text.strip():
        raise ResultsError(path, "the file is empty (an interrupted run before any result? a wrong path?)")
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        stripped = text.rstrip()
        cut_in_string = e.msg.startswith("Unterminated string") and '"' not in stripped[e.pos + 1:]
        if e.pos >= len(stripped) or cut_in_string:
            raise ResultsError(path, f"truncated JSON: the text ends before the document is complete "
                                     f"(line {e.lineno}, column {e.colno}: {e.msg}); was the file cut short "
                                     f"or copied while the run was still writing it?") from None
        if stripped[:1] not in "{[":
            raise ResultsError(path, f"not JSON (starts with {stripped[:20]!r}); a phasebench results "
                                     f"file is the JSON written by `phasebench run --out FILE`") from None
        raise ResultsError(path, f"not valid JSON: {e.msg} at line {e.lineno}, column {e.colno}") from None


def parse_results(doc: Any, path: str = "<results>") -> Results:
    """Validate a parsed results document; raises ResultsError with a clear message."""
    if not isinstance(doc, dict):
        raise ResultsError(path, f"top level is a JSON {type(doc).__name__}, not an object; "
                                 f"not a phasebench or Google Benchmark results file")
    ctx = doc.get("context")
    benches = doc.get("benchmarks")
    if not isinstance(ctx, dict) or not isinstance(benches, list):
        missing = [k for k, v in (("context", ctx), ("benchmarks", benches)) if not isinstance(v, (dict, list))]
        raise ResultsError(path, f"not a benchmark results file: no {' or '.join(repr(m) for m in missing)} "
                                 f"(expected the JSON written by `phasebench run`)")
    pb = ctx.get("phasebench")
    if not isinstance(pb, dict):
        raise ResultsError(path, "a Google Benchmark file without phasebench fields (no context.phasebench): "
                                 "it has no device, ceilings, FLOPs or bytes to compare; write results with "
                                 "`phasebench run --out FILE`, not a plain --benchmark_out")
    version = pb.get("schema_version")
    if version not in SUPPORTED_SCHEMA_VERSIONS:
        supported = ", ".join(str(v) for v in SUPPORTED_SCHEMA_VERSIONS)
        if version is None:
            raise ResultsError(path, f"no schema_version in context.phasebench (this script reads version {supported})")
        raise ResultsError(path, f"unknown schema version {version!r} (this script reads version {supported}); "
                                 f"update the scripts to the phasebench that wrote the file")
    warnings = []
    if pb.get("complete") is False:
        warnings.append(f"{path}: the run did not complete (interrupted or crashed); only the finished points are in it")
    groups: dict[Key, Point] = {}
    without = 0
    # Google Benchmark aggregates (mean/median/stddev of repetitions) are skipped,
    # except the median of a point whose repetitions were left out of the file
    # (--benchmark_report_aggregates_only): it carries the point's fields.
    iteration_names = {b.get("run_name") for b in benches
                       if isinstance(b, dict) and b.get("run_type", "iteration") == "iteration"}
    for b in benches:
        if not isinstance(b, dict):
            continue
        if b.get("run_type", "iteration") != "iteration" and not (
                b.get("aggregate_name") == "median" and b.get("run_name") not in iteration_names):
            continue
        e = b.get("phasebench")
        if not isinstance(e, dict):
            without += 1
            continue
        key = make_key(e)
        name = str(b.get("run_name") or b.get("name") or key.label())
        if name.endswith("/manual_time"):
            name = name[: -len("/manual_time")]
        if key in groups:
            groups[key].entries.append(b)
        else:
            groups[key] = Point(key=key, name=name, pb=e, entries=[b])
    if not groups:
        if without:
            raise ResultsError(path, f"none of its {without} benchmark(s) has phasebench fields; "
                                     f"it was not written by `phasebench run`")
        raise ResultsError(path, "it contains no benchmark results (empty sweep, or the run stopped before the first point)")
    if without:
        warnings.append(f"{path}: {without} benchmark(s) without phasebench fields ignored")
    points = list(groups.values())
    for p in points:
        times = [(x.get("phasebench") or {}).get("time") for x in p.entries]
        ok_entries = [x for x in p.entries if (x.get("phasebench") or {}).get("status", "ok") == "ok"]
        if ok_entries and ok_entries[0] is not p.entries[0]:
            p.pb = ok_entries[0]["phasebench"]
        p.time = _merge_times([t for t in times if t]) if p.status == "ok" else None
    return Results(path=path, context=ctx, pb=pb, points=points, warnings=warnings)


def load_results(path: str) -> Results:
    """Read and validate one results file; raises ResultsError with a clear message."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise ResultsError(path, "no such file") from None
    except IsADirectoryError:
        raise ResultsError(path, "is a directory, not a results file") from None
    except OSError as e:
        raise ResultsError(path, f"cannot be read: {e.strerror or e}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ResultsError(path, "not JSON: the file is binary (not UTF-8 text)") from None
    return parse_results(_check_json_text(path, text), path)


def load_many(paths: Iterable[str]) -> tuple[list, list]:
    """Load every file; returns (results, errors) so that good files are still reported."""
    good, bad = [], []
    for p in paths:
        try:
            good.append(load_results(p))
        except ResultsError as e:
            bad.append(e)
    return good, bad


@dataclass
class Match:
    """The union of the files' keys, in first-seen order, with each file's point (or None)."""

    keys: list
    table: dict  # Key -> [Point | None] (one per file)

    def common(self) -> list:
        return [k for k in self.keys if all(p is not None for p in self.table[k])]

    def partial(self) -> list:
        return [k for k in self.keys if any(p is None for p in self.table[k])]


def match(results: list) -> Match:
    keys, table = [], {}
    for i, r in enumerate(results):
        for p in r.points:
            if p.key not in table:
                table[p.key] = [None] * len(results)
                keys.append(p.key)
            table[p.key][i] = p
    return Match(keys=keys, table=table)


def file_labels(n: int) -> list:
    """A, B, C, ... Z, AA, AB, ..."""
    out = []
    for i in range(n):
        s, k = "", i
        while True:
            s = chr(ord("A") + k % 26) + s
            k = k // 26 - 1
            if k < 0:
                break
        out.append(s)
    return out


def geomean(values: Iterable[float]) -> float | None:
    vals = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
    if not vals:
        return None
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def fmt_si(v: float | None, unit: str = "", digits: int = 3) -> str:
    """1.23 G, 456 M, ... (decimal prefixes); '-' for None."""
    if v is None:
        return "-"
    if v == 0:
        return f"0 {unit}".strip()
    prefixes = [(1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1, ""), (1e-3, "m"), (1e-6, "u"), (1e-9, "n")]
    for scale, pre in prefixes:
        if abs(v) >= scale:
            return f"{v / scale:.{digits}g} {pre}{unit}".strip()
    return f"{v:.{digits}g} {unit}".strip()
