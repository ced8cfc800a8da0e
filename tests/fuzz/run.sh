#!/usr/bin/env bash
# tests/fuzz/run.sh — runs every libFuzzer target for SECONDS each from freshly written seeds and
# prints what each executed: `tests/fuzz/run.sh SECONDS [BUILDDIR]` (a -Dfuzz=true build, default
# build-san). Exit 1 on any finding (a crash, a sanitizer report, a leak, a hang, an input whose
# refusal names nothing); the input is kept in BUILDDIR/fuzz-findings/ for
# `BUILDDIR/tests/fuzz/fuzz_<target> FILE` to replay. SINTER_FUZZ_JOBS targets run side by side
# (default: the number of cores); SINTER_FUZZ_CORPUS=DIR keeps what each run discovers in
# DIR/<target>/ and starts the next run from it.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
seconds="${1:-}"
build="$(cd "${2:-$here/../../build-san}" 2>/dev/null && pwd)" || build=""
if ! [[ "$seconds" =~ ^[1-9][0-9]*$ ]] || [ -z "$build" ] || [ ! -x "$build/tests/fuzz/make_seeds" ]; then
  echo "usage: tests/fuzz/run.sh SECONDS [BUILDDIR]" >&2
  echo "  BUILDDIR is a clang build configured with -Dfuzz=true (see docs/reliability.md)" >&2
  exit 2
fi
targets=(safetensors checkpoint idx text kernel_cache flags pretrained)
work="$(mktemp -d "${TMPDIR:-/tmp}/sinter-fuzz-run.XXXXXX")"
trap 'rm -rf "$work"' EXIT
findings="$build/fuzz-findings"
mkdir -p "$findings"
"$build/tests/fuzz/make_seeds" "$work/seeds" || { echo "fuzz: writing the seeds failed" >&2; exit 1; }

run_target() {
  local target="$1" corpus="$work/corpus/$1"
  [ -n "$corpus_root" ] && corpus="$corpus_root/$1"
  mkdir -p "$corpus"
  # -close_fd_mask=3: the loaders' own warnings would slow every execution; libFuzzer and the
  # sanitizers still report. -timeout: one input taking 25 s is a hang.
  "$build/tests/fuzz/fuzz_$target" -max_total_time="$seconds" -print_final_stats=1 \
    -close_fd_mask=3 -timeout=25 -rss_limit_mb=4096 -artifact_prefix="$findings/$target-" \
    "$corpus" "$work/seeds/$target" >"$work/$target.log" 2>&1
  echo $? >"$work/$target.status"
}
export -f run_target
corpus_root="${SINTER_FUZZ_CORPUS:-}"
jobs="${SINTER_FUZZ_JOBS:-$(nproc)}"
# The targets are sinter programs: they would warn about these, which are this script's.
unset SINTER_FUZZ_CORPUS SINTER_FUZZ_JOBS
export build work seconds findings corpus_root
printf '%s\n' "${targets[@]}" | xargs -P "$jobs" -I{} bash -c 'run_target {}'

total=0
bad=0
for target in "${targets[@]}"; do
  status="$(cat "$work/$target.status" 2>/dev/null || echo missing)"
  executions="$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/$target.log" | tail -1)"
  executions="${executions:-0}"
  total=$((total + executions))
  if [ "$status" != 0 ] || [ "$executions" = 0 ]; then
    bad=$((bad + 1))
    echo "fuzz $target: FINDING (exit $status after $executions executions); input kept in $findings/"
    tail -n 40 "$work/$target.log"
  else
    echo "fuzz $target: $executions executions in ${seconds} s, no finding"
  fi
done
echo "fuzz: $total executions in all, $bad target(s) with findings"
[ "$bad" = 0 ]
