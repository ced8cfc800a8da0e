#!/usr/bin/env python3
# .ci/summary.py — turns meson's testlog.json files into the plain line "N passed, N failed" (skips on the line before)
# Usage: summary.py LOG [LOG ...], one per build folder (build/meson-logs/testlog.json, ...).
# Catch2 executables count their own test cases; every other meson test counts as one. A test
# that should have run and has no result in its log did not run and counts as failed, and so
# does a Catch2 run that ran no test. The tests that should have run are the build folder's
# `ci-expected-tests.txt` (one name per line: a build that runs a chosen subset, such as the
# sanitizer build), else every test meson registered there (meson-info/intro-tests.json).
import json
import os
import re
import sys

passed = failed = skipped = 0
problems = []


def read_log(log_path):
    global passed, failed, skipped
    try:
        lines = open(log_path).read().splitlines()
    except OSError:
        lines = []
        problems.append(f"no test log at {log_path}")
    seen = set()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            t = json.loads(line)
        except json.JSONDecodeError:
            failed += 1
            problems.append(f"line {number} of {log_path} is cut off")
            continue
        # meson writes "project:suite / name"; intro-tests.json has the bare name.
        seen.add(str(t.get("name", "")).rsplit(" / ", 1)[-1])
        if t.get("result") == "SKIP":
            skipped += 1
            continue
        ok = t.get("result") in ("OK", "EXPECTEDFAIL")
        out = t.get("stdout") or ""
        if "No tests ran" in out:
            failed += 1
            problems.append(f"{t.get('name')}: no test ran")
            continue
        m_all = re.search(r"All tests passed \(\d+ assertions? in (\d+) test cases?\)", out)
        m_mix = re.search(r"test cases:\s*(\d+) \|\s*(\d+) passed \|\s*(\d+) failed", out)
        if m_all and ok:
            passed += int(m_all.group(1))
        elif m_mix:
            passed += int(m_mix.group(2))
            failed += int(m_mix.group(3)) or (0 if ok else 1)
        elif ok:
            passed += 1
        else:
            failed += 1

    build_dir = os.path.dirname(os.path.dirname(os.path.abspath(log_path)))
    expected_path = os.path.join(build_dir, "ci-expected-tests.txt")
    try:
        expected = [n.strip() for n in open(expected_path).read().splitlines() if n.strip()]
    except OSError:
        try:
            registered_path = os.path.join(build_dir, "meson-info", "intro-tests.json")
            expected = [t["name"] for t in json.load(open(registered_path))]
        except (OSError, ValueError):
            expected = []
    for name in expected:
        if name not in seen:
            failed += 1
            problems.append(f"{name}: expected in {build_dir} but no result in its log (did not run)")


for log in sys.argv[1:] or ["build/meson-logs/testlog.json"]:
    read_log(log)
if passed + failed == 0:
    failed = 1  # nothing ran: the build or the setup failed
for problem in problems:
    print(f"summary: {problem}")
if skipped:
    print(f"{skipped} skipped (see their logs for why)")
print(f"{passed} passed, {failed} failed")
