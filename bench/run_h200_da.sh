#!/usr/bin/env bash
# First device call of 2026-12-04's third session (a fresh machine, no compile cache carried): the whole GPU suite at
# HEAD (the refactors since run cg were only compared offline), then the chunked indexer decode (never run on the GPU)
# beside the select kernel.
# usage: bash bench/run_h200_da.sh [SECONDS] (default 560).
. bench/h200.sh
. bench/h200_call.sh da ${1:-560}
export OMP_NUM_THREADS=1
timeout -s INT -k 15 330 python3 -m pytest -q -rfE -p no:cacheprovider -n 14 -m gpu tests > $R/gpu_all.log 2>&1
echo "== gpu tests rc=$? at $(( $(date +%s) - start )) s"; save
timeout $(( $(left) - 40 )) python3 bench/bench_indexer.py --decode-only --decode-kernels select,chunked \
  --contexts 32768,131072 --out $R > $R/indexer.log 2>&1
echo "== indexer rc=$? at $(( $(date +%s) - start )) s"; save
save_caches
test_summary $R/gpu_all.log
indexer_rows $R/*.json 2>/dev/null | tail -20
tail -5 $R/indexer.log
