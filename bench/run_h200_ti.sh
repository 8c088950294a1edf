#!/usr/bin/env bash
# Twentieth session of 2026-12-05, for whichever one-GPU card comes (three calls for an H200 got none): the decode
# indexer's merge candidates (h200_call.sh's merge_candidates) with the indexer kernels' tests first. Run ti (an H100,
# commit a4be4c2) ran merge_compact, 8 warps and both against the default of then (16 warps), B64 MXFP8 at 8K / 32K
# keys, then B1 / B8; merge_compact lost and went to branch cand/merge-compact, 8 warps became the default.
# run_h200_th.sh keeps the steps that need an H200 (the whole h200-slice).
# usage: bash bench/run_h200_ti.sh [SECONDS] (default 400); carry .whl, .snap and .tcache.
. bench/h200.sh
. bench/h200_call.sh ti ${1:-400}
export OMP_NUM_THREADS=1
merge_candidates
save_caches
merge_candidate_rows
