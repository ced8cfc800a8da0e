#!/usr/bin/env bash
# tests/cli/check_recipes.sh — short runs of every recipe: flags, progress, the result line, and
# an accuracy floor for a 300-step mlp (the full-length figures are in docs/perf.md)
set -euo pipefail
mlp="$1" vit="$2" gpt="$3"
ckpt=$(mktemp -d)
trap 'rm -rf "$ckpt"' EXIT

for r in "$mlp" "$vit" "$gpt"; do
  grep -q -- "--seed" <<<"$("$r" --help)" || { echo "$r --help lists no --seed"; exit 1; }
  if "$r" --no-such-flag 2>/dev/null; then echo "$r accepted an unknown flag"; exit 1; fi
done

out=$("$mlp" --steps 300 --checkpoint-dir "$ckpt" 2>/dev/null)
echo "mlp: $out"
acc=$(sed -n 's/^result: test_accuracy=\([0-9.]*\).*/\1/p' <<<"$out")
python3 -c "import sys; sys.exit(0 if float('$acc') >= 0.80 else 1)" \
  || { echo "mlp reached only $acc after 300 steps (expected >= 0.80)"; exit 1; }
[ -s "$ckpt/mlp.safetensors" ] || { echo "no checkpoint written"; exit 1; }
resumed=$("$mlp" --steps 320 --checkpoint-dir "$ckpt" --resume 2>&1)
grep -q "resumed from .* at step 300" <<<"$resumed" || { echo "resume did not start at step 300"; exit 1; }
grep -q "steps=320" <<<"$resumed" || { echo "resume did not reach step 320"; exit 1; }

out=$("$vit" --steps 10 2>/dev/null)
echo "vit: $out"
grep -q "^result: test_accuracy=" <<<"$out" || { echo "vit printed no result line"; exit 1; }

out=$("$gpt" --steps 20 --sample-bytes 40 2>/dev/null)
echo "gpt: $(grep '^result' <<<"$out")"
grep -q "^result: holdout_loss=" <<<"$out" || { echo "gpt printed no result line"; exit 1; }
grep -q "^sample: The " <<<"$out" || { echo "gpt printed no sample"; exit 1; }

if "$mlp" --data-dir /nonexistent --steps 1 2>"$ckpt/err"; then echo "missing data accepted"; exit 1; fi
grep -q "dataset-fashion-mnist" "$ckpt/err" || { echo "missing-data error names no package:"; cat "$ckpt/err"; exit 1; }

# Devices: a misspelt one exits 2 naming the choices; CUDA without a usable GPU fails with why.
if "$mlp" --device gpu --steps 1 2>"$ckpt/err"; then echo "--device gpu accepted"; exit 1; fi
grep -q "use cpu, cuda, cuda:N" "$ckpt/err" || { echo "bad --device not explained:"; cat "$ckpt/err"; exit 1; }
if ! grep -q '^gpus: [1-9]' <<<"$("$(dirname "$mlp")/../sinter" info)"; then
  if "$mlp" --device cuda --steps 1 >/dev/null 2>"$ckpt/err"; then echo "cuda without a GPU ran"; exit 1; fi
  grep -q "cannot use CUDA" "$ckpt/err" || { echo "no reason for CUDA failing:"; cat "$ckpt/err"; exit 1; }
fi
