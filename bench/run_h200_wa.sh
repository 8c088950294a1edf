#!/usr/bin/env bash
# Twenty-third session of 2026-12-06, any one-GPU card: run vc's steps, then run va's whole GPU suite again.
# 1. run va's two indexer tests that failed out of GPU memory beside five other workers, alone (fp32-dot tiles of at
#    most 1024 logits since commit b4ee742);
# 2. the candidate buffer (option candidates) against the default select kernel, B64 HI 32 / 64 MXFP8 at 8K / 32K /
#    128K keys, then B1 / B8 HI 64 at 32K / 128K keys;
# 3. the whole GPU suite on 6 workers (the fp32 tiles under the memory pressure that failed run va), for the time left.
# usage: bash bench/run_h200_wa.sh [SECONDS] (default 560); carry .whl, .snap and .tcache.
. bench/h200.sh
. bench/h200_call.sh wa ${1:-560}
export OMP_NUM_THREADS=1
timeout -s INT -k 15 60 python3 -m pytest -q -rfE -p no:cacheprovider -m gpu tests/plugins/test_indexer_kernel.py \
  -k "test_decode_matches_reference and 9000 and fp32" > $R/indexer_fp32.log 2>&1
echo "== indexer fp32 tests rc=$? at $(( $(date +%s) - start )) s"; test_summary $R/indexer_fp32.log; save
indexer_decode default_1 64 8192,32768,131072 32,64 '{}' select 60
indexer_decode candidates_1 64 8192,32768,131072 32,64 '{"candidates": true}' select 70
indexer_decode small_candidates 1,8 32768,131072 64 '{"candidates": true}' select 40
indexer_decode small_default 1,8 32768,131072 64 '{}' select 40
save_caches
for f in $R/*/bench_indexer.json; do echo "# $f"; indexer_rows $f | cut -c1-200; done
timeout -s INT -k 15 $(left) python3 -m pytest -q -rfE -p no:cacheprovider -n 6 -m gpu tests > $R/gpu_all.log 2>&1
echo "== gpu tests rc=$? at $(( $(date +%s) - start )) s"; test_summary $R/gpu_all.log; save
