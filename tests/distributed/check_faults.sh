#!/usr/bin/env bash
# tests/distributed/check_faults.sh PROBE — a rank that stalls or dies ends a 2-rank job within
# the collective timeout, with a message naming the rank, the collective and the step; ranks
# that stop inside a collective are named too
set -uo pipefail
probe=$1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fail=0
run() { # name, limit in seconds, then the probe's arguments (RANKS: how many, default 2)
  local name=$1 limit=$2
  shift 2
  local start=$SECONDS
  timeout 120 mpirun --oversubscribe -np "${RANKS:-2}" "$probe" "$@" >"$tmp/$name.log" 2>&1
  local status=$? took=$((SECONDS - start))
  echo "$name: exit $status after ${took}s"
  sed 's/^/  | /' "$tmp/$name.log" | grep -v '^  | *$' | head -20
  if ((status == 0 || status == 124)); then
    echo "FAIL $name: the job should have ended with an error (exit $status)"
    fail=1
  fi
  if ((took > limit)); then
    echo "FAIL $name: took ${took}s, more than ${limit}s"
    fail=1
  fi
}
expect() { # name, pattern
  if grep -Eq "$2" "$tmp/$1.log"; then echo "ok $1: /$2/"; else
    echo "FAIL $1: no /$2/ in its output"
    fail=1
  fi
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Healthy job: both ranks finish.
timeout 60 mpirun --oversubscribe -np 2 "$probe" --steps 5 >"$tmp/healthy.log" 2>&1 ||
  { echo "FAIL healthy: exit $?"; cat "$tmp/healthy.log"; fail=1; }
expect healthy "rank 0 done after 5 steps"
expect healthy "rank 1 done after 5 steps"

# Rank 1 sleeps 60 s before step 3's all_reduce; the limit is 2 s.
SINTER_COLLECTIVE_TIMEOUT=2 run stall 30 --steps 5 --stall 1:3:60
expect stall "rank 0 waited [0-9.]+ s in all_reduce #3 \(step 3, 1000 f32 sum\): rank 1 never arrived"

# Rank 1 is killed before step 3's all_reduce.
SINTER_COLLECTIVE_TIMEOUT=2 run die 30 --steps 5 --die 1:3
expect die "rank 1|process rank 1"
# The rank left waiting names the collective and the step it was in.
expect die "rank 0 was stopped while waiting in all_reduce #3 \(step 3, 1000 f32 sum\)"
# Of 4 ranks, 1 and 2 enter step 3's all_reduce and stop there (SIGSTOP): the waiting ranks
# name both, not "every rank arrived".
RANKS=4 SINTER_COLLECTIVE_TIMEOUT=2 run stopped-inside 60 --steps 5 --stop-inside 1,2:3
expect stopped-inside "rank [03] waited [0-9.]+ s in all_reduce #3 \(step 3, 1000 f32 sum\): ranks 1, 2 arrived but stopped inside it"
((fail == 0)) && echo "fault tests passed"
exit $fail
