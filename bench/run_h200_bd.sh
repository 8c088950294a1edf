#!/usr/bin/env bash
# Fourth device call of 2026-12-04 (run bc's KDA decode kernels did not compile: a non-constexpr global in the jit
# code, which the interpreter accepts):
#   1. KDA decode (pool and fused), the slots of a row read in one round trip; run aa: B64 H32 at 79% of copy;
#   2. the KDA recurrent GPU tests.
# usage: bash bench/run_h200_bd.sh [SECONDS] (default 240).
. bench/h200.sh
. bench/h200_call.sh bd ${1:-240}
export OMP_NUM_THREADS=1
timeout 100 python3 bench/bench_kda_decode.py --quick --out $R > $R/kda_decode.log 2>&1
echo "== kda decode rc=$?"; save
timeout -s INT -k 20 $(( $(left) - 30 )) python3 -m pytest -q -rfE -p no:cacheprovider -n 14 -m gpu \
  tests/plugins/test_kda_recurrent_kernel.py > $R/gpu_kda_recurrent.log 2>&1
echo "== gpu tests rc=$?"; save
test_summary $R/gpu_kda_recurrent.log
grep -E "^B(1|64|256) H" $R/kda_decode.log | cut -c1-110
