#!/usr/bin/env bash
# One device call for the code written without a GPU in the 2026-12-03 afternoon session: the GPU tests of the
# changed kernels at realistic sizes (AttnRes tiles and configs, the KDA sub-chunk pair path, the KDA decode stream
# knob, sparse MLA value-column blocks), then the KDA decode bench with its stream sweep, then the sparse MLA decode
# value-block configs. Committed tree only (.snap/head, carried).
# usage: bash bench/run_h200_q.sh [SECONDS] (default 580). Results in $OUT/results_q.tgz.
. bench/h200.sh
. bench/h200_call.sh q ${1:-580}
timeout $(( T * 40 / 100 )) python3 -m pytest -q -rf -p no:cacheprovider -m gpu tests/plugins/test_attnres_kernel.py \
  tests/plugins/test_kda_chunk_kernel.py tests/plugins/test_kda_recurrent_kernel.py \
  tests/plugins/test_sparse_mla_kernel.py > $R/gpu_tests.log 2>&1
echo "== gpu tests rc=$?"; save
timeout $(( T * 35 / 100 )) python3 bench/bench_kda_decode.py --out $R > $R/kda_decode.log 2>&1
echo "== kda decode rc=$?"; save
timeout $(left) python3 bench/bench_sparse_mla.py --no-sweep --value-blocks --decode-only --out $R > $R/sparse_mla.log 2>&1
echo "== sparse mla rc=$?"; save
grep -E "passed|failed|FAILED|rror" $R/gpu_tests.log | cut -c1-160 | tail -8
tail -50 $R/kda_decode.log | grep -E "B(1|64|256) H|ceilings" | cut -c1-140 | head -40
tail -14 $R/sparse_mla.log | cut -c1-160
