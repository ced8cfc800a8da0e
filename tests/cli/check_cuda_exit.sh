#!/usr/bin/env bash
# tests/cli/check_cuda_exit.sh — a program that trained on CUDA exits with status 0 (no abort in
# static destruction after the driver shut down); skipped (77) without a GPU
# Usage: check_cuda_exit.sh SINTER TRAIN_STEP
set -uo pipefail
sinter="$1" train_step="$2"
info=$("$sinter" info) # read whole: grep -q in a pipe could break it under pipefail
if grep -q '^gpus: 0$' <<<"$info"; then
  if [[ ${SINTER_REQUIRE_GPU:-} == 1 ]]; then
    echo "FAIL: no GPU, and SINTER_REQUIRE_GPU=1"
    exit 1
  fi
  echo "skipped: no GPU ($(grep "^cuda driver:" <<<"$info"))"
  exit 77
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sinter-cuda-exit.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
SINTER_CACHE_DIR="$tmp/cache" "$train_step" --model mlp --device cuda --warmup 2 --iters 5 \
  >"$tmp/out" 2>&1
status=$?
cat "$tmp/out"
grep -q '^peer=sinter ' "$tmp/out" || { echo "FAIL: no result line"; exit 1; }
[[ $status == 0 ]] || { echo "FAIL: exit status $status after CUDA work (want 0)"; exit 1; }
grep -q 'terminate called' "$tmp/out" && { echo "FAIL: terminate at exit"; exit 1; }
echo "CUDA program exited with status 0"
