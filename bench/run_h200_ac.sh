#!/usr/bin/env bash
# Third device call of 2026-12-03 late (after run ab):
#   1. KDA prefill, all three issue-3 shapes in one run, with the state kernel's V block now 64 wherever that gives
#      every SM a program (B1 T32768 H96 too), and the WY kernel at 64-column tiles (4 and 8 warps) against the default;
#   2. the GPU tests of the KDA chunk / recurrent and word-key indexer files (the reference of the chunk tests now on
#      the GPU; one CPU thread per worker: run ab's workers oversubscribed the 16 cores), then the other indexer files.
# usage: bash bench/run_h200_ac.sh [SECONDS] (default 400).
. bench/h200.sh
. bench/h200_call.sh ac ${1:-400}
export OMP_NUM_THREADS=1
timeout 150 python3 bench/bench_kda_prefill.py --wy tiles,tiles64w4,tiles64w8 --no-reference-check \
  --out $R > $R/kda_prefill.log 2>&1
echo "== kda prefill rc=$?"; save
timeout -s INT -k 30 $(( $(left) - 40 )) python3 -m pytest -q -rA --durations=15 -p no:cacheprovider -n 12 -m gpu \
  tests/plugins/test_kda_chunk_kernel.py tests/plugins/test_kda_recurrent_kernel.py \
  tests/plugins/test_indexer_words_keys.py tests/plugins/test_indexer_kernel.py tests/plugins/test_indexer_select.py \
  > $R/gpu_tests.log 2>&1
echo "== gpu tests rc=$?"; save
save_caches
test_summary $R/gpu_tests.log
kda_prefill_rows
