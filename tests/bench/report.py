#!/usr/bin/env python3
"""Formats the benchmark table from the `peer=... compile_s=... median_step_s=...` lines.

Usage: report.py --cold FILE --warm FILE --peers FILE [--commands FILE]
  --cold   mlp_step's output, first process (empty SINTER_CACHE_DIR)
  --warm   mlp_step's output, second process (the same, now populated, SINTER_CACHE_DIR)
  --peers  peers.py's output
Ratio = peer median step time / sinter median step time (> 1: sinter is faster).
"""
import argparse
import math
import sys


def fields_of(line):
    """{key: value} of a `key=value key=value` line (a leading word without '=' is skipped)."""
    return dict(kv.split("=", 1) for kv in line.split() if "=" in kv)


def parse(path):
    """{peer: {key: value}} from the lines of `path` that start with peer=."""
    rows = {}
    with open(path) as fh:
        for line in fh:
            if not line.startswith("peer="):
                continue
            fields = fields_of(line)
            rows[fields["peer"]] = fields
    return rows


def num(fields, key):
    try:
        v = float(fields.get(key, "nan"))
    except ValueError:
        return math.nan
    return v


def fmt(v, spec):
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


def device_peak_mb(fields):
    """A contender's peak device memory in MB, from its result line (nan when it has none):
    torch's peak_mem_mb (torch.cuda.max_memory_allocated() over its steps), or sinter's
    planned_peak_mb + state_mb (the compiled step's arena of intermediates and outputs, plus the
    parameters and the optimizer state it keeps between steps)."""
    if "peak_mem_mb" in fields:
        return num(fields, "peak_mem_mb")
    if "planned_peak_mb" in fields and not fields.get("device", "cuda").startswith("cpu"):
        return num(fields, "planned_peak_mb") + num(fields, "state_mb")
    return math.nan


def load_runs(program, title):
    """The report programs' arguments (--cold, --warm, --peers, --commands, --title) and the
    runs they name: (args, sinter's cold run, its warm run or None, {peer: fields})."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--cold", required=True)
    ap.add_argument("--warm")
    ap.add_argument("--peers", required=True)
    ap.add_argument("--commands")
    ap.add_argument("--title", default=title)
    args = ap.parse_args()
    cold = parse(args.cold).get("sinter")
    if cold is None:
        sys.exit("%s: no 'peer=sinter' line in %s" % (program, args.cold))
    warm = parse(args.warm).get("sinter") if args.warm else None
    return args, cold, warm, parse(args.peers)


def print_header(header, widths):
    line = "  ".join(h.rjust(w) if i else h.ljust(w) for i, (h, w) in enumerate(zip(header, widths)))
    print(line)
    print("-" * len(line))


def print_row(cells, widths):
    print("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))))


def print_compile_times(cold, warm):
    print("sinter compile: cold %s s (first call, empty SINTER_CACHE_DIR); warm start %s s "
          "(first call of a second process, same cache dir)" %
          (fmt(num(cold, "compile_s"), ".3f"),
           fmt(num(warm, "compile_s") if warm else math.nan, ".3f")))


def print_commands(path):
    if not path:
        return
    print("\ncommands:")
    with open(path) as fh:
        for cmd in fh:
            print("  " + cmd.rstrip())


def main():
    args, cold, warm, peers = load_runs("report.py", "MLP training step")

    base = num(cold, "median_step_s")
    base_loss = num(cold, "loss")
    rows = [("sinter", cold)] + [(name, f) for name, f in peers.items()]
    print("%s, %s threads" % (args.title, cold.get("threads", "?")))
    header = ("peer", "median step ms", "steps/s", "ratio", "first call s", "loss")
    widths = (15, 15, 10, 8, 13, 10)
    print_header(header, widths)
    mismatched = []
    for name, f in rows:
        t = num(f, "median_step_s")
        first = num(f, "compile_s")
        loss = num(f, "loss")
        cells = (name, fmt(t * 1e3, ".3f"), fmt(1.0 / t if t > 0 else math.nan, ".2f"),
                 fmt(t / base if base > 0 else math.nan, ".3g"), fmt(first, ".3f"),
                 fmt(loss, ".6f"))
        print_row(cells, widths)
        if not math.isnan(loss) and abs(loss - base_loss) > 1e-3 * max(1.0, abs(base_loss)):
            mismatched.append(name)
    print()
    print("ratio = peer median step / sinter median step (> 1: sinter is faster)")
    print("first call = wall time of the first call: trace + compile + one step "
          "(torch-eager: none, '-')")
    print_compile_times(cold, warm)
    if mismatched:
        print("WARNING: loss differs from sinter's for: %s (not the same computation?)" %
              ", ".join(mismatched))
    print_commands(args.commands)


if __name__ == "__main__":
    main()
