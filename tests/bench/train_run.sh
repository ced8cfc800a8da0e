#!/usr/bin/env bash
# tests/bench/train_run.sh — the full training-step benchmark (forward + loss + backward + AdamW)
# of an MLP and a ViT: sinter (compile_step) vs PyTorch eager, torch.compile and JAX (jax.jit),
# same model, same batch, same thread count, alternated in short rounds (train_rounds.py); prints
# one table per model with per-round ratios and a verdict per peer.
#
# Usage: tests/bench/train_run.sh [--threads N] [--models mlp,vit] [--rounds R] [--steps K|auto]
#                                 [--warmup N] [--peers torch-eager,torch-compile,jax-jit]
#   --threads N  threads for every contender (default 2)
#   --models     which models (default mlp,vit; distill: the distill recipe's teacher/student
#                pair, against the PyTorch peers only)
#   --rounds R   rounds (default 30); in each, every contender runs K timed steps in turn
#   --steps K    timed steps per turn (default auto: the slowest contender's turn about 0.5 s)
#   --warmup N   untimed steps after each contender's first call (default 5)
#   --peers      subset of the Python peers (default all three)
# Environment: BUILD_DIR (default build), TRAIN_STEP (a prebuilt train_step; skips the build).
# Results are kept under build-bench/results/train-<time>/.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BENCH="$ROOT/tests/bench"
BUILD_DIR="${BUILD_DIR:-$ROOT/build}"
THREADS=2
MODELS=mlp,vit
ROUNDS=30
STEPS=auto
WARMUP=5
PEERS=torch-eager,torch-compile,jax-jit

NAME=train_run.sh
ARGS=("$@")
# shellcheck source=tests/bench/common.sh
source "$BENCH/common.sh"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --threads) [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || die "--threads needs a positive integer"
               THREADS=$2; shift 2 ;;
    --models) [[ ${2:-} =~ ^(mlp|vit|distill)(,(mlp|vit|distill))*$ ]] \
                || die "--models takes mlp,vit,distill or a subset"
              MODELS=$2; shift 2 ;;
    --rounds) [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || die "--rounds needs a positive integer"
              ROUNDS=$2; shift 2 ;;
    --steps) [[ ${2:-} =~ ^([1-9][0-9]*|auto)$ ]] || die "--steps needs a positive integer or auto"
             STEPS=$2; shift 2 ;;
    --iters) die "--iters is gone: the contenders now alternate in rounds; use --rounds R" \
                 "(and --steps K, timed steps per turn)" ;;
    --warmup) [[ ${2:-} =~ ^[0-9]+$ ]] || die "--warmup needs a number"
              WARMUP=$2; shift 2 ;;
    --peers) [[ -n ${2:-} ]] || die "--peers needs a list"
             PEERS=$2; shift 2 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
done

bench_peers_venv
bench_program train_step TRAIN_STEP
bench_pin_and_check_load # train_rounds.py pins the contenders itself
bench_results "train-"

declare -A TITLE=(
  [mlp]="MLP 784-512-256-10 (recipes/mlp.cpp), batch 128, AdamW, float32"
  [vit]="ViT 28/7, dim 64, depth 4, 4 heads, batch 128, AdamW, float32"
  [distill]="Distillation: ViT 28/7 dim 64 depth 4 (frozen) -> ViT 28/7 dim 32 depth 2, KD T=2 alpha=0.5, batch 128, AdamW, float32"
)
IFS=, read -r -a models <<<"$MODELS"
status=0
for model in "${models[@]}"; do
  rm -rf "${CACHE:?}"/* # sinter's first call is a cold compile; its warm start reuses the cache
  peers=$PEERS
  [[ $model == distill ]] && peers=$(tr , '\n' <<<"$PEERS" | grep -v '^jax-jit$' | paste -sd,)
  cmd=("$PY" "$BENCH/train_rounds.py" --sinter "$TRAIN_STEP" --model "$model"
       --threads "$THREADS" --peers "$peers" --rounds "$ROUNDS" --steps "$STEPS"
       --warmup "$WARMUP" --out "$OUT" --title "${TITLE[$model]}")
  echo "train_run.sh: $model: sinter and $peers, $ROUNDS rounds"
  record "$OUT/commands.txt" env "SINTER_CACHE_DIR=$CACHE" "${cmd[@]}"
  SINTER_CACHE_DIR="$CACHE" "${cmd[@]}" >"$OUT/$model-report.txt" || {
    status=1
    echo "train_run.sh: WARNING: $model: a contender failed; messages in $OUT/$model-*.stderr" >&2
  }
done

for model in "${models[@]}"; do
  echo
  cat "$OUT/$model-report.txt"
done
echo
echo "train_run.sh: results in $OUT; this run: $(printf '%q ' "$0" "${ARGS[@]}")"
exit $status
