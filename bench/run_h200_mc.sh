#!/usr/bin/env bash
# Ninth session of 2026-12-04, third call: the KDA pool decode's kernel time at B >= 64 with one input set replayed
# back to back (--min-sets 1, the old bench for B64 H96 and B256) against two sets alternating (the new default), in
# one call; then the sorted and pool slot orders with two sets.
# usage: bash bench/run_h200_mc.sh [SECONDS] (default 300).
. bench/h200.sh
. bench/h200_call.sh mc ${1:-300}
export OMP_NUM_THREADS=1
for run in "random 1" "random 2" "sorted 2" "pool 2"; do
  set -- $run
  timeout 100 python3 bench/bench_kda_decode.py --quick --cases 64x32,64x96,256x32,256x96 --slot-order $1 \
    --min-sets $2 --out $R/$1_$2 > $R/kda_$1_$2.log 2>&1
  echo "== kda $1 min-sets $2 rc=$? at $(( $(date +%s) - start )) s"; save
done
for run in random_1 random_2 sorted_2 pool_2; do echo "-- $run"; tail -n 13 $R/kda_$run.log | grep -v "^ *$" | cut -c1-220; done
