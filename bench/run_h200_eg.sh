#!/usr/bin/env bash
# Last device call of 2026-12-04's fourth session: the whole GPU suite at the final commit (the model's indexer
# quantizes its query to MXFP8 again; ONNX Runtime PyOps in domains of their own).
# usage: bash bench/run_h200_eg.sh [SECONDS] (default 240).
. bench/h200.sh
. bench/h200_call.sh eg ${1:-240}
export OMP_NUM_THREADS=1
timeout -s INT -k 15 $(( $(left) - 10 )) python3 -m pytest -q -rfE -p no:cacheprovider -n 14 -m gpu tests > $R/gpu_all.log 2>&1
echo "== gpu tests rc=$? at $(( $(date +%s) - start )) s"; save
test_summary $R/gpu_all.log
