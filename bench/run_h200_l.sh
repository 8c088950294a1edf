#!/usr/bin/env bash
# One device call, everything in sequence (sharing the GPU made runs h and i time out and skewed their timings):
# the H200 export (AOTI decode vs eager, load and step times; a fault is named by run_h200_k.sh), then the plugin GPU
# tests with the time left. Committed tree only (.snap/head, carried); Triton's cache comes back as $OUT/caches.tgz
# (bench/h200.sh: carry it as .tcache/caches.tgz next time).
# usage: bash bench/run_h200_l.sh [SECONDS] (default 540). Results in $OUT/results_l.tgz.
. bench/h200.sh
T=${1:-540}; start=$(date +%s); left() { echo $(( T - ($(date +%s) - start) - 10 )); }
R=/tmp/results; mkdir -p $R
rm -rf /tmp/head; cp -r .snap/head /tmp/head; cd /tmp/head; export PYTHONPATH=/tmp/site:/tmp/head
save() { tar czf $OUT/results_l.tgz -C $R . 2>/dev/null; }
timeout $(( T * 55 / 100 )) python3 bench/h200_export.py --no-reload --out $R > $R/h200_export.log 2>&1; echo "== export rc=$?"; save
timeout $(left) python3 -m pytest -q -rf -p no:cacheprovider -m gpu tests/plugins > $R/gpu_plugins.log 2>&1
echo "== plugin gpu tests rc=$?"; save; save_caches
grep -v "^W12\|^  \|Warning\|warn\|_launch: " $R/h200_export.log | tail -16 | cut -c1-220
grep -E "passed|failed|FAILED|rror" $R/gpu_plugins.log | cut -c1-160 | tail -8
