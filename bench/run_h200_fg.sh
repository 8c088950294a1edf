#!/usr/bin/env bash
# Seventh device call of 2026-12-04's fifth session: run ff saw the same sparse MLA decode config move by up to 1.8x
# between passes. Is it where the cache pages lie? bench_sparse_mla.py --quick-decode with the page table shuffled
# (the default) and in order, alternated three times.
# usage: bash bench/run_h200_fg.sh [SECONDS] (default 300).
. bench/h200.sh
. bench/h200_call.sh fg ${1:-300}
export OMP_NUM_THREADS=1
for pass in 1 2 3; do
  for order in shuffled in-order; do
    timeout 60 python3 bench/bench_sparse_mla.py --quick-decode --page-order $order --out $R/$order$pass > $R/mla_$order$pass.log 2>&1
    echo "== $order $pass rc=$? at $(( $(date +%s) - start )) s"; save
  done
done
for f in shuffled1 in-order1 shuffled2 in-order2 shuffled3 in-order3; do echo "-- $f"; grep -E "^decode" $R/mla_$f.log | grep default | cut -c1-120; done
