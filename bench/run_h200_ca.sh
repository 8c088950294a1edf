#!/usr/bin/env bash
# First device call of 2026-12-04's second session: the cold-cache timers (bench_timers.py) on the KDA pool and the
# AttnRes mix with a copy of the same bytes; the AttnRes focused sweep with the new pipelined kernel (shared-memory
# pipeline); the AttnRes GPU tests.
# usage: bash bench/run_h200_ca.sh [SECONDS] (default 480).
. bench/h200.sh
. bench/h200_call.sh ca ${1:-480}
export OMP_NUM_THREADS=1
timeout 200 python3 bench/bench_timers.py --out $R > $R/timers.log 2>&1
echo "== timers rc=$?"; save
timeout 220 python3 bench/bench_attnres.py --sweep-cases --out $R > $R/attnres_focused.log 2>&1
echo "== attnres focused rc=$?"; save
timeout -s INT -k 15 $(( $(left) - 20 )) python3 -m pytest -q -rfE -p no:cacheprovider -n 14 -m gpu \
  tests/plugins/test_attnres_kernel.py > $R/gpu_attnres.log 2>&1
echo "== gpu tests rc=$?"; save; save_caches
test_summary $R/gpu_attnres.log
tail -40 $R/timers.log
grep -v "^\s*$" $R/attnres_focused.log | tail -75
