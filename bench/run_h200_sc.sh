#!/usr/bin/env bash
# Eighteenth session of 2026-12-05: the Gluon sparse MLA decode with its splits merged by their last program
# (`fused_combine`, gluon_last_split_combine.py) against the second combine kernel, in one call:
# 1. the Gluon and combine GPU tests (the fused combine over BF16 and FP8 caches, 2 / 5 / 40 splits, graph replays);
# 2. the decode kernel times (CUPTI, graph replay) of both, twice in turn;
# 3. the quick decode bench with --gluon (both configs, every case checked against the reference first).
# Ran as run sc at commit 9d067fe (an H100; the fused combine lost and was taken off main: branch cand/fused-combine,
# which also fixes run sc's two B1 failures). On main `fused_combine` no longer exists: check that branch out first.
# usage: bash bench/run_h200_sc.sh [SECONDS] (default 480); carry .whl, .snap and .tcache.
. bench/h200.sh
. bench/h200_call.sh sc ${1:-480}
export OMP_NUM_THREADS=1
timeout -s INT -k 15 150 python3 -m pytest -q -rfE -p no:cacheprovider -n 6 -m gpu \
  tests/plugins/test_sparse_mla_gluon.py tests/plugins/test_sparse_mla_combine.py > $R/gpu_tests.log 2>&1
echo "== gpu tests rc=$? at $(( $(date +%s) - start )) s"; test_summary $R/gpu_tests.log; save
for pass in 1 2; do
  for options in '{}' '{"fused_combine": true}'; do
    timeout 40 python3 bench/sparse_mla_decode_kernels.py --options "$options" >> $R/decode_kernels.log 2>&1
  done
done
echo "== decode kernels at $(( $(date +%s) - start )) s"; save
timeout $(( $(left) < 120 ? $(left) : 120 )) python3 bench/bench_sparse_mla.py --quick-decode --gluon \
  --out $R/quick > $R/quick.log 2>&1
echo "== quick decode rc=$? at $(( $(date +%s) - start )) s"; save
grep -E "H64|H128" $R/decode_kernels.log | cut -c1-200
sparse_mla_rows $R/quick/sparse_mla.json 2>/dev/null | grep -E "gluon" | cut -c1-160
