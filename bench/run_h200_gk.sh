#!/usr/bin/env bash
# Seventh session of 2026-12-04, eleventh call: 128-key tiles the default for a BF16 cache. The indexer GPU tests, then
# the BF16 indexer decode at B64 (8K / 32K / 128K, HI 32 / 64) at the defaults.
# usage: bash bench/run_h200_gk.sh [SECONDS] (default 240).
. bench/h200.sh
. bench/h200_call.sh gk ${1:-240}
export OMP_NUM_THREADS=1
indexer_gpu_tests
timeout 60 python3 bench/bench_indexer.py --decode-only --batch 64 --contexts 8192,32768,131072 --heads 32,64 \
  --caches bf16 --out $R/bf16 > $R/indexer_bf16.log 2>&1
echo "== indexer bf16 rc=$? at $(( $(date +%s) - start )) s"; save
python3 -m bench.result_rows indexer $R/bf16/*.json 2>/dev/null | cut -c1-200
