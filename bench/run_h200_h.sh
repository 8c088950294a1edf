#!/usr/bin/env bash
# One device call: the AOTI decode crash of run_h200_f.sh located (cores 0-9, background): the H200 export with
# AOTInductor's input checks and synchronous launches, the built package copied back, then one decode step of it in
# a process of its own, plainly and under compute-sanitizer. Beside it (cores 10-15): every plugin GPU test, the KDA
# chunk bench (column-block pair kernel) and the indexer bench. Committed tree only (.snap/head, carried).
# usage: bash bench/run_h200_h.sh [SECONDS]: slots scaled to fit SECONDS (default 540). Results in $OUT/results_h.tgz.
. bench/h200.sh
T=${1:-540}; slot() { echo $(( $1 * T / 540 )); }
R=/tmp/results; mkdir -p $R
rm -rf /tmp/head /tmp/base; cp -r .snap/head /tmp/head; cp -r .snap/head /tmp/base; cp -r .snap/kda_old/. /tmp/base/
cd /tmp/head; export PYTHONPATH=/tmp/site:/tmp/head
save() { tar czf $OUT/results_h.tgz -C $R . 2>/dev/null; }
export_job() {
  cd /tmp/base; export PYTHONPATH=/tmp/site:/tmp/base AOTI_RUNTIME_CHECK_INPUTS=1
  CUDA_LAUNCH_BLOCKING=1 timeout $(slot 330) python3 bench/h200_export.py --no-reload --out $R > $R/h200_export.log 2>&1
  echo "rc=$?" >> $R/h200_export.log
  cp /tmp/dayzero_export/decode.pt2 /tmp/dayzero_export/engine.json $R/ 2>/dev/null
  timeout $(slot 60) python3 bench/aoti_decode_probe.py > $R/probe_plain.log 2>&1; echo "rc=$?" >> $R/probe_plain.log
  timeout $(slot 130) compute-sanitizer --tool memcheck --print-limit 6 python3 bench/aoti_decode_probe.py \
    > $R/probe_sanitizer.log 2>&1; echo "rc=$?" >> $R/probe_sanitizer.log
}
(taskset -c 0-9 bash -c "$(declare -f export_job slot); T=$T R=$R; export_job") &
export_pid=$!
fg() { taskset -c 10-15 "$@"; }
fg timeout $(slot 150) python3 -m pytest -q -rf -p no:cacheprovider -m gpu tests/plugins > $R/gpu_plugins.log 2>&1
echo "== plugin gpu tests rc=$?"; save
fg timeout $(slot 130) python3 bench/bench_kda_prefill.py --quick --out $R > $R/bench_kda_prefill.log 2>&1
echo "== kda bench rc=$?"; save
fg timeout $(slot 150) python3 bench/bench_indexer.py --quick --out $R > $R/bench_indexer.log 2>&1
echo "== indexer bench rc=$?"; save
wait $export_pid; save
echo "== gpu tests"; grep -E "passed|failed|FAILED|rror" $R/gpu_plugins.log | cut -c1-160 | tail -8
echo "== kda bench"; grep -v "^W12\|^  \|^{\|Warn" $R/bench_kda_prefill.log | tail -10 | cut -c1-200
echo "== indexer bench"; tail -14 $R/bench_indexer.log | cut -c1-200
echo "== export"; grep -v "^W12\|^  \|Warning" $R/h200_export.log | tail -8 | cut -c1-260
echo "== probe"; tail -4 $R/probe_plain.log | cut -c1-260
grep -E "Invalid|name|at 0x|ERROR SUMMARY|decode ok|Error|rc=" $R/probe_sanitizer.log | head -20 | cut -c1-260
