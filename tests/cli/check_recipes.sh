#!/usr/bin/env bash
# tests/cli/check_recipes.sh — short runs of every recipe: flags, progress, the result line, and
# an accuracy floor for a 300-step mlp, the distill recipe's phases and resume, and --max-batch /
# --batch-size max on every recipe (the full-length figures are in docs/perf.md)
set -euo pipefail
mlp="$1" vit="$2" gpt="$3" distill="$4"
ckpt=$(mktemp -d)
trap 'rm -rf "$ckpt"' EXIT

for r in "$mlp" "$vit" "$gpt" "$distill"; do
  grep -q -- "--seed" <<<"$("$r" --help)" || { echo "$r --help lists no --seed"; exit 1; }
  if "$r" --no-such-flag 2>/dev/null; then echo "$r accepted an unknown flag"; exit 1; fi
done

# A switch takes --flag or --flag=true|false|1|0: `--resume=yes` once trained from scratch and
# overwrote the checkpoint; now it stops (exit 2) naming the flag, before any work.
for bad in --resume=yes --resume=on --check-numerics=yes --resume=; do
  set +e
  err=$("$mlp" --steps 1 --checkpoint-dir "$ckpt" "$bad" 2>&1 >/dev/null)
  status=$?
  set -e
  [ "$status" -eq 2 ] || { echo "mlp $bad exited $status, not 2"; exit 1; }
  grep -qF -- "${bad%%=*} is a switch" <<<"$err" ||
    { echo "mlp $bad: no message naming the switch: $err"; exit 1; }
done
[ ! -e "$ckpt/mlp.safetensors" ] || { echo "a refused switch still wrote a checkpoint"; exit 1; }

# Numbers are read whole, finite and in range, when the recipe starts: each of these once
# trained (on NaN, with clipping silently off, ...), crashed (SIGFPE, bad_alloc) or overflowed.
while read -r recipe flag value; do
  case "$recipe" in mlp) r="$mlp" ;; gpt) r="$gpt" ;; esac
  set +e
  err=$("$r" --steps 1 --checkpoint-dir "$ckpt/bad" "$flag" "$value" 2>&1 >/dev/null)
  status=$?
  set -e
  [ "$status" -eq 2 ] || { echo "$recipe $flag $value exited $status, not 2"; exit 1; }
  grep -qF -- "$flag" <<<"$err" || { echo "$recipe $flag $value: no message naming it: $err"; exit 1; }
done <<'CASES'
mlp --lr nan
mlp --lr inf
mlp --lr -1
mlp --lr 1e6
mlp --weight-decay nan
mlp --epochs -1
mlp --epochs 9223372036854775807
mlp --steps -1
mlp --hidden 12abc
mlp --hidden 1e3
mlp --hidden 99999999999
mlp --clip nan
mlp --clip -1
mlp --bucket-mb inf
mlp --collective-timeout inf
mlp --collective-timeout 1e-300
mlp --threads -1
mlp --threads 5000
mlp --seed -3
gpt --dim 0
gpt --heads 0
gpt --depth -1
gpt --context 0
CASES
[ ! -e "$ckpt/bad" ] || { echo "a refused flag still wrote a checkpoint"; exit 1; }

# A diverged run stops (exit 1) naming the step, and saves nothing: weight decay 10 at lr 10
# multiplies every weight by -99 each step, past float's range in about 20 steps.
set +e
err=$("$mlp" --steps 40 --lr 10 --weight-decay 10 --checkpoint-dir "$ckpt/diverged" 2>&1 >/dev/null)
status=$?
set -e
[ "$status" -eq 1 ] || { echo "a diverged mlp exited $status, not 1: $err"; exit 1; }
grep -qE "training loss is (nan|inf|-inf) after step [0-9]+: training diverged" <<<"$err" ||
  { echo "a diverged mlp did not say so: $err"; exit 1; }
[ ! -e "$ckpt/diverged/mlp.safetensors" ] || { echo "a diverged run saved a checkpoint"; exit 1; }

# Text that is not a file of text, or too short, is refused before training (/dev/zero once
# read forever; a 100-byte text trained, saved, then failed in its evaluation).
head -c 100 /etc/services >"$ckpt/short.txt"
mkfifo "$ckpt/fifo"
for text in /dev/zero "$ckpt" "$ckpt/fifo" "$ckpt/short.txt"; do
  set +e
  err=$(timeout 60 "$gpt" --steps 2 --text "$text" --checkpoint-dir "$ckpt/text" 2>&1 >/dev/null)
  status=$?
  set -e
  [ "$status" -eq 1 ] || { echo "gpt --text $text exited $status, not 1: $err"; exit 1; }
  grep -qE "is not a regular file|too few to hold 5% out" <<<"$err" ||
    { echo "gpt --text $text: no message saying why: $err"; exit 1; }
done
[ ! -e "$ckpt/text/gpt.safetensors" ] || { echo "gpt trained on a refused text"; exit 1; }
rm -f "$ckpt/fifo"

out=$("$mlp" --steps 300 --checkpoint-dir "$ckpt" 2>/dev/null)
echo "mlp: $out"
acc=$(sed -n 's/^result: test_accuracy=\([0-9.]*\).*/\1/p' <<<"$out")
python3 -c "import sys; sys.exit(0 if float('$acc') >= 0.80 else 1)" \
  || { echo "mlp reached only $acc after 300 steps (expected >= 0.80)"; exit 1; }
[ -s "$ckpt/mlp.safetensors" ] || { echo "no checkpoint written"; exit 1; }
# --eval-only evaluates the checkpoint: the trained run's accuracy again, and nothing else.
eval_only=$("$mlp" --eval-only --checkpoint-dir "$ckpt" 2>/dev/null)
[ "$eval_only" = "result: test_accuracy=$acc" ] ||
  { echo "mlp --eval-only printed '$eval_only', not the trained run's test_accuracy=$acc"; exit 1; }
if "$mlp" --eval-only 2>/dev/null; then echo "--eval-only without --checkpoint-dir ran"; exit 1; fi
# Another --steps is another learning-rate schedule: refused (exit 2, naming the flag and the
# value written) unless --allow-changed names it; so is another --seed.
for changed in "--steps 320" "--seed 5" "--lr 0.01"; do
  set +e
  # shellcheck disable=SC2086
  err=$("$mlp" $changed --checkpoint-dir "$ckpt" --resume 2>&1 >/dev/null)
  status=$?
  set -e
  flag=${changed%% *}
  [ "$status" -eq 2 ] || { echo "mlp --resume $changed exited $status, not 2"; exit 1; }
  grep -qF -- "$flag is '${changed#* }', but $ckpt/mlp.safetensors was written with" <<<"$err" ||
    { echo "mlp --resume $changed: no message naming $flag: $err"; exit 1; }
done
resumed=$("$mlp" --steps 320 --allow-changed steps --checkpoint-dir "$ckpt" --resume 2>&1)
grep -q "resumed from .* at step 300" <<<"$resumed" || { echo "resume did not start at step 300"; exit 1; }
grep -q "steps=320" <<<"$resumed" || { echo "resume did not reach step 320"; exit 1; }

out=$("$vit" --steps 10 2>/dev/null)
echo "vit: $out"
grep -q "^result: test_accuracy=" <<<"$out" || { echo "vit printed no result line"; exit 1; }

# --eval-every-epoch --evals-per-epoch 4: a line at every quarter of an epoch's 30 batches
# (the last epoch's end is usually the result line), in loader-mode sifting too (a quarter of
# the data scored), with training steps and seconds that only grow; resumed mid-epoch, the labels go on.
check_evals() {
  python3 - "$1" "$2" <<'PY' || { echo "--evals-per-epoch $3: wrong epoch lines:"; echo "$1"; exit 1; }
import re, sys
lines = [l for l in sys.argv[1].splitlines() if l.startswith("epoch ")]
labels = [l.split()[1] for l in lines]
# A sifting loader may end an epoch's data before the run's last step: one more line then.
assert labels in (sys.argv[2].split(), sys.argv[2].split() + ["2"]), labels
steps = [int(re.search(r"steps=(\d+)", l).group(1)) for l in lines]
seconds = [float(re.search(r"seconds=([0-9.]+)", l).group(1)) for l in lines]
assert steps == sorted(steps) and len(set(steps)) == len(steps), steps
assert seconds == sorted(seconds), seconds
PY
}
quarters="0.25 0.5 0.75 1 1.25 1.5 1.75"
args=(--epochs 2 --batch-size 2000 --hidden 32 --threads 1 --eval-every-epoch --evals-per-epoch 4)
out=$("$mlp" "${args[@]}" 2>/dev/null)
check_evals "$out" "$quarters" "plain"
grep -q "epoch 0.25 test_accuracy=0\.[0-9]* steps=8 " <<<"$out" || { echo "the first quarter is not after batch 8 of 30 (7.5 rounded up):"; echo "$out"; exit 1; }
out=$("$mlp" "${args[@]}" --sift-beta 1 2>/dev/null)
check_evals "$out" "$quarters" "loader sifting"
"$mlp" "${args[@]}" --checkpoint-dir "$ckpt/q" --stop-after 20 >/dev/null 2>&1
out=$("$mlp" "${args[@]}" --checkpoint-dir "$ckpt/q" --resume 2>/dev/null)
check_evals "$out" "0.75 1 1.25 1.5 1.75" "resumed at batch 20"
if "$mlp" --epochs 1 --eval-every-epoch --evals-per-epoch 0 2>"$ckpt/err"; then
  echo "--evals-per-epoch 0 accepted"; exit 1
fi
grep -q "evals-per-epoch must be between 1 and the 468 batches" "$ckpt/err" \
  || { echo "bad --evals-per-epoch not explained:"; cat "$ckpt/err"; exit 1; }
echo "mlp --evals-per-epoch 4: quarters in plain, loader-sifted and resumed runs"

# Loader-mode sifting with a delay: the epoch ends where the pass over the data ends. The delay's
# 10 batches of 2000 train whole, the other 20 about a quarter of theirs: about half the 60000
# images are backpropagated (the run once stopped after 7 steps, all in the delay).
out=$("$mlp" --epochs 1 --batch-size 2000 --hidden 32 --sift-beta 3 --sift-delay 10 2>/dev/null)
python3 - "$out" <<'PY' || { echo "a delayed sifting epoch ended early: $out"; exit 1; }
import re, sys
line = sys.argv[1]
kept = float(re.search(r"kept_fraction=([0-9.]+)", line).group(1))
samples = int(re.search(r"samples_backpropagated=(\d+)", line).group(1))
assert 0.4 <= kept <= 0.6 and samples >= 26000, (kept, samples)
PY

out=$("$gpt" --steps 20 --sample-bytes 40 --checkpoint-dir "$ckpt/g" 2>/dev/null)
held=$(sed -n 's/^result: holdout_loss=\([0-9.]*\) unigram_entropy=\([0-9.]*\).*/holdout_loss=\1 unigram_entropy=\2/p' <<<"$out")
eval_only=$("$gpt" --eval-only --checkpoint-dir "$ckpt/g" 2>/dev/null)
[ "$eval_only" = "result: $held" ] ||
  { echo "gpt --eval-only printed '$eval_only', not the trained run's '$held'"; exit 1; }
echo "gpt: $(grep '^result' <<<"$out")"
grep -q "^result: holdout_loss=" <<<"$out" || { echo "gpt printed no result line"; exit 1; }
grep -q "^sample: The " <<<"$out" || { echo "gpt printed no sample"; exit 1; }

# --variable-length: every batch a random length, padded to 4 shape buckets, so the step
# compiles at most 4 programs (its first call, then one recompile per new bucket).
err=$("$gpt" --steps 40 --context 32 --dim 32 --depth 1 --variable-length --sample-bytes 8 2>&1 >/dev/null)
grep -q "variable lengths 1..32 padded to buckets 4,8,16,32" <<<"$err" \
  || { echo "gpt --variable-length did not name its buckets"; echo "$err"; exit 1; }
bucket_compiles=$(grep -c "recompiling, input 'ids' dim 1 changed .* (shape bucket [0-9]* of 4, 8, 16, 32)" <<<"$err" || true)
other_compiles=$(grep "recompiling" <<<"$err" | grep -vc "shape bucket" || true)
echo "gpt --variable-length: $bucket_compiles bucket recompiles, $other_compiles others"
[ "$bucket_compiles" -ge 1 ] && [ "$bucket_compiles" -le 3 ] && [ "$other_compiles" -eq 0 ] \
  || { echo "gpt --variable-length compiled other than one program per bucket"; echo "$err"; exit 1; }

if "$mlp" --data-dir /nonexistent --steps 1 2>"$ckpt/err"; then echo "missing data accepted"; exit 1; fi
grep -q "dataset-fashion-mnist" "$ckpt/err" || { echo "missing-data error names no package:"; cat "$ckpt/err"; exit 1; }

# Devices: a misspelt one exits 2 naming the choices; CUDA without a usable GPU fails with why.
if "$mlp" --device gpu --steps 1 2>"$ckpt/err"; then echo "--device gpu accepted"; exit 1; fi
grep -q "use cpu, cuda, cuda:N" "$ckpt/err" || { echo "bad --device not explained:"; cat "$ckpt/err"; exit 1; }
if ! grep -q '^gpus: [1-9]' <<<"$("$(dirname "$mlp")/../sinter" info)"; then
  if "$mlp" --device cuda --steps 1 >/dev/null 2>"$ckpt/err"; then echo "cuda without a GPU ran"; exit 1; fi
  grep -q "cannot use CUDA" "$ckpt/err" || { echo "no reason for CUDA failing:"; cat "$ckpt/err"; exit 1; }
fi

# The largest batch that fits: one line whose peaks bracket the budget, and a run at it.
for r in "$mlp" "$vit" "$gpt" "$distill"; do
  line=$("$r" --max-batch --memory 256M 2>/dev/null)
  python3 - "$line" <<'PY' || { echo "$r --max-batch: bad line '$line'"; exit 1; }
import re, sys
m = re.fullmatch(r"max_batch=(\d+) peak_bytes=(\d+) next_peak_bytes=(\d+) budget_bytes=(\d+)", sys.argv[1])
n, p, q, b = map(int, m.groups())
assert n > 0 and p <= b < q and b == 256 << 20, sys.argv[1]
PY
done
if "$vit" --max-batch --memory lots 2>"$ckpt/err"; then echo "--memory lots accepted"; exit 1; fi
grep -q "suffix" "$ckpt/err" || { echo "bad --memory not explained:"; cat "$ckpt/err"; exit 1; }
n=$("$mlp" --max-batch --memory 64M 2>/dev/null | sed -n 's/^max_batch=\([0-9]*\) .*/\1/p')
err=$("$mlp" --batch-size max --memory 64M --steps 2 2>&1 >/dev/null)
grep -q "batch size max: $n " <<<"$err" || { echo "--batch-size max did not train at $n:"; echo "$err"; exit 1; }
grep -q "steps of batch $n" <<<"$err" || { echo "--batch-size max: no steps of batch $n"; exit 1; }

# Distillation: a teacher trained first (and said so), the three accuracies, then a teacher
# from the vit recipe's checkpoint, resume of the student phase, and a mismatched teacher.
out=$("$distill" --teacher-steps 30 --steps 20 --checkpoint-dir "$ckpt/d" 2>"$ckpt/err")
echo "distill: $out"
grep -q "no --teacher given: training a teacher first" "$ckpt/err" || { echo "distill did not say it trains a teacher"; exit 1; }
grep -Eq "^result: teacher_accuracy=0\.[0-9]+ student_accuracy=0\.[0-9]+ student_alone_accuracy=0\.[0-9]+ " <<<"$out" \
  || { echo "distill result line malformed"; exit 1; }
for f in teacher student student_alone; do
  [ -s "$ckpt/d/$f.safetensors" ] || { echo "distill wrote no $f checkpoint"; exit 1; }
done
"$vit" --steps 5 --checkpoint-dir "$ckpt/v" >/dev/null 2>&1
out=$("$distill" --teacher "$ckpt/v/vit.safetensors" --steps 10 --no-baseline --checkpoint-dir "$ckpt/s" 2>"$ckpt/err")
grep -q "loaded from $ckpt/v/vit.safetensors" "$ckpt/err" || { echo "teacher not loaded"; cat "$ckpt/err"; exit 1; }
if grep -q "student_alone_accuracy" <<<"$out"; then echo "--no-baseline still trained the baseline"; exit 1; fi
resumed=$("$distill" --teacher "$ckpt/v/vit.safetensors" --steps 14 --allow-changed steps --no-baseline --checkpoint-dir "$ckpt/s" --resume 2>&1)
grep -q "student: resumed from .* at step 10" <<<"$resumed" || { echo "distill resume did not start at step 10"; echo "$resumed"; exit 1; }
grep -q "steps=14" <<<"$resumed" || { echo "distill resume did not reach step 14"; exit 1; }
if "$distill" --teacher "$ckpt/v/vit.safetensors" --teacher-dim 32 --steps 1 2>"$ckpt/err"; then
  echo "a mismatched teacher was accepted"; exit 1
fi
grep -q "tensor 'model.vit.embed.proj.weight' is f32\[49,64\] but the model's 'vit.embed.proj.weight' is f32\[49,32\]" "$ckpt/err" \
  || { echo "mismatched teacher not named:"; cat "$ckpt/err"; exit 1; }
