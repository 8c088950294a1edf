#!/usr/bin/env bash
# Sixth session of 2026-12-04, sixth call: the indexer decode's defaults after run fo (16-warp merge; a row takes a
# split per 4096 keys but at least 4 where its keys allow 2048-key splits, MIN_ROW_SPLITS) against the old ones
# (8-warp merge, splits of at least 4096 keys) at B64 (8K, 32K, 128K; HI 32 / 64) and B1 / B8 (8K, 32K, 128K; HI 64),
# MXFP8 query and cache, every case checked against the reference first; the indexer GPU tests first.
# usage: bash bench/run_h200_fp.sh [SECONDS] (default 420).
. bench/h200.sh
. bench/h200_call.sh fp ${1:-420}
export OMP_NUM_THREADS=1
indexer_gpu_tests
OLD='{"merge_warps": 8, "min_chunk": 4096, "min_row_splits": 1}'
indexer_decode b64_new 64 8192,32768,131072 32,64 '{}'
indexer_decode b64_old 64 8192,32768,131072 32,64 "$OLD"
indexer_decode small_new 1,8 8192,32768,131072 64 '{}'
indexer_decode small_old 1,8 8192,32768,131072 64 "$OLD"
for n in b64_new b64_old small_new small_old; do
  echo "-- $n"; python3 -m bench.result_rows indexer $R/$n/*.json 2>/dev/null | cut -c1-150
done
