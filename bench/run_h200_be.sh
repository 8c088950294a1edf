#!/usr/bin/env bash
# Fifth device call of 2026-12-04: sparse MLA prefill alone on the GPU (its only figures, 207-212 TFLOP/s at T8192,
# come from a run that shared the GPU with an export job):
#   1. T8192 with the tile sweep (32-key blocks 3 stages = default, 32/2, 64/2, 16/3, 32/4) at H128 BF16; H64 BF16;
#      H128 FP8; the dense MLA cases;
#   2. T32768 (the prefill length) at the default tiles.
# usage: bash bench/run_h200_be.sh [SECONDS] (default 420).
. bench/h200.sh
. bench/h200_call.sh be ${1:-420}
export OMP_NUM_THREADS=1
timeout 230 python3 bench/bench_sparse_mla.py --prefill-only --prefill-tokens 8192 --out $R/t8192 \
  > $R/sparse_mla_t8192.log 2>&1
echo "== sparse mla T8192 rc=$?"; save
timeout $(( $(left) - 20 )) python3 bench/bench_sparse_mla.py --prefill-only --prefill-tokens 32768 --no-sweep \
  --out $R/t32768 > $R/sparse_mla_t32768.log 2>&1
echo "== sparse mla T32768 rc=$?"; save
sparse_mla_rows $R/t8192/sparse_mla.json $R/t32768/sparse_mla.json
