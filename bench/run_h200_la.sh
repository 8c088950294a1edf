#!/usr/bin/env bash
# Eighth session of 2026-12-04, first call: programmatic dependent launch (PDL) on the AttnRes and KDA decode kernels.
# The whole GPU suite (PDL now on by default for those kernels; tests/plugins/test_dependent_launch.py chains them in
# CUDA graphs), then bench_pdl.py (PDL off / on, graph / do_bench / profiler kernel time, copies of the same bytes),
# then the sparse MLA decode with deeper gather pipelines (32-key blocks 4 deep; FP8 64-key blocks 3 deep).
# usage: bash bench/run_h200_la.sh [SECONDS] (default 560).
. bench/h200.sh
. bench/h200_call.sh la ${1:-560}
export OMP_NUM_THREADS=1
timeout -s INT -k 15 150 python3 -m pytest -q -rfE -p no:cacheprovider -n 14 -m gpu tests > $R/gpu_all.log 2>&1
echo "== gpu suite rc=$? at $(( $(date +%s) - start )) s"; test_summary $R/gpu_all.log; save
timeout 230 python3 bench/bench_pdl.py --out $R/pdl > $R/pdl.log 2>&1
echo "== bench_pdl rc=$? at $(( $(date +%s) - start )) s"; save
timeout $(left) python3 bench/bench_sparse_mla.py --quick-decode --out $R/mla > $R/mla.log 2>&1
echo "== sparse mla rc=$? at $(( $(date +%s) - start )) s"; save
tail -n 60 $R/pdl.log | cut -c1-120
sparse_mla_rows $R/mla/sparse_mla.json 2>/dev/null | cut -c1-160
