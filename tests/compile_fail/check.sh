#!/usr/bin/env bash
# tests/compile_fail/check.sh — compiles a file that must be rejected with a given diagnostic
# Usage: check.sh <compiler and flags...> -- <file.cpp>
# The file names the diagnostic in a line `// expect-error: <substring>`. Exits 1 ("expected
# failure", which meson's should_fail counts as a pass) only if compilation fails AND an error
# line of the output contains the substring; otherwise exits 0 saying why, so a file that
# compiles, or fails for another reason, shows up as a test failure.
set -u

compiler=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  compiler+=("$1")
  shift
done
if [ $# -ne 2 ] || [ ${#compiler[@]} -eq 0 ]; then
  echo "check.sh: usage: check.sh <compiler and flags...> -- <file.cpp>"
  exit 0
fi
file=$2

expect=$(sed -n 's|^[[:space:]]*// expect-error:[[:space:]]*||p' "$file" | head -n 1)
if [ -z "$expect" ]; then
  echo "check.sh: $file has no '// expect-error: <substring>' line"
  exit 0
fi

output=$("${compiler[@]}" -fsyntax-only "$file" 2>&1)
status=$?
if [ $status -eq 0 ]; then
  echo "check.sh: $file compiled fine, but an error containing '$expect' was expected"
  exit 0
fi
# Only diagnostic lines count: source lines the compiler echoes could quote the message.
if grep -F -- "$expect" <<<"$output" | grep -qi "error"; then
  echo "check.sh: expected failure: $file is rejected with '$expect'"
  exit 1
fi
echo "check.sh: $file failed for another reason (no error containing '$expect'):"
head -n 60 <<<"$output"
exit 0
