#!/usr/bin/env bash
# Twenty-second session of 2026-12-05, after run va on the same card: issue 4's bench with the 64-call graph column
# (an H200's first; run tg ran it on an H100), then the candidate buffer at B64.
# usage: bash bench/run_h200_vb.sh [SECONDS] (default 560); carry .whl, .snap and .tcache.
. bench/h200.sh
. bench/h200_call.sh vb ${1:-560}
export OMP_NUM_THREADS=1
issue4_bench 90
indexer_decode candidates 64 8192,32768,131072 32,64 '{"candidates": true}' select $(( $(left) < 150 ? $(left) : 150 ))
save_caches
indexer_rows $R/indexer/bench_indexer.json 2>/dev/null | cut -c1-190
sparse_mla_rows $R/mla_decode/sparse_mla.json 2>/dev/null | grep -E "gluon" | cut -c1-190
sparse_mla_rows $R/mla_prefill/sparse_mla.json 2>/dev/null | grep "prefill T32768 H128" | cut -c1-160
indexer_rows $R/candidates/bench_indexer.json | cut -c1-230
