#!/usr/bin/env bash
# tests/cli/check_sift_resume.sh MLP — the mlp recipe with loader-mode sifting: the result line
# reports the kept fraction and the samples backpropagated, and a run stopped after 30 steps and
# resumed from its checkpoint ends exactly as the uninterrupted run (the sifter's loss history,
# draws and waiting samples are checkpointed)
set -uo pipefail
recipe=$1
export SINTER_LOG=0
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
args=(--steps 60 --batch-size 64 --threads 1 --seed 3 --hidden 64 --sift-beta 1 --sift-history 200
      --sift-delay 5)
fail=0
want=$("$recipe" "${args[@]}" 2>/dev/null | grep '^result:')
echo "uninterrupted: $want"
[[ $want =~ kept_fraction=0\.[0-9]+\ samples_backpropagated=3840 ]] ||
  { echo "FAIL: no kept_fraction / samples_backpropagated=3840 (60 steps of 64)"; fail=1; }
"$recipe" "${args[@]}" --checkpoint-dir "$dir" --stop-after 30 >/dev/null 2>&1 ||
  { echo "FAIL: the first half"; fail=1; }
got=$("$recipe" "${args[@]}" --checkpoint-dir "$dir" --resume 2>/dev/null | grep '^result:')
echo "resumed:       $got"
strip() { sed 's/ steps_per_second=[0-9.]* seconds=[0-9.]*//' <<<"$1"; }
[[ $(strip "$want") == "$(strip "$got")" ]] || { echo "FAIL: the resumed run ended elsewhere"; fail=1; }
# A mode that does not exist yet, and a bad beta, are refused by name (exit 2).
"$recipe" --steps 1 --sift-beta -1 >/dev/null 2>"$dir/err"; status=$?
((status == 2)) && grep -q "sift-beta must be a number above 0" "$dir/err" ||
  { echo "FAIL: --sift-beta -1 (exit $status)"; cat "$dir/err"; fail=1; }
((fail == 0)) && echo "sifting resume: passed"
exit $fail
