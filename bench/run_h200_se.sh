#!/usr/bin/env bash
# Eighteenth session of 2026-12-05: the chunked decode indexer (decode_chunked_kernel.py: a score kernel with no
# selection state, then a fold, in rounds of 16K keys; eager calls only) against the select kernel (the op's
# default), at B64 with the MXFP8 cache, neither measured together since run dd (fourth session) while both changed:
# 1. the chunked path's GPU tests (none are GPU-marked: run se collected none);
# 2. bench_indexer.py --decode-kernels select,chunked (8K / 32K / 128K keys, HI 32 / 64; every case checked first);
# 3. chunked with 128-key tiles in its score kernel (its default is 64; select's FP8 dot takes 128).
# usage: bash bench/run_h200_se.sh [SECONDS] (default 300); carry .whl, .snap and .tcache.
. bench/h200.sh
. bench/h200_call.sh se ${1:-300}
export OMP_NUM_THREADS=1
timeout -s INT -k 15 90 python3 -m pytest -q -rfE -p no:cacheprovider -n 6 -m gpu tests/plugins/test_indexer_chunked.py \
  > $R/gpu_chunked.log 2>&1
echo "== chunked gpu tests rc=$? at $(( $(date +%s) - start )) s"; test_summary $R/gpu_chunked.log; save
timeout 100 python3 bench/bench_indexer.py --decode-only --decode-kernels select,chunked --caches mxfp8 \
  --contexts 8192,32768,131072 --out $R/both > $R/both.log 2>&1
echo "== select, chunked rc=$? at $(( $(date +%s) - start )) s"; save
timeout $(( $(left) < 80 ? $(left) : 80 )) python3 bench/bench_indexer.py --decode-only --decode-kernels chunked \
  --caches mxfp8 --contexts 8192,32768,131072 --decode-options '{"block_keys": 128}' --out $R/chunked128 \
  > $R/chunked128.log 2>&1
echo "== chunked 128-key tiles rc=$? at $(( $(date +%s) - start )) s"; save
indexer_rows $R/both/bench_indexer.json 2>/dev/null | cut -c1-190
indexer_rows $R/chunked128/bench_indexer.json 2>/dev/null | cut -c1-190
