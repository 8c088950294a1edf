#!/usr/bin/env bash
# Seventeenth session of 2026-12-05: the whole GPU suite on the sixteenth session's final code (its run qb stopped at
# its limit beside 14 workers, two MXFP4 cases out of memory), on 8 workers; then the Triton cache comes back.
# usage: bash bench/run_h200_ra.sh [SECONDS] (default 560).
. bench/h200.sh
. bench/h200_call.sh ra ${1:-560}
export OMP_NUM_THREADS=1
timeout -s INT -k 15 $(( $(left) - 40 )) python3 -m pytest -q -rfE -p no:cacheprovider -n 8 -m gpu tests \
  > $R/gpu_all.log 2>&1
echo "== gpu suite rc=$? at $(( $(date +%s) - start )) s"; test_summary $R/gpu_all.log; save
grep -E "slowest|^[0-9.]+s " $R/gpu_all.log | head -5
save_caches
