#!/usr/bin/env bash
# First device call of 2026-12-04's fourth session: the whole GPU suite; the KDA decode bench after the decode kernels
# began loading a token's vectors before the slot lookup (one round trip where there were five); the AttnRes
# focused sweep (each 8192-token case on the balanced grid against the unbalanced one; the decode cases).
# usage: bash bench/run_h200_ea.sh [SECONDS] (default 560).
. bench/h200.sh
. bench/h200_call.sh ea ${1:-560}
export OMP_NUM_THREADS=1
timeout -s INT -k 15 200 python3 -m pytest -q -rfE -p no:cacheprovider -n 14 -m gpu tests > $R/gpu_all.log 2>&1
echo "== gpu tests rc=$? at $(( $(date +%s) - start )) s"; save
timeout 170 python3 bench/bench_kda_decode.py --quick --out $R > $R/kda_decode.log 2>&1
echo "== kda decode rc=$? at $(( $(date +%s) - start )) s"; save
timeout $(( $(left) - 5 )) python3 bench/bench_attnres.py --sweep-cases --out $R > $R/attnres_focused.log 2>&1
echo "== attnres rc=$? at $(( $(date +%s) - start )) s"; save
save_caches
test_summary $R/gpu_all.log
tail -40 $R/kda_decode.log | cut -c1-150
tail -30 $R/attnres_focused.log | cut -c1-150
