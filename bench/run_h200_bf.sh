#!/usr/bin/env bash
# Sixth device call of 2026-12-04: sparse MLA with 64-key blocks two stages deep as the prefill default too (run be:
# T8192 H128 BF16 274 TFLOP/s against 211):
#   1. prefill T32768 (the length) with the tile sweep (32/3 = the old default), H64, FP8;
#   2. indexer decode B64 HI64 MXFP8 at 128K: the select kernel's launch sweep (union length first: run bc's profile
#      puts 1.44 of its 1.51 ms in the split kernel, about 90 us per 2048-key block and program);
#   3. the sparse MLA and indexer GPU tests (the indexer's select-f16 path was removed).
# usage: bash bench/run_h200_bf.sh [SECONDS] (default 400).
. bench/h200.sh
. bench/h200_call.sh bf ${1:-400}
export OMP_NUM_THREADS=1
timeout 170 python3 bench/bench_sparse_mla.py --prefill-only --prefill-tokens 32768 --out $R/t32768 \
  > $R/sparse_mla_t32768.log 2>&1
echo "== sparse mla prefill rc=$?"; save
timeout 150 python3 bench/bench_indexer.py --decode-only --decode-kernels select --contexts 131072 --heads 64 \
  --caches mxfp8 --sweep --out $R > $R/indexer.log 2>&1
echo "== indexer sweep rc=$?"; save
timeout -s INT -k 20 $(( $(left) - 30 )) python3 -m pytest -q -rfE -p no:cacheprovider -n 14 -m gpu \
  tests/plugins/test_sparse_mla_kernel.py $(ls tests/plugins/test_indexer*.py) > $R/gpu_tests.log 2>&1
echo "== gpu tests rc=$?"; save
test_summary $R/gpu_tests.log
indexer_rows $R/bench_indexer.json
sparse_mla_rows $R/t32768/sparse_mla.json
