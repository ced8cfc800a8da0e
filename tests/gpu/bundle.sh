#!/usr/bin/env bash
# tests/gpu/bundle.sh — builds a folder that runs sinter's GPU tests, recipes and benchmarks on a
# machine with only the NVIDIA driver and CUDA libraries (no LLVM, no meson, no compiler).
#
# Usage: tests/gpu/bundle.sh [--pack] [OUT_DIR]      (default: bundle/, git-ignored)
#   --pack  also writes build-gpu/gpu-bundle.tar.xz (about 52 MB), the one file to hand the
#           device tool as `carry`; there: mkdir b && tar -C b -xJf build-gpu/gpu-bundle.tar.xz
# The folder holds bin/ (sinter, sinter_tests, recipes, benchmark programs), lib/ (libsinter.so
# with LLVM linked in statically, libdevice.10.bc, and the non-base shared libraries the
# programs need, e.g. OpenBLAS), data/ (Fashion-MNIST and a text corpus), the bench scripts and
# run.sh (which puts lib/ on LD_LIBRARY_PATH). Pack it for the device tool with: tar -C bundle -cJf gpu-bundle.tar.xz .
set -euo pipefail
PACK=0
if [[ ${1:-} == --pack ]]; then
  PACK=1
  shift
fi
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT="$(realpath -m "${1:-$ROOT/bundle}")"
BUILD="$ROOT/build-gpu"
die() { echo "bundle.sh: error: $*" >&2; exit 1; }
command -v meson >/dev/null || die "meson is missing: run .ci/setup first"
# Static LLVM needs zstd's development files (LLVM's Support library compresses with it).
if ! dpkg -s libzstd-dev >/dev/null 2>&1; then
  apt-get install -y libzstd-dev >/dev/null || die "cannot install libzstd-dev"
fi

libdevice=""
for candidate in "${SINTER_LIBDEVICE:-}" "${CUDA_HOME:-/usr/local/cuda}/nvvm/libdevice/libdevice.10.bc" \
  /usr/lib/nvidia-cuda-toolkit/libdevice/libdevice.10.bc; do
  [[ -n $candidate && -f $candidate ]] && { libdevice=$candidate; break; }
done
[[ -n $libdevice ]] || die "libdevice.10.bc not found: install the CUDA toolkit or set SINTER_LIBDEVICE"

# 1. A release build whose llvm-config answers for static libraries.
native="$BUILD/native.ini"
mkdir -p "$BUILD"
printf "[binaries]\nllvm-config-19 = '%s'\n" "$ROOT/tests/gpu/llvm-config-static" > "$native"
if [[ ! -f $BUILD/build.ninja ]]; then
  meson setup "$BUILD" "$ROOT" --native-file "$native" --buildtype=release \
    -Dcpp_link_args=-Wl,--gc-sections >/dev/null
fi
ninja -C "$BUILD" sinter tests/sinter_tests recipes/mlp recipes/vit recipes/gpt recipes/distill \
  tests/bench/train_step tests/bench/amp_parity
if grep -q libLLVM <<<"$(ldd "$BUILD/libsinter.so")"; then
  die "libsinter.so still needs libLLVM.so: the static LLVM link did not take"
fi

# 2. The folder: programs, their libraries, libdevice, data, scripts.
rm -rf "$OUT"
mkdir -p "$OUT/bin" "$OUT/lib" "$OUT/data/fashion-mnist" "$OUT/bench"
cp "$BUILD/sinter" "$BUILD/tests/sinter_tests" "$BUILD/recipes/mlp" "$BUILD/recipes/vit" \
  "$BUILD/recipes/gpt" "$BUILD/recipes/distill" "$BUILD/tests/bench/train_step" \
  "$BUILD/tests/bench/amp_parity" "$OUT/bin/"
cp "$BUILD/libsinter.so" "$OUT/lib/"
cp "$libdevice" "$OUT/lib/libdevice.10.bc"
strip --strip-unneeded "$OUT"/bin/* "$OUT/lib/libsinter.so"
# Shared libraries outside glibc and libstdc++ travel along (OpenBLAS, gfortran, zlib, ...).
for program in "$OUT"/bin/* "$OUT/lib/libsinter.so"; do
  ldd "$program" | awk '/=> \// {print $3}'
done | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|ld-linux*|libstdc++.so*|libgcc_s.so*) ;;
    libsinter.so) ;;
    *) cp -L "$lib" "$OUT/lib/" ;;
  esac
done
cp /usr/share/datasets/fashion-mnist/*.gz "$OUT/data/fashion-mnist/" 2>/dev/null ||
  die "Fashion-MNIST missing: apt-get install dataset-fashion-mnist"
find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' -exec cat {} + \
  > "$OUT/data/fortunes.txt"
[[ -s $OUT/data/fortunes.txt ]] || die "no fortunes: apt-get install fortunes"
cp "$ROOT"/tests/bench/*.py "$OUT/bench/"
cp "$ROOT/tests/gpu/run.sh" "$OUT/run.sh"
cp "$ROOT/tests/gpu/compile_stages.sh" "$OUT/compile_stages.sh"
cp "$ROOT/tests/gpu/short.sh" "$OUT/short.sh"
cp "$ROOT/tests/gpu/max_batch_check.sh" "$OUT/max_batch_check.sh"
cp "$ROOT/tests/cli/check_cuda_exit.sh" "$OUT/"
git -C "$ROOT" rev-parse HEAD > "$OUT/COMMIT" 2>/dev/null || echo unknown > "$OUT/COMMIT"
du -sh "$OUT"
if [[ $PACK == 1 ]]; then
  tar -C "$OUT" -cf - . | xz -T2 -6 > "$BUILD/gpu-bundle.tar.xz.tmp"
  mv "$BUILD/gpu-bundle.tar.xz.tmp" "$BUILD/gpu-bundle.tar.xz"
  ls -l "$BUILD/gpu-bundle.tar.xz"
fi
