#!/usr/bin/env bash
# Seventeenth session of 2026-12-05: the Gluon sparse MLA decode with its index row scanned in one load, bf16 split
# outputs and the combine as a programmatic dependent launch against the defaults before (`gluon-before-rb`) and
# without the dependent launch (`gluon-no-pdl`), in one call: its GPU tests,
# kernel times (CUPTI, graph replay) both ways, issue 4's quick decode bench; then the server bench with HTTP in a
# process of its own (run_h200_og.sh's steps) in what time is left.
# usage: bash bench/run_h200_rb.sh [SECONDS] (default 580).
. bench/h200.sh
. bench/h200_call.sh rb ${1:-580}
export OMP_NUM_THREADS=1
timeout -s INT -k 15 150 python3 -m pytest -q -rfE -p no:cacheprovider -n 8 -m gpu tests/plugins/test_sparse_mla_gluon.py \
  tests/plugins/test_sparse_mla_combine.py tests/plugins/test_sparse_mla_kernel.py > $R/gpu_tests.log 2>&1
echo "== sparse mla gpu tests rc=$? at $(( $(date +%s) - start )) s"; test_summary $R/gpu_tests.log; save
timeout 60 python3 bench/sparse_mla_decode_kernels.py > $R/decode_kernels.log 2>&1
timeout 60 python3 bench/sparse_mla_decode_kernels.py --options '{"pdl": false}' >> $R/decode_kernels.log 2>&1
timeout 60 python3 bench/sparse_mla_decode_kernels.py --options '{"bf16_partials": false, "row_scan": 256, "pdl": false}' \
  >> $R/decode_kernels.log 2>&1
echo "== decode kernels rc=$? at $(( $(date +%s) - start )) s"; save
timeout 150 python3 bench/bench_sparse_mla.py --quick-decode --gluon --out $R/mla_gluon > $R/mla_gluon.log 2>&1
echo "== sparse mla --gluon rc=$? at $(( $(date +%s) - start )) s"; save
for requests in 16 64; do
  [ $(left) -lt 100 ] && break
  timeout $(( $(left) < 160 ? $(left) : 160 )) python3 bench/bench_server.py --h200-slice --requests $requests \
    --prompt-tokens 512 --max-tokens 128 --out $R > $R/server_r$requests.log 2>&1
  echo "== server r$requests rc=$? at $(( $(date +%s) - start )) s"; save
done
save_caches
cut -c1-200 $R/decode_kernels.log
sparse_mla_rows $R/mla_gluon/sparse_mla.json 2>/dev/null | grep -E "gluon" | cut -c1-160
tail -n 4 $R/server_r16.log $R/server_r64.log 2>/dev/null | cut -c1-200
