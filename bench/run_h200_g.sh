#!/usr/bin/env bash
# One short device call: the H200 export again, loaded once, with AOTInductor's run-time input checks and
# synchronous launches, to locate the illegal memory access of run_h200_f.sh's AOTI decode step.
. bench/h200.sh
R=/tmp/results; mkdir -p $R
rm -rf /tmp/head; cp -r .snap/head /tmp/head; cp -r .snap/kda_old/. /tmp/head/; cd /tmp/head; export PYTHONPATH=/tmp/site:/tmp/head
AOTI_RUNTIME_CHECK_INPUTS=1 CUDA_LAUNCH_BLOCKING=1 timeout ${1:-170} python3 bench/h200_export.py --no-reload --out $R \
  > $R/h200_export_g.log 2>&1; echo "rc=$?"
cp $R/* $OUT/ 2>/dev/null
grep -v "^W1203\|Warning\|warn\|^  " $R/h200_export_g.log | tail -14 | cut -c1-260
