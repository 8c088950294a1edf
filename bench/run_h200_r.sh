#!/usr/bin/env bash
# One device call for issue 4's sparse MLA decode: the value-column-block configs (dv_blocks 2 / 4, against the
# accumulator's register spills) next to the default, decode cases only, then the sparse MLA GPU tests (which
# include dv_blocks at realistic sizes). Committed tree only (.snap/head, carried).
# usage: bash bench/run_h200_r.sh [SECONDS] (default 580). Results in $OUT/results_r.tgz.
. bench/h200.sh
T=${1:-580}; start=$(date +%s); left() { echo $(( T - ($(date +%s) - start) - 15 )); }
R=/tmp/results_r; mkdir -p $R
rm -rf /tmp/head; cp -r .snap/head /tmp/head; cd /tmp/head; export PYTHONPATH=/tmp/site:/tmp/head
save() { tar czf $OUT/results_r.tgz -C $R . 2>/dev/null; }
timeout $(( T * 55 / 100 )) python3 bench/bench_sparse_mla.py --no-sweep --value-blocks --decode-only --out $R \
  > $R/sparse_mla.log 2>&1
echo "== sparse mla rc=$?"; save
timeout $(left) python3 -m pytest -q -rf -p no:cacheprovider -m gpu tests/plugins/test_sparse_mla_kernel.py \
  > $R/gpu_tests.log 2>&1
echo "== gpu tests rc=$?"; save
tail -20 $R/sparse_mla.log | cut -c1-160
grep -E "passed|failed|FAILED|rror" $R/gpu_tests.log | cut -c1-160 | tail -6
