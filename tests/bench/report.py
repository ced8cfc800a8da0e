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


def parse(path):
    """{peer: {key: value}} from the lines of `path` that start with peer=."""
    rows = {}
    with open(path) as fh:
        for line in fh:
            if not line.startswith("peer="):
                continue
            fields = dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
            rows[fields["peer"]] = fields
    return rows


def num(fields, key):
    try:
        v = float(fields.get(key, "nan"))
    except ValueError:
        return math.nan
    return v


def fmt(v, spec):
    return "-" if v is None or math.isnan(v) else format(v, spec)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cold", required=True)
    ap.add_argument("--warm")
    ap.add_argument("--peers", required=True)
    ap.add_argument("--commands")
    ap.add_argument("--title", default="MLP training step")
    args = ap.parse_args()

    cold = parse(args.cold).get("sinter")
    if cold is None:
        sys.exit("report.py: no 'peer=sinter' line in %s" % args.cold)
    warm = parse(args.warm).get("sinter") if args.warm else None
    peers = parse(args.peers)

    base = num(cold, "median_step_s")
    base_loss = num(cold, "loss")
    rows = [("sinter", cold)] + [(name, f) for name, f in peers.items()]
    print("%s, %s threads" % (args.title, cold.get("threads", "?")))
    header = ("peer", "median step ms", "steps/s", "ratio", "first call s", "loss")
    widths = (15, 15, 10, 8, 13, 10)
    line = "  ".join(h.rjust(w) if i else h.ljust(w) for i, (h, w) in enumerate(zip(header, widths)))
    print(line)
    print("-" * len(line))
    mismatched = []
    for name, f in rows:
        t = num(f, "median_step_s")
        first = num(f, "compile_s")
        loss = num(f, "loss")
        cells = (name, fmt(t * 1e3, ".3f"), fmt(1.0 / t if t > 0 else math.nan, ".2f"),
                 fmt(t / base if base > 0 else math.nan, ".3g"), fmt(first, ".3f"),
                 fmt(loss, ".6f"))
        print("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))))
        if not math.isnan(loss) and abs(loss - base_loss) > 1e-3 * max(1.0, abs(base_loss)):
            mismatched.append(name)
    print()
    print("ratio = peer median step / sinter median step (> 1: sinter is faster)")
    print("first call = wall time of the first call: trace + compile + one step "
          "(torch-eager: none, '-')")
    print("sinter compile: cold %s s (first call, empty SINTER_CACHE_DIR); warm start %s s "
          "(first call of a second process, same cache dir)" %
          (fmt(num(cold, "compile_s"), ".3f"), fmt(num(warm, "compile_s") if warm else math.nan,
                                                   ".3f")))
    if mismatched:
        print("WARNING: loss differs from sinter's for: %s (not the same computation?)" %
              ", ".join(mismatched))
    if args.commands:
        print("\ncommands:")
        with open(args.commands) as fh:
            for cmd in fh:
                print("  " + cmd.rstrip())


if __name__ == "__main__":
    main()
