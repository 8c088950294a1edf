#!/usr/bin/env bash
# Next session's first device call (written 2026-12-03 late, not yet run): Nsight Compute on our KDA WY kernel and
# fla's recompute_w_u at B8 T4096 H96 (the gap behind the 0.94-0.95x prefill at H96), then the whole GPU suite.
# usage: bash bench/run_h200_ba.sh [SECONDS] (default 400).
. bench/h200.sh
. bench/h200_call.sh ba ${1:-400}
export OMP_NUM_THREADS=1
timeout 200 ncu --clock-control none --profile-from-start off -k regex:"wy_kernel|recompute_w_u" \
  --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
  --section MemoryWorkloadAnalysis python3 bench/profile_kda_wy.py > $R/ncu_wy.log 2>&1
echo "== ncu rc=$?"; save
timeout -s INT -k 30 $(( $(left) - 40 )) python3 -m pytest -q -rfE -p no:cacheprovider -n 14 -m gpu tests \
  > $R/gpu_all.log 2>&1
echo "== gpu tests rc=$?"; save
save_caches
test_summary $R/gpu_all.log
grep -E "recompute_w_u|wy_kernel|Duration|Memory Throughput|DRAM Throughput|Achieved Occupancy|Registers Per|Stall|Theoretical Occ" \
  $R/ncu_wy.log | cut -c1-160 | head -60
