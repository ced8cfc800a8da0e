#!/usr/bin/env bash
# tests/bench/run.sh — the MLP training-step benchmark: sinter vs PyTorch eager, torch.compile
# and JAX (jax.jit), same shapes, same data, same thread count; prints a table.
#
# Usage: tests/bench/run.sh [--threads N] [--small] [--iters N] [--warmup N]
#   --threads N  threads for every peer (default 2)
#   --small      784-64-64-10, batch 16, few iterations (a smoke test)
#   --iters N, --warmup N   timed / untimed steps for every peer (defaults: each program's)
# Environment: BUILD_DIR (default build), MLP_STEP (a prebuilt mlp_step; skips the build).
# Results are kept under build-bench/results/<time>/.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BENCH="$ROOT/tests/bench"
BUILD_DIR="${BUILD_DIR:-$ROOT/build}"
THREADS=2
SMALL=()
COUNTS=()

NAME=run.sh
# shellcheck source=tests/bench/common.sh
source "$BENCH/common.sh"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --threads) [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || die "--threads needs a positive integer"
               THREADS=$2; shift 2 ;;
    --small) SMALL=(--small); shift ;;
    --iters|--warmup) [[ ${2:-} =~ ^[0-9]+$ ]] || die "$1 needs a number"
                      COUNTS+=("$1" "$2"); shift 2 ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
done

bench_peers_venv
bench_program mlp_step MLP_STEP
bench_pin_and_check_load
bench_results ""
: >"$OUT/commands.txt"

cold=(env "SINTER_CACHE_DIR=$CACHE" "${PIN[@]}" "$MLP_STEP" --threads "$THREADS" "${SMALL[@]}"
      "${COUNTS[@]}")
echo "run.sh: sinter, cold (empty SINTER_CACHE_DIR)"
record "$OUT/commands.txt" "${cold[@]}"
"${cold[@]}" | tee "$OUT/sinter-cold.txt"

# The second process only needs its first call; one timed step keeps it short.
warm=(env "SINTER_CACHE_DIR=$CACHE" "${PIN[@]}" "$MLP_STEP" --threads "$THREADS" "${SMALL[@]}"
      --warmup 0 --iters 1)
echo "run.sh: sinter, warm start (second process, same SINTER_CACHE_DIR)"
record "$OUT/commands.txt" "${warm[@]}"
"${warm[@]}" | tee "$OUT/sinter-warm.txt"

peers=("$PY" "$BENCH/peers.py" --threads "$THREADS" "${SMALL[@]}" "${COUNTS[@]}")
echo "run.sh: PyTorch and JAX"
record "$OUT/commands.txt" "${peers[@]}"
"${peers[@]}" 2>"$OUT/peers.stderr" | tee "$OUT/peers.txt" ||
  echo "run.sh: WARNING: a peer failed; its messages are in $OUT/peers.stderr" >&2

echo
"$PY" "$BENCH/report.py" --cold "$OUT/sinter-cold.txt" --warm "$OUT/sinter-warm.txt" \
  --peers "$OUT/peers.txt" --commands "$OUT/commands.txt" \
  --title "MLP training step $( [[ ${#SMALL[@]} -gt 0 ]] && echo '784-64-64-10, batch 16' ||
                                 echo '784-1024-1024-10, batch 256'), float32" |
  tee "$OUT/report.txt"
echo
echo "run.sh: results in $OUT"
