#!/usr/bin/env bash
# tests/cli/check_info_and_cache.sh — `sinter info` and `sinter cache stats|clear` on a temp cache
set -euo pipefail
sinter="$1"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sinter-cli-cache.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

info=$(SINTER_NUM_THREADS=3 SINTER_CACHE_DIR="$tmp/cache" "$sinter" info)
echo "$info"
grep -Eq '^llvm: [0-9]+\.[0-9]+' <<<"$info" || { echo "no LLVM version line"; exit 1; }
grep -q '^threads: 3$' <<<"$info" || { echo "thread count missing or wrong"; exit 1; }
grep -q "^cache dir: $tmp/cache\$" <<<"$info" || { echo "cache dir missing"; exit 1; }
grep -Eq '^cuda driver: ([0-9]+\.[0-9]+|none \(.+\))$' <<<"$info" \
  || { echo "no cuda driver line"; exit 1; }
grep -Eq '^gpus: [0-9]+$' <<<"$info" || { echo "no gpu count"; exit 1; }
grep -q '^libdevice: ' <<<"$info" || { echo "no libdevice line"; exit 1; }
grep -Eq '^cudnn: ([0-9]+\.[0-9]+\.[0-9]+|none \(.+\))$' <<<"$info" || { echo "no cudnn line"; exit 1; }
# Where the toolkit's cuDNN 9 is installed, sinter finds it.
if ldconfig -p 2>/dev/null | grep -q 'libcudnn\.so\.9 '; then
  grep -Eq '^cudnn: 9\.[0-9]+\.[0-9]+$' <<<"$info" || { echo "cudnn installed but not found"; exit 1; }
fi
# Where the toolkit's libnvJitLink is installed, kernels are assembled with it; the driver's
# JIT when asked, and a wrong choice is named.
if ldconfig -p 2>/dev/null | grep -q 'libnvJitLink\.so\.1[23] '; then
  grep -q '^ptx assembler: libnvJitLink' <<<"$info" || { echo "libnvJitLink not used"; exit 1; }
fi
SINTER_PTX_ASSEMBLER=driver "$sinter" info | grep -q "^ptx assembler: the driver's JIT" ||
  { echo "SINTER_PTX_ASSEMBLER=driver not honoured"; exit 1; }
SINTER_PTX_ASSEMBLER=nvcc "$sinter" info | grep -q "^ptx assembler: none (.*SINTER_PTX_ASSEMBLER='nvcc'" ||
  { echo "a wrong SINTER_PTX_ASSEMBLER is not named"; exit 1; }
# A driver path that is wrong is named, with what to do.
nodrv=$(SINTER_LIBCUDA="$tmp/no-such-libcuda.so" "$sinter" info)
grep -q "^cuda driver: none (cannot load $tmp/no-such-libcuda.so" <<<"$nodrv" \
  || { echo "bad SINTER_LIBCUDA not reported"; exit 1; }
grep -q '^gpus: 0$' <<<"$nodrv" || { echo "gpus without a driver"; exit 1; }
grep -q '^cpu: ' <<<"$info" || { echo "no cpu line"; exit 1; }
if SINTER_NUM_THREADS=zero "$sinter" info >/dev/null 2>"$tmp/err"; then
  echo "bad SINTER_NUM_THREADS accepted"; exit 1
fi
grep -q "SINTER_NUM_THREADS='zero'" "$tmp/err" || { echo "bad SINTER_NUM_THREADS not named"; exit 1; }

# Two fake entries and a leftover temp file; stats counts the entries, clear removes all three.
mkdir -p "$tmp/cache"
head -c 100 /dev/zero > "$tmp/cache/0123456789abcdef0123456789abcdef.sko"
head -c 28 /dev/zero > "$tmp/cache/fedcba9876543210fedcba9876543210.sko"
head -c 5 /dev/zero > "$tmp/cache/fedcba9876543210fedcba9876543210.sko.tmp-1-abc"
echo "hits=1 misses=2 corrupt=0 compiled=2" > "$tmp/cache/last-run.txt"
stats=$(SINTER_CACHE_DIR="$tmp/cache" "$sinter" cache stats)
echo "$stats"
grep -q "^dir: $tmp/cache\$" <<<"$stats" || { echo "stats: no dir"; exit 1; }
grep -q '^entries: 2$' <<<"$stats" || { echo "stats: wrong entries"; exit 1; }
grep -q '^bytes: 128$' <<<"$stats" || { echo "stats: wrong bytes"; exit 1; }
grep -q '^last run: hits=1 misses=2 corrupt=0 compiled=2$' <<<"$stats" \
  || { echo "stats: no last run"; exit 1; }
cleared=$(SINTER_CACHE_DIR="$tmp/cache" "$sinter" cache clear)
echo "$cleared"
[ "$cleared" = "removed 2 entries from $tmp/cache" ] || { echo "clear: wrong message"; exit 1; }
[ -z "$(ls "$tmp/cache" | grep -v '^last-run.txt$' || true)" ] || { echo "clear left files"; exit 1; }
grep -q '^entries: 0$' <<<"$(SINTER_CACHE_DIR="$tmp/cache" "$sinter" cache stats)" \
  || { echo "entries remain after clear"; exit 1; }

for bad in "cache" "cache nope" "cache stats extra"; do
  # shellcheck disable=SC2086
  if "$sinter" $bad >/dev/null 2>"$tmp/err"; then echo "'sinter $bad' accepted"; exit 1; fi
  status=0; "$sinter" $bad >/dev/null 2>&1 || status=$?
  [ "$status" -eq 2 ] || { echo "'sinter $bad' exited $status, want 2"; exit 1; }
  grep -q 'usage: sinter cache stats|clear' "$tmp/err" || { echo "'sinter $bad': no usage"; exit 1; }
done
echo "sinter info and cache: ok"
