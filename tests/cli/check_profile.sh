#!/usr/bin/env bash
# tests/cli/check_profile.sh MLP GPT CHECKER — --profile on the recipes: the folder holds a
# trace that parses, a report and a summary; the verdicts are printed; every kernel of a GPT
# step has a model path; SINTER_PROFILE does the same without the flag; --check-numerics names
# the op and step an absurd learning rate overflows; bad flags exit 2
set -uo pipefail
mlp=$1 gpt=$2 checker=$3
export SINTER_LOG=0
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail=0
err=$("$mlp" --steps 40 --batch-size 64 --hidden 64 --threads 2 --loader-threads 1 \
  --profile "$dir/mlp" 2>&1 >/dev/null) || { echo "FAIL: mlp --profile exited $?"; fail=1; }
grep -q "^sinter profile: [0-9]* steps" <<<"$err" || { echo "FAIL: no summary printed"; fail=1; }
grep -q "^  verdict: " <<<"$err" || { echo "FAIL: no verdict printed"; fail=1; }
python3 "$checker" "$dir/mlp" || fail=1
"$gpt" --steps 6 --batch-size 4 --context 32 --dim 32 --depth 2 --heads 2 --sample-bytes 4 \
  --threads 2 --profile "$dir/gpt" >/dev/null 2>&1 || { echo "FAIL: gpt --profile"; fail=1; }
python3 "$checker" "$dir/gpt" --every-kernel-has-path || fail=1
SINTER_PROFILE="$dir/env" "$mlp" --steps 20 --batch-size 64 --hidden 64 --threads 2 \
  >/dev/null 2>&1 || { echo "FAIL: SINTER_PROFILE run"; fail=1; }
python3 "$checker" "$dir/env" || fail=1
: >"$dir/file"
out=$("$mlp" --steps 5 --profile "$dir/file/sub" 2>&1)
status=$?
[[ $status == 2 && $out == *"cannot create the profile directory"* ]] ||
  { echo "FAIL: --profile under a file: exit $status: $out"; fail=1; }
# Weight decay 10 at lr 10 multiplies every weight by -99 a step: the activations overflow.
out=$("$mlp" --steps 40 --lr 10 --weight-decay 10 --hidden 64 --threads 2 --check-numerics 2>&1)
status=$?
[[ $status == 1 && $out =~ "non-finite value in step "[0-9]+" (--check-numerics): \`matmul\` at mlp.layers." ]] ||
  { echo "FAIL: --check-numerics with --lr 10 --weight-decay 10: exit $status: $out"; fail=1; }
out=$("$mlp" --steps 5 --loader-threads -1 2>&1)
status=$?
[[ $status == 2 && $out == *"--loader-threads must be"* ]] ||
  { echo "FAIL: --loader-threads -1: exit $status: $out"; fail=1; }
exit $fail
