#!/usr/bin/env bash
# One device call for issues 5 and 3 (nothing else on the GPU): the AttnRes bench with its config sweep on the
# cases that decide a target (the tiled kernel of e35c4e4, first H200 numbers), then the KDA prefill bench on its
# first shape with the pair-kernel sweep (num_stages 2-3 and the sub-chunk path, never measured) and the state
# kernel's V-block sweep. Committed tree only (.snap/head, carried).
# usage: bash bench/run_h200_p.sh [SECONDS] (default 580). Results in $OUT/results_p.tgz.
. bench/h200.sh
. bench/h200_call.sh p ${1:-580}
timeout $(( T * 50 / 100 )) python3 bench/bench_attnres.py --out $R > $R/bench_attnres.log 2>&1
echo "== attnres rc=$?"; save
timeout $(left) python3 bench/bench_kda_prefill.py --quick --first-shape-only --out $R > $R/kda_prefill.log 2>&1
echo "== kda prefill rc=$?"; save
grep -A40 "^ N     T" $R/bench_attnres.log | cut -c1-150 | head -30
tail -6 $R/kda_prefill.log | cut -c1-400
