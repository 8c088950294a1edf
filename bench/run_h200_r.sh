#!/usr/bin/env bash
# One device call for issue 5 plus the plugin GPU tests: the AttnRes bench with its config sweep (all 18 cases and
# the variants) and the MoE bench on cores 0-7, while `pytest -m gpu tests/plugins` (compile-bound) runs on cores
# 8-15 at low priority. The tests' short GPU bursts can only slow the benches down. Committed tree only (.snap/head).
# usage: bash bench/run_h200_r.sh [SECONDS] (default 570). Results in $OUT/results_r.tgz.
. bench/h200.sh
. bench/h200_call.sh r ${1:-570}
(taskset -c 8-15 nice -n 10 timeout $(( T - 20 )) python3 -m pytest -q -rf -p no:cacheprovider -m gpu tests/plugins \
  > $R/gpu_plugins.log 2>&1; echo "rc=$?" >> $R/gpu_plugins.log) &
tests=$!
timeout $(( T * 58 / 100 )) taskset -c 0-7 python3 bench/bench_attnres.py --out $R > $R/bench_attnres.log 2>&1
echo "== attnres rc=$?"; save
timeout $(left) taskset -c 0-7 python3 bench/bench_moe.py --out $R > $R/bench_moe.log 2>&1
echo "== moe rc=$?"; save
wait $tests; save
grep -A60 "^ N     T" $R/bench_attnres.log | cut -c1-160 | head -45
grep -v "^W12\|^  " $R/bench_moe.log | tail -12 | cut -c1-180
grep -E "passed|failed|FAILED|rror|rc=" $R/gpu_plugins.log | cut -c1-160 | tail -12
