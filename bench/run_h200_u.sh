#!/usr/bin/env bash
# A short device call for issue 5: the AttnRes GPU tests of the persistent kernel, then the AttnRes bench with the
# defaults set from run t, no sweep. Committed tree only (.snap/head, carried).
# usage: bash bench/run_h200_u.sh [SECONDS] (default 220). Results in $OUT/results_u.tgz.
. bench/h200.sh
. bench/h200_call.sh u ${1:-220}
timeout 70 python3 -m pytest -q -p no:cacheprovider -m gpu tests/plugins/test_attnres_kernel.py -k "persistent or boundaries" \
  > $R/gpu_attnres.log 2>&1
echo "== attnres gpu tests rc=$?"; save
timeout $(left) python3 bench/bench_attnres.py --no-sweep --out $R > $R/bench_attnres.log 2>&1
echo "== attnres rc=$?"; save
tail -1 $R/gpu_attnres.log
grep -A40 "^ N     T" $R/bench_attnres.log | cut -c1-160 | head -30
