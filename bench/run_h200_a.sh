#!/usr/bin/env bash
# One device call: GPU tests of the landed kernels, then the KDA and AttnRes benchmarks; logs and JSON in $OUT.
. bench/h200.sh
R=/tmp/results; mkdir -p $R
timeout 170 python3 -m pytest -q -p no:cacheprovider -m gpu tests/plugins/test_kda_chunk_kernel.py \
  tests/plugins/test_kda_recurrent_kernel.py tests/plugins/test_short_conv_kernel.py tests/plugins/test_attnres_kernel.py \
  tests/plugins/test_moe_kernel.py tests/plugins/test_quant_kernel.py tests/plugins/test_cache_write_kernel.py \
  tests/plugins/test_paged_cache_kernel.py > $R/gpu_tests.log 2>&1
grep -E "passed|failed|FAILED|Error:" $R/gpu_tests.log | tail -30
tar czf $OUT/results_a.tgz -C $R .
for b in "kda_prefill 150" "kda_decode 140" "attnres 110"; do
  set -- $b
  timeout $2 python3 bench/bench_$1.py --out $R > $R/$1.log 2>&1; echo "== $1 rc=$?"; tail -22 $R/$1.log
  tar czf $OUT/results_a.tgz -C $R .
done
