#!/usr/bin/env python3
"""Reads the `peer=...` lines of train_step (sinter) and train_peers.py (PyTorch), or of
train_rounds.py (which adds each peer's per-round ratio statistics), from files or stdin and
prints the GPU benchmark table for docs/perf.md: median step time per model and peer, the
peer / sinter ratio (above 1: sinter is faster; with rounds: the median of the per-round ratios,
their interquartile range and the verdict), tokens/s and model FLOP utilisation against the
measured bf16 peak (the `peer=peak` line) for the GPT models."""
import re
import sys


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
    sinter = {r["model"]: r for r in rows if r["peer"] == "sinter"}
    print("| model | peer | step (ms) | peer / sinter | per-round IQR | verdict | tokens/s | MFU "
          "| first loss |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        step = float(r["median_step_s"])
        base = sinter.get(r["model"])
        ratio, iqr, verdict = ratio_cells(r, base)
        tokens = flops = ""
        if r["model"].startswith("gpt") and base:
            per_step_tokens = float(base["tokens_per_s"]) * float(base["median_step_s"])
            tokens = "%.0f" % (per_step_tokens / step)
            if peak:
                flops = "%.1f%%" % (100 * float(base["flops_per_step"]) / step / 1e12 / peak)
        print("| %s | %s | %.2f | %s | %s | %s | %s | %s | %s |" %
              (r["model"], r["peer"], 1e3 * step, ratio, iqr, verdict, tokens, flops,
               r.get("loss", "")))
    if peak:
        print("\nmeasured bf16 GEMM peak: %.1f TFLOP/s" % peak)
    return 0


if __name__ == "__main__":
    sys.exit(main())
