#!/usr/bin/env bash
# tests/cli/check_warm_start.sh — a second process compiles zero kernels: all come from disk
set -euo pipefail
program="$1"
cache=$(mktemp -d)
trap 'rm -rf "$cache"' EXIT
first=$(SINTER_CACHE_DIR="$cache" "$program" 2>&1)
second=$(SINTER_CACHE_DIR="$cache" "$program" 2>&1)
echo "first:  $(grep 'sinter: compiled' <<<"$first")"
echo "second: $(grep 'sinter: compiled' <<<"$second")"
grep -Eq 'sinter: compiled .* \(([1-9][0-9]*) compiled, 0 loaded from the disk cache' <<<"$first" \
  || { echo "the first process should compile its kernels"; exit 1; }
grep -Eq 'sinter: compiled .* \(0 compiled, [1-9][0-9]* loaded from the disk cache' <<<"$second" \
  || { echo "the second process should load every kernel from the disk cache"; exit 1; }
# Both runs print the same results.
[ "$(grep -v 'sinter:' <<<"$first")" = "$(grep -v 'sinter:' <<<"$second")" ] \
  || { echo "results differ between the cold and the warm run"; exit 1; }
# SINTER_TIME_PHASES=1 names each compile stage with its time; without it nothing is printed.
timed=$(SINTER_TIME_PHASES=1 SINTER_CACHE_DIR="$cache" "$program" 2>&1)
for stage in autodiff lower simplify cse small-matmuls fuse memory kernels; do
  grep -Eq "^sinter: phase $stage [0-9]+\.[0-9] ms$" <<<"$timed" \
    || { echo "SINTER_TIME_PHASES=1 should print the $stage stage"; exit 1; }
done
# The compile line names its slowest stages.
grep -Eq 'sinter: compiled .*; slowest stages: [a-z-]+ [0-9]+\.[0-9] ms' <<<"$first" \
  || { echo "the compile line should name the slowest stages"; exit 1; }
! grep -q 'sinter: phase' <<<"$second" || { echo "phases printed without SINTER_TIME_PHASES"; exit 1; }
