#!/usr/bin/env bash
# Fifth device call of 2026-12-04's fifth session, at the session's final code: the whole GPU suite, then the runtime
# on the h200-slice (bench_runtime.py: decode at batch 1 / 16 / 64 with and without CUDA graphs, now with decode rows
# in state-slot order and the lowest free slot group first; time to first token of an 8K prompt).
# usage: bash bench/run_h200_fe.sh [SECONDS] (default 480).
. bench/h200.sh
. bench/h200_call.sh fe ${1:-480}
export OMP_NUM_THREADS=1
timeout -s INT -k 15 200 python3 -m pytest -q -rfE -p no:cacheprovider -n 14 -m gpu tests > $R/gpu_all.log 2>&1
echo "== gpu tests rc=$? at $(( $(date +%s) - start )) s"; save
unset OMP_NUM_THREADS
timeout $(( $(left) - 5 )) python3 bench/bench_runtime.py --decode-steps 16 --ttft-tokens 8192 --out $R > $R/bench_runtime.log 2>&1
echo "== runtime rc=$? at $(( $(date +%s) - start )) s"; save
test_summary $R/gpu_all.log
tail -12 $R/bench_runtime.log | cut -c1-200
