#!/usr/bin/env bash
# tests/cli/check_sift_resume.sh MLP DISTILL — the mlp recipe sifting in loader mode and in-step
# mode: the result line reports the kept fraction and the samples backpropagated, and a run
# stopped after 30 steps and resumed from its checkpoint ends exactly as the uninterrupted run
# (the sifter's loss history, draws and, in loader mode, waiting samples are checkpointed); the
# distill recipe sifts by the distillation loss in both modes
set -uo pipefail
recipe=$1
distill=$2
export SINTER_LOG=0
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail=0
strip() { sed 's/ steps_per_second=[0-9.]* seconds=[0-9.]*//' <<<"$1"; }
# check MODE RESULT-PATTERN: uninterrupted, then stopped at 30 and resumed.
check() {
  local mode=$1 pattern=$2
  local args=(--steps 60 --batch-size 64 --threads 1 --seed 3 --hidden 64 --sift-beta 1
              --sift-history 200 --sift-delay 5 --sift-mode "$mode")
  rm -rf "$dir/$mode"
  local want got
  want=$("$recipe" "${args[@]}" 2>/dev/null | grep '^result:')
  echo "$mode, uninterrupted: $want"
  [[ $want =~ $pattern ]] || { echo "FAIL: $mode: the result line does not match $pattern"; fail=1; }
  "$recipe" "${args[@]}" --checkpoint-dir "$dir/$mode" --stop-after 30 >/dev/null 2>&1 ||
    { echo "FAIL: $mode: the first half"; fail=1; }
  got=$("$recipe" "${args[@]}" --checkpoint-dir "$dir/$mode" --resume 2>/dev/null | grep '^result:')
  echo "$mode, resumed:       $got"
  [[ -n $want && $(strip "$want") == "$(strip "$got")" ]] ||
    { echo "FAIL: $mode: the resumed run ended elsewhere"; fail=1; }
}
# Loader mode: 60 steps of 64 kept samples.
check loader 'kept_fraction=0\.[0-9]+ samples_backpropagated=3840$'
# In-step mode: batches of 128 scored rows; 5 delay steps on all of them, then 55 of 64 drawn
# rows: 4160 of 7680 scored.
check in-step 'kept_fraction=0\.5417 samples_backpropagated=4160$'
# A bad beta and an unknown mode are refused by name (exit 2).
"$recipe" --steps 1 --sift-beta -1 >/dev/null 2>"$dir/err"; status=$?
((status == 2)) && grep -q -- "--sift-beta must be from 0 to" "$dir/err" ||
  { echo "FAIL: --sift-beta -1 (exit $status)"; cat "$dir/err"; fail=1; }
"$recipe" --steps 1 --sift-beta 1 --sift-mode sometimes >/dev/null 2>"$dir/err"; status=$?
((status == 2)) && grep -q "sift-mode takes loader or in-step" "$dir/err" ||
  { echo "FAIL: --sift-mode sometimes (exit $status)"; cat "$dir/err"; fail=1; }
# --sift-scored-batch: in-step scores 96 rows per step and trains on 32, at beta 1 as well
# (10 steps: 320 of 960 scored); too few rows, the loader mode and no sifting are refused.
line=$("$recipe" --steps 10 --batch-size 32 --threads 1 --hidden 32 --sift-beta 1 --sift-mode in-step \
       --sift-scored-batch 96 2>"$dir/err" | grep '^result:')
echo "in-step, 96 scored: $line"
[[ $line =~ kept_fraction=0\.3333\ samples_backpropagated=320$ ]] && grep -q "steps of batch 32" "$dir/err" ||
  { echo "FAIL: --sift-scored-batch 96 of --batch-size 32"; cat "$dir/err"; fail=1; }
refused() {
  local want=$1; shift
  "$recipe" --steps 1 --batch-size 32 "$@" >/dev/null 2>"$dir/err"; local status=$?
  ((status == 2)) && grep -q -- "$want" "$dir/err" || { echo "FAIL: $* (exit $status)"; cat "$dir/err"; fail=1; }
}
refused "smaller than the --batch-size 32" --sift-beta 1 --sift-mode in-step --sift-scored-batch 16
refused "add --sift-mode in-step" --sift-beta 1 --sift-scored-batch 64
refused "needs sifting on" --sift-scored-batch 64
# distill: 20 steps of batch 64 after a 10-step teacher; in-step scores 128 rows per step.
for mode in loader in-step; do
  line=$("$distill" --teacher-steps 10 --steps 20 --batch-size 64 --threads 1 --no-baseline \
         --sift-beta 1 --sift-mode "$mode" 2>/dev/null | grep '^result:')
  echo "distill, $mode: $line"
  [[ $line =~ student_accuracy=0\.[0-9]+.*kept_fraction=0\.[0-9]+\ samples_backpropagated=1280$ ]] ||
    { echo "FAIL: distill $mode: no kept_fraction / samples_backpropagated=1280 (20 steps of 64)"
      fail=1; }
done
((fail == 0)) && echo "sifting resume: passed"
exit $fail
