"""phasebench-ncu (phasebench_tools/ncu.py), the gpu-check step's measured-beside-counted table, on a
synthetic Nsight Compute log in ncu's CSV layout and a hand-made counters file: the metric list,
the points it plans and their `run` options, units and thousands separators, sums over a
point's kernels, and bad input."""

import json

from phasebench_tools import ncu

# The counters file is an older table's (op gemv, before one name per operation); today's
# program, and so the ncu log, names the same point decode/linear/...
OLD_NAME = "decode/gemv/m.down_proj/bf16/batch:1/impl:own"
NAME = "decode/linear/m.down_proj/bf16/batch:1/impl:own"
HEADER = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size",'
          '"Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"')


def row(kid, metric, unit, value):
    return (f'"{kid}","1","phasebench","h","decode_gemv_kernel<1>","1","7","(256, 1, 1)","(396, 1, 1)","0","9.0",'
            f'"Command line profiler metrics","{metric}","{unit}","{value}"')


def counters_dir(tmp_path):
    launch = {"kind": "kernel", "kernel": "decode_gemv_kernel<1>", "sectors_read": 1_000_000, "sectors_written": 10,
              "global": {"ld": {"requests": 50_000, "sectors": 800_000, "ideal": 800_000}},
              "shared": {"ld": {"requests": 100, "sectors": 300, "ideal": 100}},
              "resources": {"registers": 80}}
    pb = {"phase": "decode", "op": "gemv", "op_kind": "linear", "model": "m", "target": "down_proj", "dtype": "bf16",
          "impl": "own", "args": {"batch": 1}, "status": "ok", "counters": [launch],
          "estimate": {"time_lower_bound_s": 10e-6, "formula_bytes": 32_000_000, "occupancy": 0.375}}
    doc = {"context": {"phasebench": {"kind": "counters", "counters_schema_version": 1, "gpu": {"key": "h200-sxm"},
                                      "command_line": "build/bench/phasebench-counters counters --gpu h200-sxm "
                                                      "--model m --ops decode_linear --decode-batches 1 "
                                                      "--benchmark_filter=-lm_head --out x.json"}},
           "benchmarks": [{"name": OLD_NAME, "phasebench": pb}]}
    d = tmp_path / "table"
    d.mkdir()
    (d / "gemv.json").write_text(json.dumps(doc))
    return str(d)


def test_metrics_cover_every_compared_counter():
    m = ncu.metrics()
    assert "dram__bytes_read.sum" in m and "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ldsm.sum" in m
    assert len(m) == len(set(m))


def test_run_args_drop_what_is_not_a_sweep_option():
    args = ncu.run_args("phasebench-counters counters --gpu h200-sxm --model m --benchmark_filter=x --out a.json "
                        "--overwrite --ops decode_linear")
    assert args == ["--model", "m", "--ops", "decode_linear"]


def test_a_point_is_measured_beside_counted(tmp_path, capsys):
    log = tmp_path / "ncu.log"
    lines = [f"### phasebench-ncu point: {NAME}", "==PROF== Connected to process 1", "verifying...", HEADER]
    for kid in (0, 1):  # two kernels: sums; registers: their duration-weighted mean
        lines += [row(kid, "dram__bytes_read.sum", "Mbyte", "16.00"), row(kid, "dram__bytes_write.sum", "byte", "160"),
                  row(kid, "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum", "sector", "400,000"),
                  row(kid, "launch__registers_per_thread", "register/thread", "80"),
                  row(kid, "gpu__time_duration.sum", "usecond", "6.00")]
    log.write_text("\n".join(lines) + "\n")
    assert ncu.main(["compare", counters_dir(tmp_path), str(log), "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    r = rows[0]
    assert r["kernels_measured"] == 2 and r["kernels_counted"] == 1
    m = {x["metric"]: x for x in r["metrics"]}
    assert m["DRAM bytes"]["measured"] == 32_000_320
    assert m["DRAM bytes"]["counted"] == (1_000_000 + 10) * 32
    assert m["global ld sectors"]["ratio"] == 1.0
    assert m["registers per thread"]["measured"] == 80
    assert m["shared ld bank conflicts"]["counted"] == 200
    assert abs(r["time_s"] - 12e-6) < 1e-12
    assert abs(r["measured_gbps"] - 32_000_000 / 12e-6 / 1e9) < 1e-6


def test_plan_lists_the_default_points_with_their_run_options(tmp_path, capsys):
    d = counters_dir(tmp_path)
    doc = json.loads((tmp_path / "table" / "gemv.json").read_text())
    doc["benchmarks"][0]["name"] = "decode/gemv/llama-3.1-8b.down_proj/bf16/batch:1/impl:own"
    (tmp_path / "table" / "gemv.json").write_text(json.dumps(doc))
    assert ncu.main(["plan", d]) == 0
    out = capsys.readouterr().out.strip().split("\t")
    assert out[0] == "decode/linear/llama-3.1-8b.down_proj/bf16/batch:1/impl:own"  # today's name of the table's point
    assert out[1] == "--model m --ops decode_linear --decode-batches 1"


def test_bad_input_is_one_line_and_status_two(tmp_path, capsys):
    assert ncu.main(["plan", str(tmp_path / "missing.json")]) == 2
    assert "no such file" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert ncu.main(["plan", str(empty)]) == 2
    assert "no counters file" in capsys.readouterr().err
    log = tmp_path / "other.log"
    log.write_text("### phasebench-ncu point: decode/other\n" + HEADER + "\n")
    assert ncu.main(["compare", counters_dir(tmp_path), str(log)]) == 2
    assert "no point of" in capsys.readouterr().err
