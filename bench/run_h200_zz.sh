#!/usr/bin/env bash
# A short last call after run z: sparse MLA quick decode twice in a row (run z's first config of the H64 FP8 case
# measured 2x slower than its others, as in run w: is it the config or its place in the run?), then the AttnRes GPU
# tests (the fix for run z's failure: 0 warps at decode sizes below 256 wide) and the sparse MLA tests under the new
# decode tiles, each test named (-rA). usage: bash bench/run_h200_zz.sh [SECONDS] (default 200).
. bench/h200.sh
. bench/h200_call.sh zz ${1:-200}
for pass in a b; do
  mkdir -p $R/$pass
  timeout 45 python3 bench/bench_sparse_mla.py --quick-decode --out $R/$pass > $R/$pass/sparse_mla.log 2>&1
  echo "== sparse mla pass $pass rc=$?"; save
done
timeout -s INT -k 5 $(left) python3 -m pytest -q -rA -p no:cacheprovider -n 12 -m gpu tests/plugins/test_attnres_kernel.py \
  tests/plugins/test_sparse_mla_fp8_decode.py tests/plugins/test_sparse_mla_kernel.py > $R/gpu_tests.log 2>&1
echo "== gpu tests rc=$?"; save
grep -E "passed|failed" $R/gpu_tests.log | tail -1 | cut -c1-200
grep -E "^FAILED|^ERROR" $R/gpu_tests.log | head -5 | cut -c1-200
for pass in a b; do grep -E "^decode B64 H64" $R/$pass/sparse_mla.log | cut -c1-100; done
