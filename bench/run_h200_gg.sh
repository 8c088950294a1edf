#!/usr/bin/env bash
# Seventh session of 2026-12-04, seventh call: the BF16 (and MXFP8 with a bf16 query) decode key loops with their pages
# read once a block. The indexer GPU tests, then the BF16 indexer decode at B64 (8K / 32K / 128K, HI 32 / 64) at this
# commit and at the one before it (.snap/prev), in one call.
# usage: bash bench/run_h200_gg.sh [SECONDS] (default 420).
. bench/h200.sh
PREV=$(pwd)/.snap/prev
. bench/h200_call.sh gg ${1:-420}
export OMP_NUM_THREADS=1
indexer_gpu_tests
for tree in head prev; do
  dir=/tmp/head; [ $tree = prev ] && dir=$PREV
  (cd $dir && PYTHONPATH=/tmp/site:$dir timeout 150 python3 bench/bench_indexer.py --decode-only --batch 64 \
    --contexts 8192,32768,131072 --heads 32,64 --caches bf16 --out $R/bf16_$tree > $R/indexer_bf16_$tree.log 2>&1)
  echo "== indexer bf16 $tree rc=$? at $(( $(date +%s) - start )) s"; save
done
for n in bf16_head bf16_prev; do echo "-- $n"; python3 -m bench.result_rows indexer $R/$n/*.json 2>/dev/null | cut -c1-240; done
