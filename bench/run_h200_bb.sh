#!/usr/bin/env bash
# Second device call of 2026-12-04 (after run ba, whose B1 shapes hit a Triton 3.6 compile crash in the chunk table's
# while loop, now a for loop):
#   1. KDA prefill, all three issue-3 shapes, with the WY variants: register cap, and wy_stream_kernel (a tile of 8
#      consecutive chunks per program, 2-3 stages, 4 or 8 warps, 16-column tiles);
#   2. the KDA GPU tests (chunk, summary, recurrent), the streamed WY products included.
# usage: bash bench/run_h200_bb.sh [SECONDS] (default 480).
. bench/h200.sh
. bench/h200_call.sh bb ${1:-480}
export OMP_NUM_THREADS=1
timeout 300 python3 bench/bench_kda_prefill.py --wy tiles,tiles_r80,stream8s2,stream8s3,stream8s2w8,stream8s3k16 \
  --no-reference-check --out $R > $R/kda_prefill.log 2>&1
echo "== kda prefill rc=$?"; save
timeout -s INT -k 20 $(( $(left) - 30 )) python3 -m pytest -q -rfE -p no:cacheprovider -n 14 -m gpu \
  tests/plugins/test_kda_chunk_kernel.py tests/plugins/test_kda_summary_op.py tests/plugins/test_kda_recurrent_kernel.py \
  > $R/gpu_kda.log 2>&1
echo "== gpu tests rc=$?"; save
save_caches
test_summary $R/gpu_kda.log
kda_prefill_rows
