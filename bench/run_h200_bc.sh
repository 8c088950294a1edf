#!/usr/bin/env bash
# Third device call of 2026-12-04:
#   1. KDA decode: the pool and fused kernels now load a row's slots and accepted count at once (one memory round
#      trip before the state load instead of three); run aa had B64 H32 at 79% of copy against the 85% target;
#   2. KDA prefill, the three shapes at the default (the chunk tables now come from one launch: eager host time);
#   3. indexer decode B64 HI64 MXFP8 at 32K / 128K (run bc also timed select-f16 here, removed after it lost);
#   4. the whole GPU suite in the time left.
# usage: bash bench/run_h200_bc.sh [SECONDS] (default 420).
. bench/h200.sh
. bench/h200_call.sh bc ${1:-420}
export OMP_NUM_THREADS=1
timeout 100 python3 bench/bench_kda_decode.py --quick --out $R > $R/kda_decode.log 2>&1
echo "== kda decode rc=$?"; save
timeout 100 python3 bench/bench_kda_prefill.py --pairs column_grid --no-reference-check --out $R > $R/kda_prefill.log 2>&1
echo "== kda prefill rc=$?"; save
timeout 70 python3 bench/bench_indexer.py --decode-only --decode-kernels select --contexts 32768,131072 \
  --heads 64 --caches mxfp8 --out $R > $R/indexer.log 2>&1
echo "== indexer rc=$?"; save
timeout -s INT -k 20 $(( $(left) - 30 )) python3 -m pytest -q -rfE -p no:cacheprovider -n 14 -m gpu tests \
  > $R/gpu_all.log 2>&1
echo "== gpu tests rc=$?"; save
save_caches
test_summary $R/gpu_all.log
grep -E "^B(1|64|256) H" $R/kda_decode.log | cut -c1-110
kda_prefill_rows
grep -E "^decode" $R/indexer.log | cut -c1-150
