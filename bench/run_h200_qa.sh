#!/usr/bin/env bash
# Sixteenth session of 2026-12-05: the device time left after failed starts fits one call, so this joins the first
# steps of run_h200_of.sh (the Gluon decode resolving its rows itself, candidate commit 9467bf6 brought back by
# reverting 508e859; the fused split combine) and run_h200_pa.sh (MXFP4 experts kept packed), without the whole GPU
# suite either ends with.
# usage: bash bench/run_h200_qa.sh [SECONDS] (default 580).
. bench/h200.sh
. bench/h200_call.sh qa ${1:-580}
export OMP_NUM_THREADS=1
timeout -s INT -k 15 150 python3 -m pytest -q -rfE -p no:cacheprovider -n 12 -m gpu tests/plugins/test_sparse_mla_gluon.py \
  tests/plugins/test_sparse_mla_fp8_decode.py tests/plugins/test_sparse_mla_kernel.py tests/plugins/test_moe_mxfp4_kernel.py \
  tests/plugins/test_moe_kernel.py tests/plugins/test_moe_local_experts.py > $R/gpu_tests.log 2>&1
echo "== sparse mla + moe gpu tests rc=$? at $(( $(date +%s) - start )) s"; test_summary $R/gpu_tests.log; save
timeout 60 python3 bench/sparse_mla_decode_kernels.py > $R/decode_kernels.log 2>&1
timeout 60 python3 bench/sparse_mla_decode_kernels.py --fused-combine >> $R/decode_kernels.log 2>&1
echo "== decode kernels rc=$? at $(( $(date +%s) - start )) s"; save
timeout 100 python3 bench/bench_sparse_mla.py --quick-decode --gluon --out $R/mla_gluon > $R/mla_gluon.log 2>&1
echo "== sparse mla --gluon rc=$? at $(( $(date +%s) - start )) s"; save
timeout $(left) python3 bench/bench_moe_mxfp4.py --sweep --json $R/moe_mxfp4.json > $R/moe_mxfp4.log 2>&1
echo "== moe mxfp4 bench rc=$? at $(( $(date +%s) - start )) s"; save
decode_kernel_rows
sparse_mla_rows $R/mla_gluon/sparse_mla.json 2>/dev/null | grep -E "default|gluon" | cut -c1-160
tail -n 14 $R/moe_mxfp4.log | cut -c1-180
