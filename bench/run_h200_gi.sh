#!/usr/bin/env bash
# Seventh session of 2026-12-04, ninth call: the whole GPU suite at the session's final code (after the key loaders'
# page change of commit e60a0c6, which run gf's suite predates).
# usage: bash bench/run_h200_gi.sh [SECONDS] (default 300).
. bench/h200.sh
. bench/h200_call.sh gi ${1:-300}
export OMP_NUM_THREADS=1
timeout -s INT -k 15 240 python3 -m pytest -q -rfE -p no:cacheprovider -n 14 -m gpu tests > $R/gpu_all.log 2>&1
echo "== gpu suite rc=$? at $(( $(date +%s) - start )) s"; test_summary $R/gpu_all.log; save
