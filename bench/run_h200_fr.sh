#!/usr/bin/env bash
# Sixth session of 2026-12-04, eighth call: long rows split by sqrt(keys x 250) (MERGE_BALANCE_KEYS, fitted to run
# fq's small-batch figures) against the same code with the balance off, at B1 / B8 (32K, 128K keys) and B64 (128K),
# HI 64, MXFP8 query and cache, every case checked against the reference first; the indexer GPU tests first.
# usage: bash bench/run_h200_fr.sh [SECONDS] (default 300). A record: the balance gained 1-2% and was taken back
# (bench/README.md).
. bench/h200.sh
. bench/h200_call.sh fr ${1:-300}
export OMP_NUM_THREADS=1
indexer_gpu_tests
indexer_decode small_balanced 1,8 32768,131072 64
indexer_decode small_unbalanced 1,8 32768,131072 64 '{"balance_keys": 0}'
indexer_decode b64_balanced 64 131072 64
for n in small_balanced small_unbalanced b64_balanced; do
  echo "-- $n"; python3 -m bench.result_rows indexer $R/$n/*.json 2>/dev/null | cut -c1-150
done
