#!/usr/bin/env python3
"""tests/cli/check_every_case_runs.py — every Catch2 case of sinter_tests is run by some meson test (a new tag without its test() line would never run in CI)."""
import json
import subprocess
import sys

build_dir, test_exe = sys.argv[1], sys.argv[2]


def names(*spec):
    out = subprocess.run([test_exe, "--list-test-names-only", *spec], capture_output=True,
                         text=True).stdout
    return {line.strip() for line in out.splitlines() if line.strip()}


every = names()
if len(every) < 100:
    sys.exit(f"sinter_tests lists only {len(every)} cases: the listing failed")
tests = json.loads(subprocess.run(["meson", "introspect", "--tests", build_dir],
                                  capture_output=True, text=True, check=True).stdout)
covered = set()
for test in tests:
    cmd = test["cmd"]
    # Direct runs and runs under mpirun: the argument after the executable is the test spec.
    for i, part in enumerate(cmd):
        if part.endswith("/sinter_tests") and i + 1 < len(cmd):
            covered |= names(cmd[i + 1])
missing = sorted(every - covered)
if missing:
    print(f"{len(missing)} test cases are run by no meson test (add a test() line with their "
          "tag to tests/meson.build):")
    for name in missing[:40]:
        print("  " + name)
    sys.exit(1)
print(f"all {len(every)} test cases are run by a meson test")
