"""`phasebench serve` end to end (the C++ binary, then the Python tools on what it wrote).

The analytical run of the README, a run on the committed CPU results of the default sweep
(results/cpu-amd-epyc: step times from measured points), trace replay, and bad input.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from conftest import ROOT

from phasebench_tools import compare, serve

CPU_RESULTS = os.path.join(ROOT, "results", "cpu-amd-epyc", "20261204T184605Z.json")


def run_serve(binary, args):
    return subprocess.run([binary, "serve", *args], capture_output=True, text=True, timeout=120)


def serve_json(binary, args, tmp_path, name="serve.json"):
    out = tmp_path / name
    p = run_serve(binary, [*args, "-o", str(out)])
    assert p.returncode == 0, p.stderr
    return p.stdout, json.loads(out.read_text())


def test_readme_command_prints_the_table_and_the_picture(binary, tmp_path):
    text, doc = serve_json(binary, ["--model", "llama-3.1-8b", "--gpu", "h200-sxm", "--concurrency", "1,8,64"], tmp_path)
    assert "the analytical model alone (no --results)" in text
    assert "tok/s/GPU" in text and "tokens/s per user" in text and "left out of the simulation" in text
    assert [p["concurrency"] for p in doc["points"]] == [1, 8, 64]
    assert doc["kind"] == "phasebench serve" and doc["step_times"]["source"] == "analytical"
    tput = [p["output_tokens_per_s_per_gpu"] for p in doc["points"]]
    user = [p["output_tokens_per_s_per_user"] for p in doc["points"]]
    assert tput == sorted(tput) and user == sorted(user, reverse=True)  # batching trades latency for throughput
    assert all(p["completed"] == p["requests"] for p in doc["points"])
    chart = tmp_path / "pareto.svg"
    assert serve.main([str(tmp_path / "serve.json"), "-o", str(chart)]) == 0
    assert chart.stat().st_size > 1000


def test_cpu_results_file_gives_measured_step_times(binary, tmp_path):
    args = ["--model", "llama-3.1-8b", "--results", CPU_RESULTS, "--concurrency", "1,4", "--input-len", "100",
            "--output-len", "8", "--max-num-batched-tokens", "128", "--max-num-seqs", "16", "--kv-capacity-tokens", "4096",
            "--requests", "8"]
    text, doc = serve_json(binary, args, tmp_path)
    assert doc["step_times"]["source"] == "measured" and doc["dtype"] == "fp32"
    ops = {o["op"]: o for o in doc["step_times"]["ops"]}
    for op in ("qkv_proj", "o_proj", "gate_up_proj", "down_proj", "lm_head"):
        assert ops[op]["measured_share"] == 1.0, op  # M = 1..128: inside the measured points
    assert ops["rope"]["measured_share"] == 0.0  # nothing measures it
    assert "measured points of" in text
    # A decode step of llama-3.1-8b on this CPU is about the sum of its measured GEMVs: seconds, not microseconds.
    assert 0.5 < doc["points"][0]["tpot_s"]["p50"] < 10


def test_same_command_with_results_and_gpu_is_a_stated_what_if(binary, tmp_path):
    args = ["--model", "llama-3.1-8b", "--gpu", "h200-sxm", "--results", CPU_RESULTS, "--concurrency", "1",
            "--requests", "2", "--input-len", "64", "--output-len", "4"]
    text, doc = serve_json(binary, args, tmp_path)
    assert "a what-if, not one machine" in text
    assert doc["device"]["memory_from"].startswith("h200-sxm")


def test_trace_and_disaggregation(binary, tmp_path):
    trace = tmp_path / "trace.csv"
    trace.write_text("arrival_s,input_tokens,output_tokens\n0,512,16\n0.01,2048,8\n0.5,128,32\n")
    _, doc = serve_json(binary, ["--gpu", "h200-sxm", "--trace", str(trace)], tmp_path)
    assert doc["workload"]["kind"] == "trace" and doc["points"][0]["completed"] == 3
    _, dis = serve_json(binary, ["--model", "llama-3.1-70b", "--gpu", "h200-sxm", "--tp", "4", "--disaggregate", "1P1D",
                                 "--concurrency", "8"], tmp_path, "dis.json")
    assert dis["engine"]["mode"] == "disaggregated" and dis["points"][0]["gpus"] == 8
    assert dis["points"][0]["kv_transfers"] == dis["points"][0]["requests"]


def test_two_serve_files_compare(binary, tmp_path, capsys):
    serve_json(binary, ["--gpu", "h200-sxm", "--concurrency", "1,8"], tmp_path, "a.json")
    serve_json(binary, ["--gpu", "b200", "--concurrency", "1,8"], tmp_path, "b.json")
    assert compare.main([str(tmp_path / "a.json"), str(tmp_path / "b.json")]) == 0
    out = capsys.readouterr().out
    assert "B200" in out and "H200" in out and "tok/s/GPU B/A" in out


@pytest.mark.parametrize("args, says", [
    (["--rate", "0"], "--rate 0"),
    (["--concurrency", "1", "--rate", "1"], "give one of --concurrency, --rate and --trace"),
    (["--input-len", "uniform:9:3"], "--input-len"),
    (["--disaggregate", "2X"], "xPyD"),
    (["--model", "llama-3.1-70b", "--gpu", "h200-sxm"], "leave no room for a KV cache"),
    (["--efficiency", "1.5"], "--efficiency"),
    (["--slo-tpot", "-1"], "--slo-tpot"),
    (["--results", os.path.join(ROOT, "README.md")], "not valid JSON"),
    (["--gpu", "h200-sxm", "--input-len", "900000", "--kv-capacity-tokens", "1000"], "KV-cache slots"),
    (["--requests", "0"], "--requests"),
    (["--requests", "100000000000"], "--requests"),
    (["--concurrency", "100000000000"], "--concurrency"),
    (["--max-num-batched-tokens", "64"], "at least --max-num-seqs"),
    (["--results", "{results_shape}", "--dtype", "bf16"], "not laid out as a phasebench results file"),
])
def test_bad_input_is_one_line_and_status_two(binary, args, says, tmp_path):
    odd = tmp_path / "odd.json"  # JSON, but not a results file's shape
    odd.write_text('{"context": {"phasebench": 1}, "benchmarks": []}')
    args = [str(odd) if a == "{results_shape}" else a for a in args]
    p = run_serve(binary, args)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], p.stderr


def test_out_is_never_replaced_without_overwrite(binary, tmp_path):
    out = tmp_path / "s.json"
    out.write_text("{}")
    p = run_serve(binary, ["--concurrency", "1", "--requests", "1", "-o", str(out)])
    assert p.returncode == 2 and "--overwrite" in p.stderr and out.read_text() == "{}"
    p = run_serve(binary, ["--concurrency", "1", "--requests", "1", "-o", str(out), "--overwrite"])
    assert p.returncode == 0 and json.loads(out.read_text())["kind"] == "phasebench serve"
