#!/usr/bin/env bash
# Seventh session of 2026-12-04, tenth call: with the BF16 key loop pipelined, 128-key tiles against the default 64
# (run bf chose 64 when the loop was not pipelined), BF16 cache, B64 (8K / 32K / 128K, HI 32 / 64).
# usage: bash bench/run_h200_gj.sh [SECONDS] (default 240).
. bench/h200.sh
. bench/h200_call.sh gj ${1:-240}
export OMP_NUM_THREADS=1
for v in default:'{}' tiles128:'{"block_keys": 128}'; do
  name=${v%%:*}; opts=${v#*:}
  timeout 100 python3 bench/bench_indexer.py --decode-only --batch 64 --contexts 8192,32768,131072 --heads 32,64 \
    --caches bf16 --decode-options "$opts" --out $R/bf16_$name > $R/indexer_bf16_$name.log 2>&1
  echo "== indexer bf16 $name rc=$? at $(( $(date +%s) - start )) s"; save
done
for n in bf16_default bf16_tiles128; do echo "-- $n"; python3 -m bench.result_rows indexer $R/$n/*.json 2>/dev/null | cut -c1-200; done
