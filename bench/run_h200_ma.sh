#!/usr/bin/env bash
# Ninth session of 2026-12-04, first call: the KDA pool decode at B >= 64 with a copy kernel of the step's own state
# bytes timed next to it (kernel time), in a random and the scheduler's slot order; the sparse MLA decode defaults on
# 16 warps (64 accumulator registers a thread instead of 128).
# usage: bash bench/run_h200_ma.sh [SECONDS] (default 420).
. bench/h200.sh
. bench/h200_call.sh ma ${1:-420}
export OMP_NUM_THREADS=1
for order in random sorted; do
  timeout 150 python3 bench/bench_kda_decode.py --quick --cases 64x32,64x96,256x32,256x96 --slot-order $order \
    --out $R/$order > $R/kda_$order.log 2>&1
  echo "== kda $order rc=$? at $(( $(date +%s) - start )) s"; save
done
timeout $(left) python3 bench/bench_sparse_mla.py --quick-decode --decode-warps 16 --out $R/mla > $R/mla.log 2>&1
echo "== sparse mla rc=$? at $(( $(date +%s) - start )) s"; save
save_caches
for order in random sorted; do echo "-- $order"; tail -n 21 $R/kda_$order.log | grep -v "^ *$" | cut -c1-200; done
sparse_mla_rows $R/mla/sparse_mla.json 2>/dev/null | cut -c1-160
