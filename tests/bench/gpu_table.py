#!/usr/bin/env python3
"""Reads the `peer=...` lines of train_step (sinter) and train_peers.py (PyTorch), or of
train_rounds.py (which adds each peer's per-round ratio statistics), from files or stdin and
prints the GPU benchmark table for docs/perf.md: median step time per model and peer, the
peer / sinter ratio (above 1: sinter is faster; with rounds: the median of the per-round ratios,
their interquartile range and the verdict), tokens/s and model FLOP utilisation against the
measured bf16 peak (the `peer=peak` line) for the GPT models, and each contender's peak device
memory.

Runs of one model with other settings (precision: --amp bf16|fp16, --tf32 or float32; batch:
--batch N) are rows of their own, each compared with sinter's run with the same settings. The
settings come from the fields amp, tf32 and batch (train_rounds.py adds them to every line;
missing: amp off, no TF32, and the batch from sinter's tokens_per_s or the model's own)."""
import math
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from report import device_peak_mb  # noqa: E402
from train_peers import GPT, batch_of, param_spec  # noqa: E402  (no torch / jax import here)


def parse(lines):
    rows, peak = [], None
    for line in lines:
        if not line.startswith("peer="):
            continue
        fields = dict(re.findall(r"(\w+)=(\S+)", line))
        if fields["peer"] == "peak":
            peak = float(fields["tflops"])
        else:
            rows.append(fields)
    return rows, peak


def precision(r):
    """bf16 | fp16 (autocast), tf32 (f32 GEMMs on TF32 tensor cores) or f32."""
    amp = r.get("amp", "off")
    if amp != "off":
        return amp
    return "tf32" if r.get("tf32") == "1" else "f32"


def batch(r):
    """The batch of a row: its batch field; else, for sinter's GPT lines, tokens_per_s ×
    median_step_s / context; else the model's own."""
    if "batch" in r:
        return int(r["batch"])
    model = r.get("model")
    if model in GPT and "tokens_per_s" in r:
        tokens = float(r["tokens_per_s"]) * float(r["median_step_s"])
        if tokens > 0:
            return int(round(tokens / GPT[model]["context"]))
    return batch_of(model) if model in GPT or model in ("mlp", "vit") else 0


def key(r):
    return r.get("model"), precision(r), batch(r)


def gpt_flops_per_step(model, b):
    """Training FLOPs of one step as train_step.cpp counts them: per token 6 per parameter plus
    attention's 12 · layers · context · width."""
    c = GPT[model]
    params = sum(math.prod(shape) for _, shape in param_spec(model))
    tokens = b * c["context"]
    return tokens * (6 * params + 12 * c["depth"] * c["context"] * c["dim"])


def ratio_cells(r, base):
    """(ratio, IQR of the per-round ratios, verdict) — from train_rounds.py's fields, else the
    ratio of the two medians (separate runs: no spread, no verdict)."""
    if "ratio_median" in r:
        return ("%.3f" % float(r["ratio_median"]),
                "%.3f–%.3f" % (float(r["ratio_q25"]), float(r["ratio_q75"])),
                r["verdict"].replace("-", " "))
    if r["peer"] == "sinter" or not base:
        return ("1" if r["peer"] == "sinter" else "n/a"), "", ""
    return "%.2f" % (float(r["median_step_s"]) / float(base["median_step_s"])), "n/a", "n/a"


def main():
    lines = []
    for path in sys.argv[1:] or ["-"]:
        lines += (sys.stdin if path == "-" else open(path)).read().splitlines()
    rows, peak = parse(lines)
    sinter = {key(r): r for r in rows if r["peer"] == "sinter"}
    print("| model | precision | batch | peer | step (ms) | peer / sinter | per-round IQR "
          "| verdict | tokens/s | MFU | peak MB | first loss |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        step = float(r["median_step_s"])
        base = sinter.get(key(r))
        ratio, iqr, verdict = ratio_cells(r, base)
        model, b = r["model"], batch(r)
        tokens = flops = ""
        if model in GPT and b and step > 0:
            tokens = "%.0f" % (b * GPT[model]["context"] / step)
            if peak:
                per_step = (float(base["flops_per_step"]) if base and "flops_per_step" in base
                            else gpt_flops_per_step(model, b))
                flops = "%.1f%%" % (100 * per_step / step / 1e12 / peak)
        mem = device_peak_mb(r)
        print("| %s | %s | %s | %s | %.2f | %s | %s | %s | %s | %s | %s | %s |" %
              (model, precision(r), b or "", r["peer"], 1e3 * step, ratio, iqr, verdict, tokens,
               flops, "" if math.isnan(mem) else "%.0f" % mem, r.get("loss", "")))
    print()
    if peak:
        print("measured bf16 GEMM peak: %.1f TFLOP/s" % peak)
    print("MFU = (6 · parameters + 12 · layers · context · width) · tokens per step / "
          "step time, over the measured bf16 peak (also for the tf32 and f32 rows)")
    print("peak MB = device memory: torch.cuda.max_memory_allocated() over the steps after the "
          "first call; sinter: planned_peak_mb (arena of intermediates + outputs) + state_mb "
          "(parameters, optimizer state, AMP working copies)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
