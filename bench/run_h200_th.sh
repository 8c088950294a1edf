#!/usr/bin/env bash
# Twentieth session of 2026-12-05: run tg's steps on an H200 (tg got an H100, where the whole h200-slice does not fit),
# with the decode indexer's merge on 16 warps against 8 in the same call:
# 1. issue 4's bench with the 64-call graph column (issue4_bench);
# 2. the indexer kernels' tests, GPU-marked or not (GPU sizes where they have them);
# 3. the decode indexer's merge on 16 warps against 8 (the default since run ti on an H100), B64 MXFP8 at 8K and 32K
#    keys twice in turn, then B1 / B8 HI 64 at 32K and 128K keys, where 16-32 splits a row fold in sequence (8 and 16
#    warps) or in a tree of merge programs (merge_tree, written after run ti);
# 4. the late-PDL combine against plain in 50-call graphs (bench/sparse_mla_pdl_replay.py);
# 5. speculative decoding on the whole h200-slice with --margins.
# usage: bash bench/run_h200_th.sh [SECONDS] (default 560); carry .whl, .snap and .tcache.
. bench/h200.sh
. bench/h200_call.sh th ${1:-560}
export OMP_NUM_THREADS=1
issue4_bench 90
merge_candidates
pdl_replay
save_caches
spec_decode_slice
indexer_rows $R/indexer/bench_indexer.json 2>/dev/null | cut -c1-190
merge_candidate_rows
sparse_mla_rows $R/mla_decode/sparse_mla.json 2>/dev/null | grep -E "gluon" | cut -c1-190
sparse_mla_rows $R/mla_prefill/sparse_mla.json 2>/dev/null | grep "prefill T32768 H128" | cut -c1-160
tail -8 $R/pdl_replay.log
grep -v "^\[" $R/spec_decode.log | tail -20 | cut -c1-200
