#!/usr/bin/env python3
"""tests/bench/sifting_report.py — the table of tests/bench/sifting.sh from its run log.

Each run in the log starts with `run model=M config=C seed=S run_epochs=E [round=R]` and holds
the recipe's `epoch E test_accuracy=A steps=N seconds=T` lines and its `result:` line (the last
epoch). Runs of one configuration and seed repeated (--repeats) train identically: their
accuracies must agree, and each time is their median.
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
            run.setdefault("run_epochs", "nan")
            runs.append(run)
        elif run is None:
            continue
        elif line.startswith("epoch "):
            f = dict(kv.split("=", 1) for kv in line.split()[2:])
            run["epochs"].append((float(f["test_accuracy"]), float(f["seconds"]),
                                  float(line.split()[1])))
        elif line.startswith("result:"):
            f = dict(kv.split("=", 1) for kv in line.split()[1:])
            run["epochs"].append((float(f["test_accuracy"]), float(f["seconds"]),
                                  float(run["run_epochs"])))
            run["final"] = float(f["test_accuracy"])
            run["kept"] = float(f.get("kept_fraction", 1.0))
        elif line.strip() == "failed":
            run["failed"] = True
    return runs


def median_run(repeats):
    """One run of a configuration and seed from its repeats: the same accuracies (the training
    is deterministic), each point's time the median of the repeats'."""
    first = repeats[0]
    for r in repeats[1:]:
        if [(a, e) for a, _, e in r["epochs"]] != [(a, e) for a, _, e in first["epochs"]]:
            sys.exit("sifting_report: %s seed %s trained differently in two rounds: a run is "
                     "not deterministic" % (first["config"], first["seed"]))
    merged = dict(first)
    merged["epochs"] = [(a, statistics.median(r["epochs"][i][1] for r in repeats), e)
                        for i, (a, _, e) in enumerate(first["epochs"])]
    return merged


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
    runs = [median_run([r for r in runs if (r["config"], r["seed"]) == key])
            for key in dict.fromkeys((r["config"], r["seed"]) for r in runs)]
    rows = {}
    for c in configs:
        mine = [r for r in runs if r["config"] == c]
        reached = [next(((t, e) for a, t, e in r["epochs"] if a >= args.target), None)
                   for r in mine]
        times = [t for t, _ in filter(None, reached)]
        epochs = [e for _, e in filter(None, reached)]
        finals = [r["final"] for r in mine]
        rows[c] = dict(n=len(mine), times=times, epochs=epochs, finals=finals,
                       kept=statistics.mean(r["kept"] for r in mine),
                       total=statistics.mean(r["epochs"][-1][1] for r in mine))
    base = rows.get("none")
    print(f"\n{model}: seconds of training to test accuracy {args.target} (evaluation left "
          f"out), and the final accuracy after the same epochs")
    print("| configuration | kept | reached | epochs to target (mean) | seconds to target (mean) "
          "| vs none | final accuracy (mean, min..max) | vs none | seconds, all epochs |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for c in configs:
        r = rows[c]
        mean_t = statistics.mean(r["times"]) if r["times"] else None
        vs = ("%+.0f%%" % (100 * (mean_t / statistics.mean(base["times"]) - 1))
              if mean_t and base and base["times"] else "—")
        final = statistics.mean(r["finals"])
        dfinal = ("%+.2f pt" % (100 * (final - statistics.mean(base["finals"])))
                  if base else "—")
        parts = c.split(":")
        name = "no sifting" if c == "none" else "%s, β %s" % tuple(parts[:2])
        if len(parts) == 3:
            name += ", %s scored" % parts[2]
        epochs = "%.2f" % statistics.mean(r["epochs"]) if r["epochs"] else "—"
        print(f"| {name} | {r['kept']:.3f} | {len(r['times'])}/{r['n']} | {epochs} | "
              f"{'%.1f' % mean_t if mean_t else 'not reached'} | {vs} | "
              f"{final:.4f} ({min(r['finals']):.4f}..{max(r['finals']):.4f}) | {dfinal} | "
              f"{r['total']:.1f} |")


if __name__ == "__main__":
    main()
