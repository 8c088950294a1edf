#!/usr/bin/env bash
# One device call: the AttnRes, quant, indexer, DSA-accuracy and MoE benchmarks, then the GPU tests with the time
# left (indexer tests first: they never ran there). Results in $OUT/results_b.tgz.
. bench/h200.sh
R=/tmp/results; mkdir -p $R
for b in "attnres 80" "quant 60" "indexer 90" "dsa_accuracy 100" "moe 110"; do
  set -- $b
  name=$1; limit=$2
  script=bench/bench_$name.py; [ -f $script ] || script=bench/$name.py
  timeout $limit python3 $script --out $R > $R/$name.log 2>&1; echo "== $name rc=$?"
  tail -14 $R/$name.log | cut -c1-200
  tar czf $OUT/results_b.tgz -C $R .
done
left=$((570 - SECONDS)); echo "== gpu tests with ${left}s"
timeout $left python3 -m pytest -v -p no:cacheprovider -m gpu tests/plugins/test_indexer_kernel.py tests/plugins \
  > $R/gpu_tests.log 2>&1
grep -cE " PASSED" $R/gpu_tests.log; grep -E " FAILED|Error" $R/gpu_tests.log | cut -c1-200 | head -20
tail -3 $R/gpu_tests.log | cut -c1-200
tar czf $OUT/results_b.tgz -C $R .
