#!/usr/bin/env bash
# Eighth session of 2026-12-04, seventh call: the KDA pool decode at B64 H32 / H96 with the kernel-time column, in
# the three slot orders (random permutation, random sets in slot order as the runtime's scheduler hands them over, the
# pool in order as a full fresh batch).
# usage: bash bench/run_h200_lg.sh [SECONDS] (default 300).
. bench/h200.sh
. bench/h200_call.sh lg ${1:-300}
export OMP_NUM_THREADS=1
for order in random sorted pool; do
  timeout 100 python3 bench/bench_kda_decode.py --quick --cases 64x32,64x96 --slot-order $order --out $R/$order \
    > $R/kda_$order.log 2>&1
  echo "== kda $order rc=$? at $(( $(date +%s) - start )) s"; save
done
for order in random sorted pool; do echo "-- $order"; tail -n 11 $R/kda_$order.log | cut -c1-170; done
