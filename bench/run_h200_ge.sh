#!/usr/bin/env bash
# Seventh session of 2026-12-04, fifth call: the FP8 tile loop unrolled by two (the prefetched scale words no longer
# waited on mid-tile). The indexer GPU tests (with the chunked path's), then the
# indexer decode bench at B64 (8K / 32K / 128K, HI 32 / 64) and at B1 / B8 (HI 64), MXFP8.
# usage: bash bench/run_h200_ge.sh [SECONDS] (default 400).
. bench/h200.sh
. bench/h200_call.sh ge ${1:-400}
export OMP_NUM_THREADS=1
indexer_gpu_tests
indexer_decode b64 64 8192,32768,131072 32,64
indexer_decode small 1,8 8192,32768,131072 64
for n in b64 small; do echo "-- $n"; python3 -m bench.result_rows indexer $R/$n/*.json 2>/dev/null | cut -c1-240; done
