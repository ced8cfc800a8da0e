# tests/bench/common.sh — what the benchmark drivers (run.sh, train_run.sh) share: the peers'
# venv, the sinter benchmark program, pinning to THREADS cores, the load warning, the results
# folder and a private kernel cache. Source it after setting ROOT, BENCH, BUILD_DIR, THREADS and
# NAME (the driver's name, for messages).

die() { echo "$NAME: error: $*" >&2; exit 1; }

# The Python peers' venv (built once); sets PY.
bench_peers_venv() {
  bash "$BENCH/setup.sh"
  PY="$ROOT/build-bench/venv/bin/python"
}

# bench_program TARGET VAR: tests/bench/TARGET in $VAR — a prebuilt one the user named there, or
# built now in BUILD_DIR.
bench_program() {
  local target=$1 var=$2
  if [[ -n ${!var:-} ]]; then
    [[ -x ${!var} ]] || die "$var=${!var} is not an executable"
  elif [[ -f "$BUILD_DIR/build.ninja" ]] &&
       grep -q "^tests/bench/$target:" <<<"$(ninja -C "$BUILD_DIR" -t targets all 2>/dev/null)"; then
    echo "$NAME: building tests/bench/$target in $BUILD_DIR"
    ninja -C "$BUILD_DIR" -j1 "tests/bench/$target" || die "building $target failed"
    printf -v "$var" '%s' "$BUILD_DIR/tests/bench/$target"
  else
    die "$BUILD_DIR has no target tests/bench/$target. Configure a build first" \
        "(meson setup $BUILD_DIR) with subdir('bench') in tests/meson.build, or point" \
        "$var at a prebuilt $target."
  fi
}

# Sets PIN (fewer threads than cores: pin every peer to that many cores; the Python peers do it
# for themselves) and warns when other work would skew the timings.
bench_pin_and_check_load() {
  PIN=()
  if (( THREADS < $(nproc) )); then
    PIN=(taskset -c "0-$((THREADS - 1))")
  fi
  local load
  load=$(cut -d' ' -f1 /proc/loadavg)
  if awk -v l="$load" 'BEGIN { exit !(l > 0.5) }'; then
    echo "$NAME: WARNING: load average $load: other work on this machine skews the timings," \
         "multi-threaded ones most" >&2
  fi
}

# bench_results PREFIX: sets OUT (build-bench/results/PREFIX<time>) and CACHE (a private kernel
# cache, removed on exit).
bench_results() {
  OUT="$ROOT/build-bench/results/$1$(date +%Y%m%d-%H%M%S)"
  mkdir -p "$OUT"
  CACHE="$(mktemp -d "${TMPDIR:-/tmp}/sinter-bench-cache.XXXXXX")"
  trap 'rm -rf "$CACHE"' EXIT
}

# record FILE COMMAND...: appends the command, shell-quoted, to FILE.
record() {
  local file=$1
  shift
  printf '%q ' "$@" | sed 's/ $//' >>"$file"
  echo >>"$file"
}
