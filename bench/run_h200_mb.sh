#!/usr/bin/env bash
# Ninth session of 2026-12-04, second call: the whole GPU suite (the indexer's -1 padding now stored by one helper in
# every kernel), then the KDA pool decode at B >= 64 with kernel time as the median of at least 20 profiled calls
# (with its spread), against the 1 GiB copy kernel and a copy kernel of the step's own bytes, three slot orders.
# usage: bash bench/run_h200_mb.sh [SECONDS] (default 420).
. bench/h200.sh
. bench/h200_call.sh mb ${1:-420}
export OMP_NUM_THREADS=1
timeout -s INT -k 15 150 python3 -m pytest -q -rfE -p no:cacheprovider -n 14 -m gpu tests > $R/gpu_all.log 2>&1
echo "== gpu suite rc=$? at $(( $(date +%s) - start )) s"; test_summary $R/gpu_all.log; save
for order in random sorted pool; do
  timeout 120 python3 bench/bench_kda_decode.py --quick --cases 64x32,64x96,256x32,256x96 --slot-order $order \
    --out $R/$order > $R/kda_$order.log 2>&1
  echo "== kda $order rc=$? at $(( $(date +%s) - start )) s"; save
done
save_caches
for order in random sorted pool; do echo "-- $order"; tail -n 21 $R/kda_$order.log | grep -v "^ *$" | grep -v "bv16" | cut -c1-220; done
