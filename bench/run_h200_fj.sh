#!/usr/bin/env bash
# Tenth device call of 2026-12-04's fifth session: after sparse MLA decode took 64-key blocks at every size, the
# sparse MLA and export GPU tests, then the quick decode bench (graph replay) once.
# usage: bash bench/run_h200_fj.sh [SECONDS] (default 180).
. bench/h200.sh
. bench/h200_call.sh fj ${1:-180}
export OMP_NUM_THREADS=1
timeout -s INT -k 10 90 python3 -m pytest -q -rfE -p no:cacheprovider -n 14 -m gpu tests/plugins/test_sparse_mla_kernel.py tests/export tests/model > $R/gpu_mla.log 2>&1
echo "== gpu tests rc=$? at $(( $(date +%s) - start )) s"; save
timeout $(( $(left) - 5 )) python3 bench/bench_sparse_mla.py --quick-decode --out $R/mla > $R/mla.log 2>&1
echo "== sparse mla rc=$? at $(( $(date +%s) - start )) s"; save
test_summary $R/gpu_mla.log
grep -E "^decode" $R/mla.log | cut -c1-170
