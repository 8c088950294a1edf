#!/usr/bin/env bash
# Seventh session of 2026-12-04, first call: the decode merge folds up to 8192 entries a step (four sets of 2048 in one
# search at B64, where there were three searches). The indexer GPU tests (the chunked path's too: it shares the merge),
# then the indexer decode bench at B64 (8K / 32K / 128K, HI 32 / 64) and at B1 / B8 (HI 64), MXFP8, the new default
# against merge_sets 2 (one set a step, the code before), and at B1 / B8 merge_sets 8 and 2048-key splits.
# usage: bash bench/run_h200_ga.sh [SECONDS] (default 480).
. bench/h200.sh
. bench/h200_call.sh ga ${1:-480}
export OMP_NUM_THREADS=1
indexer_gpu_tests
indexer_decode b64 64 8192,32768,131072 32,64
indexer_decode b64_sets2 64 8192,32768,131072 32,64 '{"merge_sets": 2}'
indexer_decode small 1,8 8192,32768,131072 64
indexer_decode small_sets2 1,8 8192,32768,131072 64 '{"merge_sets": 2}'
indexer_decode small_sets8 1,8 8192,32768,131072 64 '{"merge_sets": 8}'
indexer_decode small_split2048 1,8 8192,32768,131072 64 '{"split_keys": 2048}'
for n in b64 b64_sets2 small small_sets2 small_sets8 small_split2048; do
  echo "-- $n"; python3 -m bench.result_rows indexer $R/$n/*.json 2>/dev/null | cut -c1-150
done
