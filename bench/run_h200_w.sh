#!/usr/bin/env bash
# One device call for the first drafts of the session's kernel work, nothing else on the GPU: the sparse MLA decode
# (FP8 rows decoded by bit placement), the indexer decode (register-resident Top-K sets; run t has the old kernel), the
# KDA fused pair kernel on B1 T32768 H96, the AttnRes focused sweep, the KDA pool decode defaults, then every plugin
# GPU test spread over 14 processes (pytest-xdist, carried in .whl). Committed tree only (.snap/head, carried).
# usage: bash bench/run_h200_w.sh [SECONDS] (default 560). Results in $OUT/results_w.tgz, Triton caches in $OUT/caches.tgz.
. bench/h200.sh
. bench/h200_call.sh w ${1:-560}
timeout 85 python3 bench/bench_sparse_mla.py --quick-decode --out $R > $R/sparse_mla.log 2>&1
echo "== sparse mla rc=$?"; save
timeout 110 python3 bench/bench_indexer.py --decode-only --decode-kernels select --contexts 8192,32768,131072 \
  --heads 64 --out $R > $R/indexer.log 2>&1
echo "== indexer rc=$?"; save
timeout 100 python3 bench/bench_kda_prefill.py --pairs fused,fused_pairs,column --shapes 2 --out $R > $R/kda_prefill.log 2>&1
echo "== kda prefill rc=$?"; save
timeout 150 python3 bench/bench_attnres.py --sweep-cases --out $R > $R/attnres.log 2>&1
echo "== attnres rc=$?"; save
timeout 40 python3 bench/bench_kda_decode.py --quick --out $R > $R/kda_decode.log 2>&1
echo "== kda decode rc=$?"; save
timeout $(left) python3 -m pytest -q -p no:cacheprovider -n 14 -m gpu tests/plugins > $R/gpu_tests.log 2>&1
echo "== gpu tests rc=$?"; save
save_caches
tail -3 $R/gpu_tests.log | cut -c1-200
grep -E "FAILED|Error" $R/gpu_tests.log | head -8 | cut -c1-200
tail -14 $R/sparse_mla.log | cut -c1-150
grep -E "^(case|decode|ctx)|select|buffers" $R/indexer.log | tail -12 | cut -c1-150
grep -E "^\{|fused|column" $R/kda_prefill.log | tail -4 | cut -c1-400
tail -60 $R/attnres.log | cut -c1-140
grep -E "^B" $R/kda_decode.log | cut -c1-110
