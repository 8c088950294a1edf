#!/usr/bin/env bash
# Sixth device call of 2026-12-04's fifth session: does the order of a token's Top-K indices matter to sparse MLA
# decode, as the order of the slots did to KDA decode (runs fc, fd)? bench_sparse_mla.py --quick-decode with each
# token's indices in random order (as by score) and in ascending position, alternated twice.
# usage: bash bench/run_h200_ff.sh [SECONDS] (default 420), at commit 3379e00.
. bench/h200.sh
. bench/h200_call.sh ff ${1:-420}
export OMP_NUM_THREADS=1
for pass in 1 2; do
  for order in random position; do
    timeout 95 python3 bench/bench_sparse_mla.py --quick-decode --index-order $order --out $R/$order$pass > $R/mla_$order$pass.log 2>&1
    echo "== $order $pass rc=$? at $(( $(date +%s) - start )) s"; save
  done
done
for f in random1 position1 random2 position2; do echo "-- $f"; grep -E "^decode" $R/mla_$f.log | cut -c1-150; done
