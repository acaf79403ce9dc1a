"""The one loader of phasebench results files (python/phasebench_tools/results.py).

Every tool of the package reads results through load_results()/load_many() here; it uses
only the standard library, so cpu_targets runs without the plotting dependencies.

A results file is written by `phasebench run` (bench/results.cpp, bench/fixture.cpp): a
superset of Google Benchmark's JSON whose context carries a "phasebench" object (schema
version, backend, device, ceilings and, from schema 2 on, the decode-linear ridge crossings)
and whose every benchmark entry carries a "phasebench" object (phase, op, model, target,
dtype, impl, args, shape, flops, bytes, time statistics, roofline placement). Schema versions
1, 2 and 3 are read; schema 1 files have no recorded crossings (Results.decode_linear_crossings
is None, and the tools say so where they would show them).

The time statistics of an ok point (`phasebench.time`, Point.time): median_s, mean_s,
stddev_s, cv, samples, min_s, max_s, runs_per_sample. From schema 3 on they also carry:

  * `samples_s`: the per-run seconds of every timed sample of the point, in the order they
    were taken (at least 5), pooled over all the point's repetitions (Point.samples_s; None
    for schema 1 and 2, or when the list is missing or not all positive finite numbers,
    which the loader warns about). compare.py's verdicts are computed from them;
  * `converged` (bool: whether the noise-based stopping rule converged), `noise` (the
    relative spread it measured) and `stop_reason` (why sampling stopped): carried through
    as recorded, shown by compare's JSON.

The repetition rule (the same as the run's own summary, bench/crossings.cpp standing_points;
tests/conformance holds the cases both readers must pass):

  * a point is identified by its Google Benchmark `run_name` (else `name`; an entry with
    neither as a non-empty string is a point of its own);
  * a file may hold several entries of one point (`--benchmark_repetitions`, interleaved or
    not). phasebench writes the point's pooled statistics (all samples of all repetitions)
    into every repetition's "phasebench" object, so the LAST iteration entry of the point that
    has a "phasebench" object stands for the point; nothing is merged or recomputed; entries
    without one never stand;
  * Google Benchmark's aggregate entries (run_type "aggregate": mean, median, stddev, cv) are
    ignored, except for a point none of whose iteration entries has a "phasebench" object
    (`--benchmark_report_aggregates_only`): then its "median" aggregate stands for it;
  * only status "ok" is a measured point (Point.ok); a block without a status is "unknown".

Numbers the file holds are read, never recomputed: time statistics, TFLOP/s and GB/s, the
intensity, the fraction of roofline (`fraction_of_roofline` against the ceilings in use,
`roofline_by_source[source].fraction_of_roofline` against each source) and the crossings.

Points are matched across files on their structured key (phase, op, model, target, dtype,
impl, args), never on the benchmark's name string.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from typing import Any, Iterable

#: Schema versions of context.phasebench.schema_version this module understands.
SUPPORTED_SCHEMA_VERSIONS = (1, 2, 3, 4)

#: Operations' former kind names -> today's (the C++ declarations' OpDecl::former_kinds;
#: tests/conformance holds old files both readers must read alike). From schema 4 a point's
#: op is its kind; older files name ops otherwise (decode/gemv, decode/attention, ...), so
#: a file is read with op := today's kind, whatever it wrote.
FORMER_KINDS = {
    "moe_experts": "moe",
    "decode_latent_attention": "latent_attention",
    "decode_latent_attention_paged": "latent_attention_paged",
}


def current_names(pb: dict) -> dict:
    """Gives a phasebench block today's names, in place (the loader's own copy of the file, as
    bench/standing.cpp's upgrade_names): op_kind renamed where the kind was, op set to it.
    A block without an op_kind keeps its op. Returns the block."""
    kind = pb.get("op_kind")
    if isinstance(kind, str):
        kind = FORMER_KINDS.get(kind, kind)
        pb["op_kind"] = kind
        pb["op"] = kind
    return pb


def current_point_name(name: str, old_pb: dict) -> str:
    """A point name (phase/op/...) with today's op in place of the one `old_pb` recorded,
    so a point of an older file can select the same point of today's program."""
    parts = name.split("/")
    old_op = old_pb.get("op")
    new_op = current_names(dict(old_pb)).get("op")
    if len(parts) > 1 and parts[1] == old_op and new_op != old_op:
        parts[1] = str(new_op)
    return "/".join(parts)

#: The first schema version whose files record the decode-linear ridge crossings.
CROSSINGS_SCHEMA_VERSION = 2

#: The first schema version whose ok points record their raw samples (time.samples_s).
SAMPLES_SCHEMA_VERSION = 3

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
        parts += [f"{k}:{fmt_arg(v)}" for k, v in self.args]
        if self.impl:
            parts.append(f"impl:{self.impl}")
        return "/".join(p for p in parts if p != "")

    def as_dict(self) -> dict:
        return {"phase": self.phase, "op": self.op, "model": self.model, "target": self.target,
                "dtype": self.dtype, "impl": self.impl, "args": self.args_dict()}


def fmt_arg(v: Any) -> str:
    """An argument as the benchmark names write it (8, not 8.0)."""
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
    """The point's key, with today's op name (current_names) whatever schema wrote the block."""
    args = pb.get("args") or {}
    if not isinstance(args, dict):
        args = {"args": args}
    kind = pb.get("op_kind")
    op = FORMER_KINDS.get(kind, kind) if isinstance(kind, str) else pb.get("op", "")
    return Key(phase=str(pb.get("phase", "")), op=str(op), model=str(pb.get("model", "")),
               target=str(pb.get("target", "") or ""), dtype=str(pb.get("dtype", "")),
               impl=str(pb.get("impl", "") or ""), args=_freeze(args))


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, (int, float)) and math.isfinite(v):
        return float(v)
    return None


def _obj(v: Any) -> dict:
    return v if isinstance(v, dict) else {}


def _scaled(v: Any, scale: float) -> float | None:
    x = _num(v)
    return None if x is None else x * scale


@dataclass
class Point:
    """One benchmark point of one file: the entry that stands for it under the repetition rule."""

    key: Key
    name: str  # the benchmark name without the "/manual_time" suffix
    pb: dict  # the "phasebench" object of the entry that stands for the point
    entries: list = field(default_factory=list)  # the point's entries that count (repetitions, or its median)

    # Accessors; None when not available (skipped/error point, no ceilings, ...).
    @property
    def status(self) -> str:
        """ok, skipped, error or not run as recorded; "unknown" where none is (phasebench always writes one)."""
        return str(self.pb.get("status") or "unknown")

    @property
    def time(self) -> dict | None:
        """Time statistics (median_s, mean_s, stddev_s, cv, samples, min_s, max_s; schema 3 also
        samples_s, converged, noise, stop_reason) of an ok point."""
        t = self.pb.get("time")
        return t if self.status == "ok" and isinstance(t, dict) else None

    @property
    def samples_s(self) -> list | None:
        """The raw per-run seconds of every timed sample (schema 3), or None when the file has no usable list."""
        raw = (self.time or {}).get("samples_s")
        if not isinstance(raw, list) or not raw:
            return None
        vals = [_num(x) for x in raw]
        return vals if all(v is not None and v > 0 for v in vals) else None

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
    def cv(self) -> float | None:
        """The samples' coefficient of variation (stddev / mean) as recorded."""
        return _num((self.time or {}).get("cv"))

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
        return _num(self.pb.get("intensity"))

    @property
    def flops_per_s(self) -> float | None:
        """Achieved FLOP/s at the median time (the file's "tflops")."""
        return _scaled(self.pb.get("tflops"), 1e12) if self.time else None

    @property
    def tflops(self) -> float | None:
        f = self.flops_per_s
        return None if f is None else f / 1e12

    @property
    def bytes_per_s(self) -> float | None:
        """Achieved bytes/s of minimum traffic at the median time (the file's "gbps")."""
        return _scaled(self.pb.get("gbps"), 1e9) if self.time else None

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
        """Fraction of the roofline of the ceilings the run used (the file's fraction_of_roofline)."""
        return _num(self.pb.get("fraction_of_roofline"))

    def fraction_by_source(self, source: str) -> float | None:
        """Fraction of the roofline of one ceiling source (measured, datasheet, theoretical), as recorded."""
        return _num(_obj(_obj(self.pb.get("roofline_by_source")).get(source)).get("fraction_of_roofline"))

    @property
    def above_roofline(self) -> dict | None:
        """{fraction, likely_cause} when the run found the point above its roofline (schema 2), else None."""
        a = self.pb.get("above_roofline")
        return a if isinstance(a, dict) else None

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


@dataclass
class Results:
    path: str
    context: dict
    pb: dict  # context.phasebench
    points: list  # list[Point], in file order
    warnings: list = field(default_factory=list)

    def __post_init__(self):
        self.by_key = {p.key: p for p in self.points}
        self._crossings = None  # schema 1: not recorded
        if self.crossings_recorded:
            rows = self.pb.get("decode_linear_crossings")
            self._crossings = [_crossing(x) for x in rows if isinstance(x, dict)] if isinstance(rows, list) else []

    @property
    def schema_version(self) -> int:
        return int(self.pb.get("schema_version"))

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

    def cache_ceilings(self) -> list:
        """Cache-level read ceilings (schema 3: context.phasebench.ceilings.cache_bandwidth), each
        {level, bytes_per_s, source, method}: hot reads within the L2 (GPU) or last-level cache (CPU)."""
        c = (self.pb.get("ceilings") or {}).get("cache_bandwidth") or []
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

    # Decode-linear ridge crossings (recorded by `phasebench run` from schema 2 on) ------
    @property
    def crossings_recorded(self) -> bool:
        return self.schema_version >= CROSSINGS_SCHEMA_VERSION

    @property
    def crossings_absent_text(self) -> str:
        """What the tools show where a crossing would be, for a file that predates them."""
        return f"not recorded in this file (schema {self.schema_version})"

    @property
    def decode_linear_crossings(self) -> list | None:
        """context.phasebench.decode_linear_crossings: one dict per decode linear layer, or None (schema 1).

        Each: layer, model, target, dtype, N, K, batches, measured {batch (or None), text,
        peak_flops_per_s, bandwidth_bytes_per_s}, predicted {source: {batch (None: beyond
        2^24), ridge_flop_per_byte}} for the sources present in the run, ceiling_used.
        """
        return self._crossings

    def crossing(self, model: str, target: str, dtype: str) -> dict | None:
        """The recorded crossing of one layer; None when not recorded."""
        for x in self.decode_linear_crossings or []:
            if (x["model"], x["target"], x["dtype"]) == (model, target, dtype):
                return x
        return None


def _batch(v: Any) -> int | None:
    x = _num(v)
    return None if x is None else int(x)


def _crossing(x: dict) -> dict:
    """One recorded crossing with the shape the docstring above promises (numbers or None, sources in order)."""
    m, pred = _obj(x.get("measured")), _obj(x.get("predicted"))
    order = [s for s in CEILING_SOURCES if s in pred] + [s for s in pred if s not in CEILING_SOURCES]
    return {**x, "model": str(x.get("model", "")), "target": str(x.get("target", "") or ""),
            "dtype": str(x.get("dtype", "")), "batches": [b for b in map(_batch, x.get("batches") or []) if b is not None],
            "measured": {**m, "batch": _batch(m.get("batch")), "text": str(m.get("text", "-")),
                         "peak_flops_per_s": _num(m.get("peak_flops_per_s")),
                         "bandwidth_bytes_per_s": _num(m.get("bandwidth_bytes_per_s"))},
            "predicted": {s: {**_obj(pred[s]), "batch": _batch(_obj(pred[s]).get("batch")),
                              "ridge_flop_per_byte": _num(_obj(pred[s]).get("ridge_flop_per_byte"))} for s in order}}


class _NonFinite:
    """A NaN or Infinity where strict JSON allows none (Python's json reads them)."""

    def __init__(self, text: str):
        self.text = text


def _first_non_finite(doc: Any, where: str = "") -> tuple | None:
    """(JSON path, literal) of the first NaN/Infinity in `doc`, or None."""
    stack = [(doc, where)]
    while stack:
        v, at = stack.pop()
        if isinstance(v, _NonFinite):
            return at or "(the document)", v.text
        if isinstance(v, dict):
            stack.extend((x, f"{at}.{k}" if at else str(k)) for k, x in reversed(list(v.items())))
        elif isinstance(v, list):
            stack.extend((x, f"{at}[{i}]") for i, x in reversed(list(enumerate(v))))
    return None


def _check_json_text(path: str, text: str) -> Any:
    if not text.strip():
        raise ResultsError(path, "the file is empty (an interrupted run before any result? a wrong path?)")
    try:
        doc = json.loads(text, parse_constant=_NonFinite)
        bad = _first_non_finite(doc)
        if bad:
            field, literal = bad
            raise ResultsError(path, f"{literal} at {field}: not strict JSON (phasebench never writes NaN or "
                                     f"Infinity; was the file edited or written by another tool?)")
        return doc
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


def _point_id(b: dict, i: int) -> Any:
    """A point's identity: its run_name, else its name (non-empty strings), else the entry alone."""
    for k in ("run_name", "name"):
        v = b.get(k)
        if isinstance(v, str) and v:
            return v
    return ("unnamed entry", i)  # never equal to a name


def _standing_entries(benches: list) -> list:
    """[(entry that stands for the point or None, the point's entries that count)] per point, in file order.

    The repetition rule of the module docstring, the same as bench/crossings.cpp's standing_points
    (tests/conformance holds the cases both must pass): every run_type but "aggregate" is an
    iteration; the last iteration entry with a "phasebench" object stands, else (none has one)
    the last "median" aggregate with one. Entries without a "phasebench" object never stand.
    """
    order: list = []
    iterations: dict = {}
    medians: dict = {}
    for i, b in enumerate(benches):
        if not isinstance(b, dict):
            continue
        pid = _point_id(b, i)
        if pid not in iterations:
            order.append(pid)
            iterations[pid], medians[pid] = [], []
        if b.get("run_type") != "aggregate":
            iterations[pid].append(b)
        elif b.get("aggregate_name") == "median":
            medians[pid].append(b)
    out = []
    for pid in order:
        counted = next((e for e in (iterations[pid], medians[pid]) if _last_with_block(e)), None)
        if counted:
            out.append((_last_with_block(counted), counted))
        elif iterations[pid] or medians[pid]:
            out.append((None, iterations[pid] or medians[pid]))
        # else: aggregates other than the median only (mean, stddev, cv): nothing to read
    return out


def _last_with_block(entries: list) -> dict | None:
    return next((b for b in reversed(entries) if isinstance(b.get("phasebench"), dict)), None)


def _versions_text() -> str:
    v = [str(x) for x in SUPPORTED_SCHEMA_VERSIONS]
    return f"version {v[0]}" if len(v) == 1 else f"versions {', '.join(v[:-1])} and {v[-1]}"


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
    if type(version) is not int or version not in SUPPORTED_SCHEMA_VERSIONS:  # not True, not 3.0
        if version is None:
            raise ResultsError(path, f"no schema_version in context.phasebench (this script reads {_versions_text()})")
        raise ResultsError(path, f"unknown schema version {version!r} (this script reads {_versions_text()}); "
                                 f"update the scripts to the phasebench that wrote the file")
    warnings = []
    if pb.get("complete") is False:
        warnings.append(f"{path}: the run did not complete (interrupted or crashed); only the finished points are in it")
    if version >= CROSSINGS_SCHEMA_VERSION and not isinstance(pb.get("decode_linear_crossings"), list):
        warnings.append(f"{path}: schema {version} without a decode_linear_crossings list; no crossings to show")
    points: list = []
    without = 0
    for standing, counted in _standing_entries(benches):
        if standing is None:
            without += 1
            continue
        e = current_names(standing["phasebench"])
        key = make_key(e)
        pid = _point_id(standing, -1)
        name = pid if isinstance(pid, str) else key.label()
        if name.endswith("/manual_time"):
            name = name[: -len("/manual_time")]
        points.append(Point(key=key, name=name, pb=e, entries=counted))
    if not points:
        if without:
            raise ResultsError(path, f"none of its {without} benchmark(s) has phasebench fields; "
                                     f"it was not written by `phasebench run`")
        raise ResultsError(path, "it contains no benchmark results (empty sweep, or the run stopped before the first point)")
    if without:
        warnings.append(f"{path}: {without} benchmark(s) without phasebench fields ignored")
    if version >= SAMPLES_SCHEMA_VERSION:
        unsampled = sum(1 for p in points if p.ok and p.samples_s is None)
        if unsampled:
            warnings.append(f"{path}: {unsampled} ok point(s) without a usable time.samples_s list (schema {version} "
                            f"records one per point); compare judges them by min..max only")
    seen: dict = {}
    for p in points:
        if p.key in seen:
            warnings.append(f"{path}: {seen[p.key]} and {p.name} have the same parameters; only {p.name} is compared")
        seen[p.key] = p.name
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
