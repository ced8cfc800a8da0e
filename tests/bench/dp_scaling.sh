#!/usr/bin/env bash
# tests/bench/dp_scaling.sh — data-parallel scaling on the CPU: one process against two ranks
# under mpirun (one thread each, the same global batch), alternated in rounds, with the time of
# the gradient reductions hidden under the backward pass; then each rank's optimizer state under
# plain data parallel, ZeRO-1 and ZeRO-2 (docs/distributed.md, docs/perf.md).
#
# Usage: tests/bench/dp_scaling.sh [--models mlp,vit] [--rounds R] [--iters K] [--batch B]
#                                  [--bucket-kb N]
#   --rounds R    rounds (default 5); in each, 1 rank then 2 ranks run K timed steps
#   --iters K     timed steps per run (default 100), after 10 untimed ones
#   --batch B     global batch (default 128)
#   --bucket-kb N gradient bucket size for every run (default: the step's, 25 MiB)
# Environment: BUILD_DIR (default build), DP_SCALING (a prebuilt dp_scaling; skips the build).
# Prints one table per model: step time per rank count (median over rounds), the efficiency
# t1 / (2 t2) with its per-round range, the collectives' hidden share, the same efficiency in
# CPU time (every rank's user + system time; steadier than wall time on a shared machine); then
# the memory table.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BENCH="$ROOT/tests/bench"
BUILD_DIR="${BUILD_DIR:-$ROOT/build}"
MODELS=mlp,vit
ROUNDS=5
ITERS=100
BATCH=128
BUCKET=()
NAME=dp_scaling.sh
die() { echo "$NAME: error: $*" >&2; exit 1; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --models) [[ ${2:-} =~ ^(mlp|vit)(,(mlp|vit))*$ ]] || die "--models takes mlp,vit or one"
              MODELS=$2; shift 2 ;;
    --rounds) [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || die "--rounds needs a positive integer"
              ROUNDS=$2; shift 2 ;;
    --iters) [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || die "--iters needs a positive integer"
             ITERS=$2; shift 2 ;;
    --batch) [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || die "--batch needs a positive even integer"
             BATCH=$2; shift 2 ;;
    --bucket-kb) [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || die "--bucket-kb needs a positive integer"
                 BUCKET=(--bucket-kb "$2"); shift 2 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
done
(( BATCH % 2 == 0 )) || die "--batch must be even (two ranks split it)"
command -v mpirun >/dev/null || die "mpirun not found: apt-get install openmpi-bin"
if [[ -z ${DP_SCALING:-} ]]; then
  ninja -C "$BUILD_DIR" -j1 tests/bench/dp_scaling >/dev/null || die "building dp_scaling failed"
  DP_SCALING="$BUILD_DIR/tests/bench/dp_scaling"
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 SINTER_LOG=0
MPIRUN=(mpirun --oversubscribe --bind-to none -np 2)
OUT="$ROOT/build-bench/results/dp-$(date +%Y%m%d-%H%M%S)"
mkdir -p "$OUT"
echo "$NAME: results in $OUT ($(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs))"

for model in ${MODELS//,/ }; do
  for ((r = 1; r <= ROUNDS; ++r)); do
    "$DP_SCALING" --model "$model" --batch "$BATCH" --iters "$ITERS" "${BUCKET[@]}" \
      >>"$OUT/$model-1.txt"
    "${MPIRUN[@]}" "$DP_SCALING" --model "$model" --batch "$BATCH" --iters "$ITERS" "${BUCKET[@]}" \
      >>"$OUT/$model-2.txt"
  done
  for zero in 0 1 2; do
    "${MPIRUN[@]}" "$DP_SCALING" --model "$model" --batch "$BATCH" --iters 20 --zero "$zero" \
      "${BUCKET[@]}" >>"$OUT/$model-zero.txt"
  done
done

python3 - "$OUT" "$MODELS" <<'EOF'
import statistics, sys
out, models = sys.argv[1], sys.argv[2].split(",")
def lines(path):
    rows = []
    for line in open(path):
        if line.startswith("peer=sinter"):
            rows.append({k: v for k, v in (f.split("=", 1) for f in line.split())})
    return rows
for model in models:
    one, two = lines(f"{out}/{model}-1.txt"), lines(f"{out}/{model}-2.txt")
    t1 = [float(r["step_s"]) for r in one]
    t2 = [float(r["step_s"]) for r in two]
    eff = [a / (2 * b) for a, b in zip(t1, t2)]
    hidden = [float(r["hidden"]) for r in two]
    print(f"\n{model}: global batch {one[0]['batch']}, 1 thread per rank, {len(t1)} rounds")
    print(f"  1 rank : {statistics.median(t1) * 1e3:8.2f} ms/step")
    print(f"  2 ranks: {statistics.median(t2) * 1e3:8.2f} ms/step  "
          f"({float(two[-1]['collectives']):.0f} collectives, "
          f"{float(two[-1]['collective_mb']):.2f} MB per step; in flight "
          f"{statistics.median(float(r['in_flight_ms']) for r in two):.2f} ms, waited "
          f"{statistics.median(float(r['waited_ms']) for r in two):.2f} ms: "
          f"{statistics.median(hidden) * 100:.0f}% hidden)")
    print(f"  efficiency t1/(2 t2): median {statistics.median(eff) * 100:.1f}% "
          f"(rounds {min(eff) * 100:.1f}-{max(eff) * 100:.1f}%), goal >= 90%")
    c1 = [float(r["cpu_s"]) for r in one]
    c2 = [float(r["cpu_s"]) for r in two]
    ceff = [a / b for a, b in zip(c1, c2)]
    print(f"  CPU time per step: 1 rank {statistics.median(c1) * 1e3:.2f} ms, 2 ranks together "
          f"{statistics.median(c2) * 1e3:.2f} ms; efficiency c1/c2: median "
          f"{statistics.median(ceff) * 100:.1f}% (rounds {min(ceff) * 100:.1f}-{max(ceff) * 100:.1f}%)")
    zero = lines(f"{out}/{model}-zero.txt")
    base = float(zero[0]["optimizer_state_bytes"])
    print(f"  optimizer state per rank (2 ranks): " + ", ".join(
        f"zero {r['zero']}: {float(r['optimizer_state_bytes']) / 1e6:.3f} MB "
        f"({float(r['optimizer_state_bytes']) / base * 100:.1f}%)" for r in zero) +
        "; goal ZeRO-2 <= 55% of DDP")
EOF
