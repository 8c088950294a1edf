#!/usr/bin/env bash
# Seventeenth session of 2026-12-05 (written after the device time ran out; for the next session): the split combine
# that loads up to 4 splits' rows at once (candidate commit 6583d10) against main's (one split a loop step), in one
# call: the candidate's combine and Gluon GPU tests, then the decode kernel times (CUPTI, graph replay) of main and
# the candidate twice in turn, then the quick decode bench of both.
# Before the call: rm -rf .snap/cand && mkdir -p .snap/cand && git archive 6583d10 dayzero bench tests | tar -x -C .snap/cand
# usage: bash bench/run_h200_rf.sh [SECONDS] (default 420); carry .whl, .snap (and .tcache if it fits).
. bench/h200.sh
rm -rf /tmp/cand && cp -r .snap/cand /tmp/cand
. bench/h200_call.sh rf ${1:-420}
export OMP_NUM_THREADS=1
(cd /tmp/cand && PYTHONPATH=/tmp/site:/tmp/cand timeout -s INT -k 15 120 python3 -m pytest -q -rfE -p no:cacheprovider \
  -n 6 -m gpu tests/plugins/test_sparse_mla_combine.py tests/plugins/test_sparse_mla_gluon.py) > $R/gpu_tests.log 2>&1
echo "== candidate gpu tests rc=$? at $(( $(date +%s) - start )) s"; test_summary $R/gpu_tests.log; save
for pass in 1 2; do
  echo "# main" >> $R/decode_kernels.log
  timeout 40 python3 bench/sparse_mla_decode_kernels.py >> $R/decode_kernels.log 2>&1
  echo "# candidate 6583d10" >> $R/decode_kernels.log
  (cd /tmp/cand && PYTHONPATH=/tmp/site:/tmp/cand timeout 40 python3 bench/sparse_mla_decode_kernels.py) \
    >> $R/decode_kernels.log 2>&1
done
echo "== decode kernels at $(( $(date +%s) - start )) s"; save
timeout 90 python3 bench/bench_sparse_mla.py --quick-decode --gluon --out $R/main > $R/main.log 2>&1
(cd /tmp/cand && PYTHONPATH=/tmp/site:/tmp/cand timeout $(left) python3 bench/bench_sparse_mla.py --quick-decode --gluon \
  --out $R/cand) > $R/cand.log 2>&1
echo "== quick decode benches at $(( $(date +%s) - start )) s"; save
grep -E "^#|H64" $R/decode_kernels.log | cut -c1-200
for which in main cand; do echo "# $which"; sparse_mla_rows $R/$which/sparse_mla.json 2>/dev/null | grep -E "gluon " | cut -c1-160; done
