#!/usr/bin/env python3
"""tests/bench/sifting_report.py — the table of tests/bench/sifting.sh from its run log.

Each run in the log starts with `run model=M config=C seed=S` and holds the recipe's
`epoch E test_accuracy=A steps=N seconds=T` lines and its `result:` line (the last epoch).
"""
import argparse
import re
import statistics
import sys


def parse(lines):
    runs, run = [], None
    for line in lines:
        if line.startswith("run "):
            run = dict(kv.split("=", 1) for kv in line.split()[1:])
            run["epochs"], run["failed"] = [], False
            runs.append(run)
        elif run is None:
            continue
        elif line.startswith("epoch "):
            f = dict(kv.split("=", 1) for kv in line.split()[2:])
            run["epochs"].append((float(f["test_accuracy"]), float(f["seconds"])))
        elif line.startswith("result:"):
            f = dict(kv.split("=", 1) for kv in line.split()[1:])
            run["epochs"].append((float(f["test_accuracy"]), float(f["seconds"])))
            run["final"] = float(f["test_accuracy"])
            run["kept"] = float(f.get("kept_fraction", 1.0))
        elif line.strip() == "failed":
            run["failed"] = True
    return runs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", type=float, required=True)
    ap.add_argument("log")
    args = ap.parse_args()
    with open(args.log) as f:
        runs = parse(f.read().splitlines())
    broken = [r for r in runs if r["failed"] or "final" not in r]
    if broken or not runs:
        sys.exit("sifting_report: %d of %d runs failed or printed no result line"
                 % (len(broken), len(runs)))
    configs = list(dict.fromkeys(r["config"] for r in runs))
    model = runs[0]["model"]
    rows = {}
    for c in configs:
        mine = [r for r in runs if r["config"] == c]
        reached = [next((t for a, t in r["epochs"] if a >= args.target), None) for r in mine]
        times = [t for t in reached if t is not None]
        finals = [r["final"] for r in mine]
        rows[c] = dict(n=len(mine), times=times, finals=finals,
                       kept=statistics.mean(r["kept"] for r in mine),
                       total=statistics.mean(r["epochs"][-1][1] for r in mine))
    base = rows.get("none")
    print(f"\n{model}: seconds of training to test accuracy {args.target} (evaluation left "
          f"out), and the final accuracy after the same epochs")
    print("| configuration | kept | reached | seconds to target (mean) | vs none | "
          "final accuracy (mean, min..max) | vs none | seconds, all epochs |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for c in configs:
        r = rows[c]
        mean_t = statistics.mean(r["times"]) if r["times"] else None
        vs = ("%+.0f%%" % (100 * (mean_t / statistics.mean(base["times"]) - 1))
              if mean_t and base and base["times"] else "—")
        final = statistics.mean(r["finals"])
        dfinal = ("%+.2f pt" % (100 * (final - statistics.mean(base["finals"])))
                  if base else "—")
        name = "no sifting" if c == "none" else "%s, β %s" % tuple(c.split(":"))
        print(f"| {name} | {r['kept']:.3f} | {len(r['times'])}/{r['n']} | "
              f"{'%.1f' % mean_t if mean_t else 'not reached'} | {vs} | "
              f"{final:.4f} ({min(r['finals']):.4f}..{max(r['finals']):.4f}) | {dfinal} | "
              f"{r['total']:.1f} |")


if __name__ == "__main__":
    main()
