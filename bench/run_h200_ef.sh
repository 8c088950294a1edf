#!/usr/bin/env bash
# Sixth device call of 2026-12-04's fourth session: AttnRes with the paired reduction kept to the decode kernel: its
# GPU tests, the decode sweep against fla, and the 8192-token cases of rows of 2304 at the defaults.
# usage: bash bench/run_h200_ef.sh [SECONDS] (default 240).
. bench/h200.sh
. bench/h200_call.sh ef ${1:-240}
export OMP_NUM_THREADS=1
timeout -s INT -k 15 100 python3 -m pytest -q -rfE -p no:cacheprovider -n 8 -m gpu tests/plugins/test_attnres_kernel.py > $R/gpu_attnres.log 2>&1
echo "== attnres gpu tests rc=$? at $(( $(date +%s) - start )) s"; save
timeout 60 python3 bench/bench_attnres.py --sweep-cases --decode-cases --out $R/decode > $R/attnres_decode.log 2>&1
echo "== attnres decode rc=$? at $(( $(date +%s) - start )) s"; save
for c in 2,8192,2304 8,8192,2304 9,8192,2304; do
  timeout 60 python3 bench/bench_attnres.py --sweep-cases --case $c --out $R/sweep_$c > $R/attnres_$c.log 2>&1
  echo "== attnres $c rc=$? at $(( $(date +%s) - start )) s"; save
done
test_summary $R/gpu_attnres.log
grep -hE "^ *[0-9]" $R/attnres_decode.log $R/attnres_*,*.log | grep -E "default|8192" | cut -c1-150
