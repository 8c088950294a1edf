#!/usr/bin/env bash
# Ninth device call of 2026-12-04's fifth session: sparse MLA decode (twice) and indexer decode timed as CUDA-graph
# replays next to the eager times (runs ff-fh: eager decode times moved up to 2.5x with the SM clock at 1980 MHz).
# usage: bash bench/run_h200_fi.sh [SECONDS] (default 300).
. bench/h200.sh
. bench/h200_call.sh fi ${1:-300}
export OMP_NUM_THREADS=1
for pass in 1 2; do
  timeout 60 python3 bench/bench_sparse_mla.py --quick-decode --out $R/mla$pass > $R/mla$pass.log 2>&1
  echo "== sparse mla $pass rc=$? at $(( $(date +%s) - start )) s"; save
done
timeout $(( $(left) - 5 )) python3 bench/bench_indexer.py --decode-only --decode-kernels select --contexts 8192,32768,131072 --heads 32,64 --caches mxfp8,bf16 --out $R/indexer > $R/indexer.log 2>&1
echo "== indexer rc=$? at $(( $(date +%s) - start )) s"; save
for p in 1 2; do echo "-- sparse mla $p"; grep -E "^decode" $R/mla$p.log | cut -c1-170; done
grep -E "^decode" $R/indexer.log | cut -c1-160
