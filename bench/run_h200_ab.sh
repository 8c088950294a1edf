#!/usr/bin/env bash
# Second device call of 2026-12-03 late (after run aa made column_grid and the word-loading indexer the defaults):
#   1. KDA prefill, all three issue-3 shapes in one run, default column_grid pairs with each WY kernel (a program per
#      tile: the default; per chunk at BK 32 / 4 warps and BK 64 / 8 warps) against fla, plus the state kernel's
#      V-block sweep on every shape (the H96 shapes have never been swept);
#   2. the GPU tests of the KDA chunk / recurrent files and the word-key indexer file, each named (-rA), with
#      durations, interrupted (SIGINT, so that pytest prints its summary) before the call's end.
# usage: bash bench/run_h200_ab.sh [SECONDS] (default 560).
. bench/h200.sh
. bench/h200_call.sh ab ${1:-560}
timeout 330 python3 bench/bench_kda_prefill.py --wy tiles,chunk,chunk64w8 --state-sweep --no-reference-check \
  --out $R > $R/kda_prefill.log 2>&1
echo "== kda prefill rc=$?"; save
timeout -s INT -k 45 $(( $(left) - 60 )) python3 -m pytest -q -rA --durations=20 -p no:cacheprovider -n 8 -m gpu \
  tests/plugins/test_kda_chunk_kernel.py tests/plugins/test_kda_recurrent_kernel.py \
  tests/plugins/test_indexer_words_keys.py > $R/gpu_tests.log 2>&1
echo "== gpu tests rc=$?"; save
save_caches
test_summary $R/gpu_tests.log
kda_prefill_rows state_
