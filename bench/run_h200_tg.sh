#!/usr/bin/env bash
# Written in the nineteenth session of 2026-12-05 for the next H200 call (none of it has run on an H200):
# 1. issue 4's bench (run_h200_oe.sh's steps) with the 64-call graph column the benches gained in this session:
#    indexer decode and prefill, the quick sparse decode (gluon, gluon-pdl-combine), sparse MLA prefill T 32768 H128;
# 2. the late-PDL combine against plain in 50-call graphs, alternating rounds (bench/sparse_mla_pdl_replay.py);
# 3. speculative decoding on the whole h200-slice with --margins (run_h200_sh.sh's step; out of an H100's memory).
# usage: bash bench/run_h200_tg.sh [SECONDS] (default 560); carry .whl, .snap and .tcache.
. bench/h200.sh
. bench/h200_call.sh tg ${1:-560}
export OMP_NUM_THREADS=1
issue4_bench 90
pdl_replay
save_caches
spec_decode_slice
indexer_rows $R/indexer/bench_indexer.json 2>/dev/null | cut -c1-190
sparse_mla_rows $R/mla_decode/sparse_mla.json 2>/dev/null | grep -E "gluon" | cut -c1-190
sparse_mla_rows $R/mla_prefill/sparse_mla.json 2>/dev/null | grep "prefill T32768 H128" | cut -c1-160
cat $R/pdl_replay.log | tail -8
grep -v "^\[" $R/spec_decode.log | tail -20 | cut -c1-200
