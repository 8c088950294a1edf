#!/usr/bin/env bash
# Eleventh session of 2026-12-04 (no device machine; written for the next one that lends nvidia-h200-x2): context
# parallelism (--cp 2, eager engines over NCCL), never run on GPUs yet.
# 1. the 2-GPU tests: cp 2 == one rank step by step and cache by cache (Triton kernels on split and padded
#    segments, NCCL all-gathers), BF16 and MXFP8 index caches;
# 2. bench.h200_cp: one 32K and one 128K prompt's time to first token, one rank against --cp 2, on a cut-down
#    h200-slice (full width, 3 KDA + 1 MLA layers, 8 experts), whole prompt in one prefill step, bf16.
# usage (kind nvidia-h200-x2): bash bench/run_h200_nc.sh [SECONDS] (default 560).
. bench/h200.sh
. bench/h200_call.sh nc ${1:-560}
nvidia-smi -L | head -4
timeout -s INT -k 15 200 python3 -m pytest -q -rfE -p no:cacheprovider -m gpu tests/dist/test_context_parallel.py \
  > $R/gpu_cp.log 2>&1
echo "== cp gpu tests rc=$? at $(( $(date +%s) - start )) s"; test_summary $R/gpu_cp.log; save
timeout $(left) python3 -m bench.h200_cp --out $R/cp > $R/h200_cp.log 2>&1
echo "== h200_cp rc=$? at $(( $(date +%s) - start )) s"; save
tail -n 6 $R/h200_cp.log | cut -c1-200
