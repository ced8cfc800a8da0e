#!/usr/bin/env bash
# tests/bench/host_side.sh — the CUDA backend's host side, measured on the null driver
# (SINTER_NULL_GPU=1, docs/gpu.md) on any machine: per model, the compile cold (empty kernel
# cache) and warm (a second process on that cache) with its slowest stages, the first call
# (compile + first run), host memory, host time and launches per step, pinned memory and the
# device memory the run allocated (docs/perf.md, issue goals beside them).
#
# Usage: tests/bench/host_side.sh [--models LIST] [--iters N]
#   --models  comma-separated train_step models with their AMP and batch, as
#             model[:amp[:batch[:host]]] (default: gpt2-small:bf16:8, distill-vit-b-s:bf16:256,
#             distill-vit-b-s:bf16:256:host, mlp, vit, gpt, distill); `host` uploads the batch
#             from the host every step (--host-batch) instead of keeping it on the device
#   --iters N timed steps per run (default 20, after 2 untimed)
# Environment: BUILD_DIR (default build), TRAIN_STEP (a prebuilt train_step), SINTER_NULL_GPU
#   (default 1; a path picks the library), SINTER_NULL_GPU_DEVICE (default h100), OUT_DIR
#   (default $BUILD_DIR/host-side) for each run's log and driver report.
# Each model runs in fresh processes: cold, then warm. The host time per step is train_step's
# median step time: on the null driver nothing runs on a device, so it is all host work.
# Then the gpt recipe with --variable-length on cuda (cold cache): each shape bucket's
# recompile, as its compile lines report them (GPT recipe: RECIPE_GPT, default
# $BUILD_DIR/recipes/gpt; skipped when missing).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BENCH="$ROOT/tests/bench"
BUILD_DIR="${BUILD_DIR:-$ROOT/build}"
NAME=host_side.sh
MODELS="gpt2-small:bf16:8,distill-vit-b-s:bf16:256,distill-vit-b-s:bf16:256:host,mlp,vit,gpt,distill"
ITERS=20
source "$BENCH/common.sh"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --models) MODELS="${2:?}"; shift 2 ;;
    --iters) ITERS="${2:?}"; shift 2 ;;
    -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
[[ $ITERS =~ ^[1-9][0-9]*$ ]] || die "--iters needs a positive count, not '$ITERS'"
bench_program train_step TRAIN_STEP
export SINTER_NULL_GPU="${SINTER_NULL_GPU:-1}"
OUT_DIR="${OUT_DIR:-$BUILD_DIR/host-side}"
mkdir -p "$OUT_DIR"
cache_root=$(mktemp -d "${TMPDIR:-/tmp}/sinter-host-side.XXXXXX")
trap 'rm -rf "$cache_root"' EXIT

rows=()
IFS=',' read -r -a specs <<<"$MODELS"
for spec in "${specs[@]}"; do
  IFS=':' read -r model amp batch host <<<"$spec"
  amp=${amp:-off}
  args=(--model "$model" --device cuda --amp "$amp" --warmup 2 --iters "$ITERS")
  [[ -n ${batch:-} ]] && args+=(--batch "$batch")
  [[ ${host:-} == host ]] && args+=(--host-batch)
  label="$model${amp:+ $amp}${batch:+ b$batch}${host:+ (batch from host)}"
  cache="$cache_root/${spec//[:]/-}"
  for run in cold warm; do
    base="$OUT_DIR/${spec//[:]/-}-$run"
    rm -f "$base.report"
    start=$(date +%s%N)
    if ! SINTER_CACHE_DIR="$cache" SINTER_DUMP=list SINTER_TIME_PHASES=1 \
         SINTER_NULL_GPU_REPORT="$base.report" "$TRAIN_STEP" "${args[@]}" >"$base.log" 2>&1; then
      echo "$NAME: $label ($run) failed; its log:" >&2
      tail -20 "$base.log" >&2
      exit 1
    fi
    end=$(date +%s%N)
    echo "$NAME: $label $run: $(((end - start) / 1000000)) ms"
    rows+=("$label|$run|$base.log|$base.report")
  done
done

OUT_DIR="$OUT_DIR" python3 - "${rows[@]}" <<'PY'
import os, re, sys

def field(text, key, default=None):
    m = re.search(r"(?:^|\s)" + re.escape(key) + r"=([^\s]+)", text)
    return m.group(1) if m else default

print()
print("| model | run | compile (stages) | slowest stages | first call | host RSS | host time / step | launches / step | pinned | device peak | ptxas (longest) |")
print("| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for row in sys.argv[1:]:
    label, run, log_path, report_path = row.split("|")
    log = open(log_path).read()
    report = open(report_path).read()
    result = next(l for l in log.splitlines() if l.startswith("peer=sinter "))
    compiled = re.search(r"compiled \(first call[^)]*\) in ([0-9.]+) ms", log)
    slowest = re.search(r"slowest stages: (.*)$", log, re.M)
    first_run = re.search(r"phase first run ([0-9.]+) ms", log)
    stages_ms = float(compiled.group(1)) if compiled else float("nan")
    print("| {} | {} | {:.2f} s | {} | {:.2f} s | {:.0f} MB | {:.3f} ms | {} | {:.2f} MB | {:.2f} GB | {:.1f} s ({:.2f} s) |".format(
        label, run, stages_ms / 1000, slowest.group(1) if slowest else "-",
        float(field(result, "compile_s")),
        float(field(result, "maxrss_mb")),
        float(field(result, "median_step_s")) * 1e3,
        field(report, "last_graph_nodes"),
        int(field(report, "pinned_peak_bytes")) / 2**20,
        int(field(report, "device_peak_bytes")) / 1e9,
        float(field(report, "ptxas_seconds")),
        float(field(report, "ptxas_longest_seconds"))))
print()
print("compile = the compile's stages (the compile line); first call = train_step's compile_s: "
      "trace, stages and the first run (uploads, graph capture). host RSS = the process's peak "
      "(ru_maxrss). host time / step = the median step on the null driver, where the device "
      "takes no time. launches / step = nodes of the CUDA graph one step replays (kernels, "
      "GEMMs, copies, memsets). ptxas = the null driver assembling the PTX, as the driver's JIT "
      "would, in all (and its slowest kernel: what no number of threads shortens). Logs and "
      "driver reports: " + os.environ["OUT_DIR"] + ".")
PY

RECIPE_GPT="${RECIPE_GPT:-$BUILD_DIR/recipes/gpt}"
if [[ -x $RECIPE_GPT ]]; then
  log="$OUT_DIR/gpt-variable-length.log"
  SINTER_CACHE_DIR="$cache_root/gpt-buckets" "$RECIPE_GPT" --device cuda --variable-length \
    --steps 40 >"$log" 2>&1 || { echo "$NAME: the gpt recipe failed; its log:" >&2; tail -20 "$log" >&2; exit 1; }
  echo
  echo "gpt recipe, --variable-length on cuda (buckets of the context), each compile of its step:"
  grep -E '^sinter: compiled \((first call|recompiling)' "$log" | grep 'shape bucket' |
    sed -E 's/^sinter: compiled \((first call |recompiling, [^(]*)\((shape bucket [0-9]+)[^)]*\), specialisation [0-9]+\) in ([0-9.]+ ms): [0-9]+ kernels \(([0-9]+) compiled.*/  \2: \3, \4 kernels compiled/'
else
  echo "$NAME: no gpt recipe at $RECIPE_GPT: the bucket recompiles are not measured"
fi
