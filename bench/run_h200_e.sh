#!/usr/bin/env bash
# One device call: the H200 export (AOTInductor, 2-layer h200-slice) on cores 0-9 in the background while the
# runtime, AttnRes and KDA prefill benches and the GPU tests run on cores 10-15. Results in $OUT/results_e.tgz.
. bench/h200.sh
R=/tmp/results; mkdir -p $R
save() { tar czf $OUT/results_e.tgz -C $R . 2>/dev/null; }
(taskset -c 0-9 timeout 560 python3 bench/h200_export.py --out $R > $R/h200_export.log 2>&1; echo "rc=$?" >> $R/h200_export.log) &
export_pid=$!
for b in "bench_runtime 200" "bench_attnres 150" "bench_kda_prefill 70 --quick"; do
  set -- $b; name=$1; limit=$2; shift 2
  taskset -c 10-15 timeout $limit python3 bench/$name.py --out $R "$@" > $R/$name.log 2>&1; echo "== $name rc=$?"
  save
done
taskset -c 10-15 timeout 100 python3 -m pytest -q -p no:cacheprovider -m gpu tests/plugins/test_kda_chunk_kernel.py \
  tests/plugins/test_quant_kernel.py tests/plugins/test_attnres_kernel.py > $R/gpu_tests_e.log 2>&1
echo "== gpu tests rc=$?"; save
wait $export_pid; save
for f in bench_runtime bench_attnres bench_kda_prefill; do echo "== $f"; grep -v "^W1202\|^  \|^{" $R/$f.log | tail -28 | cut -c1-200; done
echo "== gpu tests"; grep -E "passed|failed|FAILED|Error" $R/gpu_tests_e.log | cut -c1-200 | tail -12
echo "== export"; grep -v "^W1202\|^  " $R/h200_export.log | tail -25 | cut -c1-220
