#!/usr/bin/env bash
# Second device call of 2026-12-04's fourth session: the KDA decode kernels' neighbours at B >= 64 after the token
# vectors' loads moved ahead of the slot lookup (streaming hints, register caps; the fused step's block widths and
# warps), then the quick bench again for its spread.
# usage: bash bench/run_h200_eb.sh [SECONDS] (default 300).
. bench/h200.sh
. bench/h200_call.sh eb ${1:-300}
export OMP_NUM_THREADS=1
timeout 150 python3 bench/bench_kda_decode.py --focus --out $R/focus > $R/kda_focus.log 2>&1
echo "== kda focus rc=$? at $(( $(date +%s) - start )) s"; save
timeout $(( $(left) - 5 )) python3 bench/bench_kda_decode.py --quick --out $R > $R/kda_decode.log 2>&1
echo "== kda quick rc=$? at $(( $(date +%s) - start )) s"; save
save_caches
grep -E "^B(64|256)" $R/kda_focus.log | cut -c1-110
grep -E "^B" $R/kda_decode.log | cut -c1-150
