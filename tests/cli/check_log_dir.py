#!/usr/bin/env python3
"""tests/cli/check_log_dir.py — a recipe's --log-dir: metrics.csv holds the training metrics every
--log-every steps and the evaluation at the end; TensorBoard's own reader (EventAccumulator, PyPI
`tensorboard`) reads the same values from the event file; `sinter plot DIR` draws them; a folder
that holds another run's metrics is refused.

Usage: check_log_dir.py MLP GPT SINTER. Exit 77 (meson's SKIP) without tensorboard, unless
SINTER_INTEROP_PYTHON names the Python that must have it (CI: .ci/test's venv).
"""
import csv
import math
import os
import subprocess
import sys
import tempfile

SKIP = 77
required = os.environ.get("SINTER_INTEROP_PYTHON")
if required and not os.environ.get("SINTER_LOG_DIR_REEXEC"):
    env = dict(os.environ, SINTER_LOG_DIR_REEXEC="1")
    sys.exit(subprocess.run([required, *sys.argv], env=env).returncode)
try:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
except ImportError:
    if required:
        print(f"FAIL: {required} cannot import tensorboard (run .ci/test, which installs it)")
        sys.exit(1)
    print("skipped: the tensorboard package is not installed")
    sys.exit(SKIP)

mlp, gpt, sinter = sys.argv[1:4]
failures = []


def check(condition, what):
    if not condition:
        failures.append(what)
        print("FAIL:", what)


with tempfile.TemporaryDirectory(prefix="sinter-log-dir-") as tmp:
    logs = os.path.join(tmp, "run")
    run = subprocess.run([mlp, "--steps", "30", "--hidden", "64", "--threads", "2",
                          "--log-dir", logs, "--log-every", "10"],
                         capture_output=True, text=True, timeout=600)
    check(run.returncode == 0, f"mlp --log-dir exited {run.returncode}: {run.stderr[-2000:]}")
    with open(os.path.join(logs, "metrics.csv")) as f:
        rows = list(csv.DictReader(f))
    columns = ["step", "epoch", "loss", "lr", "steps_per_second", "samples_per_second",
               "host_memory_mb", "test_accuracy"]
    check(list(rows[0].keys()) == columns, f"metrics.csv columns {list(rows[0].keys())}")
    training = [r for r in rows if r["loss"]]
    check([int(r["step"]) for r in training] == [10, 20, 30],
          f"training rows at steps {[r['step'] for r in training]}, want 10, 20, 30")
    for r in training:
        check(float(r["loss"]) > 0 and float(r["lr"]) > 0 and float(r["steps_per_second"]) > 0
              and math.isclose(float(r["samples_per_second"]), float(r["steps_per_second"]) * 128,
                               rel_tol=1e-6)
              and float(r["host_memory_mb"]) > 10, f"a training row's values: {r}")
    result = [r for r in rows if r["test_accuracy"]]
    check(len(result) == 1 and int(result[0]["step"]) == 30
          and 0.1 < float(result[0]["test_accuracy"]) <= 1, f"the evaluation row: {result}")
    printed = [line for line in run.stdout.splitlines() if line.startswith("result: ")]
    check(printed and f"test_accuracy={float(result[0]['test_accuracy']):.4f}" in printed[0],
          f"the result line {printed} and metrics.csv's test_accuracy disagree")

    # TensorBoard's reader: the same scalars at the same steps.
    events = EventAccumulator(logs)
    events.Reload()
    tags = events.Tags()["scalars"]
    check(set(columns[1:]) <= set(tags), f"TensorBoard's scalar tags {tags}")
    for tag in ("loss", "lr", "epoch"):
        got = [(e.step, e.value) for e in events.Scalars(tag)]
        want = [(int(r["step"]), float(r[tag])) for r in training]
        check(len(got) == len(want) and all(
            s == ws and math.isclose(v, w, rel_tol=1e-6) for (s, v), (ws, w) in zip(got, want)),
            f"TensorBoard's {tag}: {got}, metrics.csv's: {want}")
    accuracy = [(e.step, e.value) for e in events.Scalars("test_accuracy")]
    check(len(accuracy) == 1 and accuracy[0][0] == 30 and math.isclose(
        accuracy[0][1], float(result[0]["test_accuracy"]), rel_tol=1e-6),
        f"TensorBoard's test_accuracy: {accuracy}")
    print(f"tensorboard: {len(tags)} scalar tags; loss {[round(e.value, 4) for e in events.Scalars('loss')]}")

    # sinter plot: the curves as SVG.
    plot = subprocess.run([sinter, "plot", logs], capture_output=True, text=True, timeout=60)
    check(plot.returncode == 0, f"sinter plot exited {plot.returncode}: {plot.stderr}")
    for name in ("loss.svg", "accuracy.svg"):
        path = os.path.join(logs, name)
        check(os.path.exists(path) and open(path).read().startswith("<svg"),
              f"sinter plot wrote no {name}")
    empty = os.path.join(tmp, "empty")
    os.makedirs(empty)
    plot = subprocess.run([sinter, "plot", empty], capture_output=True, text=True, timeout=60)
    check(plot.returncode == 1 and "metrics.csv" in plot.stderr,
          f"sinter plot of a folder without metrics: exit {plot.returncode}: {plot.stderr}")

    # Another recipe's columns in the same folder: refused before any work, naming the file.
    other = subprocess.run([gpt, "--steps", "2", "--log-dir", logs], capture_output=True,
                           text=True, timeout=600)
    check(other.returncode == 2 and "metrics.csv holds another run's metrics" in other.stderr,
          f"gpt --log-dir over mlp's metrics: exit {other.returncode}: {other.stderr[-500:]}")

sys.exit(1 if failures else 0)
