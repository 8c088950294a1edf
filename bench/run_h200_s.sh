#!/usr/bin/env bash
# One device call for issue 3 (and issue 4's sparse MLA value blocks), nothing else on the GPU: the KDA prefill bench
# on all three shapes (pair-kernel sweep on the first), the KDA decode bench with its stream sweep, then the sparse
# MLA decode value-block configs. Committed tree only (.snap/head, carried).
# usage: bash bench/run_h200_s.sh [SECONDS] (default 570). Results in $OUT/results_s.tgz.
. bench/h200.sh
. bench/h200_call.sh s ${1:-570}
timeout $(( T * 50 / 100 )) python3 bench/bench_kda_prefill.py --quick --out $R > $R/kda_prefill.log 2>&1
echo "== kda prefill rc=$?"; save
timeout $(( T * 30 / 100 )) python3 bench/bench_kda_decode.py --out $R > $R/kda_decode.log 2>&1
echo "== kda decode rc=$?"; save
timeout $(left) python3 bench/bench_sparse_mla.py --no-sweep --value-blocks --decode-only --out $R > $R/sparse_mla.log 2>&1
echo "== sparse mla rc=$?"; save
grep "^{" $R/kda_prefill.log | cut -c1-600; tail -1 $R/kda_prefill.log | cut -c1-300
tail -50 $R/kda_decode.log | grep -E "B(1|64|256) H|ceilings" | cut -c1-140 | head -40
tail -14 $R/sparse_mla.log | cut -c1-160
