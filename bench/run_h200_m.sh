#!/usr/bin/env bash
# One device call: the H200 export compare (bench/h200_export.py) with synchronous launches, so that the illegal
# memory access of run l is raised by the kernel that makes it (the probe of run k, on random caches without a
# prefill, did not fault). usage: bash bench/run_h200_m.sh. Results in $OUT/results_m.tgz.
. bench/h200.sh
R=/tmp/results; mkdir -p $R
rm -rf /tmp/head; cp -r .snap/head /tmp/head; cd /tmp/head; export PYTHONPATH=/tmp/site:/tmp/head
CUDA_LAUNCH_BLOCKING=1 timeout 400 python3 bench/h200_export.py --no-reload --out $R > $R/h200_export.log 2>&1
echo "== export rc=$?"
tar czf $OUT/results_m.tgz -C $R .
grep -v "^W12\|Warn\|warn\|^  \|_launch: " $R/h200_export.log | tail -24 | cut -c1-240
