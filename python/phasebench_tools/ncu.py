"""Measured beside counted: Nsight Compute's metrics of a handful of points next to what the
emulation's counting build counted for them (python/phasebench_tools/ncu.py).

scripts/gpu-check's ncu step uses it on a machine with a GPU:

    phasebench-ncu metrics                      the metric list to give `ncu --metrics`
    phasebench-ncu plan COUNTERS [--max N]      the points to profile: "NAME<TAB>RUN ARGS" lines
    phasebench-ncu compare COUNTERS NCU_LOG [--format table|json]

COUNTERS is a counters file of `phasebench counters` or a folder of them (scripts/counters-table's
results/counters/<gpu>/<time>/). NCU_LOG holds, for each profiled point, a line
"### phasebench-ncu point: NAME" followed by `ncu --csv --print-units base` output for that
point's kernels (one row per kernel and metric). The metrics are summed over a point's kernels
(percentages and registers: their mean weighted by duration; bytes and times in base units
whatever prefix ncu printed) and set beside the counts of the
same names in the counters file, with measured / counted. Counts come from the emulation and
measurements from the GPU: a ratio far from 1 is a finding (a counter's model, or the hardware's
caches, or a different compiled access pattern), never proof of either.

Exit status: 0; 2 for bad input (a file that cannot be read, no point in common), one line on stderr.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shlex
import sys

from . import cli
from . import counters as pc
from . import results as pr

EXIT_OK, EXIT_BAD_INPUT = 0, cli.EXIT_BAD_INPUT

#: (label, ncu metrics summed, how the counters file gives the same quantity)
COMPARED = (
    ("DRAM bytes", ("dram__bytes_read.sum", "dram__bytes_write.sum"), "dram"),
    ("global ld requests", ("l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",), ("global", "ld", "requests")),
    ("global ld sectors", ("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",), ("global", "ld", "sectors")),
    ("global st requests", ("l1tex__t_requests_pipe_lsu_mem_global_op_st.sum",), ("global", "st", "requests")),
    ("global st sectors", ("l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum",), ("global", "st", "sectors")),
    ("cp.async sectors", ("sm__sass_l1tex_t_sectors_pipe_lsu_mem_global_op_ldgsts_cache_bypass.sum",),
     ("global", "ldgsts", "sectors")),
    ("shared ld wavefronts", ("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",), ("shared", "ld", "sectors")),
    ("shared st wavefronts", ("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum",), ("shared", "st", "sectors")),
    ("ldmatrix wavefronts", ("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ldsm.sum",), ("shared", "ldsm", "sectors")),
    ("shared ld bank conflicts", ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",), ("shared", "ld", "conflicts")),
    ("shared st bank conflicts", ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",), ("shared", "st", "conflicts")),
    ("ldmatrix bank conflicts", ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ldsm.sum",),
     ("shared", "ldsm", "conflicts")),
    ("registers per thread", ("launch__registers_per_thread",), "registers"),
)
#: Measured only (nothing counted stands for them): shown beside the estimate.
EXTRA = ("gpu__time_duration.sum", "sm__warps_active.avg.pct_of_peak_sustained_active",
         "smsp__thread_inst_executed_per_inst_executed.ratio")
MEAN_METRICS = {"launch__registers_per_thread", "sm__warps_active.avg.pct_of_peak_sustained_active",
                "smsp__thread_inst_executed_per_inst_executed.ratio"}

#: The points the ncu step profiles by default: one per kernel family, as named in the table.
DEFAULT_POINTS = (
    r"^decode/linear/llama-3\.1-8b\.down_proj/bf16/batch:1/impl:own$",
    r"^decode/linear_int4/llama-3\.1-8b\.down_proj/bf16/batch:1/group:128/impl:own$",
    r"^decode/linear_fp4/llama-3\.1-8b\.down_proj/bf16/batch:1/format:mxfp4/impl:own$",
    r"^decode/decode_attention/llama-3\.1-8b/bf16/batch:8/context:4096$",
    r"^decode/decode_attention/llama-3\.1-70b/bf16/batch:8/context:4096$",
    r"^decode/latent_attention/deepseek-v3/bf16/batch:8/context:1024$",
    r"^prefill/prefill_attention/llama-3\.1-8b/bf16/batch:1/prompt:2048/impl:own$",
    r"^decode/kv_append/llama-3\.1-8b/bf16/batch:32/context:4096$",
)


def metrics() -> list:
    out = []
    for _, names, _ in COMPARED:
        out += [n for n in names if n not in out]
    return out + [m for m in EXTRA if m not in out]


def counters_files(path: str) -> list:
    if os.path.isdir(path):
        files = sorted(os.path.join(path, f) for f in os.listdir(path) if f.endswith(".json"))
        if not files:
            raise pr.ResultsError(path, "a folder with no counters file (*.json) in it")
        return files
    return [path]


def load_points(path: str) -> tuple[dict, list]:
    """{point name: (point, run args)} over every counters file at `path`."""
    points = {}
    for f in counters_files(path):
        doc = pc.load(f)
        args = run_args(doc["context"].get("command_line", ""))
        for p in doc["points"].values():
            if p.get("status") == "ok":
                points[p["name"]] = (p, args)
    return points


def run_args(command_line: str) -> list:
    """The sweep options of a `phasebench counters` command line, for `phasebench run`."""
    words = shlex.split(command_line)
    out, skip = [], False
    for i, w in enumerate(words):
        if skip:
            skip = False
            continue
        if i == 0 or w == "counters":
            continue
        name = w.split("=", 1)[0]
        if name in ("--gpu", "--out", "--benchmark_filter"):
            skip = "=" not in w
            continue
        if name in ("--overwrite", "--benchmark_list_tests"):
            continue
        out.append(w)
    return out


def counted(point: dict, how) -> float | None:
    launches = [L for L in point.get("counters", []) if L.get("kind") == "kernel"]
    if not launches:
        return None
    if how == "dram":
        return float(sum((L.get("sectors_read", 0) + L.get("sectors_written", 0)) * 32 for L in launches))
    if how == "registers":
        regs = [L.get("resources", {}).get("registers") for L in launches]
        return float(regs[0]) if regs and regs[0] else None
    space, kind, field = how
    total = 0.0
    for L in launches:
        t = L.get(space, {}).get(kind, {})
        total += t.get("sectors", 0) - t.get("ideal", 0) if field == "conflicts" else t.get(field, 0)
    return total


def number(text: str) -> float | None:
    t = text.strip().replace(",", "")
    try:
        return float(t)
    except ValueError:
        return None


#: Unit prefixes ncu may print (it scales units unless told --print-units base): to bytes and seconds.
UNIT_SCALE = {"byte": 1, "kbyte": 1e3, "mbyte": 1e6, "gbyte": 1e9, "tbyte": 1e12,
              "nsecond": 1e-9, "usecond": 1e-6, "msecond": 1e-3, "second": 1, "ns": 1e-9, "us": 1e-6, "ms": 1e-3}


def in_base_units(value: float, unit: str) -> float:
    return value * UNIT_SCALE.get(unit.strip().lower(), 1)


def parse_ncu_log(text: str) -> dict:
    """{point name: {metric: value}} from the ncu step's log."""
    out, name, block = {}, None, []

    def flush():
        if name is None:
            return
        rows = [l for l in block if l.startswith('"')]  # ncu's CSV lines; ==PROF== and app output are not
        per_kernel: dict = {}
        for r in csv.DictReader(io.StringIO("\n".join(rows))):
            m, v = r.get("Metric Name"), number(r.get("Metric Value", ""))
            if m and v is not None:
                per_kernel.setdefault(r.get("ID", ""), {})[m] = in_base_units(v, r.get("Metric Unit", ""))
        agg: dict = {}
        total_t = sum(k.get("gpu__time_duration.sum", 0) for k in per_kernel.values())
        for k in per_kernel.values():
            for m, v in k.items():
                if m in MEAN_METRICS:
                    w = k.get("gpu__time_duration.sum", 0) / total_t if total_t else 1 / len(per_kernel)
                    agg[m] = agg.get(m, 0) + v * w
                else:
                    agg[m] = agg.get(m, 0) + v
        agg["kernels"] = len(per_kernel)
        out[name] = agg

    for line in text.splitlines():
        m = re.match(r"### phasebench-ncu point: (.+)$", line)
        if m:
            flush()
            name, block = m.group(1).strip(), []
        else:
            block.append(line)
    flush()
    return out


def compare(points: dict, measured: dict) -> list:
    rows = []
    for name, meas in measured.items():
        if name not in points:
            continue
        p, _ = points[name]
        row = {"point": name, "kernels_measured": meas.get("kernels", 0),
               "kernels_counted": sum(1 for L in p.get("counters", []) if L.get("kind") == "kernel"), "metrics": []}
        for label, names, how in COMPARED:
            have = [meas[n] for n in names if n in meas]
            m = sum(have) if have else None
            c = counted(p, how)
            row["metrics"].append({"metric": label, "ncu": list(names), "measured": m, "counted": c,
                                   "ratio": m / c if m is not None and c else None})
        est = p.get("estimate", {})
        t = meas.get("gpu__time_duration.sum")
        row["time_s"] = t  # seconds (in_base_units)
        row["time_lower_bound_s"] = est.get("time_lower_bound_s")
        row["estimated_fraction"] = est.get("estimated_fraction")
        fb = est.get("formula_bytes")
        row["measured_gbps"] = fb / row["time_s"] / 1e9 if fb and row["time_s"] else None
        row["achieved_occupancy_pct"] = meas.get("sm__warps_active.avg.pct_of_peak_sustained_active")
        row["estimated_occupancy_pct"] = 100 * est["occupancy"] if est.get("occupancy") is not None else None
        rows.append(row)
    return rows


def fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float) and abs(v) >= 1e4:
        return f"{v:.4g}"
    return f"{v:.3g}" if isinstance(v, float) else str(v)


def render(rows: list) -> str:
    lines = ["measured (Nsight Compute, on the GPU) beside counted (the emulation's counting build): "
             "a ratio far from 1 is a finding, not a verdict"]
    for r in rows:
        lines.append("")
        lines.append(f"{r['point']}  ({r['kernels_measured']} kernel(s) measured, {r['kernels_counted']} counted)")
        t, b = r["time_s"], r["time_lower_bound_s"]
        lines.append(f"  time {fmt(t * 1e6 if t else None)} us measured, {fmt(b * 1e6 if b else None)} us the "
                     f"estimate's lower bound; {fmt(r['measured_gbps'])} GB/s of formula bytes; occupancy "
                     f"{fmt(r['achieved_occupancy_pct'])}% achieved, {fmt(r['estimated_occupancy_pct'])}% estimated")
        for m in r["metrics"]:
            if m["measured"] is None and not m["counted"]:
                continue
            lines.append(f"  {m['metric']:<26} {fmt(m['measured']):>12} {fmt(m['counted']):>12}  "
                         f"ratio {fmt(m['ratio'])}")
    return "\n".join(lines) + "\n"


def main(argv: list | None = None) -> int:
    ap = cli.Parser(prog="phasebench-ncu", description=__doc__.split("\n\n")[0],
                    epilog="exit status: 0; 2 bad input (one line on stderr)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("metrics", help="the metric list for ncu --metrics")
    pp = sub.add_parser("plan", help="the points to profile, with their run options")
    pp.add_argument("counters")
    pp.add_argument("--max", type=int, default=len(DEFAULT_POINTS))
    pcmp = sub.add_parser("compare", help="measured beside counted")
    pcmp.add_argument("counters")
    pcmp.add_argument("ncu_log")
    pcmp.add_argument("--format", choices=("table", "json"), default="table")
    return cli.run(ap, lambda a: _main(a, ap.prog), argv)


def _main(a, prog: str) -> int:
    if a.cmd == "metrics":
        print(",".join(metrics()))
        return EXIT_OK
    points = load_points(a.counters)  # a ResultsError is cli.run's one line
    if a.cmd == "plan":
        chosen = []
        for rx in DEFAULT_POINTS:
            hit = next((n for n in points if re.search(rx, n)), None)
            if hit and hit not in chosen:
                chosen.append(hit)
        for n in chosen[: max(0, a.max)]:
            print(n + "\t" + " ".join(shlex.quote(x) for x in points[n][1]))
        return EXIT_OK
    measured = parse_ncu_log(cli.read_bytes(a.ncu_log).decode("utf-8", errors="replace"))
    rows = compare(points, measured)
    if not rows:
        print(f"{prog}: error: no point of {a.ncu_log} is in the counters at {a.counters}", file=sys.stderr)
        return EXIT_BAD_INPUT
    sys.stdout.write(json.dumps(rows, indent=2) + "\n" if a.format == "json" else render(rows))
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
