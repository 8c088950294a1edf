#!/usr/bin/env bash
# Fourth device call of 2026-12-04's fourth session: the whole GPU suite (token groups' GPU tests among them); the
# 2 x 8192 x 2304 AttnRes case with token groups against the default; the AttnRes bench at the defaults (two-source
# decode calls on 8 warps at rows of 2304).
# usage: bash bench/run_h200_ed.sh [SECONDS] (default 420).
. bench/h200.sh
. bench/h200_call.sh ed ${1:-420}
export OMP_NUM_THREADS=1
timeout -s INT -k 15 200 python3 -m pytest -q -rfE -p no:cacheprovider -n 14 -m gpu tests > $R/gpu_all.log 2>&1
echo "== gpu tests rc=$? at $(( $(date +%s) - start )) s"; save
timeout 100 python3 bench/bench_attnres.py --sweep-cases --case 2,8192,2304 --out $R/narrow > $R/attnres_narrow.log 2>&1
echo "== attnres 2x8192x2304 sweep rc=$? at $(( $(date +%s) - start )) s"; save
timeout $(( $(left) - 5 )) python3 bench/bench_attnres.py --no-sweep --out $R > $R/attnres.log 2>&1
echo "== attnres bench rc=$? at $(( $(date +%s) - start )) s"; save
test_summary $R/gpu_all.log
grep -E "^ *[0-9]" $R/attnres_narrow.log | cut -c1-150
tail -32 $R/attnres.log | cut -c1-160
