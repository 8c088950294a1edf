#!/usr/bin/env bash
# Eighth session of 2026-12-04, fifth call: bench_pdl.py again with steady clocks and each PDL mode timed twice in a
# palindrome order (run ld found the first timing of a case up to 8% slow in graph replay, and runs la / lb timed
# PDL off first). The KDA recurrent and PDL GPU tests first (the narrow-tail kernel of runs lc / ld was reverted).
# usage: bash bench/run_h200_le.sh [SECONDS] (default 330).
. bench/h200.sh
. bench/h200_call.sh le ${1:-330}
export OMP_NUM_THREADS=1
timeout -s INT -k 15 90 python3 -m pytest -q -rfE -p no:cacheprovider -n 8 -m gpu tests/plugins/test_kda_recurrent_kernel.py \
  tests/plugins/test_dependent_launch.py > $R/gpu_kda.log 2>&1
echo "== gpu kda tests rc=$? at $(( $(date +%s) - start )) s"; test_summary $R/gpu_kda.log; save
timeout $(left) python3 bench/bench_pdl.py --out $R/pdl > $R/pdl.log 2>&1
echo "== bench_pdl rc=$? at $(( $(date +%s) - start )) s"; save
tail -n 32 $R/pdl.log | cut -c1-150
