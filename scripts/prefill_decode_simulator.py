#!/usr/bin/env python3
# Prefill vs. decode simulator of the blog post "The Two Pillars of LLM Inference: Prefill vs. Decode" (the simple
# 12*h^2 weights-only layer model), with every number taken from phasebench's own model via `phasebench model --json`.
"""Prefill vs. decode in the simple 12*h^2 weights-only layer model, printed as the blog post shows it.

No model formula is here: the FLOPs, bytes, intensities and the GPU's datasheet ridge come from the binary's
`phasebench model --simple --json`; this script formats them (GFLOPs = FLOPs/1e9, GB = bytes/1e9,
M = parameters/1e6) and compares each intensity with the ridge. With --model NAME or --config PATH it also
prints what the simple model leaves out for that real model, from the full model's `phasebench model --json`
(fields in docs/model-json.md), only adding up the per-op numbers that JSON gives.

Exit status: 0 on success; 2 for bad input, a missing or failing binary, or a GPU without a datasheet ridge for
the dtype (the binary's own non-zero status is passed through, with its message).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import stat
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD_DIRS = ("build-cpu", "build", "build-emu")
WIDTH = 60
# The post's defaults: a 4096-wide layer, 32 layers, batch 4, prompt 1024, fp16.
DEFAULT_HIDDEN, DEFAULT_LAYERS = 4096, 32
TIMEOUT_S = 120


class Failure(Exception):
    """One line for stderr, and the exit status."""

    def __init__(self, message: str, status: int = 2, passthrough: bool = False):
        super().__init__(message)
        self.status = status
        self.passthrough = passthrough  # the binary's own message: printed as it is, not prefixed


def find_binary(flag: str | None) -> str:
    """PHASEBENCH_BINARY, else --binary, else a build under the repository root, else `phasebench` on PATH."""
    env = os.environ.get("PHASEBENCH_BINARY")
    for what, path in (("PHASEBENCH_BINARY", env), ("--binary", flag)):
        if path:
            if os.path.isfile(path) and os.access(path, os.X_OK):
                return path
            raise Failure(f"{what}={path} is not an executable file; build phasebench (scripts/setup, then "
                          f"scripts/build) or point {what} at a built phasebench binary")
    for d in BUILD_DIRS:
        p = os.path.join(ROOT, d, "bench", "phasebench")
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    on_path = shutil.which("phasebench")
    if on_path:
        return on_path
    raise Failure("no phasebench binary found (looked in " + ", ".join(f"{d}/bench/phasebench" for d in BUILD_DIRS)
                  + " and PATH); run scripts/setup then scripts/build, or set PHASEBENCH_BINARY to a built binary")


def run_model(binary: str, args: list[str]) -> dict:
    """`phasebench model ARGS --json`, parsed; the binary's error message and status on failure."""
    cmd = [binary, "model", *args, "--json"]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S)
    except OSError as e:
        raise Failure(f"could not run {binary}: {e.strerror or e}")
    except subprocess.TimeoutExpired:
        raise Failure(f"{' '.join(cmd)} did not finish in {TIMEOUT_S} s")
    if r.returncode != 0:
        message = r.stderr.strip() or r.stdout.strip() or f"{' '.join(cmd)} failed"
        # A signal (negative status) is no status to exit with: report it as an error (2).
        raise Failure(message, r.returncode if r.returncode > 0 else 2, passthrough=bool(r.stderr.strip()))
    try:
        return json.loads(r.stdout)
    except json.JSONDecodeError:
        raise Failure(f"{' '.join(cmd)} printed no JSON; is {binary} a phasebench binary?")


def need(d: dict, key: str, what: str) -> object:
    if key not in d:
        raise Failure(f"{what} has no '{key}'; this phasebench binary is older than this script "
                      f"(rebuild it: scripts/build)")
    return d[key]


class Parser(argparse.ArgumentParser):
    """Bad arguments are one line on stderr and exit status 2, like the binary's own errors."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = Parser(
        description="Prefill vs. decode in the simple 12*h^2 weights-only layer model (numbers from "
                    "`phasebench model --simple --json`); with --model/--config also what that model leaves out.")
    p.add_argument("--batch", type=int, default=4, help="sequences per step (default 4)")
    p.add_argument("--prompt", type=int, default=1024, help="prompt length (default 1024)")
    p.add_argument("--hidden", type=int, default=None,
                   help=f"hidden size h (default {DEFAULT_HIDDEN}, or the config's with --model/--config)")
    p.add_argument("--layers", type=int, default=None,
                   help=f"layers (default {DEFAULT_LAYERS}, or the config's with --model/--config)")
    p.add_argument("--dtype", default="fp16", help="weight element type: fp32, fp16, bf16, fp8 (default fp16)")
    p.add_argument("--gpu", default=None, help="GPU key of `phasebench gpus` (default: the binary's, h100-sxm)")
    p.add_argument("--binary", default=None, help="the phasebench binary (PHASEBENCH_BINARY wins when set)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--model", default=None, help="shipped model (see `phasebench models`): its hidden size and "
                                                   "layers, and what the simple model leaves out for it")
    src.add_argument("--config", default=None, help="a Hugging Face config.json, as --model")
    return p.parse_args(argv)


def common_args(a: argparse.Namespace) -> list[str]:
    out = ["--batch", str(a.batch), "--prompt", str(a.prompt), "--dtype", a.dtype]
    if a.gpu:
        out += ["--gpu", a.gpu]
    if a.model:
        out += ["--model", a.model]
    if a.config:
        out += ["--config", a.config]
    return out


def simple_args(a: argparse.Namespace, hidden: int | None, layers: int | None) -> list[str]:
    out = ["--simple", *common_args(a)]
    if hidden is not None:
        out += ["--hidden", str(hidden)]
    if layers is not None:
        out += ["--layers", str(layers)]
    return out


def check_echo(s: dict, asked: dict) -> None:
    """The binary echoes its inputs; one it did not use as asked (e.g. a 0 taken as 'the default') is an error."""
    for key, value in asked.items():
        if value is None:
            continue
        got = need(s, key, "`phasebench model --simple --json`")
        if got != value and not (isinstance(value, str) and str(got).lower() == value.lower()):
            raise Failure(f"phasebench modelled {key} {got}, not the {value} asked for (--{key} must be a "
                          f"positive integer)" if isinstance(value, int) else
                          f"phasebench modelled {key} {got!r}, not the {value!r} asked for")


def classify(intensity: float, ridge: float) -> str:
    return "COMPUTE-BOUND" if intensity >= ridge else "MEMORY-BANDWIDTH-BOUND"


def table(s: dict) -> list[str]:
    what = "`phasebench model --simple --json`"
    ridge = need(s, "ridge_flop_per_byte", what)
    if ridge is None:
        raise Failure(f"GPU {s.get('gpu', '?')} has no datasheet {s.get('dtype', '?')} peak, so no ridge to "
                      f"classify against; choose another --gpu or --dtype (see `phasebench gpus`)")
    params, weight_bytes = need(s, "params_per_layer", what), need(s, "weight_bytes", what)
    lines = ["=" * WIDTH,
             f"LLM LAYER SIMULATOR (Layer Params: {params / 1e6:.2f} M)",
             f"Batch Size: {need(s, 'batch', what)} | Prompt Length: {need(s, 'prompt', what)} | "
             f"Hidden Dim: {need(s, 'hidden', what)}",
             "=" * WIDTH]
    for n, (phase, title) in enumerate((("prefill", "PREFILL PHASE"), ("decode", "DECODE PHASE (Single Token)")), 1):
        flops, intensity = need(s, f"{phase}_flops", what), need(s, f"{phase}_intensity", what)
        if n > 1:
            lines.append("-" * WIDTH)
        lines += [f"{n}. {title}:",
                  f"   - Total FLOPS required: {flops / 1e9:.2f} GFLOPs",
                  f"   - Weight memory read:   {weight_bytes / 1e9:.3f} GB",
                  f"   - Arithmetic Intensity: {intensity:.2f} FLOPs/byte",
                  f"   - Classification:       {classify(intensity, ridge)}"]
    lines.append("=" * WIDTH)
    return lines


def attention_flops(phase: dict) -> int:
    return sum(o["flops"] * o["count"] for o in phase["ops"] if o["kind"].endswith("attention"))


def op(phase: dict, name: str) -> dict | None:
    return next((o for o in phase["ops"] if o["name"] == name), None)


def leaves_out(full: dict, simple: dict) -> list[str]:
    """What the simple model leaves out, from the full model's JSON (docs/model-json.md) and the simple one's."""
    m, inputs, ph = full["model"], full["inputs"], full["phases"]
    pre, dec = ph["prefill"], ph["decode"]

    def bytes_part(phase: dict) -> str:
        b = phase["bytes"]
        rest = b["total"] - b["weights"] - b["kv_cache"]  # activations read, everything written, block table
        return f"weights {b['weights'] / 1e9:.3f} + KV {b['kv_cache'] / 1e9:.3f} + activations/writes {rest / 1e9:.3f}"

    def cell(value: str, unit: str) -> str:
        return f"{value:>10} {unit:<6}"

    def row(label: str, simple_cell: str, full_cell: str, note: str = "") -> str:
        return f"   {label:<14}{simple_cell}  {full_cell}{'  = ' + note if note else ''}".rstrip()

    sw = simple["weight_bytes"] / 1e9
    lines = [f"What the simple model leaves out for {m['name']}:",
             f"   (full model: {full['gpu']['key']} {inputs['ceiling_source']} roofline, weights "
             f"{inputs['linear_weights']}, KV cache {inputs['kv_dtype']}, decode at context {dec['context']})",
             row("", f"{'simple 12*h^2':>17}", f"{'full model':>17}")]
    for name, phase in (("Prefill", pre), ("Decode", dec)):
        lines += [row(f"{name} FLOPs", cell(f"{simple[name.lower() + '_flops'] / 1e9:.2f}", "GFLOPs"),
                      cell(f"{phase['flops'] / 1e9:.2f}", "GFLOPs")),
                  row(f"{name} bytes", cell(f"{sw:.3f}", "GB"), cell(f"{phase['bytes']['total'] / 1e9:.3f}", "GB"),
                      bytes_part(phase)),
                  row(f"{name} time", cell("-", ""), cell(f"{phase['time_s'] * 1e3:.3f}", "ms"))]
    lines.append(f"   - attention (grows with the prompt/context): {attention_flops(pre) / 1e9:.2f} GFLOPs at "
                 f"prefill, {attention_flops(dec) / 1e9:.2f} at decode")
    lines.append(f"   - KV cache read at decode: {dec['bytes']['kv_cache'] / 1e9:.3f} GB (batch {dec['batch']} at "
                 f"context {dec['context']}; {full['kv_bytes_per_token']} B per cached token)")
    layer_ops = [o for o in dec["ops"]
                 if o["kind"] in ("linear", "grouped_linear", "batched_linear") and o["name"] != "lm_head"]
    layer_weights = sum(o["bytes"]["weights"] * o["count"] for o in layer_ops)
    mla = m.get("mla")
    attention = (f"MLA with a latent of {mla['kv_lora_rank']}+{mla['qk_rope_head_dim']}" if mla else
                 f"{m['num_key_value_heads']} KV heads of {m['num_attention_heads']}")
    shape = (f"{attention}, MLP {m['intermediate_size']}" if not m.get("experts") else
             f"{attention}, {m['experts_per_token']} of {m['experts']} experts of {m['expert_intermediate_size']}")
    lines.append(f"   - layer shape ({shape}): {layer_weights / 1e9:.3f} GB of layer weights read at decode, "
                 f"not {sw:.3f}")
    head, embed = op(dec, "lm_head"), op(pre, "embed")
    if head:
        lines.append(f"   - lm_head: {head['bytes']['weights'] * head['count'] / 1e9:.3f} GB and "
                     f"{head['flops'] * head['count'] / 1e9:.2f} GFLOPs a step; embedding rows "
                     f"{(embed['bytes']['weights'] if embed else 0) / 1e9:.3f} GB at prefill")
    lines.append("=" * WIDTH)
    return lines


def check_config(path: str | None) -> None:
    """A --config that is not a regular file (a FIFO would leave the binary waiting for a writer) is refused here."""
    if path is None:
        return
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return  # missing or unreadable: the binary names it
    if not stat.S_ISREG(mode):
        kind = "a folder" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "not a regular file"
        raise Failure(f"--config {path} is {kind}; give the path of a config.json file")


def main(argv: list[str] | None = None) -> int:
    try:
        a = parse_args(argv)
    except SystemExit as e:  # --help (0) or a usage error (2, its line printed): a status, so tests can drive main()
        return e.code if isinstance(e.code, int) else 2
    try:
        check_config(a.config)
        binary = find_binary(a.binary)
        real = a.model or a.config
        hidden = a.hidden if (a.hidden is not None or real) else DEFAULT_HIDDEN
        layers = a.layers if (a.layers is not None or real) else DEFAULT_LAYERS
        s = run_model(binary, simple_args(a, hidden, layers))
        check_echo(s, {"hidden": hidden, "layers": layers, "batch": a.batch, "prompt": a.prompt, "dtype": a.dtype})
        out = table(s)
        if real:
            full = run_model(binary, common_args(a))
            m = full["model"]
            if (s["hidden"], s["layers"]) == (m["hidden_size"], m["num_hidden_layers"]):
                simple = s
            else:  # the table was for other sizes: compare with the simple model of the config's own
                simple = run_model(binary, simple_args(a, m["hidden_size"], m["num_hidden_layers"]))
            out += leaves_out(full, simple)
    except Failure as f:
        print(str(f) if f.passthrough else f"prefill_decode_simulator: {f}", file=sys.stderr)
        return f.status
    except (KeyError, TypeError) as e:
        print(f"prefill_decode_simulator: unexpected JSON from the phasebench binary (missing or bad {e}); "
              f"rebuild it (scripts/build)", file=sys.stderr)
        return 2
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
