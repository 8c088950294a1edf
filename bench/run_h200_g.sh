#!/usr/bin/env bash
# One device call to locate the illegal memory access of run_h200_f.sh's AOTI decode step: the H200 export again
# (loaded once, AOTInductor's run-time input checks on, synchronous launches), then one decode step of the built
# package in a process of its own under compute-sanitizer (which names the faulting kernel).
# usage: bash bench/run_h200_g.sh [SECONDS for the export]
. bench/h200.sh
R=/tmp/results; mkdir -p $R
rm -rf /tmp/head; cp -r .snap/head /tmp/head; cp -r .snap/kda_old/. /tmp/head/ 2>/dev/null; cd /tmp/head
export PYTHONPATH=/tmp/site:/tmp/head
AOTI_RUNTIME_CHECK_INPUTS=1 CUDA_LAUNCH_BLOCKING=1 timeout ${1:-200} python3 bench/h200_export.py --no-reload --out $R \
  > $R/h200_export_g.log 2>&1; echo "== export rc=$?"
timeout 240 compute-sanitizer --tool memcheck --print-limit 8 python3 bench/aoti_decode_probe.py > $R/probe.log 2>&1
echo "== probe under compute-sanitizer rc=$?"
cp $R/* $OUT/ 2>/dev/null
grep -v "^W1203\|Warning\|warn\|^  " $R/h200_export_g.log | tail -10 | cut -c1-260
grep -E "Invalid|kernel|at 0x|ERROR SUMMARY|decode ok|Error" $R/probe.log | head -24 | cut -c1-260
