#!/usr/bin/env bash
# Eleventh device call of 2026-12-04's fifth session (about 140 s of device time left): the fused decode step on one
# warp a head walking its V blocks against the four-warp step and the pool kernel, slots in pool order (what the
# runtime gives a full batch). The bench checks every kernel against the reference before timing it.
# usage: bash bench/run_h200_fk.sh [SECONDS] (default 60).
. bench/h200.sh
. bench/h200_call.sh fk ${1:-60}
export OMP_NUM_THREADS=1
timeout $(( $(left) + 10 )) python3 bench/bench_kda_decode.py --walk --slot-order pool --out $R > $R/kda_walk.log 2>&1
echo "== walk rc=$? at $(( $(date +%s) - start )) s"; save
grep -E "^B(1|64|256) " $R/kda_walk.log | cut -c1-120
