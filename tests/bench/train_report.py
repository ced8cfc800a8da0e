#!/usr/bin/env python3
"""Formats the table of the full-training-step benchmark (tests/bench/train_run.sh) from the
`peer=... model=... median_step_s=...` lines of train_step and train_peers.py.

Usage: train_report.py --cold FILE [--warm FILE] --peers FILE [--commands FILE] [--title T]
  --cold   train_step's output, first process (empty SINTER_CACHE_DIR)
  --warm   train_step's output, second process (the same, now populated, SINTER_CACHE_DIR)
  --peers  train_peers.py's output
Ratio = sinter steps/s / peer steps/s (> 1: sinter is faster).
"""
import math

from report import (fmt, load_runs, num, print_commands, print_compile_times, print_header,
                    print_row)


def main():
    args, cold, warm, peers = load_runs("train_report.py", "Training step")

    base = num(cold, "median_step_s")
    rows = [("sinter", cold)] + list(peers.items())
    print("%s, %s threads, %s timed steps" % (args.title, cold.get("threads", "?"),
                                              cold.get("iters", "?")))
    header = ("peer", "step ms", "steps/s", "ratio", "first call s", "max RSS MB", "loss",
              "final loss")
    widths = (14, 9, 9, 7, 12, 10, 9, 10)
    print_header(header, widths)
    mismatched, drifted = [], []
    for name, f in rows:
        t = num(f, "median_step_s")
        loss, final = num(f, "loss"), num(f, "final_loss")
        cells = (name, fmt(t * 1e3, ".2f"), fmt(1.0 / t if t > 0 else math.nan, ".1f"),
                 fmt(t / base if base > 0 else math.nan, ".3g"), fmt(num(f, "compile_s"), ".3f"),
                 fmt(num(f, "maxrss_mb"), ".0f"), fmt(loss, ".6f"), fmt(final, ".6f"))
        print_row(cells, widths)
        if not math.isnan(loss) and abs(loss - num(cold, "loss")) > 1e-4 * max(1.0, abs(loss)):
            mismatched.append(name)
        if not math.isnan(final) and abs(final - num(cold, "final_loss")) > 1e-2 * max(1.0, abs(final)):
            drifted.append(name)
    print()
    print("ratio = sinter steps/s / peer steps/s (> 1: sinter is faster); step = median step")
    print("first call = wall time of the first call: trace + compile + one step (torch-eager: '-')")
    print("max RSS = ru_maxrss of the peer's own process (base after imports / before the model: %s)"
          % ", ".join("%s %s" % (n, fmt(num(f, "base_rss_mb"), ".0f")) for n, f in rows))
    print("sinter memory: planned peak %s MB (memory_plan().peak_bytes(): arena + outputs) + "
          "parameters and AdamW m, v %s MB; %s parameters" %
          (fmt(num(cold, "planned_peak_mb"), ".2f"), fmt(num(cold, "state_mb"), ".2f"),
           cold.get("params", "?")))
    print_compile_times(cold, warm)
    if mismatched:
        print("WARNING: initial loss differs from sinter's for: %s (not the same model?)" %
              ", ".join(mismatched))
    if drifted:
        print("WARNING: final loss differs by > 1%% from sinter's for: %s (optimizer differs, or "
              "different step counts?)" % ", ".join(drifted))
    print_commands(args.commands)


if __name__ == "__main__":
    main()
