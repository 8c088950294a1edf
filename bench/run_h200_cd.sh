#!/usr/bin/env bash
# Fourth device call of 2026-12-04's second session: the KDA decode bench with the pipelined one-token pool step
# (pipelined_pool_kernel.py) beside the one-tile kernel and fla; the whole GPU suite; the AttnRes bench at the final
# defaults (rows of 2304 with more than two sources on 8 programs per SM of 2 warps).
# usage: bash bench/run_h200_cd.sh [SECONDS] (default 560).
. bench/h200.sh
. bench/h200_call.sh cd ${1:-560}
export OMP_NUM_THREADS=1
timeout 170 python3 bench/bench_kda_decode.py --quick --out $R > $R/kda_decode.log 2>&1
echo "== kda decode rc=$?"; save
timeout -s INT -k 15 230 python3 -m pytest -q -rfE -p no:cacheprovider -n 14 -m gpu tests > $R/gpu_all.log 2>&1
echo "== gpu tests rc=$?"; save
timeout $(( $(left) - 10 )) python3 bench/bench_attnres.py --no-sweep --out $R > $R/attnres.log 2>&1
echo "== attnres rc=$?"; save
test_summary $R/gpu_all.log
tail -52 $R/kda_decode.log | cut -c1-150
tail -30 $R/attnres.log
