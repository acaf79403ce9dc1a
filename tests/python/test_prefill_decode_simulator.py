"""scripts/prefill_decode_simulator.py: the blog post's output exactly, other sizes, the ridge, bad input, --model.

The script takes every number from the binary (`phasebench model --simple --json`, and the full model's JSON
with --model); these tests run it against the binary conftest finds, and compute the simple model's numbers
independently (12*h^2 parameters a layer, 2 FLOPs a parameter a token, the weights the only traffic).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT, SCRIPTS

SIM = os.path.join(SCRIPTS, "prefill_decode_simulator.py")

# The post's output, verbatim (`python scripts/prefill_decode_simulator.py`).
POST = """\
============================================================
LLM LAYER SIMULATOR (Layer Params: 201.33 M)
Batch Size: 4 | Prompt Length: 1024 | Hidden Dim: 4096
============================================================
1. PREFILL PHASE:
   - Total FLOPS required: 52776.56 GFLOPs
   - Weight memory read:   12.885 GB
   - Arithmetic Intensity: 4096.00 FLOPs/byte
   - Classification:       COMPUTE-BOUND
------------------------------------------------------------
2. DECODE PHASE (Single Token):
   - Total FLOPS required: 51.54 GFLOPs
   - Weight memory read:   12.885 GB
   - Arithmetic Intensity: 4.00 FLOPs/byte
   - Classification:       MEMORY-BANDWIDTH-BOUND
============================================================
"""


def sim(binary: str | None, *args: str, env: dict | None = None, script: str = SIM) -> subprocess.CompletedProcess:
    e = dict(os.environ)
    e.pop("PHASEBENCH_BINARY", None)
    if binary:
        e["PHASEBENCH_BINARY"] = binary
    e.update(env or {})
    return subprocess.run([sys.executable, script, *args], capture_output=True, text=True, env=e, timeout=120)


def model_json(binary: str, *args: str) -> dict:
    r = subprocess.run([binary, "model", *args, "--json"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def expected_table(h: int, layers: int, batch: int, prompt: int, w: int, prefill_bound: str, decode_bound: str):
    params = 12 * h * h
    prefill, decode, weight_bytes = 2 * params * layers * batch * prompt, 2 * params * layers * batch, params * layers * w
    return "\n".join([
        "=" * 60,
        f"LLM LAYER SIMULATOR (Layer Params: {params / 1e6:.2f} M)",
        f"Batch Size: {batch} | Prompt Length: {prompt} | Hidden Dim: {h}",
        "=" * 60,
        "1. PREFILL PHASE:",
        f"   - Total FLOPS required: {prefill / 1e9:.2f} GFLOPs",
        f"   - Weight memory read:   {weight_bytes / 1e9:.3f} GB",
        f"   - Arithmetic Intensity: {prefill / weight_bytes:.2f} FLOPs/byte",
        f"   - Classification:       {prefill_bound}",
        "-" * 60,
        "2. DECODE PHASE (Single Token):",
        f"   - Total FLOPS required: {decode / 1e9:.2f} GFLOPs",
        f"   - Weight memory read:   {weight_bytes / 1e9:.3f} GB",
        f"   - Arithmetic Intensity: {decode / weight_bytes:.2f} FLOPs/byte",
        f"   - Classification:       {decode_bound}",
        "=" * 60]) + "\n"


def one_clean_error(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert r.stdout == ""
    assert "Traceback" not in r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    return lines[0]


def test_default_output_is_the_posts(binary):
    r = sim(binary)
    assert r.returncode == 0, r.stderr
    assert r.stdout == POST
    assert r.stderr == ""


def test_binary_flag_without_the_environment(binary, tmp_path):
    # A wrapper that leaves a mark, so that finding a build next to the script instead would show.
    mark, wrapper = tmp_path / "called", tmp_path / "phasebench"
    wrapper.write_text(f'#!/bin/sh\ntouch "{mark}"\nexec "{binary}" "$@"\n')
    wrapper.chmod(0o755)
    r = sim(None, "--binary", str(wrapper))
    assert r.returncode == 0, r.stderr
    assert r.stdout == POST
    assert mark.exists()


@pytest.mark.parametrize("h,layers,batch,prompt,dtype,w", [
    (8192, 80, 1, 2048, "fp16", 2),
    (5120, 40, 8, 512, "bf16", 2),
    (4096, 32, 2, 1024, "fp32", 4),
])
def test_other_sizes(binary, h, layers, batch, prompt, dtype, w):
    r = sim(binary, "--hidden", str(h), "--layers", str(layers), "--batch", str(batch), "--prompt", str(prompt),
            "--dtype", dtype)
    assert r.returncode == 0, r.stderr
    # On the default GPU (h100-sxm: ridge ~295 FLOP/byte in bf16/fp16, ~14.8 in fp32) every prefill here is
    # compute-bound and every decode step memory-bound.
    assert r.stdout == expected_table(h, layers, batch, prompt, w, "COMPUTE-BOUND", "MEMORY-BANDWIDTH-BOUND")
    if h == 8192:
        assert "(Layer Params: 805.31 M)" in r.stdout


@pytest.mark.parametrize("batch,prompt,bound", [
    (1, 64, "MEMORY-BANDWIDTH-BOUND"),  # intensity 64 < ridge 295.37
    (1, 295, "MEMORY-BANDWIDTH-BOUND"),  # just below the ridge
    (1, 296, "COMPUTE-BOUND"),  # just above it
    (4, 64, "MEMORY-BANDWIDTH-BOUND"),  # 256: batch x prompt is what counts
])
def test_prefill_below_the_ridge_is_memory_bound(binary, batch, prompt, bound):
    r = sim(binary, "--batch", str(batch), "--prompt", str(prompt))
    assert r.returncode == 0, r.stderr
    assert r.stdout == expected_table(4096, 32, batch, prompt, 2, bound, "MEMORY-BANDWIDTH-BOUND")


def test_the_gpu_moves_the_ridge(binary):
    # fp32 on an A100 (19.5 TFLOP/s over 2039 GB/s: ridge ~9.6): a decode step of batch 32 (intensity 16) is
    # compute-bound there.
    r = sim(binary, "--dtype", "fp32", "--gpu", "a100-sxm4-80gb", "--batch", "32")
    assert r.returncode == 0, r.stderr
    assert r.stdout == expected_table(4096, 32, 32, 1024, 4, "COMPUTE-BOUND", "COMPUTE-BOUND")


@pytest.mark.parametrize("args", [["--hidden", "0"], ["--layers", "0"], ["--batch", "-1"], ["--prompt", "0"],
                                  ["--hidden", "abc"], ["--gpu", "nope"], ["--dtype", "int4"], ["--model", "nope"]])
def test_bad_input_is_one_clean_error(binary, args):
    line = one_clean_error(sim(binary, *args))
    assert args[0] in line or args[1] in line, line


def test_the_binarys_own_message_passes_through(binary):
    own = subprocess.run([binary, "model", "--simple", "--json", "--batch", "-1"], capture_output=True, text=True)
    assert own.returncode == 2
    assert one_clean_error(sim(binary, "--batch", "-1")) == own.stderr.strip()


def test_no_ridge_is_an_error(binary):
    # The A100 has no fp8 tensor cores: no datasheet peak, no ridge.
    line = one_clean_error(sim(binary, "--dtype", "fp8", "--gpu", "a100-sxm4-80gb"))
    assert "ridge" in line and "a100-sxm4-80gb" in line


def test_missing_binary(tmp_path):
    line = one_clean_error(sim(str(tmp_path / "no-such-phasebench")))
    assert "PHASEBENCH_BINARY" in line and "scripts/setup" in line
    # Nothing set, nothing built next to the script, nothing on PATH.
    (tmp_path / "scripts").mkdir()
    copy = str(tmp_path / "scripts" / "prefill_decode_simulator.py")
    shutil.copy(SIM, copy)
    line = one_clean_error(sim(None, script=copy, env={"PATH": str(tmp_path)}))
    assert "no phasebench binary found" in line and "PHASEBENCH_BINARY" in line and "scripts/setup" in line


def numbers(line: str) -> list[str]:
    return re.findall(r"\d+(?:\.\d+)?", line.split(":", 1)[-1] if line.lstrip().startswith("-") else line)


def test_model_leaves_out(binary):
    args = ["--model", "llama-3.1-8b", "--batch", "4", "--prompt", "1024", "--dtype", "fp16"]
    r = sim(binary, *args)
    assert r.returncode == 0, r.stderr
    full, simple = model_json(binary, *args), model_json(binary, "--simple", *args)
    # The table is the simple model on the config's own sizes (Llama-3.1-8B: h = 4096, 32 layers): the post's.
    assert (simple["hidden"], simple["layers"]) == (full["model"]["hidden_size"], full["model"]["num_hidden_layers"])
    assert r.stdout.startswith(POST)
    # The full model's own copy of the simple model agrees with --simple.
    assert {k: v for k, v in full["simple_model"].items()} == {k: simple[k] for k in full["simple_model"]}

    section = r.stdout[len(POST):].splitlines()
    assert section[0] == "What the simple model leaves out for llama-3.1-8b:"
    assert section[-1] == "=" * 60
    assert len(section) <= 14
    rows = {line[:17].strip(): line for line in section if line.startswith("   ") and not line.startswith("   -")}
    for name in ("prefill", "decode"):
        ph, label = full["phases"][name], name.capitalize()
        b = ph["bytes"]
        assert numbers(rows[f"{label} FLOPs"]) == [f"{simple[f'{name}_flops'] / 1e9:.2f}", f"{ph['flops'] / 1e9:.2f}"]
        assert numbers(rows[f"{label} bytes"]) == [
            f"{simple['weight_bytes'] / 1e9:.3f}", f"{b['total'] / 1e9:.3f}", f"{b['weights'] / 1e9:.3f}",
            f"{b['kv_cache'] / 1e9:.3f}", f"{(b['total'] - b['weights'] - b['kv_cache']) / 1e9:.3f}"]
        assert numbers(rows[f"{label} time"]) == [f"{ph['time_s'] * 1e3:.3f}"]
    notes = {line.split()[1]: line for line in section if line.startswith("   - ")}
    pre, dec = full["phases"]["prefill"], full["phases"]["decode"]

    def attention(ph):
        return sum(o["flops"] * o["count"] for o in ph["ops"] if o["name"] == "attention")

    assert f"{attention(pre) / 1e9:.2f} GFLOPs at prefill, {attention(dec) / 1e9:.2f} at decode" in notes["attention"]
    assert attention(pre) > 0 and dec["bytes"]["kv_cache"] > 0
    assert f"{dec['bytes']['kv_cache'] / 1e9:.3f} GB" in notes["KV"]
    assert "8 KV heads of 32, MLP 14336" in notes["layer"]
    layer_weights = sum(o["bytes"]["weights"] * o["count"] for o in dec["ops"]
                        if o["kind"] == "linear" and o["name"] != "lm_head")
    assert f"{layer_weights / 1e9:.3f} GB of layer weights" in notes["layer"]
    head = next(o for o in dec["ops"] if o["name"] == "lm_head")
    assert f"{head['bytes']['weights'] / 1e9:.3f} GB and {head['flops'] / 1e9:.2f} GFLOPs" in notes["lm_head:"]


def test_config_sets_the_sizes(binary):
    config = os.path.join(ROOT, "harness", "data", "models", "qwen2.5-7b.json")
    r = sim(binary, "--config", config)
    assert r.returncode == 0, r.stderr
    s = model_json(binary, "--simple", "--config", config, "--batch", "4", "--prompt", "1024", "--dtype", "fp16")
    assert s["hidden"] == 3584 and s["layers"] == 28
    assert r.stdout.startswith(expected_table(3584, 28, 4, 1024, 2, "COMPUTE-BOUND", "MEMORY-BANDWIDTH-BOUND"))
    assert "What the simple model leaves out for qwen2.5-7b:" in r.stdout


def test_no_section_without_a_model(binary):
    r = sim(binary, "--hidden", "1024", "--layers", "4")
    assert r.returncode == 0, r.stderr
    assert "leaves out" not in r.stdout
