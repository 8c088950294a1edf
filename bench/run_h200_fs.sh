#!/usr/bin/env bash
# Sixth session of 2026-12-04, ninth call: the indexer GPU tests after store_ascending (topk_kernel.py) became the one
# ascending-position writer of the prefill, buffers and chunked-merge paths (a refactor, no change of behaviour).
# usage: bash bench/run_h200_fs.sh [SECONDS] (default 150).
. bench/h200.sh
. bench/h200_call.sh fs ${1:-150}
export OMP_NUM_THREADS=1
indexer_gpu_tests
