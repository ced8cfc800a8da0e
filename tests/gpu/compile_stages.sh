#!/usr/bin/env bash
# tests/gpu/compile_stages.sh — where a compile's time goes on a GPU machine: the stages of a
# training step's compile (SINTER_DUMP=list), cold (empty kernel cache) and warm (a second
# process on the same cache), for one train_step model, plus its compile line and step time.
#
# Usage (from a bundle, tests/gpu/bundle.sh): ./compile_stages.sh [MODEL] [AMP] [BATCH]
#   default: gpt2-small bf16 8. Writes OUT_DIR (default $OUT, else ./stages)/stages-<model>-*.txt
set -uo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
MODEL=${1:-gpt2-small}
AMP=${2:-bf16}
BATCH=${3:-8}
OUT_DIR="${OUT_DIR:-${OUT:-$HERE/stages}}"
mkdir -p "$OUT_DIR"
export LD_LIBRARY_PATH="$HERE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export SINTER_LIBDEVICE="$HERE/lib/libdevice.10.bc"
cache=$(mktemp -d)
trap 'rm -rf "$cache"' EXIT
status=0
for run in cold warm; do
  log="$OUT_DIR/stages-$MODEL-$AMP-b$BATCH-$run.txt"
  start=$(date +%s%N)
  SINTER_CACHE_DIR="$cache" SINTER_DUMP=list timeout 300 "$HERE/bin/train_step" --model "$MODEL" \
    --device cuda --amp "$AMP" --batch "$BATCH" --warmup 1 --iters 5 >"$log" 2>&1 || status=1
  end=$(date +%s%N)
  echo "== $run: the process took $(((end - start) / 1000000)) ms"
  grep -E '^// sinter stages|^//   |^sinter: compiled|^peer=|first|median|maxrss|rror' "$log"
done
exit $status
