#!/usr/bin/env bash
# The session's last device call, nothing else on the GPU: the KDA fused pair kernel against the column path and fla
# on B1 T32768 H96, the AttnRes decode-size cases under the new two-source warps (run v's kernels), the indexer's MXFP8
# f16 key path against the default select kernel, then the GPU tests of every kernel changed this session spread over 14 processes (pytest-xdist).
# Committed tree only (.snap/head, carried). usage: bash bench/run_h200_x.sh [SECONDS] (default 360).
. bench/h200.sh
. bench/h200_call.sh x ${1:-360}
timeout 90 python3 bench/bench_indexer.py --decode-only --decode-kernels select,select-f16 --contexts 8192,32768,131072 --heads 64 \
  --caches mxfp8 --out $R > $R/indexer.log 2>&1
echo "== indexer rc=$?"; save
timeout 130 python3 bench/bench_kda_prefill.py --pairs fused,column --shapes 2 --no-reference-check --out $R \
  > $R/kda_prefill.log 2>&1
echo "== kda prefill rc=$?"; save
timeout 40 python3 bench/bench_attnres.py --sweep-cases --decode-cases --out $R > $R/attnres.log 2>&1
echo "== attnres rc=$?"; save
timeout $(left) python3 -m pytest -q -p no:cacheprovider -n 14 -m gpu tests/plugins/test_kda_chunk_kernel.py \
  tests/plugins/test_kda_recurrent_kernel.py tests/plugins/test_indexer_select.py tests/plugins/test_indexer_kernel.py \
  tests/plugins/test_sparse_mla_fp8_decode.py tests/plugins/test_attnres_kernel.py tests/plugins/test_indexer_f16_keys.py > $R/gpu_tests.log 2>&1
echo "== gpu tests rc=$?"; save
tail -3 $R/gpu_tests.log | cut -c1-200
grep -E "FAILED|Error" $R/gpu_tests.log | head -8 | cut -c1-200
grep -E "^B|shape|fused|column" $R/kda_prefill.log | tail -6 | cut -c1-600
tail -16 $R/attnres.log | cut -c1-140
grep -E "^decode" $R/indexer.log | cut -c1-150
