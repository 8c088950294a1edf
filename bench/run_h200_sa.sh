#!/usr/bin/env bash
# Eighteenth session of 2026-12-05: issue 4's indexer bench in one call on the machine lent (run rf's was an H100:
# its copy ceiling, not the H200's, is the measure), every case checked against the reference first, then two knobs
# of the MXFP8 decode, each against the default in the same call:
# 1. the indexer GPU tests; bench_indexer.py with its default cases (decode B64 8K / 32K / 128K keys, HI 32 / 64,
#    MXFP8 and BF16 caches, the verify rows, prefill T 32768);
# 2. the split kernel's pipeline 4 and 5 stages deep at HI 64 (3 is the default; at HI 32 the unrolled FP8 loop's 4
#    stages would take 136 KB of shared memory, one program an SM, offline sm_90);
# 3. the merge on 8 and 4 warps at HI 32 (16 is the default, chosen while the merge still sorted; its bitwise search
#    is a chain of block-wide counts, each cheaper on fewer warps).
# usage: bash bench/run_h200_sa.sh [SECONDS] (default 560); carry .whl, .snap and .tcache.
. bench/h200.sh
. bench/h200_call.sh sa ${1:-560}
export OMP_NUM_THREADS=1
export CACHE_BYTES=$(( 29 * 1024 * 1024 ))
indexer_gpu_tests
timeout 200 python3 bench/bench_indexer.py --out $R/indexer > $R/indexer.log 2>&1
echo "== indexer rc=$? at $(( $(date +%s) - start )) s"; save
indexer_decode stages4 64 8192,32768,131072 64 '{"num_stages": 4}'
indexer_decode stages5 64 8192,32768,131072 64 '{"num_stages": 5}'
indexer_decode merge8 64 8192,32768,131072 32 '{"merge_warps": 8}'
indexer_decode merge4 64 8192,32768,131072 32 '{"merge_warps": 4}'
save_caches
indexer_rows $R/indexer/bench_indexer.json 2>/dev/null | cut -c1-160
for n in stages4 stages5 merge8 merge4; do echo "# $n"; indexer_rows $R/$n/bench_indexer.json 2>/dev/null | cut -c1-160; done
