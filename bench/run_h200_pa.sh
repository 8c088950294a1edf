#!/usr/bin/env bash
# Written in the fifteenth session of 2026-12-05 (no device machine was lent; for the next one): MXFP4 routed experts
# kept packed (the Triton grouped GEMM's MXFP4 path, never compiled on a GPU yet).
# 1. the MoE GPU tests (the MXFP4 kernel against the reference at realistic sizes, every code and scale exactly, and
#    the bf16 paths beside it);
# 2. bench_moe_mxfp4.py --sweep: the grouped MLP with MXFP4 weights against the bf16 Triton path and
#    torch._grouped_mm at decode (64 tokens) and prefill (8192), K3.1 and Kimi-Linear expert shapes, top-k 8; the
#    bf16 banks need ~75 GB (an H200);
# 3. the whole GPU suite for the seconds left.
# usage: bash bench/run_h200_pa.sh [SECONDS] (default 420).
. bench/h200.sh
. bench/h200_call.sh pa ${1:-420}
export OMP_NUM_THREADS=1
timeout -s INT -k 15 150 python3 -m pytest -q -rfE -p no:cacheprovider -n 8 -m gpu tests/plugins/test_moe_mxfp4_kernel.py \
  tests/plugins/test_moe_kernel.py tests/plugins/test_moe_local_experts.py > $R/gpu_moe.log 2>&1
echo "== moe gpu tests rc=$? at $(( $(date +%s) - start )) s"; test_summary $R/gpu_moe.log; save
timeout 200 python3 bench/bench_moe_mxfp4.py --sweep --json $R/moe_mxfp4.json > $R/moe_mxfp4.log 2>&1
echo "== moe mxfp4 bench rc=$? at $(( $(date +%s) - start )) s"; save
timeout -s INT -k 15 $(left) python3 -m pytest -q -rfE -p no:cacheprovider -n 14 -m gpu tests > $R/gpu_all.log 2>&1
echo "== gpu tests rc=$? at $(( $(date +%s) - start )) s"; test_summary $R/gpu_all.log; save
tail -n 20 $R/moe_mxfp4.log | cut -c1-200
