#!/usr/bin/env bash
# Seventh session of 2026-12-04, eighth call: with every key loop pipelined, the MXFP8 cache through the FP8 dot (the
# default) against the same cache and query dequantized to bf16 in registers (fp8_dot false), B64 (8K / 32K / 128K,
# HI 32 / 64).
# usage: bash bench/run_h200_gh.sh [SECONDS] (default 300).
. bench/h200.sh
. bench/h200_call.sh gh ${1:-300}
export OMP_NUM_THREADS=1
indexer_decode b64 64 8192,32768,131072 32,64
indexer_decode b64_bf16_dot 64 8192,32768,131072 32,64 '{"fp8_dot": false}'
for n in b64 b64_bf16_dot; do echo "-- $n"; python3 -m bench.result_rows indexer $R/$n/*.json 2>/dev/null | cut -c1-240; done
