#!/usr/bin/env bash
# Fourth device call of 2026-12-04's fifth session: run fc found B64 H32 at 86% of copy with the slots in pool order
# against 82-83% with a random permutation. Here the quick bench under the three slot orders (random, random sets
# with rows in ascending slot order, pool order), alternated twice: does sorting a batch's rows by slot recover it?
# usage: bash bench/run_h200_fd.sh [SECONDS] (default 300).
. bench/h200.sh
. bench/h200_call.sh fd ${1:-300}
export OMP_NUM_THREADS=1
for pass in 1 2; do
  for order in random sorted pool; do
    timeout 80 python3 bench/bench_kda_decode.py --quick --slot-order $order --out $R/$order$pass > $R/kda_$order$pass.log 2>&1
    echo "== $order $pass rc=$? at $(( $(date +%s) - start )) s"; save
  done
done
for f in random1 sorted1 pool1 random2 sorted2 pool2; do echo "-- $f"; grep -E "^B(64|256) " $R/kda_$f.log | grep -v "bv16_w1\|fla" | cut -c1-100; done
