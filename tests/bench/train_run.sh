#!/usr/bin/env bash
# tests/bench/train_run.sh — the full training-step benchmark (forward + loss + backward + AdamW)
# of an MLP and a ViT: sinter (compile_step) vs PyTorch eager, torch.compile and JAX (jax.jit),
# same model, same batch, same thread count; prints one table per model.
#
# Usage: tests/bench/train_run.sh [--threads N] [--models mlp,vit] [--iters N] [--warmup N]
#                                 [--peers torch-eager,torch-compile,jax-jit]
#   --threads N  threads for every peer (default 2)
#   --models     which models (default mlp,vit)
#   --iters N, --warmup N   timed / untimed steps for every peer (default 30 / 5)
#   --peers      subset of the Python peers (default all three)
# Environment: BUILD_DIR (default build), TRAIN_STEP (a prebuilt train_step; skips the build).
# Results are kept under build-bench/results/train-<time>/.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BENCH="$ROOT/tests/bench"
BUILD_DIR="${BUILD_DIR:-$ROOT/build}"
THREADS=2
MODELS=mlp,vit
ITERS=30
WARMUP=5
PEERS=torch-eager,torch-compile,jax-jit

NAME=train_run.sh
# shellcheck source=tests/bench/common.sh
source "$BENCH/common.sh"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --threads) [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || die "--threads needs a positive integer"
               THREADS=$2; shift 2 ;;
    --models) [[ ${2:-} =~ ^(mlp|vit)(,(mlp|vit))*$ ]] || die "--models takes mlp,vit or one"
              MODELS=$2; shift 2 ;;
    --iters) [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || die "--iters needs a positive integer"
             ITERS=$2; shift 2 ;;
    --warmup) [[ ${2:-} =~ ^[0-9]+$ ]] || die "--warmup needs a number"
              WARMUP=$2; shift 2 ;;
    --peers) [[ -n ${2:-} ]] || die "--peers needs a list"
             PEERS=$2; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
done

bench_peers_venv
bench_program train_step TRAIN_STEP
bench_pin_and_check_load
bench_results "train-"

declare -A TITLE=(
  [mlp]="MLP 784-512-256-10 (recipes/mlp.cpp), batch 128, AdamW, float32"
  [vit]="ViT 28/7, dim 64, depth 4, 4 heads, batch 128, AdamW, float32"
)
IFS=, read -r -a models <<<"$MODELS"
for model in "${models[@]}"; do
  : >"$OUT/$model-commands.txt"
  rm -rf "${CACHE:?}"/*
  cold=(env "SINTER_CACHE_DIR=$CACHE" "${PIN[@]}" "$TRAIN_STEP" --model "$model"
        --threads "$THREADS" --warmup "$WARMUP" --iters "$ITERS")
  echo "train_run.sh: $model: sinter, cold (empty SINTER_CACHE_DIR)"
  record "$OUT/$model-commands.txt" "${cold[@]}"
  "${cold[@]}" | tee "$OUT/$model-sinter-cold.txt"

  # The second process only needs its first call; one timed step keeps it short.
  warm=(env "SINTER_CACHE_DIR=$CACHE" "${PIN[@]}" "$TRAIN_STEP" --model "$model"
        --threads "$THREADS" --warmup 0 --iters 1)
  echo "train_run.sh: $model: sinter, warm start (second process, same SINTER_CACHE_DIR)"
  record "$OUT/$model-commands.txt" "${warm[@]}"
  "${warm[@]}" | tee "$OUT/$model-sinter-warm.txt"

  peers=("$PY" "$BENCH/train_peers.py" --model "$model" --threads "$THREADS"
         --warmup "$WARMUP" --iters "$ITERS" --peers "$PEERS")
  echo "train_run.sh: $model: PyTorch and JAX"
  record "$OUT/$model-commands.txt" "${peers[@]}"
  "${peers[@]}" 2>"$OUT/$model-peers.stderr" | tee "$OUT/$model-peers.txt" ||
    echo "train_run.sh: WARNING: a peer failed; its messages are in $OUT/$model-peers.stderr" >&2
done

for model in "${models[@]}"; do
  echo
  "$PY" "$BENCH/train_report.py" --cold "$OUT/$model-sinter-cold.txt" \
    --warm "$OUT/$model-sinter-warm.txt" --peers "$OUT/$model-peers.txt" \
    --commands "$OUT/$model-commands.txt" --title "${TITLE[$model]}" |
    tee "$OUT/$model-report.txt"
done
echo
echo "train_run.sh: results in $OUT"
