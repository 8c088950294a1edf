#!/usr/bin/env bash
# Seventh session of 2026-12-04, sixth call: the session's final indexer code (merge of 8192 entries a step with the
# last step writing the output, splits of 2048 keys up to 32 a row, the FP8 dot's pages in registers, the tile loop
# unrolled by two up to 32 dot rows). The whole GPU suite, then the indexer decode bench at B64 (8K / 32K / 128K, HI
# 32 / 64) and B1 / B8 (HI 64), MXFP8.
# usage: bash bench/run_h200_gf.sh [SECONDS] (default 480).
. bench/h200.sh
. bench/h200_call.sh gf ${1:-480}
export OMP_NUM_THREADS=1
timeout -s INT -k 15 240 python3 -m pytest -q -rfE -p no:cacheprovider -n 14 -m gpu tests > $R/gpu_all.log 2>&1
echo "== gpu suite rc=$? at $(( $(date +%s) - start )) s"; test_summary $R/gpu_all.log; save
indexer_decode b64 64 8192,32768,131072 32,64
indexer_decode small 1,8 8192,32768,131072 64
for n in b64 small; do echo "-- $n"; python3 -m bench.result_rows indexer $R/$n/*.json 2>/dev/null | cut -c1-240; done
