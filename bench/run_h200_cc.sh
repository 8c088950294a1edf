#!/usr/bin/env bash
# Third device call of 2026-12-04's second session: the AttnRes defaults after run cb (pipelined: rows of up to 4096
# in pairs, 4 warps, 4 per SM, 2 in flight; wider rows one at a time, 4 warps, 4 per SM, 3 in flight; the emitted norm
# on the persistent kernel), the focused sweep around them, the AttnRes GPU tests, the full bench at the defaults.
# usage: bash bench/run_h200_cc.sh [SECONDS] (default 500).
. bench/h200.sh
. bench/h200_call.sh cc ${1:-500}
export OMP_NUM_THREADS=1
timeout 200 python3 bench/bench_attnres.py --sweep-cases --out $R > $R/attnres_focused.log 2>&1
echo "== attnres focused rc=$?"; save
timeout -s INT -k 15 60 python3 -m pytest -q -rfE -p no:cacheprovider -n 14 -m gpu \
  tests/plugins/test_attnres_kernel.py > $R/gpu_attnres.log 2>&1
echo "== gpu tests rc=$?"; save
timeout $(( $(left) - 10 )) python3 bench/bench_attnres.py --no-sweep --out $R > $R/attnres.log 2>&1
echo "== attnres rc=$?"; save; save_caches
test_summary $R/gpu_attnres.log
grep -v "^\s*$" $R/attnres_focused.log | grep -v "^ 2 \+\(1\|64\) " | tail -64
tail -30 $R/attnres.log
