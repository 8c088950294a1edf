#!/usr/bin/env bash
# Last device call of 2026-12-04's third session: the whole GPU suite at the session's final commit, and the indexer
# decode as engines run it (select; MXFP8 with an MXFP8 query, BF16) at 8K / 32K / 128K.
# usage: bash bench/run_h200_df.sh [SECONDS] (default 400).
. bench/h200.sh
. bench/h200_call.sh df ${1:-400}
export OMP_NUM_THREADS=1
timeout -s INT -k 15 200 python3 -m pytest -q -rfE -p no:cacheprovider -n 14 -m gpu tests > $R/gpu_all.log 2>&1
echo "== gpu tests rc=$? at $(( $(date +%s) - start )) s"; save
timeout $(( $(left) - 10 )) python3 bench/bench_indexer.py --decode-only --contexts 8192,32768,131072 --out $R \
  > $R/indexer.log 2>&1
echo "== indexer rc=$? at $(( $(date +%s) - start )) s"; save
test_summary $R/gpu_all.log
grep -E "^decode|ERROR" $R/indexer.log | cut -c1-150
