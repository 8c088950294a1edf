#!/usr/bin/env bash
# Eighth session of 2026-12-04, ninth call: bench_pdl.py as refactored after run le (measure_modes), once more.
# usage: bash bench/run_h200_li.sh [SECONDS] (default 200).
. bench/h200.sh
. bench/h200_call.sh li ${1:-200}
export OMP_NUM_THREADS=1
timeout $(left) python3 bench/bench_pdl.py --out $R/pdl > $R/pdl.log 2>&1
echo "== bench_pdl rc=$? at $(( $(date +%s) - start )) s"; save
grep -E "graph|kernel" $R/pdl.log | cut -c1-120
