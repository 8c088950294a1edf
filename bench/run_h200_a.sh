#!/usr/bin/env bash
# One device call: GPU tests of the landed kernels, then the KDA, AttnRes and sparse-MLA benchmarks; results in $OUT.
. bench/h200.sh
R=/tmp/results; mkdir -p $R
timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/plugins/test_kda_chunk_kernel.py \
  tests/plugins/test_kda_recurrent_kernel.py tests/plugins/test_short_conv_kernel.py tests/plugins/test_attnres_kernel.py \
  tests/plugins/test_moe_kernel.py tests/plugins/test_quant_kernel.py tests/plugins/test_cache_write_kernel.py \
  tests/plugins/test_paged_cache_kernel.py tests/plugins/test_sparse_mla_kernel.py > $R/gpu_tests.log 2>&1
grep -E "passed|failed|FAILED|Error:" $R/gpu_tests.log | cut -c1-200 | tail -30
tar czf $OUT/results_a.tgz -C $R .
for b in "kda_prefill 120" "kda_decode 100" "attnres 80" "sparse_mla 90 --prefill-tokens 8192 --no-sweep"; do
  set -- $b
  name=$1; limit=$2; shift 2
  timeout $limit python3 bench/bench_$name.py --out $R "$@" > $R/$name.log 2>&1; echo "== $name rc=$?"
  tail -16 $R/$name.log | cut -c1-220
  tar czf $OUT/results_a.tgz -C $R .
done
