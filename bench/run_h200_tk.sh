#!/usr/bin/env bash
# Twentieth session of 2026-12-05, the session's final code on any one-GPU card: the tree merge (run ti2) with up to 64
# splits a row (run tj) and the merge on 8 warps (run ti) are the defaults now.
# 1. the whole GPU suite (pytest -m gpu tests, 6 workers), then the indexer kernels' tests that carry no gpu mark
#    (test_indexer_select.py's tree and split-count cases included) at their GPU sizes;
# 2. indexer decode with the defaults: B1 / B2 / B4 / B8 HI 64 MXFP8 at 32K and 128K keys, then B64 HI 32 / 64 MXFP8 at
#    8K / 32K / 128K keys.
# usage: bash bench/run_h200_tk.sh [SECONDS] (default 480); carry .whl, .snap and .tcache.
. bench/h200.sh
. bench/h200_call.sh tk ${1:-480}
export OMP_NUM_THREADS=1
timeout -s INT -k 15 270 python3 -m pytest -q -rfE -p no:cacheprovider -n 6 -m gpu tests > $R/gpu_all.log 2>&1
echo "== gpu tests rc=$? at $(( $(date +%s) - start )) s"; test_summary $R/gpu_all.log; save
timeout -s INT -k 15 60 python3 -m pytest -q -rfE -p no:cacheprovider -n 6 tests/plugins/test_indexer_select.py \
  > $R/indexer_select.log 2>&1
echo "== indexer select tests rc=$? at $(( $(date +%s) - start )) s"; test_summary $R/indexer_select.log; save
indexer_decode small 1,2,4,8 32768,131072 64
indexer_decode b64 64 8192,32768,131072 32,64
save_caches
for f in $R/{small,b64}/bench_indexer.json; do echo "# $f"; indexer_rows $f | cut -c1-230; done
