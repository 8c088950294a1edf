#!/usr/bin/env bash
# Seventh device call of 2026-12-04:
#   1. indexer decode, B64, 8K / 32K / 128K, HI 32 / 64, MXFP8 / BF16: the select split kernel at its default (8 warps,
#      128 registers) and at 4 warps uncapped (run bf's sweep at 128K HI64 MXFP8: 1.358 ms against 1.507);
#   2. the whole GPU suite.
# usage: bash bench/run_h200_bg.sh [SECONDS] (default 300).
. bench/h200.sh
. bench/h200_call.sh bg ${1:-300}
export OMP_NUM_THREADS=1
timeout 80 python3 bench/bench_indexer.py --decode-only --decode-kernels select --contexts 8192,32768,131072 \
  --out $R/w8 > $R/indexer_w8.log 2>&1
echo "== indexer 8 warps rc=$?"; save
timeout 80 python3 bench/bench_indexer.py --decode-only --decode-kernels select --contexts 8192,32768,131072 \
  --decode-options '{"num_warps": 4, "maxnreg": null}' --out $R/w4 > $R/indexer_w4.log 2>&1
echo "== indexer 4 warps rc=$?"; save
timeout -s INT -k 20 $(( $(left) - 25 )) python3 -m pytest -q -rfE -p no:cacheprovider -n 14 -m gpu tests \
  > $R/gpu_all.log 2>&1
echo "== gpu tests rc=$?"; save
test_summary $R/gpu_all.log
indexer_rows $R/w8/bench_indexer.json $R/w4/bench_indexer.json
