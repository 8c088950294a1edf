#!/usr/bin/env bash
# Twelfth session of 2026-12-05, second call: where the Gluon sparse MLA decode's time goes (B64 H128, 32K context,
# top-2048; one program a token, no splits): Nsight Compute's stall samples per SASS instruction
# (bench/ncu_source_hotspots.py) and warp-state sections, for the FP8 cache (5.2 us a key block in run oa) and the
# BF16 one (3.7 us) in turn.
# usage: bash bench/run_h200_ob.sh [SECONDS] (default 300).
. bench/h200.sh
. bench/h200_call.sh ob ${1:-300}
export OMP_NUM_THREADS=1
ncu_profile fp8 _sparse_mla_decode_kernel 0 $(( $(left) / 2 )) sparse_mla_gluon
ncu_profile bf16 _sparse_mla_decode_kernel 1 $(left) sparse_mla_gluon
for name in fp8 bf16; do
  echo "-- $name"; grep -E "Duration|Registers Per|Warp Cycles Per Issued|Memory Throughput|Compute \(SM\)" \
    $R/details_$name.txt | head -8 | cut -c1-110
  head -c 2500 $R/hotspots_$name.txt | cut -c1-150
done
