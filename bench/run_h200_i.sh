#!/usr/bin/env bash
# One device call: the H200 export with the symbolic-safe launch plans (cores 0-9, background): AOTI decode vs eager,
# load and step times; a compute-sanitizer probe only if the decode fails. Beside it (cores 10-15): the KDA chunk GPU
# tests, the KDA chunk bench (plain and CUDA-graph times), the indexer bench (MXFP8 keys loaded by 32-blocks), then
# every other plugin GPU test.
# Committed tree only (.snap/head, carried). usage: bash bench/run_h200_i.sh [SECONDS] (default 540).
. bench/h200.sh
T=${1:-540}; slot() { echo $(( $1 * T / 540 )); }
R=/tmp/results; mkdir -p $R
rm -rf /tmp/head; cp -r .snap/head /tmp/head; cd /tmp/head; export PYTHONPATH=/tmp/site:/tmp/head
save() { tar czf $OUT/results_i.tgz -C $R . 2>/dev/null; }
export_job() {
  timeout $(slot 360) python3 bench/h200_export.py --out $R > $R/h200_export.log 2>&1; echo "rc=$?" >> $R/h200_export.log
  if ! grep -q "decode_logits_rel_err" $R/h200_export.log; then
    AOTI_RUNTIME_CHECK_INPUTS=1 timeout $(slot 120) compute-sanitizer --tool memcheck --print-limit 6 \
      python3 bench/aoti_decode_probe.py > $R/probe_sanitizer.log 2>&1; echo "rc=$?" >> $R/probe_sanitizer.log
  fi
}
(taskset -c 0-9 bash -c "$(declare -f export_job slot); T=$T R=$R; export_job") &
export_pid=$!
fg() { taskset -c 10-15 "$@"; }
gpu_tests() { fg timeout $(slot $1) python3 -m pytest -q -rf -p no:cacheprovider -m gpu "${@:3}" > $R/$2.log 2>&1; echo "== $2 rc=$?"; save; }
gpu_tests 100 gpu_kda_chunk tests/plugins/test_kda_chunk_kernel.py tests/plugins/test_kda_summary_op.py
fg timeout $(slot 130) python3 bench/bench_kda_prefill.py --quick --out $R > $R/bench_kda_prefill.log 2>&1
echo "== kda bench rc=$?"; save
fg timeout $(slot 90) python3 bench/bench_indexer.py --quick --out $R > $R/bench_indexer.log 2>&1
echo "== indexer bench rc=$?"; save
gpu_tests 170 gpu_plugins_rest tests/plugins --deselect tests/plugins/test_kda_chunk_kernel.py \
  --ignore tests/plugins/test_kda_chunk_kernel.py --ignore tests/plugins/test_kda_summary_op.py
wait $export_pid; save
for log in gpu_kda_chunk gpu_plugins_rest; do echo "== $log"; grep -E "passed|failed|FAILED|rror" $R/$log.log | cut -c1-160 | tail -6; done
echo "== kda bench"; grep -v "^W12\|^  \|^{\|Warn\|^B\|_warn" $R/bench_kda_prefill.log | tail -8 | cut -c1-240
echo "== indexer bench"; tail -13 $R/bench_indexer.log | cut -c1-200
echo "== export"; grep -v "^W12\|^  \|Warning\|warn" $R/h200_export.log | tail -18 | cut -c1-240
[ -f $R/probe_sanitizer.log ] && grep -E "Invalid|name|at 0x|ERROR SUMMARY|decode ok|Error|rc=" $R/probe_sanitizer.log | head -16 | cut -c1-240
true
