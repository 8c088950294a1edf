#!/usr/bin/env bash
# Eighth session of 2026-12-04, eighth call: the whole GPU suite at the session's final code (pdl_mode looks at its
# latency test only where PDL is available).
# usage: bash bench/run_h200_lh.sh [SECONDS] (default 240).
. bench/h200.sh
. bench/h200_call.sh lh ${1:-240}
export OMP_NUM_THREADS=1
timeout -s INT -k 15 $(left) python3 -m pytest -q -rfE -p no:cacheprovider -n 14 -m gpu tests > $R/gpu_all.log 2>&1
echo "== gpu suite rc=$? at $(( $(date +%s) - start )) s"; test_summary $R/gpu_all.log; save
