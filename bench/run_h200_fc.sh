#!/usr/bin/env bash
# Third device call of 2026-12-04's fifth session: the whole GPU suite at the session's code (unchanged since
# ccd5858), then the KDA decode quick bench with each set's slots as a random permutation of the pool (the default)
# and in pool order (--slots-in-order), alternated twice: does B64 H32's miss come from where its slots lie?
# usage: bash bench/run_h200_fc.sh [SECONDS] (default 400), at commit 1197d88 (--slots-in-order became --slot-order pool
# in 511dafc).
. bench/h200.sh
. bench/h200_call.sh fc ${1:-400}
export OMP_NUM_THREADS=1
timeout -s INT -k 15 200 python3 -m pytest -q -rfE -p no:cacheprovider -n 14 -m gpu tests > $R/gpu_all.log 2>&1
echo "== gpu tests rc=$? at $(( $(date +%s) - start )) s"; save
for pass in 1 2; do
  timeout 80 python3 bench/bench_kda_decode.py --quick --out $R/random$pass > $R/kda_random$pass.log 2>&1
  echo "== random $pass rc=$? at $(( $(date +%s) - start )) s"; save
  timeout 80 python3 bench/bench_kda_decode.py --quick --slots-in-order --out $R/ordered$pass > $R/kda_ordered$pass.log 2>&1
  echo "== in order $pass rc=$? at $(( $(date +%s) - start )) s"; save
done
save_caches
test_summary $R/gpu_all.log
for f in random1 ordered1 random2 ordered2; do echo "-- $f"; grep -E "^B(64|256) " $R/kda_$f.log | grep -v bv16_w1 | cut -c1-110; done
