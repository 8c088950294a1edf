#!/usr/bin/env bash
# Twelfth session of 2026-12-05, last call: the Gluon FP8 decode's e4m3 placement in three instructions a pair
# (prmt's sign-replicating selectors, a shift and a mask; e4m3_bits.E4M3X4_TIMES_BF16X4) where it took five: its
# FP8 GPU tests, then the quick decode bench with --gluon against run oa (FP8 0.165 / 0.098 ms at H128 / H64).
# usage: bash bench/run_h200_oc.sh [SECONDS] (default 180).
. bench/h200.sh
. bench/h200_call.sh oc ${1:-180}
export OMP_NUM_THREADS=1
timeout -s INT -k 10 80 python3 -m pytest -q -rfE -p no:cacheprovider -n 8 -m gpu tests/plugins/test_sparse_mla_gluon.py \
  -k fp8 > $R/gpu_gluon_fp8.log 2>&1
echo "== gpu tests rc=$? at $(( $(date +%s) - start )) s"; test_summary $R/gpu_gluon_fp8.log; save
timeout $(left) python3 bench/bench_sparse_mla.py --quick-decode --gluon --out $R/mla_gluon > $R/mla_gluon.log 2>&1
echo "== sparse mla --gluon rc=$? at $(( $(date +%s) - start )) s"; save
sparse_mla_rows $R/mla_gluon/sparse_mla.json 2>/dev/null | grep -E "fp8 (default|gluon)" | cut -c1-160
