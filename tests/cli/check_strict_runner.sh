#!/usr/bin/env bash
# tests/cli/check_strict_runner.sh — the test runner and CI summary cannot pass by testing nothing
# Usage: check_strict_runner.sh SINTER_TESTS SINTER SUMMARY_PY
set -euo pipefail
tests="$1" sinter="$2" summary="$3"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sinter-strict.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
status_of() { set +e; "$@" >"$tmp/out" 2>&1; local s=$?; set -e; echo $s; }

# 1. A filter that matches nothing, and a test case that asserts nothing, fail.
[[ $(status_of "$tests" '[no-such-tag]') != 0 ]] || fail "a run with no matching test passed"
grep -q "No tests ran" "$tmp/out" || fail "no 'No tests ran' message"
[[ $(status_of "$tests" '[no-assertions-probe]') != 0 ]] || fail "a test case without assertions passed"

# 2. CUDA suites skip (77) only where there is no GPU; a broken driver path is a failure.
[[ $(status_of env SINTER_LIBCUDA="$tmp/no-such-libcuda.so" "$tests" '[cuda]') == 1 ]] ||
  fail "an unloadable SINTER_LIBCUDA was not a failure: $(cat "$tmp/out")"
info=$("$sinter" info) # read whole: grep -q in a pipe could break it under pipefail
if grep -q '^gpus: 0$' <<<"$info"; then
  [[ $(status_of "$tests" '[cuda]') == 77 ]] || fail "no GPU: the CUDA suite did not skip"
  grep -q "skipped \[cuda\] tests: no usable NVIDIA GPU" "$tmp/out" || fail "skip without a reason"
  [[ $(status_of env SINTER_REQUIRE_GPU=1 "$tests" '[cuda]') == 1 ]] ||
    fail "SINTER_REQUIRE_GPU=1 did not turn the skip into a failure"
fi

# 3. The CI summary: a log cut off, a registered test without a result, and a Catch2 run that
#    ran nothing all count as failures; a complete log of passes does not.
mkdir -p "$tmp/build/meson-logs" "$tmp/build/meson-info"
log="$tmp/build/meson-logs/testlog.json"
cat >"$tmp/build/meson-info/intro-tests.json" <<'JSON'
[{"name": "alpha"}, {"name": "beta"}, {"name": "gamma"}]
JSON
passed='"stdout": "All tests passed (4 assertions in 2 test cases)\n", "result": "OK"'
{
  echo "{\"name\": \"sinter:core / alpha\", $passed}"
  echo "{\"name\": \"sinter:core / beta\", $passed}"
  echo '{"name": "sinter:gpu / gamma", "stdout": "skipped", "result": "SKIP"}'
} >"$log"
[[ $(python3 "$summary" "$log" | tail -1) == "4 passed, 0 failed" ]] || fail "complete log misread"
head -n 1 "$log" >"$tmp/partial" && mv "$tmp/partial" "$log"
[[ $(python3 "$summary" "$log" | tail -1) == "2 passed, 2 failed" ]] ||
  fail "tests missing from the log were not counted as failed: $(python3 "$summary" "$log")"
printf '%s\n' "{\"name\": \"sinter:core / alpha\", $passed}" '{"name": "sinter:core / beta", "std' >"$log"
# (The output is read whole first: `grep -q` in a pipe may close it early, and pipefail would
# then count the writer's broken pipe.)
out=$(python3 "$summary" "$log")
grep -q "cut off" <<<"$out" || fail "a cut-off line was not reported: $out"
{
  echo "{\"name\": \"sinter:core / alpha\", $passed}"
  echo '{"name": "sinter:core / beta", "stdout": "Filters: [x]\nNo tests ran\n", "result": "OK"}'
  echo '{"name": "sinter:gpu / gamma", "stdout": "", "result": "SKIP"}'
} >"$log"
[[ $(python3 "$summary" "$log" | tail -1) == "2 passed, 1 failed" ]] ||
  fail "'No tests ran' was not a failure: $(python3 "$summary" "$log")"
echo "strict runner: empty runs, assertion-free cases, bad drivers and incomplete logs all fail"
