#!/usr/bin/env bash
# One device call: GPU tests of the landed kernels, then the KDA and AttnRes benchmarks; logs and JSON in $OUT.
. bench/h200.sh
R=/tmp/results; mkdir -p $R
timeout 240 python3 -m pytest -q -p no:cacheprovider -m gpu tests/plugins/test_kda_chunk_kernel.py \
  tests/plugins/test_kda_recurrent_kernel.py tests/plugins/test_short_conv_kernel.py tests/plugins/test_attnres_kernel.py \
  tests/plugins/test_moe_kernel.py tests/plugins/test_quant_kernel.py tests/plugins/test_cache_write_kernel.py \
  tests/plugins/test_paged_cache_kernel.py > $R/gpu_tests.log 2>&1
tail -30 $R/gpu_tests.log | grep -E "passed|failed|FAILED|Error" | head -30
for b in kda_prefill kda_decode attnres; do
  timeout 170 python3 bench/bench_$b.py --out $R > $R/$b.log 2>&1; echo "== $b rc=$?"; tail -25 $R/$b.log
done
tar czf $OUT/results_a.tgz -C $R .
