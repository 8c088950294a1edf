#!/usr/bin/env bash
# Seventh session of 2026-12-04, third call: the merge writes its last step's positions straight to the output. The
# indexer GPU tests (the chunked path's too), then the indexer decode bench at B64 (8K / 32K / 128K, HI 32 / 64,
# MXFP8) at the defaults, with 8 warps, and with 8192-entry unions on 8 warps (a search per 6144 keys, not 2048);
# the chunked kernels at B64 (scoring without selection state: where the split kernel's time goes); B1 / B8.
# usage: bash bench/run_h200_gc.sh [SECONDS] (default 480).
. bench/h200.sh
. bench/h200_call.sh gc ${1:-480}
export OMP_NUM_THREADS=1
indexer_gpu_tests
indexer_decode b64 64 8192,32768,131072 32,64
indexer_decode b64_w8 64 8192,32768,131072 32,64 '{"num_warps": 8}'
indexer_decode b64_u8192_w8 64 8192,32768,131072 32,64 '{"num_warps": 8, "union_keys": 8192}'
indexer_decode small 1,8 8192,32768,131072 64
timeout 120 python3 bench/bench_indexer.py --decode-only --decode-kernels chunked --batch 64 --contexts 8192,32768,131072 \
  --heads 32,64 --caches mxfp8 --out $R/b64_chunked > $R/indexer_b64_chunked.log 2>&1
echo "== indexer b64_chunked rc=$? at $(( $(date +%s) - start )) s"; save
for n in b64 b64_w8 b64_u8192_w8 small b64_chunked; do
  echo "-- $n"; python3 -m bench.result_rows indexer $R/$n/*.json 2>/dev/null | cut -c1-240
done
