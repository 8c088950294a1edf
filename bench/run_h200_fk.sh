#!/usr/bin/env bash
# Written for the fifth session of 2026-12-04, run first in the sixth: the fused decode step on one
# warp a head walking its V blocks against the four-warp step and the pool kernel, slots in pool order (what the
# runtime gives a full batch). The bench checks every kernel against the reference before timing it.
# Runs the KDA recurrent GPU tests first (the walk step's included).
# usage: bash bench/run_h200_fk.sh [SECONDS] (default 60). A record: the walking step and --walk were removed after
# this run (it lost, bench/README.md).
. bench/h200.sh
. bench/h200_call.sh fk ${1:-60}
export OMP_NUM_THREADS=1
timeout 120 python3 -m pytest -q -rfE -p no:cacheprovider -n 8 -m gpu tests/plugins/test_kda_recurrent_kernel.py \
  > $R/gpu_tests.log 2>&1
echo "== gpu tests rc=$? at $(( $(date +%s) - start )) s"; test_summary $R/gpu_tests.log
timeout $(( $(left) + 10 )) python3 bench/bench_kda_decode.py --walk --slot-order pool --out $R > $R/kda_walk.log 2>&1
echo "== walk rc=$? at $(( $(date +%s) - start )) s"; save
grep -E "^B(1|64|256) " $R/kda_walk.log | cut -c1-120
if [ "$(left)" -gt 60 ]; then
  timeout $(( $(left) + 10 )) python3 bench/bench_kda_decode.py --walk --slot-order sorted --out $R/sorted \
    > $R/kda_walk_sorted.log 2>&1
  echo "== walk, sorted slots rc=$? at $(( $(date +%s) - start )) s"; save
  grep -E "^B(1|64|256) " $R/kda_walk_sorted.log | cut -c1-120
fi
