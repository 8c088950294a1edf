#!/usr/bin/env bash
# Run x's compile-bound steps again with room to compile (a fresh machine, nothing cached): the AttnRes decode-size
# cases under the two-source warps (run v's kernels) against fla, then the KDA fused pair kernel against the column
# path and fla on B1 T8192 H32; the Triton cache comes back in parts for the next call (.tcache).
# Committed tree only (.snap/head, carried). usage: bash bench/run_h200_y.sh [SECONDS] (default 430).
. bench/h200.sh
. bench/h200_call.sh y ${1:-430}
timeout 120 python3 bench/bench_attnres.py --sweep-cases --decode-cases --out $R > $R/attnres.log 2>&1
echo "== attnres rc=$?"; save
timeout $(( $(left) - 20 )) python3 bench/bench_kda_prefill.py --pairs fused,column --shapes 0 --no-reference-check \
  --out $R > $R/kda_prefill.log 2>&1
echo "== kda prefill rc=$?"; save
save_caches
ls -la $OUT | tail -5
grep -E "^B|shape|fused|column|fla" $R/kda_prefill.log | tail -12 | cut -c1-400
tail -14 $R/attnres.log | cut -c1-140
