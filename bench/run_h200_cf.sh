#!/usr/bin/env bash
# Sixth device call of 2026-12-04's second session: the one-tile KDA pool kernel capped at 224 registers (9 one-warp
# programs an SM instead of 8) in the decode bench, and the KDA recurrent GPU tests (the cap at K = V = 128).
# usage: bash bench/run_h200_cf.sh [SECONDS] (default 200).
. bench/h200.sh
. bench/h200_call.sh cf ${1:-200}
export OMP_NUM_THREADS=1
timeout 100 python3 bench/bench_kda_decode.py --quick --out $R > $R/kda_decode.log 2>&1
echo "== kda decode rc=$?"; save
timeout -s INT -k 15 $(( $(left) - 10 )) python3 -m pytest -q -rfE -p no:cacheprovider -n 14 -m gpu \
  tests/plugins/test_kda_recurrent_kernel.py > $R/gpu_kda.log 2>&1
echo "== gpu tests rc=$?"; save
test_summary $R/gpu_kda.log
grep -E "^B|^shape" $R/kda_decode.log | cut -c1-130
