#!/usr/bin/env bash
# Twenty-first session of 2026-12-05 (no device then), for any one-GPU card: what that session wrote on CPU.
# 1. the indexer kernels' GPU tests (the f16 key dot's new file included); the whole GPU suite (the merge's finality
#    is per row at run time now, and exported engines take the tree merge and 64 splits) is run_h200_tk.sh's call;
# 2. the f16 key dot against the FP8 dot (decode kernels select-f16 / select), B64 HI 32 / 64 MXFP8 at 8K / 32K / 128K
#    keys (offline sm_90: 623 against 927 key-loop instructions a 128-key tile at HI 64, 1099 against 1129 for two
#    tiles at HI 32), then B1 / B8 at 32K / 128K keys; then both with the candidate buffer (option candidates: a
#    block's keys filtered against the set's K-th key, one search a full buffer instead of one a block).
# usage: bash bench/run_h200_ua.sh [SECONDS] (default 560); carry .whl, .snap and .tcache.
. bench/h200.sh
. bench/h200_call.sh ua ${1:-560}
export OMP_NUM_THREADS=1
indexer_gpu_tests
indexer_decode b64 64 8192,32768,131072 32,64 '{}' select,select-f16 170
indexer_decode small 1,8 32768,131072 64 '{}' select,select-f16
indexer_decode candidates 64 8192,32768,131072 32,64 '{"candidates": true}' select,select-f16 150
save_caches
for f in $R/{b64,small,candidates}/bench_indexer.json; do echo "# $f"; indexer_rows $f | cut -c1-230; done
