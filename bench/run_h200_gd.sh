#!/usr/bin/env bash
# Seventh session of 2026-12-04, fourth call: where the indexer split kernel's time goes at 128K keys (B64, HI 32,
# MXFP8): Nsight Compute's stall samples per SASS instruction (bench/ncu_source_hotspots.py), for the split and merge
# kernels, plus their warp-state sections.
# usage: bash bench/run_h200_gd.sh [SECONDS] (default 300).
. bench/h200.sh
. bench/h200_call.sh gd ${1:-300}
export OMP_NUM_THREADS=1
ncu_profile _decode_select_kernel _decode_select_kernel 0 $(( $(left) / 2 )) indexer_long
ncu_profile _merge_select_kernel _merge_select_kernel 0 $(left) indexer_long
for k in _decode_select_kernel _merge_select_kernel; do
  echo "-- $k"; grep -E "Duration|Registers Per|Achieved Occupancy|Warp Cycles Per Issued|Theoretical Occ" $R/details_$k.txt | head -8 | cut -c1-110
  head -c 6000 $R/hotspots_$k.txt | cut -c1-150
done
