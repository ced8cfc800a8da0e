#!/usr/bin/env bash
# tests/gpu/max_batch_check.sh — on a GPU machine (from a bundle, tests/gpu/bundle.sh): the
# largest batch `train_step --max-batch` predicts for a model must train, and the next one is
# expected to run out of memory (issue 32; docs/distillation.md §4). Prints both runs' result or
# error lines and a verdict; exits 1 when the predicted batch does not run.
#
# Usage: ./max_batch_check.sh [MODEL] [AMP]    default: distill-vit-b-s bf16
#   (PyTorch eager's largest batch for the ViT-B/16 -> ViT-S/16 pair on the H100: 2304)
set -uo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
MODEL=${1:-distill-vit-b-s}
AMP=${2:-bf16}
export LD_LIBRARY_PATH="$HERE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export SINTER_LIBDEVICE="$HERE/lib/libdevice.10.bc"
# A kernel cache of the caller's (SINTER_CACHE_DIR) is kept; otherwise a fresh one, removed after.
cache=${SINTER_CACHE_DIR:-}
if [[ -z $cache ]]; then
  cache=$(mktemp -d)
  trap 'rm -rf "$cache"' EXIT
fi
run() { SINTER_CACHE_DIR="$cache" timeout 600 "$HERE/bin/train_step" --model "$MODEL" \
  --device cuda --amp "$AMP" "$@" 2>&1; }
line=$(run --max-batch | grep '^max_batch=')
echo "prediction: $line"
batch=$(sed -n 's/^max_batch=\([0-9]*\).*/\1/p' <<<"$line")
[[ -n $batch && $batch -gt 0 ]] || { echo "FAIL: no prediction"; exit 1; }
out=$(run --batch "$batch" --warmup 1 --iters 2)
if grep -q '^peer=sinter ' <<<"$out"; then
  echo "batch $batch (predicted): trained: $(grep -o 'median_step_s=[^ ]*' <<<"$out")"
else
  echo "FAIL: batch $batch (predicted) did not train:"
  tail -15 <<<"$out"
  exit 1
fi
out=$(run --batch $((batch + 1)) --warmup 1 --iters 2)
if grep -q 'out of memory' <<<"$out"; then
  echo "batch $((batch + 1)): out of memory, as predicted"
else
  echo "batch $((batch + 1)): did not run out of memory (the prediction is conservative):"
  grep -E '^peer=sinter|rror' <<<"$out" | tail -3
fi
