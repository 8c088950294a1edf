#!/usr/bin/env bash
# One device call: run m's compare (eager prefill, then AOTI decode; faults only after a real prefill, not on the
# random caches of run k's probe) with the decode package built with AOTInductor's kernel-name printer and
# synchronous launches: the last kernel named before the error is the faulting one.
# usage: bash bench/run_h200_n.sh. Results in $OUT/results_n.tgz.
. bench/h200.sh
R=/tmp/results; mkdir -p $R
rm -rf /tmp/head; cp -r .snap/head /tmp/head; cd /tmp/head; export PYTHONPATH=/tmp/site:/tmp/head
AOT_INDUCTOR_DEBUG_INTERMEDIATE_VALUE_PRINTER=3 CUDA_LAUNCH_BLOCKING=1 timeout 400 \
  python3 bench/h200_export.py --no-reload --out $R > $R/h200_export.log 2>&1
echo "== export rc=$?"
tar czf $OUT/results_n.tgz -C $R .
grep -v "^W12\|Warn\|warn\|^  " $R/h200_export.log | grep -B12 -A3 "rror" | tail -24 | cut -c1-240
