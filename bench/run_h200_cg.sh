#!/usr/bin/env bash
# Seventh device call of 2026-12-04's second session: the whole GPU suite at the session's final kernels, and the
# cold-cache timer study with its two fixes (device sleep after the read flush, elementwise copies).
# usage: bash bench/run_h200_cg.sh [SECONDS] (default 320).
. bench/h200.sh
. bench/h200_call.sh cg ${1:-320}
export OMP_NUM_THREADS=1
timeout -s INT -k 15 150 python3 -m pytest -q -rfE -p no:cacheprovider -n 14 -m gpu tests > $R/gpu_all.log 2>&1
echo "== gpu tests rc=$?"; save
timeout $(( $(left) - 10 )) python3 bench/bench_timers.py --out $R > $R/timers.log 2>&1
echo "== timers rc=$?"; save
test_summary $R/gpu_all.log
tail -18 $R/timers.log
