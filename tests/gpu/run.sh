#!/usr/bin/env bash
# tests/gpu/run.sh — runs on a GPU machine from a bundle (tests/gpu/bundle.sh): the CUDA test
# suite, the recipes on cuda, and the training-step benchmarks against PyTorch on the same GPU;
# writes REPORT_DIR/report.md with every command, its exit status and its result lines.
#
# Usage: ./run.sh [STAGE...]     stages: info tests recipes amp bench (default: all but amp, in
#                                that order)
# Exits 1 when any step failed (the report lists which), 0 when all passed.
# Environment: REPORT_DIR (default $OUT, else ./report), RECIPE_EPOCHS (default: each recipe's
# own, as in docs/perf.md's CPU table), BENCH_MODELS (default: mlp vit distill gpt gpt2-small),
# BENCH_ROUNDS (default 20), BENCH_TIME_LIMIT (seconds of rounds per model, default 420),
# BENCH_AMP_BATCHES (batches of the mixed-precision GPT-2 small rows, default "8 16"; empty: none),
# BENCH_AMP_MODES (their precisions, default bf16; also fp16),
# PYTHON (default python3, with torch built for CUDA).
set -uo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPORT_DIR="${REPORT_DIR:-${OUT:-$HERE/report}}"
PYTHON="${PYTHON:-python3}"
mkdir -p "$REPORT_DIR"
export LD_LIBRARY_PATH="$HERE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export SINTER_CACHE_DIR="$REPORT_DIR/kernel-cache"
export SINTER_LIBDEVICE="$HERE/lib/libdevice.10.bc"
REPORT="$REPORT_DIR/report.md"
# NCCL (the collective ops' GPU path, even in a world of one): PyTorch's wheel brings one.
if [[ -z ${SINTER_LIBNCCL:-} ]]; then
  nccl_dir=$("$PYTHON" -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null)
  [[ -n $nccl_dir && -f $nccl_dir/libnccl.so.2 ]] && export SINTER_LIBNCCL="$nccl_dir/libnccl.so.2"
fi
# On a GPU machine a CUDA suite that skips is a failure: nothing was tested.
export SINTER_REQUIRE_GPU=1
failed_steps=()
stages=("$@")
[[ ${#stages[@]} -gt 0 ]] || stages=(info tests recipes bench)

# Runs a command, keeps its whole output in REPORT_DIR/logs/NAME.log, and puts the command,
# its exit status, wall time and the lines matching PATTERN into the report.
step() {
  local name=$1 pattern=$2
  shift 2
  mkdir -p "$REPORT_DIR/logs"
  local log="$REPORT_DIR/logs/$name.log" start=$SECONDS
  "$@" >"$log" 2>&1
  local status=$?
  {
    echo "### $name"
    echo '```'
    echo "\$ $*"
    echo "exit $status, $((SECONDS - start)) s"
    grep -E "$pattern" "$log" | tail -n 40
    echo '```'
  } >>"$REPORT"
  [[ $status == 0 ]] || failed_steps+=("$name (exit $status)")
  return $status
}

{
  echo "# sinter GPU report"
  echo "commit $(cat "$HERE/COMMIT" 2>/dev/null || echo unknown), $(date -u +%Y-%m-%dT%H:%MZ)"
} >>"$REPORT"

for stage in "${stages[@]}"; do
  case "$stage" in
    info)
      step info '.' "$HERE/bin/sinter" info
      step nvidia-smi 'NVIDIA|MiB|Driver' nvidia-smi
      ;;
    tests)
      # Catch2 prints "All tests passed (...)" or "test cases: N | N passed | N failed".
      for suite in '[cuda]~[cuda-forward]~[cuda-gradient]' '[cuda-forward]' '[cuda-gradient]'; do
        step "tests-${suite//[^a-z-]/}" 'passed|failed|FAILED|skipped|with expansion|CHECK' \
          "$HERE/bin/sinter_tests" "$suite"
      done
      # After CUDA work a program must exit with status 0 (no abort in static destruction).
      step cuda-exit-status 'CUDA program|FAIL|terminate' bash "$HERE/check_cuda_exit.sh" \
        "$HERE/bin/sinter" "$HERE/bin/train_step"
      ;;
    recipes)
      data=(--data-dir "$HERE/data/fashion-mnist")
      [[ -n ${RECIPE_EPOCHS:-} ]] && data+=(--epochs "$RECIPE_EPOCHS")
      step mlp-cuda '^result|error|sinter:' "$HERE/bin/mlp" --device cuda "${data[@]}"
      step mlp-cpu '^result|error' "$HERE/bin/mlp" --device cpu "${data[@]}"
      step vit-cuda '^result|error|sinter:' "$HERE/bin/vit" --device cuda "${data[@]}"
      step gpt-cuda '^result|^sample|error|sinter:' "$HERE/bin/gpt" --device cuda --steps 500 \
        --text "$HERE/data/fortunes.txt"
      # GPU profiling (events around each launch): the report, and its cost against the same
      # run unprofiled (steps_per_second of the two result lines); then shape buckets on cuda.
      step gpt-cuda-plain '^result|error|sinter:' "$HERE/bin/gpt" --device cuda --steps 200 \
        --sample-bytes 8 --text "$HERE/data/fortunes.txt"
      step gpt-cuda-profile '^result|verdict|peak|error|sinter:' "$HERE/bin/gpt" --device cuda \
        --steps 200 --sample-bytes 8 --text "$HERE/data/fortunes.txt" \
        --profile "$REPORT_DIR/profile-gpt-cuda"
      step gpt-cuda-variable-length '^result|buckets|recompiling|error' "$HERE/bin/gpt" \
        --device cuda --steps 200 --variable-length --sample-bytes 8 \
        --text "$HERE/data/fortunes.txt"
      # --check-numerics on the GPU: no false alarm on a healthy run; a diverging one (exit 1
      # expected) names the op as on the CPU.
      step gpt-cuda-check-numerics '^result|non-finite|error' "$HERE/bin/gpt" --device cuda \
        --steps 20 --sample-bytes 8 --check-numerics --text "$HERE/data/fortunes.txt"
      step mlp-cuda-check-numerics-diverging 'non-finite|^result|error' bash -c \
        '"$0" --device cuda --lr 10 --weight-decay 10 --hidden 64 --steps 40 --check-numerics \
        "${@}"; [[ $? == 1 ]]' "$HERE/bin/mlp" "${data[@]}"
      # Distillation in bf16 (teacher trained first), then the largest batch the GPU fits,
      # predicted from the memory plan, and a run at it (it must not run out of memory).
      step distill-cuda '^result|error|sinter:|distill:' "$HERE/bin/distill" --device cuda \
        --amp bf16 "${data[@]}"
      step distill-max-batch '^max_batch=|error|sinter:' "$HERE/bin/distill" --device cuda \
        --amp bf16 --max-batch "${data[@]}"
      step distill-at-max-batch '^result|batch size max|error|sinter:|out of memory' \
        "$HERE/bin/distill" --device cuda --amp bf16 --batch-size max --teacher-steps 5 \
        --steps 5 --no-baseline "${data[@]}"
      ;;
    amp)
      # Mixed-precision parity (docs/amp.md): the study of tests/bench/amp_parity.py on the GPU,
      # then GPT-2 small bf16 on one batch for 77 steps, each attention path, against PyTorch
      # eager (train_step's and train_peers.py's final_loss: the 77th step's loss).
      step amp-parity '^parity|^sinter |^torch |FAILED|Error|error' "$PYTHON" \
        "$HERE/bench/amp_parity.py" --sinter "$HERE/bin/amp_parity" --device cuda \
        --text "$HERE/data/fortunes.txt" --out "$REPORT_DIR/logs/amp-parity.d"
      for attention in fused decomposed; do
        SINTER_ATTENTION=$attention step "amp-gpt2-small-77-$attention" '^peer=|error|sinter:' \
          "$HERE/bin/train_step" --model gpt2-small --device cuda --amp bf16 --warmup 0 --iters 76
      done
      # PyTorch's two attention algorithms: SDPA beside sinter's fused path, the decomposed one
      # beside SINTER_ATTENTION=decomposed (on the CPU they part by 9% on one batch in bf16).
      for attention in sdpa math; do
        step "amp-gpt2-small-77-torch-eager-$attention" '^peer=|Error' "$PYTHON" \
          "$HERE/bench/train_peers.py" --model gpt2-small --device cuda --amp bf16 \
          --peers torch-eager --torch-attention "$attention" --warmup 0 --iters 76
      done
      ;;
    bench)
      # Interleaved rounds (tests/bench/train_rounds.py): sinter and the PyTorch peers stay
      # alive and alternate short turns, so each ratio is per round with its spread.
      # The table reads the logs of this stage's steps, in the order they ran.
      bench_logs=("$REPORT_DIR/logs/bench-peak.log")
      step bench-peak '^peer=|Error' "$PYTHON" "$HERE/bench/train_peers.py" --peak
      bench_rounds=("$PYTHON" "$HERE/bench/train_rounds.py" --sinter "$HERE/bin/train_step"
                    --device cuda --peers "torch-eager,torch-compile" --warmup 10
                    --rounds "${BENCH_ROUNDS:-20}" --time-limit "${BENCH_TIME_LIMIT:-420}")
      bench_pattern='^peer=|faster|inconclusive|WARNING|error|Error'
      for model in ${BENCH_MODELS:-mlp vit distill gpt gpt2-small}; do
        # float32; GPT-2 small's f32 GEMMs use TF32 on both sides.
        tf32=()
        [[ $model == gpt2-small ]] && tf32=(--tf32)
        bench_logs+=("$REPORT_DIR/logs/bench-$model.log")
        SINTER_TF32=${#tf32[@]} step "bench-$model" "$bench_pattern" "${bench_rounds[@]}" \
          --model "$model" --out "$REPORT_DIR/logs/bench-$model.d" "${tf32[@]}"
      done
      # Distillation at the issue's scale: ViT-B/16 -> ViT-S/16, 224x224, bf16, B = 256 against
      # the PyTorch peers; then sinter's predicted largest batch and three steps at it.
      bench_logs+=("$REPORT_DIR/logs/bench-distill-vit-b-s.log")
      SINTER_TF32=0 step bench-distill-vit-b-s "$bench_pattern" "${bench_rounds[@]}" \
        --model distill-vit-b-s --amp bf16 --out "$REPORT_DIR/logs/bench-distill-vit-b-s.d"
      step distill-vit-b-s-max-batch '^max_batch=|error|sinter:' "$HERE/bin/train_step" \
        --model distill-vit-b-s --device cuda --amp bf16 --max-batch
      max_batch=$(sed -n 's/^max_batch=\([0-9]*\) .*/\1/p' "$REPORT_DIR/logs/distill-vit-b-s-max-batch.log")
      [[ -n $max_batch && $max_batch -gt 0 ]] &&
        step distill-vit-b-s-at-max-batch '^peer=|error|sinter:|out of memory' \
          "$HERE/bin/train_step" --model distill-vit-b-s --device cuda --amp bf16 \
          --batch "$max_batch" --warmup 1 --iters 3
      # PyTorch eager's largest batch for the same pair, by trial (a process per batch, from
      # 256 doubling, then bisected to 64; the anchor: 2304 runs, 2368 does not).
      step peer-distill-vit-b-s-max-batch '^peer=|train_peers|Error' "$PYTHON" \
        "$HERE/bench/train_peers.py" --model distill-vit-b-s --device cuda --amp bf16 \
        --peers torch-eager --max-batch
      # Mixed precision: GPT-2 small (T = 1024) under autocast on both sides (train_step --amp,
      # torch.autocast + F.scaled_dot_product_attention + fused AdamW), per batch.
      for amp in ${BENCH_AMP_MODES-bf16}; do
        for batch in ${BENCH_AMP_BATCHES-8 16}; do
          name="bench-gpt2-small-$amp-b$batch"
          bench_logs+=("$REPORT_DIR/logs/$name.log")
          SINTER_TF32=0 step "$name" "$bench_pattern" "${bench_rounds[@]}" \
            --model gpt2-small --amp "$amp" --batch "$batch" --out "$REPORT_DIR/logs/$name.d"
        done
      done
      # Attention paths (docs/gpu.md, "Attention: cuDNN or sinter's kernels"): GPT-2 small bf16
      # at B=8 with each forced, T=1024 and T=2048 (sinter alone: the peers run SDPA); the
      # default's timed choice is in the rounds above, its decision lines in their logs.
      for context in 1024 2048; do
        for path in cudnn nvptx decomposed; do
          SINTER_TF32=0 SINTER_ATTENTION=$path step "attention-$path-t$context" \
            '^peer=|^sinter: attention|rror' "$HERE/bin/train_step" --model gpt2-small \
            --device cuda --amp bf16 --batch 8 --context "$context" --warmup 3 --iters 20
        done
      done
      {
        echo "### benchmark table"
        cat "${bench_logs[@]}" | "$PYTHON" "$HERE/bench/gpu_table.py"
      } >>"$REPORT"
      ;;
    *) echo "run.sh: unknown stage '$stage' (info tests recipes bench)" >&2; exit 2 ;;
  esac
done
{
  echo "### summary"
  if [[ ${#failed_steps[@]} -eq 0 ]]; then echo "all steps passed"
  else printf 'FAILED: %s\n' "${failed_steps[@]}"; fi
} >>"$REPORT"
echo "report: $REPORT"
[[ ${#failed_steps[@]} -eq 0 ]] || { printf 'run.sh: FAILED: %s\n' "${failed_steps[@]}" >&2; exit 1; }
