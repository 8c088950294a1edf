#!/usr/bin/env bash
# One device call for issues 4 and 5, nothing else on the GPU: the full indexer bench (128K contexts, T = 32K
# prefill; never run before), the AttnRes GPU tests, then the AttnRes bench with the defaults set from run r, sweeping the persistent kernel.
# Committed tree only (.snap/head, carried).
# usage: bash bench/run_h200_t.sh [SECONDS] (default 560). Results in $OUT/results_t.tgz.
. bench/h200.sh
. bench/h200_call.sh t ${1:-560}
timeout $(( T * 40 / 100 )) python3 bench/bench_indexer.py --out $R > $R/bench_indexer.log 2>&1
echo "== indexer rc=$?"; save
timeout 110 python3 -m pytest -q -p no:cacheprovider -m gpu tests/plugins/test_attnres_kernel.py > $R/gpu_attnres.log 2>&1
echo "== attnres gpu tests rc=$?"; save
timeout $(left) python3 bench/bench_attnres.py --out $R > $R/bench_attnres.log 2>&1
echo "== attnres rc=$?"; save
grep -A30 "^ceilings" $R/bench_indexer.log | cut -c1-150 || grep '^{' $R/bench_indexer.log | cut -c1-200
tail -1 $R/gpu_attnres.log
grep -A40 "^ N     T" $R/bench_attnres.log | cut -c1-160 | head -30
