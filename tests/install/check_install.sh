#!/usr/bin/env bash
# tests/install/check_install.sh BUILDDIR — sinter as an installed library (docs/install.md):
# `meson install` into a temporary folder, then, with nothing of the build tree on any path, an
# outside program built with pkg-config and with CMake, the installed CLI, the installed notebook
# kernel through jupyter_client, and a project that takes sinter as a meson subproject (which
# must build and register none of sinter's tests).
set -uo pipefail
build="$(cd "$1" && pwd)"
here="$(cd "$(dirname "$0")" && pwd)"
source_root="$(cd "$here/../.." && pwd)"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/sinter-install.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
status=0
fail() { echo "FAIL: $*"; status=1; }
option() {
  meson introspect "$build" --buildoptions |
    python3 -c "import json, sys; print([o['value'] for o in json.load(sys.stdin) if o['name'] == '$1'][0])"
}
meson install -C "$build" --no-rebuild --quiet --destdir "$tmp/stage" >"$tmp/install.log" 2>&1 ||
  { cat "$tmp/install.log"; echo "FAIL: meson install"; exit 1; }
prefix="$(option prefix)"
libdir="$(option libdir)"
root="$tmp/stage$prefix"
unset LD_LIBRARY_PATH
for f in include/sinter/dsl/sinter.hpp include/sinter/jit/notebook/prelude.hpp \
  "$libdir/libsinter.so" "$libdir/pkgconfig/sinter.pc" "$libdir/cmake/sinter/sinterConfig.cmake" \
  bin/sinter; do
  [[ -e $root/$f ]] || fail "meson install did not install $f"
done

# pkg-config (sinter.pc is relocatable: its prefix is relative to the folder it is in).
flags="$(PKG_CONFIG_PATH="$root/$libdir/pkgconfig" pkg-config --cflags --libs sinter)"
include="$(grep -o -- '-I[^ ]*include/sinter' <<<"$flags" | head -1)"
[[ -n $include && $(realpath "${include#-I}") == $(realpath "$root/include/sinter") ]] ||
  fail "pkg-config gives no include folder of the install: $flags"
# shellcheck disable=SC2086
if g++ "$here/outside.cpp" $flags -Wl,-rpath,"$root/$libdir" -o "$tmp/outside-pkgconfig" \
  >"$tmp/pc.log" 2>&1; then
  out="$("$tmp/outside-pkgconfig" 2>&1)" || fail "the pkg-config program failed: $out"
  [[ $out == *"outside: loss "* ]] || fail "the pkg-config program printed: $out"
  echo "pkg-config: $(grep '^outside' <<<"$out")"
else
  head -30 "$tmp/pc.log"
  fail "the outside program does not compile with \$(pkg-config --cflags --libs sinter)"
fi

# CMake: find_package(sinter) and the sinter::sinter target.
if cmake -S "$here/cmake" -B "$tmp/cmake" -DCMAKE_PREFIX_PATH="$root" >"$tmp/cmake.log" 2>&1 &&
  cmake --build "$tmp/cmake" >>"$tmp/cmake.log" 2>&1; then
  out="$("$tmp/cmake/outside" 2>&1)" || fail "the CMake program failed: $out"
  [[ $out == *"outside: loss "* ]] || fail "the CMake program printed: $out"
  echo "cmake: $(grep '^outside' <<<"$out")"
else
  tail -30 "$tmp/cmake.log"
  fail "the outside program does not build with find_package(sinter)"
fi

# The installed CLI finds the installed library (its rpath), not the build tree's.
if out="$("$root/bin/sinter" info 2>&1)"; then
  resolved="$(ldd "$root/bin/sinter" | grep 'libsinter\.so')"
  [[ $resolved == *"$root/"* ]] || fail "bin/sinter loads another libsinter: $resolved"
else
  fail "the installed sinter does not run: $out"
fi

# The installed kernel: headers and library from the prefix, its prelude precompiled into the
# cache on first start.
if [[ -x $root/bin/sinter-kernel ]]; then
  SINTER_CACHE_DIR="$tmp/cache" /usr/bin/python3 "$here/check_installed_kernel.py" \
    "$root/bin/sinter" || fail "the installed notebook kernel"
  ls "$tmp/cache"/kernel-prelude-*/prelude.pch >/dev/null 2>&1 ||
    fail "the installed kernel wrote no prelude into the cache"
fi

# A meson project with sinter as its subproject: sinter's tests and benchmarks are not there.
mkdir -p "$tmp/super/subprojects"
ln -s "$source_root" "$tmp/super/subprojects/sinter"
cat >"$tmp/super/meson.build" <<'MESON'
project('super', 'cpp', default_options : ['cpp_std=c++20'])
sinter = dependency('sinter', fallback : ['sinter', 'sinter_dep'])
executable('outside', 'outside.cpp', dependencies : sinter)
MESON
cp "$here/outside.cpp" "$tmp/super/"
if meson setup "$tmp/super-build" "$tmp/super" --force-fallback-for=sinter >"$tmp/super.log" 2>&1; then
  tests="$(meson introspect "$tmp/super-build" --tests | python3 -c 'import json, sys; print(len(json.load(sys.stdin)))')"
  [[ $tests == 0 ]] || fail "a project with sinter as a subproject registers $tests of its tests"
  targets="$(meson introspect "$tmp/super-build" --targets)"
  [[ $targets != *sinter_tests* ]] || fail "a project with sinter as a subproject builds sinter_tests"
  echo "subproject: configured, $tests tests of sinter registered"
else
  tail -20 "$tmp/super.log"
  fail "meson setup of a project with sinter as a subproject"
fi
exit $status
