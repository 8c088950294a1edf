#!/usr/bin/env bash
# Twenty-third session of 2026-12-06, whatever one-GPU card comes: on an H200, issue 4's bench with the 64-call graph
# column (an H200's first), run va's two fp32-cache indexer tests alone and the candidate buffer at B64; on any other
# card, run wa's steps (those tests alone, the candidate buffer, the whole GPU suite).
# usage: bash bench/run_h200_wb.sh [SECONDS] (default 560); carry .whl, .snap and .tcache.
if ! nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  exec bash bench/run_h200_wa.sh "$@"
fi
. bench/h200.sh
. bench/h200_call.sh wb ${1:-560}
export OMP_NUM_THREADS=1
timeout -s INT -k 15 60 python3 -m pytest -q -rfE -p no:cacheprovider -m gpu tests/plugins/test_indexer_kernel.py \
  -k "test_decode_matches_reference and 9000 and fp32" > $R/indexer_fp32.log 2>&1
echo "== indexer fp32 tests rc=$? at $(( $(date +%s) - start )) s"; test_summary $R/indexer_fp32.log; save
issue4_bench 90
indexer_decode candidates 64 8192,32768,131072 32,64 '{"candidates": true}' select $(( $(left) < 150 ? $(left) : 150 ))
save_caches
indexer_rows $R/indexer/bench_indexer.json 2>/dev/null | cut -c1-190
sparse_mla_rows $R/mla_decode/sparse_mla.json 2>/dev/null | grep -E "gluon" | cut -c1-190
sparse_mla_rows $R/mla_prefill/sparse_mla.json 2>/dev/null | grep "prefill T32768 H128" | cut -c1-160
indexer_rows $R/candidates/bench_indexer.json | cut -c1-230
