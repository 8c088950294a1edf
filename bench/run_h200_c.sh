#!/usr/bin/env bash
# One device call: GPU tests of the fixed kernels (quant, indexer) and the indexer streams, the H200 export of an
# h200-slice through AOTInductor, and the two-stream indexer bench. Results in $OUT/results_c.tgz.
. bench/h200.sh
R=/tmp/results; mkdir -p $R
timeout 120 python3 -m pytest -q -p no:cacheprovider -m gpu tests/plugins/test_quant_kernel.py \
  tests/plugins/test_indexer_kernel.py tests/model/test_indexer_streams.py tests/plugins/test_kda_chunk_kernel.py > $R/gpu_tests_c.log 2>&1
echo "== gpu tests rc=$?"; grep -E "passed|failed|FAILED|Error:" $R/gpu_tests_c.log | cut -c1-200 | tail -12
tar czf $OUT/results_c.tgz -C $R .
timeout 70 python3 bench/bench_kda_prefill.py --quick --out $R > $R/kda_prefill.log 2>&1; echo "== kda rc=$?"
tail -8 $R/kda_prefill.log | cut -c1-200; tar czf $OUT/results_c.tgz -C $R .
for b in "h200_export 280" "bench_indexer_streams 50"; do
  set -- $b
  timeout $2 python3 bench/$1.py --out $R > $R/$1.log 2>&1; echo "== $1 rc=$?"
  grep -v "^W1202\|^  " $R/$1.log | tail -22 | cut -c1-220
  tar czf $OUT/results_c.tgz -C $R .
done
