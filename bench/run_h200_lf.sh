#!/usr/bin/env bash
# Eighth session of 2026-12-04, sixth call: the whole GPU suite at the session's code, then the AttnRes bench at the
# defaults (no sweep) with the kernel-time column (profiler durations against a copy kernel timed the same way).
# usage: bash bench/run_h200_lf.sh [SECONDS] (default 480).
. bench/h200.sh
. bench/h200_call.sh lf ${1:-480}
export OMP_NUM_THREADS=1
timeout -s INT -k 15 150 python3 -m pytest -q -rfE -p no:cacheprovider -n 14 -m gpu tests > $R/gpu_all.log 2>&1
echo "== gpu suite rc=$? at $(( $(date +%s) - start )) s"; test_summary $R/gpu_all.log; save
timeout $(left) python3 bench/bench_attnres.py --no-sweep --out $R/attnres > $R/attnres.log 2>&1
echo "== bench_attnres rc=$? at $(( $(date +%s) - start )) s"; save
tail -n 32 $R/attnres.log | cut -c1-170
