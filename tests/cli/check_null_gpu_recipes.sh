#!/usr/bin/env bash
# tests/cli/check_null_gpu_recipes.sh — on the null CUDA driver (SINTER_NULL_GPU=1, set by the
# meson test): `sinter info` names the null device, and every recipe trains a few steps with
# --device cuda, compiling its kernels (ptxas checks them where it is installed), exiting 0 and
# printing its result line; the driver's report shows the work went through CUDA graphs;
# --check-numerics on cuda names the op that made a NaN (on memory the null driver fills with NaN).
# Usage: check_null_gpu_recipes.sh SINTER MLP VIT GPT DISTILL
set -uo pipefail
sinter="$1"
shift
[[ ${SINTER_NULL_GPU:-} == 1 ]] || { echo "FAIL: run with SINTER_NULL_GPU=1"; exit 1; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sinter-null-gpu.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
info=$("$sinter" info)
grep -q '^cuda driver: null (SINTER_NULL_GPU=1, no GPU): NVIDIA H100' <<<"$info" \
  || { echo "FAIL: sinter info does not name the null driver:"; echo "$info"; exit 1; }
grep -q '^  cuda:0  NVIDIA H100 80GB HBM3 \[null driver\]  sm_90' <<<"$info" \
  || { echo "FAIL: sinter info does not list the null device:"; echo "$info"; exit 1; }
# Bad settings are refused by name.
bad=$(SINTER_NULL_GPU=/nonexistent/libsinter_null_gpu.so "$sinter" info)
grep -q '^cuda driver: none (sinter: SINTER_NULL_GPU=/nonexistent/libsinter_null_gpu.so is not a file' \
  <<<"$bad" || { echo "FAIL: a missing null driver library is not named:"; echo "$bad"; exit 1; }
bad=$(SINTER_NULL_GPU_DEVICE=h100,memroy=40GiB "$sinter" info)
grep -q "unknown key 'memroy'" <<<"$bad" \
  || { echo "FAIL: a bad SINTER_NULL_GPU_DEVICE key is not named:"; echo "$bad"; exit 1; }
small=$(SINTER_NULL_GPU_DEVICE=a100,memory=40GiB,count=2 "$sinter" info)
grep -q '^gpus: 2$' <<<"$small" && grep -q 'cuda:1  NVIDIA A100-SXM4-80GB \[null driver\]  sm_80  40.0 GiB  108 SMs' \
  <<<"$small" || { echo "FAIL: SINTER_NULL_GPU_DEVICE was not applied:"; echo "$small"; exit 1; }
status=0
for recipe in "$@"; do
  name=$(basename "$recipe")
  report="$tmp/$name.report"
  SINTER_CACHE_DIR="$tmp/cache" SINTER_NULL_GPU_REPORT="$report" timeout 300 "$recipe" \
    --device cuda --steps 4 >"$tmp/$name.out" 2>&1
  code=$?
  if [[ $code != 0 ]] || ! grep -q '^result: ' "$tmp/$name.out"; then
    echo "FAIL: $name --device cuda exited $code without a result line:"
    cat "$tmp/$name.out"
    status=1
    continue
  fi
  # Steps from the third on replay CUDA graphs; kernels and GEMMs were launched.
  graphs=$(sed -n 's/.* graph_launches=\([0-9]*\).*/\1/p' "$report")
  kernels=$(sed -n 's/.* kernel_launches=\([0-9]*\).*/\1/p' "$report")
  leaked=$(sed -n 's/.* device_bytes=\([0-9]*\).*/\1/p' "$report")
  if [[ -z $graphs || $graphs -lt 1 || -z $kernels || $kernels -lt 1 ]]; then
    echo "FAIL: $name ran no CUDA graph or kernel: $(cat "$report")"
    status=1
  fi
  if [[ $leaked != 0 ]]; then
    echo "FAIL: $name left $leaked bytes of device memory allocated at exit"
    status=1
  fi
  echo "$name: $(grep '^result: ' "$tmp/$name.out")"
  echo "  $(cut -c1-400 "$report")"
done
# --check-numerics on cuda: no false alarm where kernels leave nothing non-finite, and with every
# fresh buffer NaN (SINTER_NULL_GPU_FILL, backed memory) the first launch's op (the flattening of
# the images) is named with its kernel and step, exit 1, as on the CPU.
mlp="$1"
out=$(SINTER_CACHE_DIR="$tmp/cache" timeout 300 "$mlp" --device cuda --steps 3 --check-numerics 2>&1)
code=$?
[[ $code == 0 ]] || { echo "FAIL: mlp --device cuda --check-numerics exited $code: $out"; status=1; }
out=$(SINTER_CACHE_DIR="$tmp/cache" SINTER_NULL_GPU_COPIES=1 SINTER_NULL_GPU_FILL=nan timeout 300 \
  "$mlp" --device cuda --steps 3 --check-numerics 2>&1)
code=$?
if [[ $code != 1 || ! $out =~ "non-finite value in step 1 (--check-numerics): \`"[a-z_]+"\`"[^$'\n']*"; kernel k0 " ]]; then
  echo "FAIL: mlp --device cuda --check-numerics on NaN memory: exit $code, want 1 naming the op:"
  echo "$out" | tail -5
  status=1
else
  echo "check-numerics on cuda: $(grep -m1 'non-finite value' <<<"$out" | cut -c1-300)"
fi
exit $status
