#!/usr/bin/env bash
# tests/distributed/check_recipe_dp.sh RECIPE — the same recipe command on 1 rank and under
# `mpirun -np 2` trains the same model (--batch-size is the global batch): one result line,
# the same accuracy and loss within rounding, and rank 0 alone prints
set -uo pipefail
recipe=$1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 SINTER_LOG=0
args=(--steps 150 --batch-size 64 --threads 1 --seed 3)
one=$("$recipe" "${args[@]}" 2>/dev/null | grep '^result:') || { echo "FAIL: 1 rank failed"; exit 1; }
two_all=$(timeout 300 mpirun --oversubscribe -np 2 "$recipe" "${args[@]}" 2>&1)
status=$?
echo "1 rank:  $one"
echo "$two_all" | sed 's/^/2 ranks: /'
fail=0
((status == 0)) || { echo "FAIL: mpirun exit $status"; fail=1; }
results=$(grep -c '^result:' <<<"$two_all")
((results == 1)) || { echo "FAIL: $results result lines (rank 0 alone prints)"; fail=1; }
headers=$(grep -c 'parameters, 150 steps of batch 64 over 2 ranks (data parallel)' <<<"$two_all")
((headers == 1)) || { echo "FAIL: $headers data-parallel header lines, want 1"; fail=1; }
field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p" <<<"$2" | head -1; }
two=$(grep '^result:' <<<"$two_all")
python3 - "$(field test_accuracy "$one")" "$(field test_accuracy "$two")" \
  "$(field train_loss "$one")" "$(field train_loss "$two")" <<'PY' || fail=1
import sys
acc1, acc2, loss1, loss2 = map(float, sys.argv[1:])
ok = abs(acc1 - acc2) <= 0.005 and abs(loss1 - loss2) <= 0.02 * loss1
print("accuracy %.4f vs %.4f, loss %.4f vs %.4f: %s" % (acc1, acc2, loss1, loss2,
      "same model" if ok else "FAIL: different models"))
sys.exit(0 if ok else 1)
PY
((fail == 0)) && echo "recipe data parallel: passed"
exit $fail
