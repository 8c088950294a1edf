#!/usr/bin/env bash
# Fifth device call of 2026-12-04's second session: the KDA pool launcher's new default (the pipelined one-token step
# on 16-wide V blocks) in the decode bench and the KDA recurrent GPU tests; the AttnRes 2 x 8192 x 2304 case swept.
# usage: bash bench/run_h200_ce.sh [SECONDS] (default 300).
. bench/h200.sh
. bench/h200_call.sh ce ${1:-300}
export OMP_NUM_THREADS=1
timeout -s INT -k 15 80 python3 -m pytest -q -rfE -p no:cacheprovider -n 14 -m gpu \
  tests/plugins/test_kda_recurrent_kernel.py tests/export/test_fake_impls.py > $R/gpu_kda.log 2>&1
echo "== gpu tests rc=$?"; save
timeout 60 python3 bench/bench_attnres.py --sweep-cases --case 2,8192,2304 --out $R > $R/attnres_focused.log 2>&1
echo "== attnres focused rc=$?"; save
timeout $(( $(left) - 10 )) python3 bench/bench_kda_decode.py --quick --out $R > $R/kda_decode.log 2>&1
echo "== kda decode rc=$?"; save
test_summary $R/gpu_kda.log
grep -v "^\s*$" $R/attnres_focused.log | tail -20
grep -E "^B|^shape" $R/kda_decode.log | grep -E "shape|pool_bv16_w1 |pipelined_s2_12sm|pool_bv32_w1 |fla " | cut -c1-130
