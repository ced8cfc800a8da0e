#!/usr/bin/env bash
# tests/distributed/check_recipe_reshard.sh MLP SINTER — a recipe run interrupted with
# --stop-after and resumed on another number of ranks ends where the uninterrupted run ends:
# 2 ZeRO-2 ranks -> 1 process, and 1 process -> 2 ZeRO-1 ranks; the ZeRO checkpoint is a shard
# file per rank plus its index, and `sinter checkpoint export` makes it one safetensors file
# (read back with the reference `safetensors` package when SINTER_INTEROP_PYTHON names one)
set -uo pipefail
recipe=$1 sinter=$2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 SINTER_LOG=0
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
args=(--steps 60 --batch-size 64 --threads 1 --seed 3 --hidden 64)
mpi=(timeout 300 mpirun --oversubscribe -np 2)
fail=0
result() { grep '^result:' | head -1; }
want=$("$recipe" "${args[@]}" 2>/dev/null | result)
echo "uninterrupted (1 rank): $want"

"${mpi[@]}" "$recipe" "${args[@]}" --zero 2 --checkpoint-dir "$dir/a" --stop-after 30 >/dev/null 2>&1 ||
  { echo "FAIL: 2 ranks with --stop-after 30"; fail=1; }
ls "$dir/a"
for r in 0 1; do
  [[ -f $dir/a/mlp.step30.rank$r-of-2.safetensors ]] || { echo "FAIL: no shard of rank $r"; fail=1; }
done
a=$("$recipe" "${args[@]}" --checkpoint-dir "$dir/a" --resume 2>&1 | tee "$dir/a.log" | result)
grep -q "resumed from .* at step 30" "$dir/a.log" || { echo "FAIL: 2 -> 1 did not resume at 30"; fail=1; }
echo "2 ZeRO-2 ranks -> 1:   $a"

"$recipe" "${args[@]}" --checkpoint-dir "$dir/b" --stop-after 30 >/dev/null 2>&1 ||
  { echo "FAIL: 1 rank with --stop-after 30"; fail=1; }
b=$("${mpi[@]}" "$recipe" "${args[@]}" --zero 1 --checkpoint-dir "$dir/b" --resume 2>&1 | result)
echo "1 -> 2 ZeRO-1 ranks:   $b"

field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p" <<<"$2" | head -1; }
python3 - "$(field test_accuracy "$want")" "$(field train_loss "$want")" \
  "$(field test_accuracy "$a")" "$(field train_loss "$a")" \
  "$(field test_accuracy "$b")" "$(field train_loss "$b")" <<'PY' || fail=1
import sys
acc, loss, *rest = map(float, sys.argv[1:])
ok = True
for name, (a, l) in zip(["2 -> 1", "1 -> 2"], zip(rest[::2], rest[1::2])):
    same = abs(a - acc) <= 0.005 and abs(l - loss) <= 0.02 * loss
    print("%s: accuracy %.4f vs %.4f, loss %.4f vs %.4f: %s" % (name, a, acc, l, loss,
          "the same run" if same else "FAIL: a different run"))
    ok &= same
sys.exit(0 if ok else 1)
PY

"$sinter" checkpoint export "$dir/a/mlp.safetensors" "$dir/whole.safetensors" ||
  { echo "FAIL: export"; fail=1; }
if [[ -n ${SINTER_INTEROP_PYTHON:-} ]]; then
  "$SINTER_INTEROP_PYTHON" - "$dir/whole.safetensors" <<'PY' || fail=1
import sys
from safetensors.numpy import load_file
t = load_file(sys.argv[1])
params = {k[6:]: v for k, v in t.items() if k.startswith("model.")}
ok = params and all(t["optimizer.m." + k].shape == v.shape and t["optimizer.v." + k].shape == v.shape
                    for k, v in params.items())
print("export: %d tensors, every optimizer state whole: %s" % (len(t), "yes" if ok else "FAIL"))
sys.exit(0 if ok else 1)
PY
fi
((fail == 0)) && echo "recipe resharding: passed"
exit $fail
