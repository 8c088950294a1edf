#!/usr/bin/env bash
# Sixth session of 2026-12-04, second call: AttnRes over whole tokens packed into chunks (packed_kernel.py) at
# 2 x 8192 x 2304, the one 8192-token case under 85% of copy: its GPU tests, then the case's sweep (the default
# first, the packed candidates next; every config checked against the reference before it is timed).
# usage: bash bench/run_h200_fl.sh [SECONDS] (default 200). A record: the packed kernel was removed after this run
# (it lost, bench/README.md).
. bench/h200.sh
. bench/h200_call.sh fl ${1:-200}
export OMP_NUM_THREADS=1
timeout -s INT -k 15 90 python3 -m pytest -q -rfE -p no:cacheprovider -n 4 -m gpu tests/plugins/test_attnres_kernel.py \
  -k packed > $R/gpu_packed.log 2>&1
echo "== packed gpu tests rc=$? at $(( $(date +%s) - start )) s"; test_summary $R/gpu_packed.log; save
timeout $(( $(left) )) python3 bench/bench_attnres.py --sweep-cases --case 2,8192,2304 --out $R/sweep \
  > $R/attnres_sweep.log 2>&1
echo "== sweep rc=$? at $(( $(date +%s) - start )) s"; save
grep -E "copy ceiling|^ *2 " $R/attnres_sweep.log | cut -c1-160
