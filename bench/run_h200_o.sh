#!/usr/bin/env bash
# One device call: the H200 export check alone on the GPU (bench/h200_export.py: build, load twice, AOTI decode vs
# eager over 3 steps, step times, CUDA-graph replay), after the MoE permutation fix of runs m/n.
# usage: bash bench/run_h200_o.sh. Results in $OUT/results_o.tgz.
. bench/h200.sh
R=/tmp/results_o; mkdir -p $R
rm -rf /tmp/head; cp -r .snap/head /tmp/head; cd /tmp/head; export PYTHONPATH=/tmp/site:/tmp/head
timeout 400 python3 bench/h200_export.py --out $R > $R/h200_export.log 2>&1
echo "== export rc=$?"
tar czf $OUT/results_o.tgz -C $R .
grep -v "^W12\|Warn\|warn\|^  " $R/h200_export.log | tail -20 | cut -c1-240
