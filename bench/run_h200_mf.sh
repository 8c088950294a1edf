#!/usr/bin/env bash
# Ninth session of 2026-12-04, sixth call: bench_kda_decode.py's kernel-time column on graphs of at least 64 calls
# (bench/common.replay_kernel_ms; the 1 GiB copy kernel and the same-size copy timed alike) at every B >= 64 shape,
# random and sorted slot orders.
# usage: bash bench/run_h200_mf.sh [SECONDS] (default 200).
. bench/h200.sh
. bench/h200_call.sh mf ${1:-200}
export OMP_NUM_THREADS=1
for order in random sorted; do
  timeout 80 python3 bench/bench_kda_decode.py --quick --cases 64x32,64x96,256x32,256x96 --slot-order $order \
    --out $R/$order > $R/kda_$order.log 2>&1
  echo "== kda $order rc=$? at $(( $(date +%s) - start )) s"; save
done
for order in random sorted; do echo "-- $order"; tail -n 21 $R/kda_$order.log | grep -v "^ *$" | grep -v "bv16" | cut -c1-220; done
