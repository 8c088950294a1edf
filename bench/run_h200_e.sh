#!/usr/bin/env bash
# One device call: the H200 export (AOTInductor, 2-layer h200-slice) on cores 0-9 in the background while the
# runtime, AttnRes, MoE and KDA prefill benches and GPU tests run on cores 10-15. Results in $OUT/results_e.tgz.
# A carried `.snap/` folder holds committed files: the export and runtime bench run on a copy of the tree with
# them laid over (a known-good kernel set), the KDA tests and bench on the tree itself.
. bench/h200.sh
R=/tmp/results; mkdir -p $R
rm -rf /tmp/base; mkdir -p /tmp/base; cp -r dayzero bench tests configs /tmp/base/; [ -d .snap ] && cp -r .snap/. /tmp/base/
base() { (cd /tmp/base && PYTHONPATH=/tmp/site:/tmp/base "$@"); }
save() { tar czf $OUT/results_e.tgz -C $R . 2>/dev/null; }
(base taskset -c 0-9 timeout 560 python3 bench/h200_export.py --out $R > $R/h200_export.log 2>&1; echo "rc=$?" >> $R/h200_export.log) &
export_pid=$!
fg() { taskset -c 10-15 "$@"; }
fg timeout 100 python3 -m pytest -q -p no:cacheprovider -m gpu tests/plugins/test_moe_kernel.py tests/plugins/test_quant_kernel.py \
  tests/plugins/test_kda_chunk_kernel.py > $R/gpu_tests_e.log 2>&1; echo "== gpu tests rc=$?"; save
base fg timeout 170 python3 bench/bench_runtime.py --out $R > $R/bench_runtime.log 2>&1; echo "== runtime rc=$?"; save
for b in "bench_moe 80" "bench_attnres 100" "bench_kda_prefill 70 --quick"; do
  set -- $b; name=$1; limit=$2; shift 2
  fg timeout $limit python3 bench/$name.py --out $R "$@" > $R/$name.log 2>&1; echo "== $name rc=$?"
  save
done
wait $export_pid; save
for f in bench_runtime bench_moe bench_attnres bench_kda_prefill; do echo "== $f"; grep -v "^W1202\|^  \|^{" $R/$f.log | tail -22 | cut -c1-180; done
echo "== gpu tests"; grep -E "passed|failed|FAILED|Error" $R/gpu_tests_e.log | cut -c1-160 | tail -10
echo "== export"; grep -v "^W1202\|^  " $R/h200_export.log | tail -22 | cut -c1-200
