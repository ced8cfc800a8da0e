#!/usr/bin/env bash
# tests/cli/check_null_gpu_host_memory.sh — GPT-2 small's bf16 training step (batch 8) on cuda,
# on the null driver (SINTER_NULL_GPU=1, set by the meson test): the whole process stays under
# 2 GB of host memory (parameters initialised on the host, compile with ptxas, five steps),
# pins no more than its batch and loss, and the device memory it allocates at its peak is the
# step's plan (plan_total_mb: arena, outputs, inputs, workspace) less the plan's allowance for
# kernel images and graphs, which the null driver counts apart; attention says which kernels
# it runs.
# Usage: check_null_gpu_host_memory.sh TRAIN_STEP
set -uo pipefail
train_step="$1"
[[ ${SINTER_NULL_GPU:-} == 1 ]] || { echo "FAIL: run with SINTER_NULL_GPU=1"; exit 1; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sinter-null-rss.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
SINTER_CACHE_DIR="$tmp/cache" SINTER_NULL_GPU_REPORT="$tmp/report" timeout 600 "$train_step" \
  --model gpt2-small --amp bf16 --batch 8 --device cuda --warmup 2 --iters 3 >"$tmp/out" 2>&1
code=$?
cat "$tmp/out"
cat "$tmp/report"
[[ $code == 0 ]] || { echo "FAIL: train_step exited $code"; exit 1; }
python3 - "$tmp/out" "$tmp/report" <<'PY'
import re, sys
out = open(sys.argv[1]).read()
report = open(sys.argv[2]).read()
def field(text, key):
    m = re.search(r"(?:^|\s)" + key + r"=([0-9.e+-]+)", text)
    if not m:
        sys.exit(f"FAIL: no {key}= in the output")
    return float(m.group(1))
rss = field(out, "maxrss_mb")
pinned = field(report, "pinned_peak_bytes")
device_peak = field(report, "device_peak_bytes")
planned = field(out, "plan_total_mb") * 2**20
failures = []
if rss >= 2048:
    failures.append(f"host RSS {rss:.0f} MB, goal < 2048 MB")
if pinned > 1 << 20:
    failures.append(f"{pinned:.0f} bytes pinned; the batch and the loss need a few KB")
# The plan holds 64 MiB for kernel images and CUDA graphs, which are not cuMemAlloc'd, and no
# GEMM workspace (made before the plan, by the run: 32 MiB). The plan counts each of the
# step's allocations in whole 2 MiB pages, the null driver only those of a page or more: less
# than a page apart per allocation (the arena, the outputs, carried inputs, other inputs, the
# second set's batch).
allocated = planned - (64 << 20) + (32 << 20)
if not allocated - 5 * (2 << 20) < device_peak <= allocated:
    failures.append(f"device peak {device_peak:.0f} bytes against a plan of {planned:.0f}")
# Attention's path is decided per shape: the null driver has no cuDNN, so the NVPTX kernels run,
# and the log line says why (docs/gpu.md, "Attention").
for kind in ("", " backward"):
    line = ("sinter: attention 8×12×1024×1024×64 bf16 causal" + kind +
            " on cuda: nvptx (the null CUDA driver (SINTER_NULL_GPU=1) has no cuDNN)")
    if line not in out.splitlines():
        failures.append("no line '" + line + "'")
for f in failures:
    print("FAIL:", f)
print(f"host RSS {rss:.0f} MB, pinned {pinned:.0f} bytes, device peak {device_peak / 1e9:.2f} GB "
      f"(plan {planned / 1e9:.2f} GB)")
sys.exit(1 if failures else 0)
PY
