#!/usr/bin/env python3
# .ci/summary.py — turns meson's testlog.json into the plain line "N passed, N failed" (skips on the line before)
# Catch2 executables count their own test cases; every other meson test counts as one. A test
# meson registered (meson-info/intro-tests.json) that has no result in the log did not run and
# counts as failed, and so does a Catch2 run that ran no test.
import json
import os
import re
import sys

passed = failed = skipped = 0
problems = []
log_path = sys.argv[1]
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
        problems.append(f"line {number} of the test log is cut off")
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

registered_path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(log_path))),
                               "meson-info", "intro-tests.json")
try:
    registered = [t["name"] for t in json.load(open(registered_path))]
except (OSError, ValueError):
    registered = []
for name in registered:
    if name not in seen:
        failed += 1
        problems.append(f"{name}: registered but no result in the log (did not run)")

if passed + failed == 0:
    failed = 1  # nothing ran: the build or the setup failed
for problem in problems:
    print(f"summary: {problem}")
if skipped:
    print(f"{skipped} skipped (see their logs for why)")
print(f"{passed} passed, {failed} failed")
