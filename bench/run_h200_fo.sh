#!/usr/bin/env bash
# Sixth session of 2026-12-04, fifth call: the indexer decode's new defaults (16-warp merge, splits of at least
# max(2048, sqrt(keys x 532)) keys) against the old ones (8-warp merge, splits of at least 4096 keys, no balance) at
# B64 (8K, 32K, 128K keys; HI 32 / 64) and at B1 / B8 (32K, 128K; HI 64), MXFP8 query and cache, every case checked
# against the reference first; the indexer GPU tests first.
# usage: bash bench/run_h200_fo.sh [SECONDS] (default 420). A record: the sqrt balance lost at B1 / B8 and 128K keys and
# was replaced by MIN_ROW_SPLITS (run fp).
. bench/h200.sh
. bench/h200_call.sh fo ${1:-420}
export OMP_NUM_THREADS=1
indexer_gpu_tests
OLD='{"merge_warps": 8, "min_chunk": 4096, "balance_keys": 0}'
indexer_decode b64_new 64 8192,32768,131072 32,64 '{}'
indexer_decode b64_old 64 8192,32768,131072 32,64 "$OLD"
indexer_decode small_new 1,8 32768,131072 64 '{}'
indexer_decode small_old 1,8 32768,131072 64 "$OLD"
for n in b64_new b64_old small_new small_old; do
  echo "-- $n"; python3 -m bench.result_rows indexer $R/$n/*.json 2>/dev/null | cut -c1-160
done
