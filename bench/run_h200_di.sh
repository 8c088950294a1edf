#!/usr/bin/env bash
# The session's final commit: the whole GPU suite, and the indexer decode defaults (select; 128-key tiles on the FP8
# dot) at 8K / 32K / 128K, MXFP8 (MXFP8 query) and BF16, with the 2- and 4-token verify rows.
# usage: bash bench/run_h200_di.sh [SECONDS] (default 330).
. bench/h200.sh
. bench/h200_call.sh di ${1:-330}
export OMP_NUM_THREADS=1
timeout -s INT -k 15 170 python3 -m pytest -q -rfE -p no:cacheprovider -n 14 -m gpu tests > $R/gpu_all.log 2>&1
echo "== gpu tests rc=$? at $(( $(date +%s) - start )) s"; save
timeout $(( $(left) - 5 )) python3 bench/bench_indexer.py --decode-only --out $R > $R/indexer.log 2>&1
echo "== indexer rc=$? at $(( $(date +%s) - start )) s"; save
test_summary $R/gpu_all.log
grep -E "^decode|ERROR" $R/indexer.log | cut -c1-150
