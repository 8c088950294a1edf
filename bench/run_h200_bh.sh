#!/usr/bin/env bash
# Eighth device call of 2026-12-04: the indexer decode's split kernel now takes 4 uncapped warps from 32K keys of block
# table (run bg); its default at 8K / 32K / 128K, and the indexer GPU tests.
# usage: bash bench/run_h200_bh.sh [SECONDS] (default 200).
. bench/h200.sh
. bench/h200_call.sh bh ${1:-200}
export OMP_NUM_THREADS=1
timeout 70 python3 bench/bench_indexer.py --decode-only --decode-kernels select --contexts 8192,32768,131072 \
  --out $R > $R/indexer.log 2>&1
echo "== indexer rc=$?"; save
timeout -s INT -k 15 $(( $(left) - 20 )) python3 -m pytest -q -rfE -p no:cacheprovider -n 14 -m gpu \
  $(ls tests/plugins/test_indexer*.py) > $R/gpu_indexer.log 2>&1
echo "== gpu tests rc=$?"; save
test_summary $R/gpu_indexer.log
indexer_rows $R/bench_indexer.json
