#!/usr/bin/env python3
"""tests/data/make_cost_calibration.py — the cost model's calibration set: each kernel of a
measured GPU trace (sinter's profiler, trace.json) with its median time over the steady steps,
joined by name with the kernel's fields from SINTER_DUMP=plan of the same model (any machine:
the null driver prints it), written as tab-separated lines: measured_us, class, name, fields.

Usage: make_cost_calibration.py TRACE.json PLAN_DUMP.txt > tests/data/<gpu>_<model>_kernels.tsv
The plan dump: SINTER_NULL_GPU=1 SINTER_DUMP=plan train_step --model ... 2> PLAN_DUMP.txt.
Kernels are matched in order by name (model path, kind, root op); the trace's kernel numbers
may differ from the plan's.
"""
import difflib
import json
import re
import statistics
import sys

trace_path, plan_path = sys.argv[1], sys.argv[2]
trace = json.load(open(trace_path))
kernels = [e for e in trace["traceEvents"] if e.get("cat") == "kernel"]
per_step = [i for i, e in enumerate(kernels) if e["name"].startswith("k0 ")]
if len(per_step) < 3:
    sys.exit(f"{trace_path}: fewer than 3 steps of kernels")
n = per_step[1] - per_step[0]
steps = [kernels[s:s + n] for s in per_step[1:] if len(kernels[s:s + n]) == n]  # not the first
measured = [(steps[0][i]["name"].split(" ", 1)[1], statistics.median(s[i]["dur"] for s in steps))
            for i in range(n)]

plan = []
for line in open(plan_path, errors="replace"):
    m = re.match(r"\s+[0-9.]+ us\s+\S+(?: \S+)?\s+(k\d+ .*?)  \[(.*)\]$", line)
    if m:
        plan.append((m.group(1).split(" ", 1)[1], m.group(2)))
if not plan:
    sys.exit(f"{plan_path}: no SINTER_DUMP=plan lines")


def kernel_class(name, fields):
    f = dict(x.split("=", 1) for x in fields.split())
    if name.startswith("optimizer."):
        return "AdamW"
    if f["kind"] == "attention":
        return "attention backward" if f["gradient"] == "1" else "attention forward"
    if f["kind"] == "gemm":
        return "GEMMs"
    if f["strategy"] == "column_split":
        return "column reductions"
    if f["kind"] in ("row", "reduce"):
        return "row kernels"
    return "elementwise loops"


print(f"# {trace_path.split('/')[-1]}: median over {len(steps)} steady steps; fields from "
      f"SINTER_DUMP=plan ({plan_path.split('/')[-1]}). measured_us, class, name, fields.")
matcher = difflib.SequenceMatcher(a=[m[0] for m in measured], b=[p[0] for p in plan],
                                  autojunk=False)
for tag, i1, i2, j1, j2 in matcher.get_opcodes():
    if tag != "equal":
        continue
    for i, j in zip(range(i1, i2), range(j1, j2)):
        name, us = measured[i]
        print(f"{us:.3f}\t{kernel_class(name, plan[j][1])}\t{name}\t{plan[j][1]}")
