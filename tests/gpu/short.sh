#!/usr/bin/env bash
# tests/gpu/short.sh — the open issues' GPU figures in one device call of under 10 minutes (from
# a bundle, tests/gpu/bundle.sh): steps in priority order, each with its own time limit and all
# under one deadline, so whatever ran comes back even when the call is cut short.
#
# Usage: ./short.sh [STAGE...]   (REPORT_DIR, default $OUT; DEADLINE_S, default 540 seconds)
# Writes REPORT_DIR/short.md (each step's command, exit status, seconds and result lines) and
# REPORT_DIR/short-logs.tar.gz (whole outputs and profile summaries, one file: the device tool
# brings back only a few files; a compile's stages are in its log, SINTER_DUMP=list). Stages
# (default: the first seven, in this order):
#   info          sinter info, the GPU, cuDNN's attention test alone (if it fails, the
#                 stages after it run SINTER_ATTENTION=nvptx), and a small CUDA test with the
#                 kernels assembled by libnvJitLink (if that fails, SINTER_PTX_ASSEMBLER=driver)
#   compile       GPT-2 small bf16 B=8: cold compile (empty kernel cache, SINTER_DUMP=list,plan:
#                 stages and predicted_step_ms), the same with the driver's JIT assembling
#                 (SINTER_PTX_ASSEMBLER=driver), warm compile (second process), a profiled run
#   amp77         the CUDA suites in the background, beside GPT-2 small bf16, 77 steps on one
#                 batch: sinter fused/decomposed, PyTorch eager SDPA/math (issue 34: within 2% of
#                 PyTorch eager's loss)
#   rounds-gpt2   interleaved rounds against torch eager and torch.compile (issue 33)
#   distill       ViT-B/16 -> ViT-S/16 bf16 B=256: step, plan, profile; predicted largest batch
#   buckets       the gpt recipe's shape-bucket recompiles (issue 32: < 0.3 s each)
#   ab            GPT-2 small's step with each attention path forced (SINTER_ATTENTION=nvptx,
#                 cudnn), then the attention pipeline, the heads read and written in place
#                 (SINTER_ATTENTION_VIEWS), split reductions, runtime row counts and the update
#                 written over the old parameters (SINTER_UPDATE_IN_PLACE) and the head's bias
#                 as its GEMM's epilogue (SINTER_HEAD_BIAS_EPILOGUE, GPT-2 only) turned off (the
#                 first four and the update in place for the distillation pair too)
#   profiles      cold compiles profiled (GPT-2 small, the distillation pair), and GPT-2 small's
#                 cold compile on all the host's cores (--threads)
#   max-batch     the predicted largest batch of the distillation pair, then smaller ones until
#                 one trains (how far off the prediction is)
#   rounds-distill  the distillation pair against torch eager and torch.compile
#   parity        the mixed-precision parity study on the GPU (issue 34; tests/bench/amp_parity.py
#                 --device cuda, seeds 0 and 1 or PARITY_SEEDS, 300 steps)
#   tied          GPT-2 small as released (gpt2-small-tied: 124M parameters, the head is the
#                 token embedding): a profiled step (the optimizer phase against issue 33's
#                 AdamW goal of 1.4 ms), then rounds against torch eager and torch.compile
#   recheck       (not a default) after a fix: the [cuda] suite's own cases, GPT-2's cold
#                 compile (and with the driver's JIT), a warm one (its first run's parts) and a
#                 profiled step, 77 fused steps on one batch
#   ncu           (not a default) Nsight Compute's counters for one kernel: NCU_KERNEL (a name
#                 regex; default GPT-2's loss row kernel), NCU_MODEL (gpt2 or distill)
#   reproduce     (not a default) GPT-2 small's first 30 bf16 steps, twice by default and
#                 twice with SINTER_DETERMINISTIC=1: whether each pair's losses agree bit for bit,
#                 and each mode's step time (docs/gpu.md, "Reproducible runs")
#   checks        (not a default) amp77 with the three CUDA suites side by side and the parity
#                 study in the background: every correctness figure at once on a many-core host
set -uo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPORT_DIR="${REPORT_DIR:-${OUT:-$HERE/short-report}}"
PYTHON="${PYTHON:-python3}"
DEADLINE=$((SECONDS + ${DEADLINE_S:-540}))
LOGS="$REPORT_DIR/logs"
mkdir -p "$LOGS"
export LD_LIBRARY_PATH="$HERE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export SINTER_LIBDEVICE="$HERE/lib/libdevice.10.bc"
export SINTER_REQUIRE_GPU=1
CACHE="${TMPDIR:-/tmp}/sinter-short-cache"
export SINTER_CACHE_DIR="$CACHE"
# cuDNN (the attention path of docs/gpu.md): the system's, else PyTorch's wheel.
if ! ldconfig -p 2>/dev/null | grep -q 'libcudnn\.so\.9 '; then
  cudnn_dir=$("$PYTHON" -c 'import nvidia.cudnn, os; print(os.path.join(list(nvidia.cudnn.__path__)[0], "lib"))' 2>/dev/null)
  [[ -n $cudnn_dir && -f $cudnn_dir/libcudnn.so.9 ]] && export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$cudnn_dir"
fi
# libnvJitLink (the in-process PTX assembler): the system's, else the nvidia-nvjitlink wheel's.
if [[ -z ${SINTER_LIBNVJITLINK:-} ]] && ! ldconfig -p 2>/dev/null | grep -q 'libnvJitLink\.so\.1[23] '; then
  jitlink=$("$PYTHON" -c 'import nvidia, glob, os
for d in nvidia.__path__:
    for f in sorted(glob.glob(os.path.join(d, "*", "lib", "libnvJitLink.so.1[23]"))): print(f)' 2>/dev/null | head -n 1)
  [[ -n $jitlink ]] && export SINTER_LIBNVJITLINK="$jitlink"
fi
if [[ -z ${SINTER_LIBNCCL:-} ]]; then
  nccl_dir=$("$PYTHON" -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null)
  [[ -n $nccl_dir && -f $nccl_dir/libnccl.so.2 ]] && export SINTER_LIBNCCL="$nccl_dir/libnccl.so.2"
fi
REPORT="$REPORT_DIR/short.md"
echo "# sinter short GPU report, commit $(cat "$HERE/COMMIT" 2>/dev/null), $(date -u +%FT%TZ)" >>"$REPORT"
TS="$HERE/bin/train_step"
# Result lines, ncu's key counters, and a compile's costliest stages (SINTER_DUMP=list), so that
# short.md alone says where a compile's time went should the logs not come back.
RESULT='^peer=|^sinter: |^parity|predicted_step_ms|passed|failed|FAILED|rror|^prediction|^max_batch=|^batch |verdict|^result|Throughput|Duration|Achieved Occupancy|Registers Per Thread|Hit Rate'
RESULT+='|^//   (kernels|bind|split-reductions|rematerialize|fuse|lower|cse) '

# step NAME LIMIT_S CMD...: runs CMD with the smaller of LIMIT_S and the time left, logs it whole
# and reports its matching lines; a step with under 10 s left is skipped (and says so).
step() {
  local name=$1 limit=$2
  shift 2
  local left=$((DEADLINE - SECONDS))
  ((left < limit)) && limit=$left
  if ((limit < 10)); then
    echo "### $name: skipped, the deadline is near" >>"$REPORT"
    return 1
  fi
  local start=$SECONDS
  timeout --kill-after=5 "$limit" "$@" >"$LOGS/$name.log" 2>&1
  local status=$?
  {
    echo "### $name (exit $status, $((SECONDS - start)) s, limit $limit s)"
    echo "\$ $*"
    grep -aE "$RESULT" "$LOGS/$name.log" | tail -n 40
  } >>"$REPORT"
  return $status
}

gpt2=(--model gpt2-small --device cuda --amp bf16 --batch 8)
distill=(--model distill-vit-b-s --device cuda --amp bf16)
stage_info() {
  step info 20 "$HERE/bin/sinter" info
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem \
    --format=csv >>"$REPORT" 2>&1
  # cuDNN's attention has never run here before: its CUDA test first, alone. Should it fail
  # or crash, the later stages run the NVPTX kernels (and the report says so), so that one
  # broken path does not cost the session's other figures.
  if [[ -z ${SINTER_ATTENTION:-} ]] &&
    ! step cudnn-attention 90 "$HERE/bin/sinter_tests" "cuda: attention through cuDNN*"; then
    export SINTER_ATTENTION=nvptx
    echo "### cuDNN's attention test failed: the stages below run SINTER_ATTENTION=nvptx" >>"$REPORT"
  fi
  # libnvJitLink assembles the kernels since 897f357, never yet on a GPU: a small CUDA test
  # first; should it fail over the assembler, the stages after it leave the PTX to the driver.
  if [[ -z ${SINTER_PTX_ASSEMBLER:-} ]] &&
    ! step ptx-assembler 60 "$HERE/bin/sinter_tests" "cuda: an MLP's gradients match the CPU*" &&
    grep -qa "libnvJitLink\|cuModuleLoadDataEx\|NO_BINARY\|INVALID_IMAGE" "$LOGS/ptx-assembler.log"; then
    export SINTER_PTX_ASSEMBLER=driver
    echo "### the test failed over libnvJitLink's cubins: the stages below run" \
      "SINTER_PTX_ASSEMBLER=driver" >>"$REPORT"
  fi
}
# The same cold compile with the driver's JIT assembling the PTX (its cache off, a kernel cache
# of its own): the A/B of libnvJitLink on every compile thread (SINTER_PTX_ASSEMBLER).
compile_cold_driver_jit() {
  SINTER_PTX_ASSEMBLER=driver CUDA_CACHE_DISABLE=1 SINTER_CACHE_DIR="$CACHE-driver-jit" \
    SINTER_DUMP=list step compile-cold-driver-jit 150 "$TS" "${gpt2[@]}" --warmup 1 --iters 3
}
stage_compile() {
  SINTER_DUMP=list,plan step compile-cold 150 "$TS" "${gpt2[@]}" --warmup 3 --iters 20
  compile_cold_driver_jit
  # SINTER_TIME_PHASES: each stage's time, and where the first run's goes (issue 32's warm
  # first call < 1 s).
  SINTER_TIME_PHASES=1 step compile-warm 60 "$TS" "${gpt2[@]}" --warmup 3 --iters 20
  SINTER_PROFILE="$REPORT_DIR/profile-gpt2-small" step compile-warm-profiled 60 "$TS" "${gpt2[@]}" \
    --warmup 2 --iters 5
}
# GPT-2 small bf16, 77 steps on one batch: sinter fused and decomposed, PyTorch eager with SDPA
# and with decomposed attention (issue 34: within 2% of PyTorch eager's loss).
amp77_losses() {
  for attention in fused decomposed; do
    SINTER_ATTENTION=$attention step "amp77-sinter-$attention" 90 "$TS" "${gpt2[@]}" --warmup 0 \
      --iters 76
  done
  for attention in sdpa math; do
    step "amp77-torch-eager-$attention" 90 "$PYTHON" "$HERE/bench/train_peers.py" "${gpt2[@]}" \
      --peers torch-eager --torch-attention "$attention" --warmup 0 --iters 76
  done
}
stage_amp77() {
  # The CUDA suites (correctness of kernels never run on a GPU) next to steps that check losses only.
  (
    REPORT="$REPORT_DIR/short-tests.md"
    for suite in '[cuda-forward]' '[cuda-gradient]' '[cuda]~[cuda-forward]~[cuda-gradient]'; do
      SINTER_CACHE_DIR="$CACHE-tests" step "tests-${suite//[^a-z-]/}" 150 \
        "$HERE/bin/sinter_tests" "$suite"
    done
  ) &
  tests_pid=$!
  amp77_losses
  wait "$tests_pid"
  cat "$REPORT_DIR/short-tests.md" >>"$REPORT" 2>/dev/null
}
stage_checks() {
  # What measures correctness, not speed, at once: the three CUDA suites side by side and the
  # parity study (issue 34) in the background, amp77's loss runs in front; the timed stages
  # come after, on a quiet GPU. On a 16-core host this takes about as long as the suites alone.
  local pids=()
  for suite in '[cuda-forward]' '[cuda-gradient]' '[cuda]~[cuda-forward]~[cuda-gradient]'; do
    local name="tests-${suite//[^a-z-]/}"
    (
      REPORT="$REPORT_DIR/short-$name.md"
      SINTER_CACHE_DIR="$CACHE-$name" step "$name" 240 "$HERE/bin/sinter_tests" "$suite"
    ) &
    pids+=($!)
  done
  (
    REPORT="$REPORT_DIR/short-parity.md"
    SINTER_CACHE_DIR="$CACHE-parity" step parity 300 "$PYTHON" "$HERE/bench/amp_parity.py" \
      --sinter "$HERE/bin/amp_parity" --device cuda --seeds "${PARITY_SEEDS:-0,1}" \
      --text "$HERE/data/fortunes.txt" --out "$LOGS/parity.d"
  ) &
  pids+=($!)
  amp77_losses
  wait "${pids[@]}"
  cat "$REPORT_DIR"/short-tests-*.md "$REPORT_DIR/short-parity.md" >>"$REPORT" 2>/dev/null
  rm -f "$REPORT_DIR"/short-tests-*.md "$REPORT_DIR/short-parity.md"
}
stage_rounds_gpt2() {
  step rounds-gpt2 200 "$PYTHON" "$HERE/bench/train_rounds.py" --sinter "$TS" "${gpt2[@]}" \
    --peers torch-eager,torch-compile --warmup 5 --rounds 6 --time-limit 60 --no-warm-start \
    --out "$LOGS/rounds-gpt2.d"
}
stage_distill() {
  SINTER_DUMP=list,plan step distill-step 90 "$TS" "${distill[@]}" --batch 256 --warmup 3 --iters 20
  SINTER_PROFILE="$REPORT_DIR/profile-distill" step distill-profiled 60 "$TS" "${distill[@]}" \
    --batch 256 --warmup 2 --iters 5
  step distill-max-batch 150 bash "$HERE/max_batch_check.sh" distill-vit-b-s bf16
}
stage_buckets() {
  step buckets 60 "$HERE/bin/gpt" --device cuda --steps 200 --variable-length --sample-bytes 8 \
    --text "$HERE/data/fortunes.txt"
}
stage_ab() {
  # A/B of GPU changes (against compile-warm's step, which runs the timed choice): each attention
  # path forced, the attention kernels' double-buffered tiles, the heads in place, split column
  # reductions, row counts as kernel parameters and the update over the old parameters, each
  # off; the first four and the last also for the distillation pair (against the distill
  # stage's step).
  for path in nvptx cudnn; do
    SINTER_ATTENTION=$path step "ab-attention-$path" 60 "$TS" "${gpt2[@]}" --warmup 3 --iters 20
    SINTER_ATTENTION=$path step "ab-attention-$path-distill" 90 "$TS" "${distill[@]}" \
      --batch 256 --warmup 3 --iters 10
  done
  SINTER_ATTENTION_PIPELINE=0 step ab-attention-pipeline-off 60 "$TS" "${gpt2[@]}" --warmup 3 \
    --iters 20
  SINTER_ATTENTION_PIPELINE=0 step ab-attention-pipeline-off-distill 90 "$TS" "${distill[@]}" \
    --batch 256 --warmup 3 --iters 10
  SINTER_ATTENTION_VIEWS=0 step ab-attention-views-off 60 "$TS" "${gpt2[@]}" --warmup 3 --iters 20
  SINTER_ATTENTION_VIEWS=0 step ab-attention-views-off-distill 90 "$TS" "${distill[@]}" \
    --batch 256 --warmup 3 --iters 10
  SINTER_SPLIT_REDUCTIONS=0 step ab-split-reductions-off 60 "$TS" "${gpt2[@]}" --warmup 3 --iters 20
  SINTER_ROWS_PARAMETER=0 step ab-rows-parameter-off 60 "$TS" "${gpt2[@]}" --warmup 3 --iters 20
  SINTER_UPDATE_IN_PLACE=0 step ab-update-in-place-off 60 "$TS" "${gpt2[@]}" --warmup 3 --iters 20
  SINTER_HEAD_BIAS_EPILOGUE=0 step ab-head-bias-epilogue-off 60 "$TS" "${gpt2[@]}" --warmup 3 \
    --iters 20
  SINTER_UPDATE_IN_PLACE=0 step ab-update-in-place-off-distill 90 "$TS" "${distill[@]}" \
    --batch 256 --warmup 3 --iters 10
}
stage_profiles() {
  SINTER_PROFILE="$REPORT_DIR/profile-gpt2-small-cold" \
  step profiled-cold-gpt2 90 "$TS" "${gpt2[@]}" --warmup 2 --iters 5
  SINTER_PROFILE="$REPORT_DIR/profile-distill-cold" \
  step profiled-cold-distill 90 "$TS" "${distill[@]}" --batch 256 --warmup 2 --iters 5
  SINTER_CACHE_DIR="$CACHE-threads" SINTER_DUMP=list step compile-cold-all-threads 90 "$TS" \
    "${gpt2[@]}" --threads "$(nproc)" --warmup 2 --iters 5
}
stage_max_batch() {
  step max-batch-prediction 60 "$TS" "${distill[@]}" --max-batch
  local batch
  batch=$(sed -n 's/^max_batch=\([0-9]*\) .*/\1/p' "$LOGS/max-batch-prediction.log")
  [[ -n $batch ]] || return 1
  # Each sample of the pair plans about 27 MB: 40 fewer are about 1 GiB less.
  for fewer in 0 40 80 160 320 640; do
    step "max-batch-at-$((batch - fewer))" 60 "$TS" "${distill[@]}" --batch $((batch - fewer)) \
      --warmup 1 --iters 2 && break
  done
}
stage_rounds_distill() {
  step rounds-distill 240 "$PYTHON" "$HERE/bench/train_rounds.py" --sinter "$TS" \
    "${distill[@]}" --peers torch-eager,torch-compile --warmup 3 --rounds 5 --time-limit 60 \
    --no-warm-start --out "$LOGS/rounds-distill.d"
}

stage_parity() {
  step parity 300 "$PYTHON" "$HERE/bench/amp_parity.py" --sinter "$HERE/bin/amp_parity" \
    --device cuda --seeds "${PARITY_SEEDS:-0,1}" --text "$HERE/data/fortunes.txt" \
    --out "$LOGS/parity.d"
}

stage_reproduce() {
  local mode run
  for mode in 0 1; do
    for run in 1 2; do
      SINTER_DETERMINISTIC=$mode step "reproduce-$mode-$run" 90 "$HERE/bin/train_step" \
        "${gpt2[@]}" --warmup 0 --iters 30 --print-losses
      grep -a '^step=' "$LOGS/reproduce-$mode-$run.log" >"$LOGS/reproduce-$mode-$run.losses"
    done
    local same=no
    [[ -s $LOGS/reproduce-$mode-1.losses ]] &&
      cmp -s "$LOGS/reproduce-$mode-1.losses" "$LOGS/reproduce-$mode-2.losses" && same=yes
    echo "result reproduce SINTER_DETERMINISTIC=$mode identical_losses=$same" \
      "last: $(tail -n 1 "$LOGS/reproduce-$mode-1.losses") / $(tail -n 1 "$LOGS/reproduce-$mode-2.losses")" \
      >>"$REPORT"
  done
}

stage_ncu() {
  # One kernel's hardware counters (Nsight Compute, where the machine has it; clocks left
  # alone): NCU_KERNEL a regular expression of kernel names (default: GPT-2's loss row kernel,
  # 38% of the bandwidth on the H200), NCU_MODEL gpt2 or distill. Whether a kernel waits on DRAM,
  # on L2 (the loss re-reads its f32 head bias each pass) or on too few bytes in flight.
  local model=("${gpt2[@]}")
  [[ ${NCU_MODEL:-gpt2} == distill ]] && model=("${distill[@]}" --batch 256)
  command -v ncu >/dev/null || { echo "### ncu: not on this machine" >>"$REPORT"; return 1; }
  step ncu 240 ncu --clock-control none --kernel-name "regex:${NCU_KERNEL:-^sinter_bwd_row_cast}" \
    --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis \
    --section Occupancy --section LaunchStats --section WarpStateStats "$TS" "${model[@]}" \
    --warmup 0 --iters 1
}
stage_recheck() {
  # After a fix, in a few device-minutes: the [cuda] suite's own cases, GPT-2's cold compile
  # (its plan and launch plan dumped) and a profiled step, and 77 fused steps on one batch.
  step tests-cuda 120 "$HERE/bin/sinter_tests" '[cuda]~[cuda-forward]~[cuda-gradient]'
  SINTER_DUMP=list,plan,launch-plan step compile-cold 150 "$TS" "${gpt2[@]}" --warmup 3 --iters 20
  compile_cold_driver_jit
  SINTER_TIME_PHASES=1 step compile-warm 60 "$TS" "${gpt2[@]}" --warmup 3 --iters 20
  SINTER_PROFILE="$REPORT_DIR/profile-gpt2-small" step compile-warm-profiled 60 "$TS" \
    "${gpt2[@]}" --warmup 2 --iters 5
  SINTER_ATTENTION=fused step amp77-sinter-fused 90 "$TS" "${gpt2[@]}" --warmup 0 --iters 76
}

stage_tied() {
  local tied=(--model gpt2-small-tied --device cuda --amp bf16 --batch 8)
  SINTER_PROFILE="$REPORT_DIR/profile-gpt2-small-tied" step tied-profiled 90 "$TS" "${tied[@]}" \
    --warmup 3 --iters 10
  step rounds-gpt2-tied 200 "$PYTHON" "$HERE/bench/train_rounds.py" --sinter "$TS" "${tied[@]}" \
    --peers torch-eager,torch-compile --warmup 5 --rounds 4 --time-limit 60 --no-warm-start \
    --out "$LOGS/rounds-gpt2-tied.d"
}

stages=("$@")
[[ ${#stages[@]} -gt 0 ]] || stages=(info compile amp77 rounds-gpt2 distill buckets ab)
for stage in "${stages[@]}"; do
  case "$stage" in
    info | compile | amp77 | checks | rounds-gpt2 | distill | buckets | ab | profiles | \
      max-batch | rounds-distill | parity | tied | recheck | ncu | reproduce) "stage_${stage//-/_}" ;;
    *) echo "short.sh: unknown stage '$stage'" >&2 ;;
  esac
done
echo "### done at $SECONDS s" >>"$REPORT"
# The device tool brings back files of at most 16 MiB: logs and profile summaries go in one
# archive without the traces, HTML reports and the parity study's data (GPT-2's trace alone,
# or the study's weights and batches, passed that on 2026-11-29); should it still be too big,
# the step logs alone.
pack() {
  tar -C "$REPORT_DIR" --exclude='*.json' --exclude='*.html' --exclude='*.bin' \
    --exclude='*.safetensors' "$@" -czf "$REPORT_DIR/short-logs.tar.gz.tmp" \
    logs $(cd "$REPORT_DIR" && ls -d profile-* 2>/dev/null)
}
pack || true
if (($(stat -c %s "$REPORT_DIR/short-logs.tar.gz.tmp" 2>/dev/null || echo 0) > 15 * 1024 * 1024)); then
  echo "### short-logs.tar.gz: the step logs alone (with the profiles it passed 15 MiB)" >>"$REPORT"
  tar -C "$REPORT_DIR" -czf "$REPORT_DIR/short-logs.tar.gz.tmp" $(cd "$REPORT_DIR" && ls logs/*.log)
fi
mv "$REPORT_DIR/short-logs.tar.gz.tmp" "$REPORT_DIR/short-logs.tar.gz" &&
  rm -rf "$LOGS" "$REPORT_DIR"/profile-* "$REPORT_DIR/short-tests.md"
