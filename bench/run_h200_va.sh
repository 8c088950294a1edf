#!/usr/bin/env bash
# Twenty-second session of 2026-12-05, any one-GPU card: run tk's checks and ua's first timing in one call.
# 1. the whole GPU suite at the current defaults (the merge's finality per row at run time; exported engines take the
#    tree merge and 64 splits), then the indexer select / f16 key tests that carry no gpu mark, at their GPU sizes;
# 2. the f16 key dot against the FP8 dot (decode kernels select-f16 / select), B64 HI 32 / 64 MXFP8 at 8K / 32K /
#    128K keys.
# usage: bash bench/run_h200_va.sh [SECONDS] (default 560); carry .whl, .snap and .tcache.
. bench/h200.sh
. bench/h200_call.sh va ${1:-560}
export OMP_NUM_THREADS=1
timeout -s INT -k 15 270 python3 -m pytest -q -rfE -p no:cacheprovider -n 6 -m gpu tests > $R/gpu_all.log 2>&1
echo "== gpu tests rc=$? at $(( $(date +%s) - start )) s"; test_summary $R/gpu_all.log; save
timeout -s INT -k 15 60 python3 -m pytest -q -rfE -p no:cacheprovider -n 6 -m "not gpu" \
  tests/plugins/test_indexer_select.py tests/plugins/test_indexer_f16_keys.py > $R/indexer_unmarked.log 2>&1
echo "== indexer unmarked tests rc=$? at $(( $(date +%s) - start )) s"; test_summary $R/indexer_unmarked.log; save
indexer_decode b64 64 8192,32768,131072 32,64 '{}' select,select-f16 $(( $(left) < 170 ? $(left) : 170 ))
save_caches
indexer_rows $R/b64/bench_indexer.json | cut -c1-230
