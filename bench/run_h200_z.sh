#!/usr/bin/env bash
# The session's last device call: sparse MLA decode with the decode-grid tiles (64-key blocks, 2 stages) against
# prefill's tiles; the AttnRes two-source decode cases with 32 warps as a candidate; then the GPU tests of every kernel
# changed since run w's passing GPU tests, spread over 12 processes (SIGINT at the deadline, so pytest still prints
# what passed). Triton cache of run y carried in .tcache. usage: bash bench/run_h200_z.sh [SECONDS] (default 540).
. bench/h200.sh
. bench/h200_call.sh z ${1:-540}
timeout 100 python3 bench/bench_sparse_mla.py --quick-decode --out $R > $R/sparse_mla.log 2>&1
echo "== sparse mla rc=$?"; save
timeout 80 python3 bench/bench_attnres.py --sweep-cases --decode-cases --out $R > $R/attnres.log 2>&1
echo "== attnres rc=$?"; save
timeout -s INT -k 10 $(left) python3 -m pytest -q -p no:cacheprovider -n 12 -m gpu --durations=12 \
  tests/plugins/test_sparse_mla_kernel.py tests/plugins/test_sparse_mla_fp8_decode.py \
  tests/plugins/test_indexer_select.py tests/plugins/test_indexer_kernel.py tests/plugins/test_indexer_f16_keys.py \
  tests/plugins/test_attnres_kernel.py tests/plugins/test_kda_chunk_kernel.py tests/plugins/test_kda_recurrent_kernel.py \
  > $R/gpu_tests.log 2>&1
echo "== gpu tests rc=$?"; save
grep -E "passed|failed" $R/gpu_tests.log | tail -2 | cut -c1-200
grep -E "^FAILED|^ERROR" $R/gpu_tests.log | head -8 | cut -c1-200
grep -A14 "^case" $R/sparse_mla.log | cut -c1-120
grep -E "^ +2 +(1|64) " $R/attnres.log | cut -c1-110
