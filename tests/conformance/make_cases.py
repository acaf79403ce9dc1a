#!/usr/bin/env python3
"""Writes the conformance cases next to it (tests/conformance: <case>.json and <case>.expected.json;
they are committed, run this only to change them). See README.md here for what they are for.

Every expected answer below is written out by hand from the case's construction (times chosen so
that rates and crossings are round numbers); nothing here calls either reader. The one exception
are old-schema1-cpu and current-schema3-cpu, entries copied from two results files of the
repository (an old phasebench's and today's), whose expected figures are literals computed once
by hand from their recorded numbers.
"""

import copy
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

# A made-up device: 100 TFLOP/s bf16 and 1 TB/s measured (ridge 100), 200 and 1 TB/s datasheet.
RIDGE = {"measured": 200.0, "datasheet": 300.0}


def context(schema=3, crossings=None, device="GPU A", **extra):
    pb = {"schema_version": schema, "backend": "cuda", "complete": True, "ceiling_used": "measured",
          "device": {"name": device, "slug": device.lower().replace(" ", "-"), "backend": "cuda"},
          "ceilings": {"compute": {"bf16": [{"flops_per_s": 1e14, "source": "measured", "method": "made up"}]},
                       "bandwidth": [{"bytes_per_s": 1e12, "source": "measured", "method": "made up"}]}}
    if schema >= 2:
        pb["decode_linear_crossings"] = crossings if crossings is not None else []
        pb["decode_moe_crossings"] = []
    pb.update(extra)
    return {"date": "2026-12-03T00:00:00Z", "phasebench": pb}


def roof(fraction, ridge=RIDGE["measured"], source="measured"):
    return {"fraction_of_roofline": fraction, "ridge_flop_per_byte": ridge, "bandwidth_ceiling_source": source,
            "compute_ceiling_source": source}


def block(phase, op, op_kind, subject, args, shape, status="ok", median_s=None, flops=0, total=0, fraction=None,
          target="", impl="own", dtype="bf16", message=None):
    """A point's "phasebench" object; an ok one with time, rates and its roofline placement."""
    p = {"phase": phase, "op": op, "op_kind": op_kind, "model": subject, "target": target, "dtype": dtype,
         "impl": impl, "args": args, "shape": shape, "flops": flops, "bytes": {"total": total}, "status": status}
    if message:
        p["message"] = message
    if status == "ok":
        p["time"] = {"median_s": median_s, "mean_s": median_s, "min_s": median_s, "max_s": median_s, "stddev_s": 0.0,
                     "cv": 0.0, "samples": 5, "runs_per_sample": 1, "samples_s": [median_s] * 5}
        p["tflops"] = flops / median_s / 1e12
        p["gbps"] = total / median_s / 1e9
        if fraction is not None:
            p["fraction_of_roofline"] = fraction
            p["roofline"] = roof(fraction)
            p["roofline_by_source"] = {s: roof(fraction, r, s) for s, r in RIDGE.items()}
    return p


def gemv(M, median_s, status="ok", fraction=0.5, impl="own", N=1024, K=1024, message=None):
    """A decode GEMV of the layer m.proj (N = K = 1024, bf16: intensity M*1024/(1024+2M))."""
    flops, total = 2 * M * N * K, 2 * (N * K + M * K + M * N)
    return block("decode", "gemv", "linear", "m", {"batch": M}, {"M": M, "N": N, "K": K}, status, median_s, flops, total,
                 fraction, target="proj", impl=impl, message=message)


def gemv_name(M, impl="own"):
    return f"decode/gemv/m.proj/bf16/batch:{M}/impl:{impl}/manual_time"


# Times at which the layer streams at exactly 1 TB/s (batches 1, 8, 64) or computes at 100 TFLOP/s (256).
def t_stream(M):
    return 2 * (1024 * 1024 + 2048 * M) / 1e12


T256 = 2 * 256 * 1024 * 1024 / 1e14


def attention(B, L, median_s, fraction, status="ok", paged=False, message=None):
    op = "attention_paged" if paged else "attention"
    args = {"batch": B, "context": L, **({"page_size": 16} if paged else {})}
    return block("decode", op, "decode_" + op, "m", args, {"B": B, "Hq": 8, "Hkv": 2, "L": L, "D": 64}, status,
                 median_s, 4 * 8 * B * L * 64, 2 * 2 * 2 * B * L * 64, fraction, message=message)


def attention_name(B, L, paged=False):
    return f"decode/{'attention_paged' if paged else 'attention'}/m/bf16/batch:{B}/context:{L}" + \
           ("/page:16" if paged else "") + "/manual_time"


def entry(run_name, pb, rep=0, reps=1, run_type="iteration", aggregate=None):
    e = {"name": run_name + (f"_{aggregate}" if aggregate else ""), "run_name": run_name, "run_type": run_type,
         "repetitions": reps, "threads": 1, "iterations": 1, "time_unit": "us"}
    if run_type == "iteration":
        e["repetition_index"] = rep
    else:
        e["aggregate_name"] = aggregate
        e["aggregate_unit"] = "time"
    if pb is not None:
        e["phasebench"] = pb
        if "time" in pb:
            e["real_time"] = e["cpu_time"] = pb["time"]["median_s"] * 1e6
    return e


def aggregates(run_name, pb, reps, which=("mean", "median", "stddev", "cv")):
    """Google Benchmark's aggregates of a point; phasebench puts its object on the median alone."""
    return [entry(run_name, pb if a == "median" else None, reps=reps, run_type="aggregate", aggregate=a) for a in which]


def crossing(measured_text, measured_batch, predicted_batch, batches, N=1024, K=1024):
    """A recorded crossing of m.proj as `phasebench run` writes it (the fields the readers use)."""
    return {"layer": "m.proj", "model": "m", "target": "proj", "dtype": "bf16", "N": N, "K": K, "batches": batches,
            "measured": {"batch": measured_batch, "text": measured_text, "peak_flops_per_s": None,
                         "bandwidth_bytes_per_s": None},
            "predicted": {"measured": {"batch": predicted_batch, "ridge_flop_per_byte": RIDGE["measured"]},
                          "datasheet": {"batch": 725, "ridge_flop_per_byte": RIDGE["datasheet"]}},
            "ceiling_used": "measured"}


def answer_crossing(text, batch, predicted=329, layer="m.proj", dtype="bf16"):
    return {"layer": layer, "dtype": dtype, "measured_text": text, "measured_batch": batch,
            "predicted_batch": predicted}


def group(phase, op, points, best=None, median=None, skipped=0, errors=0):
    return {"phase": phase, "op": op, "points": points, "best": best, "median": median, "skipped": skipped,
            "errors": errors}


def standing(doc, *indexes):
    return [{"index": i, "run_name": doc["benchmarks"][i]["run_name"], "status": doc["benchmarks"][i]["phasebench"]["status"]}
            for i in indexes]


CASES = {}


def case(fn):
    CASES[fn.__name__.replace("_", "-")] = fn
    return fn


@case
def basic_schema3():
    """One entry per point: every ok point with a fraction counts; the crossing where 256 is compute-bound."""
    pts = [entry(gemv_name(M), gemv(M, t_stream(M) if M < 256 else T256, fraction=f))
           for M, f in ((1, 0.9), (8, 0.8), (64, 0.7), (256, 0.6))]
    pts += [entry(attention_name(1, 1024), attention(1, 1024, 1e-5, 0.4)),
            entry(attention_name(1, 1024, True), attention(1, 1024, 1.2e-5, 0.3, paged=True))]
    doc = {"context": context(3, [crossing("125", 125, 329, [1, 8, 64, 256])]), "benchmarks": pts}
    return doc, {
        "about": "a plain schema 3 run: one entry per point, each stands; intensity M*1024/(1024+2M) reaches "
                 "P_eff/W_eff = 100 at batch 125 and the measured ridge 200 at 329",
        "standing": standing(doc, 0, 1, 2, 3, 4, 5),
        "groups": [group("decode", "decode_attention", 1, 0.4, 0.4), group("decode", "decode_attention_paged", 1, 0.3, 0.3),
                   group("decode", "linear", 4, 0.9, 0.75)],
        "crossings_recorded": [answer_crossing("125", 125)],
        "crossings_computed": [answer_crossing("125", 125)]}


@case
def repeat_later_failed():
    """Interleaved repetitions; batch 256's second repetition failed, so its error stands."""
    p256_ok = gemv(256, T256, fraction=0.6)
    p256_err = gemv(256, None, status="error", message="result mismatch at row 3")
    b = []
    for rep in range(2):
        for M in (1, 8, 64):
            b.append(entry(gemv_name(M), gemv(M, t_stream(M) * (1.5 if rep == 0 else 1.0), fraction=0.3 + rep * 0.5),
                           rep=rep, reps=2))
        b.append(entry(gemv_name(256), p256_ok if rep == 0 else p256_err, rep=rep, reps=2))
    doc = {"context": context(3, [crossing("> 64", None, 329, [1, 8, 64])]), "benchmarks": b}
    return doc, {
        "about": "--benchmark_repetitions=2 interleaved: the last repetition of each point stands (the pooled "
                 "statistics), so batch 256 is an error, left out of the crossing: batches 1, 8, 64 all stream at "
                 "1 TB/s, hence '> 64'",
        "standing": standing(doc, 4, 5, 6, 7),
        "groups": [group("decode", "linear", 3, 0.8, 0.8, errors=1)],
        "crossings_recorded": [answer_crossing("> 64", None)],
        "crossings_computed": [answer_crossing("> 64", None)]}


@case
def skipped_only():
    """A group whose points were all skipped (row with no points) and a point skipped in every repetition."""
    skip = lambda B, L, paged=False: attention(B, L, None, None, status="skipped", paged=paged,  # noqa: E731
                                               message="needs 200 GiB, the device has 80")
    b = [entry(attention_name(64, 131072, True), skip(64, 131072, True)),
         entry(attention_name(1, 1024), attention(1, 1024, 1e-5, 0.5)),
         entry(attention_name(64, 131072), skip(64, 131072), rep=0, reps=2),
         entry(attention_name(64, 131072), skip(64, 131072), rep=1, reps=2)]
    b += aggregates(attention_name(64, 131072), skip(64, 131072), 2)
    doc = {"context": context(3), "benchmarks": b}
    return doc, {
        "about": "skipped points count as skipped, once per point however many repetitions; a group of skipped "
                 "points only has no fractions",
        "standing": standing(doc, 0, 1, 3),
        "groups": [group("decode", "decode_attention", 1, 0.5, 0.5, skipped=1),
                   group("decode", "decode_attention_paged", 0, skipped=1)],
        "crossings_recorded": [], "crossings_computed": []}


@case
def aggregates_only():
    """--benchmark_report_aggregates_only: the median aggregate stands; a point with only a mean has none."""
    b = []
    for B, f in ((1, 0.2), (8, 0.4)):
        b += aggregates(attention_name(B, 1024), attention(B, 1024, 1e-5 * B, f), 3)
    b += [entry(attention_name(32, 1024), None, reps=3, run_type="aggregate", aggregate="mean")]
    doc = {"context": context(3), "benchmarks": b}
    return doc, {
        "about": "no iteration entries: each point's median aggregate (the one with the phasebench object) "
                 "stands; mean, stddev and cv are never read; a point with a mean alone is no point",
        "standing": standing(doc, 1, 5),
        "groups": [group("decode", "decode_attention", 2, 0.4, 0.3)],
        "crossings_recorded": [], "crossings_computed": []}


@case
def iterations_beat_aggregates():
    """Iterations and the median aggregate of one point disagree: the last iteration stands."""
    b = [entry(attention_name(1, 1024), attention(1, 1024, 1e-5, 0.5), rep=0, reps=2),
         entry(attention_name(1, 1024), attention(1, 1024, 1e-5, 0.6), rep=1, reps=2)]
    b += aggregates(attention_name(1, 1024), attention(1, 1024, 1e-5, 0.9), 2)
    doc = {"context": context(3), "benchmarks": b}
    return doc, {
        "about": "aggregates count only for a point that has no iteration entry with a phasebench object; here the "
                 "iterations stand, the last of them",
        "standing": standing(doc, 1),
        "groups": [group("decode", "decode_attention", 1, 0.6, 0.6)],
        "crossings_recorded": [], "crossings_computed": []}


@case
def entries_without_block():
    """Entries without a phasebench object are not phasebench entries: they neither stand nor hide another."""
    b = [entry(attention_name(8, 1024), None, rep=0, reps=2),
         entry(attention_name(1, 1024), attention(1, 1024, 1e-5, 0.5), rep=0, reps=2),
         entry(attention_name(1, 1024), None, rep=1, reps=2),
         entry(attention_name(8, 1024), None, rep=1, reps=2)]
    b += aggregates(attention_name(8, 1024), attention(8, 1024, 8e-5, 0.7), 2)
    b += [entry(attention_name(32, 1024), None)]
    b[-1]["phasebench"] = None  # not an object either
    doc = {"context": context(3), "benchmarks": b}
    return doc, {
        "about": "batch 8 (first seen in the first entry, so the first point): no iteration has a phasebench "
                 "object, so its median aggregate stands (nothing else of the point can); batch 1: its last "
                 "iteration has none, the one before stands; batch 32: a null phasebench is none, no point (the "
                 "Python tools warn about it)",
        "standing": standing(doc, 5, 1),
        "groups": [group("decode", "decode_attention", 2, 0.7, 0.6)],
        "crossings_recorded": [], "crossings_computed": [],
        "python_warnings": ["1 benchmark(s) without phasebench fields ignored"]}


@case
def unnamed_and_odd_fields():
    """Entries without a usable run_name: name instead, else each its own point; odd run_type values."""
    a = entry(attention_name(1, 1024), attention(1, 1024, 1e-5, 0.1))
    a["run_name"] = ""  # empty: its name identifies it
    a2 = entry(attention_name(1, 1024), attention(1, 1024, 1e-5, 0.2))
    del a2["run_name"]  # the same point by name: it stands
    n1 = {"phasebench": attention(8, 1024, 8e-5, 0.3)}  # no names at all: a point of its own
    n2 = {"phasebench": attention(32, 1024, 3.2e-4, 0.4), "run_name": 7}  # not a string: no name
    t = entry(attention_name(64, 1024), attention(64, 1024, 6.4e-4, 0.5))
    t["run_type"] = "repetition"  # not "aggregate": an iteration
    b = [a, a2, n1, n2, t]
    doc = {"context": context(3), "benchmarks": b}
    return doc, {
        "about": "a point is its run_name when that is a non-empty string, else its name, else the entry alone; "
                 "every run_type but \"aggregate\" is an iteration",
        "standing": [{"index": 1, "run_name": attention_name(1, 1024), "status": "ok"},
                     {"index": 2, "run_name": None, "status": "ok"},
                     {"index": 3, "run_name": None, "status": "ok"},
                     {"index": 4, "run_name": attention_name(64, 1024), "status": "ok"}],
        "groups": [group("decode", "decode_attention", 4, 0.5, 0.35)],
        "crossings_recorded": [], "crossings_computed": []}


@case
def no_status():
    """A phasebench object without a status is not an ok point (phasebench always writes one)."""
    p = attention(8, 1024, 8e-5, 0.9)
    del p["status"]
    b = [entry(attention_name(1, 1024), attention(1, 1024, 1e-5, 0.5)), entry(attention_name(8, 1024), p),
         entry(attention_name(32, 1024), attention(32, 1024, None, None, status="not run"))]
    doc = {"context": context(3), "benchmarks": b}
    return doc, {
        "about": "only status \"ok\" is a measured point; a missing status or \"not run\" (a point Google "
                 "Benchmark never called) stands but counts as neither ok, skipped nor an error",
        "standing": [{"index": 0, "run_name": attention_name(1, 1024), "status": "ok"},
                     {"index": 1, "run_name": attention_name(8, 1024), "status": None},
                     {"index": 2, "run_name": attention_name(32, 1024), "status": "not run"}],
        "groups": [group("decode", "decode_attention", 1, 0.5, 0.5)],
        "crossings_recorded": [], "crossings_computed": []}


@case
def duplicate_parameters():
    """Two names, the same structured parameters: two points of the file (compare can match only one)."""
    b = [entry(attention_name(1, 1024), attention(1, 1024, 1e-5, 0.5)),
         entry(attention_name(1, 1024).replace("/manual_time", "/copy/manual_time"), attention(1, 1024, 2e-5, 0.25))]
    doc = {"context": context(3), "benchmarks": b}
    return doc, {
        "about": "points are run names, so both stand and the summary counts both; matched on their parameters "
                 "across files, the later one is compared and the Python tools warn",
        "standing": standing(doc, 0, 1),
        "groups": [group("decode", "decode_attention", 2, 0.5, 0.375)],
        "crossings_recorded": [], "crossings_computed": [],
        "python_warnings": ["have the same parameters"]}


@case
def merged_two_gpus():
    """Two runs' benchmarks in one file (GPU A, then GPU B): the later run's entries stand."""
    first = [entry(gemv_name(M), gemv(M, 2 * t_stream(M), fraction=0.45)) for M in (1, 8)]
    first += [entry(attention_name(1, 1024), attention(1, 1024, 1e-5, 0.2))]
    second = [entry(gemv_name(M), gemv(M, t_stream(M), fraction=0.9)) for M in (1, 8, 64)]
    second += [entry(gemv_name(256), gemv(256, T256, fraction=0.95))]
    doc = {"context": context(3, [crossing("125", 125, 329, [1, 8, 64, 256])], device="GPU B"),
           "benchmarks": first + second}
    return doc, {
        "about": "a file merged by hand from two runs on two GPUs: one point per run name in the order first "
                 "seen, the last entry of each stands (GPU B's where both ran), GPU A's attention point stays",
        "standing": standing(doc, 3, 4, 2, 5, 6),
        "groups": [group("decode", "decode_attention", 1, 0.2, 0.2), group("decode", "linear", 4, 0.95, 0.9)],
        "crossings_recorded": [answer_crossing("125", 125)],
        "crossings_computed": [answer_crossing("125", 125)]}


@case
def crossing_impls_and_one_batch():
    """The fastest point of each batch over impls; a layer with one batch only; a layer with no time."""
    b = [entry(gemv_name(M, "blas"), gemv(M, 3 * t_stream(M), impl="blas", fraction=0.3)) for M in (1, 8, 64)]
    b += [entry(gemv_name(M), gemv(M, t_stream(M), fraction=0.9)) for M in (1, 8, 64)]
    b += [entry(gemv_name(256, "blas"), gemv(256, T256, impl="blas", fraction=0.95)),
          entry(gemv_name(256), gemv(256, 2 * T256, fraction=0.5))]
    one = gemv(4, t_stream(4), fraction=0.7, N=2048, K=512)
    one["target"] = "small"
    b += [entry("decode/gemv/m.small/bf16/batch:4/impl:own/manual_time", one)]
    doc = {"context": context(2), "benchmarks": b}
    doc["context"]["phasebench"]["decode_linear_crossings"] = [
        crossing("125", 125, 329, [1, 8, 64, 256]),
        dict(crossing("one batch only", None, 391, [4], N=2048, K=512), layer="m.small", target="small")]
    return doc, {
        "about": "schema 2 (crossings recorded, no raw samples needed): per batch the fastest impl's rates count "
                 "(own at 1-64, blas at 256), so m.proj crosses at 125; m.small has one batch only (its "
                 "predicted batch: intensity 2048*512*M/(2048*512+2560M) reaches the ridge 200 at M = 391)",
        "standing": standing(doc, *range(9)),
        "groups": [group("decode", "linear", 9, 0.95, 0.7)],
        "crossings_recorded": [answer_crossing("125", 125), answer_crossing("one batch only", None, 391, "m.small")],
        "crossings_computed": [answer_crossing("125", 125), answer_crossing("one batch only", None, 391, "m.small")]}


@case
def empty_run():
    """A run stopped before its first point: valid, with no points."""
    doc = {"context": context(3, complete=False), "benchmarks": []}
    return doc, {
        "about": "nothing stands and the summary has an empty table; the Python tools refuse the file, since "
                 "they have nothing to compare, plot or report (the one difference of the two readers)",
        "standing": [], "groups": [], "crossings_recorded": [], "crossings_computed": [],
        "python_refuses": "contains no benchmark results"}


def trimmed(src, keep):
    """The entries of a results file of the repository that `keep(entries)` picks, with its context."""
    with open(os.path.join(ROOT, src)) as f:
        full = json.load(f)
    return {"context": full["context"], "benchmarks": [full["benchmarks"][i] for i in keep(full["benchmarks"])]}


def old_schema1_cpu():
    """Entries of an old phasebench's file (schema 1, before the crossings were recorded)."""
    return trimmed("results/cpu-amd-epyc/20261130T043455Z.json",
                   lambda b: [1, 68, 74, 80] + [i for i, e in enumerate(b) if e["run_name"].startswith(
                       "decode/gemv/llama-3.1-8b.o_proj/")])


def current_schema3_cpu(old):
    """The same points from a run of today's phasebench (schema 3), its recorded o_proj crossing alone."""
    names = [e["run_name"] for e in old["benchmarks"]]
    doc = trimmed("results/cpu-intel-r-xeon-r-processor/20261201T232343Z.json",
                  lambda b: [next(i for i, e in enumerate(b) if e["run_name"] == n) for n in names])
    pb = doc["context"]["phasebench"]
    pb["decode_linear_crossings"] = [x for x in pb["decode_linear_crossings"] if x["target"] == "o_proj"]
    pb["decode_moe_crossings"] = []
    return doc


CURRENT_EXPECTED = {
    "about": "the points of old-schema1-cpu as a schema 3 run measured them (16 of the 131 entries of "
             "results/cpu-intel-r-xeon-r-processor/20261201T232343Z.json): the same names and parameters, so "
             "compare matches every point of the two; the recorded o_proj crossing (7, predicted 3) is what the "
             "C++ code computes again from the points (3.09 FLOP/B reached at batch 7, the ridge 1.43 at 3)",
    "standing": [{"index": i, "status": "ok"} for i in range(16)],
    "groups": [group("decode", "decode_attention", 1, 1.0196055608597936, 1.0196055608597936),
               group("decode", "decode_attention_paged", 1, 0.980795581575144, 0.980795581575144),
               group("decode", "kv_append", 1, 0.3716666705531511, 0.3716666705531511),
               group("decode", "linear", 12, 1.3529679127489915, 0.6319401470361289),
               group("prefill", "linear", 1, 0.781571957373136, 0.781571957373136)],
    "crossings_recorded": [answer_crossing("7", 7, 3, "llama-3.1-8b.o_proj", "fp32")],
    "crossings_computed": [answer_crossing("7", 7, 3, "llama-3.1-8b.o_proj", "fp32")],
}

OLD_EXPECTED = {
    "about": "written by phasebench at schema 1 (16 of the 86 entries of results/cpu-amd-epyc/20261130T043455Z.json): "
             "its point names, op names and fields read as today's; it recorded no crossings, so the Python tools "
             "say so and the C++ summary computes them: o_proj's best FLOP/s over its best bytes/s is 3.79 FLOP/B, "
             "reached at batch 8 (fp32: 2*M*4096*4096 / (4*(4096*4096 + 2*4096*M))), its largest batch moving "
             "12% of the best bytes/s; the measured ridge 5.58 is reached at 12",
    "standing": [{"index": i, "status": "ok"} for i in range(16)],
    "groups": [group("decode", "decode_attention", 1, 0.4172703792089999, 0.4172703792089999),
               group("decode", "decode_attention_paged", 1, 0.3897813075966334, 0.3897813075966334),
               group("decode", "kv_append", 1, 0.22120315342733302, 0.22120315342733302),
               group("decode", "linear", 12, 0.9029659515378967, 0.4338952902245454),
               group("prefill", "linear", 1, 0.5555861689622172, 0.5555861689622172)],
    "crossings_recorded": None,
    "crossings_computed": [answer_crossing("8", 8, 12, "llama-3.1-8b.o_proj", "fp32")],
}


@case
def old_kinds():
    """A schema 3 file of the operations renamed since: today's names are read from its op_kinds."""
    def pt(phase, op, op_kind, args, shape, t, f, impl="own", target=""):
        name = f"{phase}/{op}/m{'.' + target if target else ''}/bf16/" + "/".join(f"{k}:{v}" for k, v in args.items()) + \
               (f"/impl:{impl}" if op in ("gemv_int4", "moe") or phase == "prefill" else "") + "/manual_time"
        return entry(name, block(phase, op, op_kind, "m", args, shape, "ok", t, 1e9, 1e6, f, target=target, impl=impl))
    pts = [pt("decode", "gemv_int4", "linear_int4", {"batch": 1, "group": 128}, {"M": 1, "N": 1024, "K": 1024}, 1e-5, 0.7,
              target="proj"),
           pt("decode", "moe", "moe_experts", {"batch": 8, "routing": "uniform"}, {"T": 8, "k": 2, "E": 8, "h": 64, "I": 64},
              2e-5, 0.2, impl="blas", target="experts"),
           pt("decode", "latent_attention", "decode_latent_attention", {"batch": 1, "context": 1024},
              {"B": 1, "H": 16, "L": 1024, "R": 512, "P": 64}, 1e-5, 0.5),
           pt("decode", "latent_attention_paged", "decode_latent_attention_paged", {"batch": 1, "context": 1024, "page_size": 64},
              {"B": 1, "H": 16, "L": 1024, "R": 512, "P": 64}, 1e-5, 0.4),
           pt("prefill", "attention", "prefill_attention", {"batch": 1, "prompt": 512}, {"B": 1, "Hq": 8, "Hkv": 2, "S": 512, "D": 64},
              1e-4, 0.6)]
    doc = {"context": context(3), "benchmarks": pts}
    return doc, {
        "about": "written before the operations were renamed (schema 3): moe_experts is moe, "
                 "decode_latent_attention[_paged] is latent_attention[_paged], and each point's op is its kind "
                 "(gemv_int4 is linear_int4, prefill's attention is prefill_attention); both readers group the "
                 "points under today's names",
        "standing": standing(doc, 0, 1, 2, 3, 4),
        "groups": [group("decode", "latent_attention", 1, 0.5, 0.5), group("decode", "latent_attention_paged", 1, 0.4, 0.4),
                   group("decode", "linear_int4", 1, 0.7, 0.7), group("decode", "moe", 1, 0.2, 0.2),
                   group("prefill", "prefill_attention", 1, 0.6, 0.6)],
        "crossings_recorded": [],
        "crossings_computed": []}


def write(name, doc, expected):
    with open(os.path.join(HERE, name + ".json"), "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    expected = {"fixture": name + ".json", "readable": True, **expected}
    with open(os.path.join(HERE, name + ".expected.json"), "w") as f:
        json.dump(expected, f, indent=2)
        f.write("\n")


UNREADABLE = {
    "schema-unknown": ({"context": context(99), "benchmarks": []}, "schema version", "an unknown schema version"),
    "schema-float": ({"context": context(3.0), "benchmarks": []}, "schema version",
                     "schema_version 3.0: a number that is not a whole one (phasebench writes 3)"),
    "no-phasebench-context": ({"context": {"date": "x"}, "benchmarks": []}, "context.phasebench",
                              "a plain Google Benchmark file (no context.phasebench)"),
    "non-finite": ({"context": context(3), "benchmarks": [entry(attention_name(1, 1024), attention(1, 1024, float("nan"), 0.5))]},
                   None, "a NaN where a time should be (not strict JSON; phasebench never writes one)"),
}


def main():
    for name, fn in CASES.items():
        doc, expected = fn()
        write(name, doc, expected)
    for name, (doc, text, about) in UNREADABLE.items():
        with open(os.path.join(HERE, name + ".json"), "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
        exp = {"fixture": name + ".json", "about": about + ": both readers refuse the file", "readable": False}
        if text:
            exp["error_contains"] = text
        with open(os.path.join(HERE, name + ".expected.json"), "w") as f:
            json.dump(exp, f, indent=2)
            f.write("\n")
    old = old_schema1_cpu()
    for name, doc, expected in (("old-schema1-cpu", old, OLD_EXPECTED),
                                ("current-schema3-cpu", current_schema3_cpu(old), CURRENT_EXPECTED)):
        for x in expected["standing"]:
            x["run_name"] = doc["benchmarks"][x["index"]]["run_name"]
        write(name, doc, expected)


if __name__ == "__main__":
    main()
