#!/usr/bin/env bash
# tests/bench/sifting.sh — smart sifting on Fashion-MNIST (docs/sifting.md, docs/perf.md): the
# mlp or vit recipe with no sifting, loader mode and in-step mode at each beta, for each seed,
# interleaved (seed by seed) so a change in the machine's load touches every configuration. Each
# run evaluates the test split several times an epoch (--eval-every-epoch --evals-per-epoch N;
# the evaluation is left out of the training time). Prints a table per model: the training seconds until the test accuracy
# first reaches the target (mean over seeds, and how many seeds reached it), that time against
# no sifting, the final accuracy after the same epochs (mean, min..max) and its change.
#
# Usage: tests/bench/sifting.sh [--model mlp|vit] [--epochs E] [--seeds "0 1 2"] [--betas "1 2"]
#                               [--configs "none in-step:1 ..."] [--target A] [--threads N]
#                               [--evals-per-epoch N] [--repeats R] [--log FILE]
#   --model    the recipe (default mlp)
#   --epochs   epochs of every run (default: mlp 10, vit 8)
#   --seeds    seeds (default "0 1 2")
#   --betas    sifting betas (default "1 2")
#   --configs  the runs instead of none + loader and in-step at each beta: each is none,
#              loader:BETA, in-step:BETA or in-step:BETA:SCORED (--sift-scored-batch SCORED)
#   --target   test accuracy to reach (default: mlp 0.89, vit 0.88)
#   --threads  worker threads of every run (default 2)
#   --evals-per-epoch  test-accuracy points per epoch (default 4): the time to the target is
#              read at the first point that reaches it, so a finer grid measures it closer
#   --repeats  runs of every configuration and seed (default 1); the report takes the median
#              time of each, so one slow spell of a shared machine does not move a row. Rounds
#              are interleaved, each in another order of the configurations
#   --log      keep every run's epoch and result lines here (default: a temporary file)
# Environment: BUILD_DIR (default build; the recipes are built there first).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build}"
NAME=sifting.sh
MODEL=mlp
EPOCHS=""
SEEDS="0 1 2"
BETAS="1 2"
CONFIGS=""
TARGET=""
THREADS=2
EVALS=4
REPEATS=1
LOG=""
die() { echo "$NAME: error: $*" >&2; exit 1; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --model) [[ ${2:-} =~ ^(mlp|vit)$ ]] || die "--model takes mlp or vit"; MODEL=$2; shift 2 ;;
    --epochs) [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || die "--epochs needs a positive integer"
              EPOCHS=$2; shift 2 ;;
    --seeds) [[ ${2:-} =~ ^[0-9]+( [0-9]+)*$ ]] || die "--seeds takes numbers, e.g. \"0 1 2\""
             SEEDS=$2; shift 2 ;;
    --betas) [[ ${2:-} =~ ^[0-9.]+( [0-9.]+)*$ ]] || die "--betas takes numbers, e.g. \"1 2\""
             BETAS=$2; shift 2 ;;
    --configs) [[ ${2:-} =~ ^(none|loader:[0-9.]+|in-step:[0-9.]+(:[0-9]+)?)( (none|loader:[0-9.]+|in-step:[0-9.]+(:[0-9]+)?))*$ ]] \
                 || die "--configs takes none, loader:BETA, in-step:BETA or in-step:BETA:SCORED"
               CONFIGS=$2; shift 2 ;;
    --target) [[ ${2:-} =~ ^0\.[0-9]+$ ]] || die "--target takes an accuracy such as 0.89"
              TARGET=$2; shift 2 ;;
    --threads) [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || die "--threads needs a positive integer"
               THREADS=$2; shift 2 ;;
    --evals-per-epoch) [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || die "--evals-per-epoch needs a positive integer"
                       EVALS=$2; shift 2 ;;
    --repeats) [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || die "--repeats needs a positive integer"
               REPEATS=$2; shift 2 ;;
    --log) [[ -n ${2:-} ]] || die "--log needs a file"; LOG=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
[[ -n $EPOCHS ]] || { [[ $MODEL == mlp ]] && EPOCHS=10 || EPOCHS=8; }
[[ -n $TARGET ]] || { [[ $MODEL == mlp ]] && TARGET=0.89 || TARGET=0.88; }
[[ -f "$BUILD_DIR/build.ninja" ]] || die "no build in $BUILD_DIR (meson setup $BUILD_DIR first)"
ninja -C "$BUILD_DIR" -j1 "recipes/$MODEL" >/dev/null || die "building recipes/$MODEL failed"
RECIPE="$BUILD_DIR/recipes/$MODEL"
[[ -n $LOG ]] || { LOG=$(mktemp); trap 'rm -f "$LOG"' EXIT; }
: >"$LOG"

if [[ -n $CONFIGS ]]; then
  read -r -a configs <<<"$CONFIGS"
else
  configs=("none")
  for beta in $BETAS; do configs+=("loader:$beta" "in-step:$beta"); done
fi
echo "$NAME: $MODEL, $EPOCHS epochs, seeds $SEEDS, target $TARGET, $THREADS threads," \
     "$EVALS evaluations per epoch;" \
     "${#configs[@]} configurations, $REPEATS round(s)" >&2
for ((round = 0; round < REPEATS; ++round)); do
 for seed in $SEEDS; do
  # Round r starts at configuration r, so no configuration always runs first or last.
  for ((i = 0; i < ${#configs[@]}; ++i)); do
    config=${configs[$(((i + round) % ${#configs[@]}))]}
    args=(--epochs "$EPOCHS" --seed "$seed" --threads "$THREADS" --eval-every-epoch
          --evals-per-epoch "$EVALS")
    IFS=: read -r mode beta scored <<<"$config"
    [[ $mode == none ]] || args+=(--sift-mode "$mode" --sift-beta "$beta")
    [[ -z $scored ]] || args+=(--sift-scored-batch "$scored")
    echo "$NAME: round $((round + 1)), seed $seed, $config" >&2
    {
      echo "run model=$MODEL config=$config seed=$seed run_epochs=$EPOCHS round=$((round + 1))"
      SINTER_LOG=0 "$RECIPE" "${args[@]}" 2>/dev/null || echo "failed"
    } >>"$LOG"
  done
 done
done
python3 "$ROOT/tests/bench/sifting_report.py" --target "$TARGET" "$LOG"
