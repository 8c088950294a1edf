#!/usr/bin/env bash
# Eighth session of 2026-12-04, third and fourth calls (run lc stopped at the bench's bitwise check): the KDA pool kernel's last (row, head) pairs on half-wide tiles
# (`narrow_pairs`), against B64 H32's tail. The KDA recurrent and PDL GPU tests, then bench_kda_tail.py.
# usage: bash bench/run_h200_lc.sh [SECONDS] (default 300).
. bench/h200.sh
. bench/h200_call.sh lc ${1:-300}
export OMP_NUM_THREADS=1
timeout -s INT -k 15 90 python3 -m pytest -q -rfE -p no:cacheprovider -n 8 -m gpu tests/plugins/test_kda_recurrent_kernel.py \
  tests/plugins/test_dependent_launch.py > $R/gpu_kda.log 2>&1
echo "== gpu kda tests rc=$? at $(( $(date +%s) - start )) s"; test_summary $R/gpu_kda.log; save
timeout $(left) python3 bench/bench_kda_tail.py --out $R/tail > $R/tail.log 2>&1
echo "== bench_kda_tail rc=$? at $(( $(date +%s) - start )) s"; save
tail -n 14 $R/tail.log | cut -c1-150
