#!/usr/bin/env bash
# Fifth device call of 2026-12-04's fourth session: the whole GPU suite at the session's code (token groups taken
# back); 8 and 9 x 8192 x 2304 on grids of 4, 5 and 10 programs per SM against the default's 8 (5 stay resident).
# usage: bash bench/run_h200_ee.sh [SECONDS] (default 300).
. bench/h200.sh
. bench/h200_call.sh ee ${1:-300}
export OMP_NUM_THREADS=1
timeout -s INT -k 15 200 python3 -m pytest -q -rfE -p no:cacheprovider -n 14 -m gpu tests > $R/gpu_all.log 2>&1
echo "== gpu tests rc=$? at $(( $(date +%s) - start )) s"; save
for c in 8,8192,2304 9,8192,2304; do
  timeout 60 python3 bench/bench_attnres.py --sweep-cases --case $c --out $R/sweep_$c > $R/attnres_$c.log 2>&1
  echo "== attnres $c rc=$? at $(( $(date +%s) - start )) s"; save
done
test_summary $R/gpu_all.log
grep -hE "^ *[0-9]" $R/attnres_*.log | cut -c1-150
