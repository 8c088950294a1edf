#!/usr/bin/env bash
# One device call for what changed after run u (issues 3 and 5), nothing else on the GPU: the GPU tests of the KDA
# chunk kernels (triangle tiles loaded whole) and of AttnRes, the KDA prefill bench on all three shapes, the KDA
# decode bench (one-warp pool programs), then the AttnRes bench timed by CUDA-graph replay at every size, no sweep.
# Committed tree only (.snap/head, carried).
# usage: bash bench/run_h200_v.sh [SECONDS] (default 570). Results in $OUT/results_v.tgz.
. bench/h200.sh
. bench/h200_call.sh v ${1:-570}
timeout $(( T * 25 / 100 )) python3 -m pytest -q -p no:cacheprovider -m gpu tests/plugins/test_kda_chunk_kernel.py \
  tests/plugins/test_attnres_kernel.py > $R/gpu_tests.log 2>&1
echo "== gpu tests rc=$?"; save
timeout $(( T * 30 / 100 )) python3 bench/bench_kda_prefill.py --quick --out $R > $R/kda_prefill.log 2>&1
echo "== kda prefill rc=$?"; save
timeout $(( T * 20 / 100 )) python3 bench/bench_kda_decode.py --out $R > $R/kda_decode.log 2>&1
echo "== kda decode rc=$?"; save
timeout $(left) python3 bench/bench_attnres.py --no-sweep --out $R > $R/bench_attnres.log 2>&1
echo "== attnres rc=$?"; save
grep -E "passed|failed|FAILED|rror" $R/gpu_tests.log | cut -c1-160 | tail -6
grep "^B" $R/kda_prefill.log | tail -3 | cut -c1-300
tail -50 $R/kda_decode.log | grep -E "B(1|64|256) H" | grep -E "pool|fla " | cut -c1-140 | head -24
grep -A40 "^ N     T" $R/bench_attnres.log | cut -c1-160 | head -30
