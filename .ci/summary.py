#!/usr/bin/env python3
# .ci/summary.py — turns meson's testlog.json into the plain line "N passed, N failed" (skips on the line before)
# Catch2 executables count their own test cases; every other meson test counts as one.
import json
import re
import sys

passed = failed = skipped = 0
try:
    lines = open(sys.argv[1]).read().splitlines()
except OSError:
    lines = []
for line in lines:
    if not line.strip():
        continue
    t = json.loads(line)
    if t.get("result") == "SKIP":
        skipped += 1
        continue
    ok = t.get("result") in ("OK", "EXPECTEDFAIL")
    out = t.get("stdout") or ""
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
if passed + failed == 0:
    failed = 1  # nothing ran: the build or the setup failed
if skipped:
    print(f"{skipped} skipped (see their logs for why)")
print(f"{passed} passed, {failed} failed")
