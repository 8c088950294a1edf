#!/usr/bin/env bash
# Third device call of 2026-12-04's fourth session: AttnRes after a tile's two sums per source became one paired
# reduction: its GPU tests, the decode-size sweep against fla, the 2 x 8192 x 2304 case's sweep, then the whole bench
# at the defaults.
# usage: bash bench/run_h200_ec.sh [SECONDS] (default 420).
. bench/h200.sh
. bench/h200_call.sh ec ${1:-420}
export OMP_NUM_THREADS=1
timeout -s INT -k 15 120 python3 -m pytest -q -rfE -p no:cacheprovider -n 8 -m gpu tests/plugins/test_attnres_kernel.py > $R/gpu_attnres.log 2>&1
echo "== attnres gpu tests rc=$? at $(( $(date +%s) - start )) s"; save
timeout 100 python3 bench/bench_attnres.py --sweep-cases --decode-cases --out $R/decode > $R/attnres_decode.log 2>&1
echo "== attnres decode sweep rc=$? at $(( $(date +%s) - start )) s"; save
timeout 100 python3 bench/bench_attnres.py --sweep-cases --case 2,8192,2304 --out $R/narrow > $R/attnres_narrow.log 2>&1
echo "== attnres 2x8192x2304 sweep rc=$? at $(( $(date +%s) - start )) s"; save
timeout $(( $(left) - 5 )) python3 bench/bench_attnres.py --no-sweep --out $R > $R/attnres.log 2>&1
echo "== attnres bench rc=$? at $(( $(date +%s) - start )) s"; save
save_caches
test_summary $R/gpu_attnres.log
grep -E "^ *[0-9]" $R/attnres_decode.log $R/attnres_narrow.log | cut -c1-150
tail -32 $R/attnres.log | cut -c1-160
