#!/usr/bin/env bash
# First device call of 2026-12-04: the KDA intra-chunk kernels now find their chunk in a precomputed [chunks, 2]
# table (chunk_common.chunk_bounds) instead of a per-program search over the sequences.
#   1. KDA prefill, all three issue-3 shapes, with the WY variants (run ac: 0.94-0.95x at H96, the WY kernel 2x fla's);
#   2. Nsight Compute on our WY kernel and fla's recompute_w_u at B8 T4096 H96 (bench/profile_kda_wy.py);
#   3. the whole GPU suite (run ad: 268 passed in 84 s), in the time left.
# usage: bash bench/run_h200_ba.sh [SECONDS] (default 480).
. bench/h200.sh
. bench/h200_call.sh ba ${1:-480}
export OMP_NUM_THREADS=1
timeout 170 python3 bench/bench_kda_prefill.py --wy tiles,tiles64w4,tiles64w8 --no-reference-check \
  --out $R > $R/kda_prefill.log 2>&1
echo "== kda prefill rc=$?"; save
kda_prefill_rows
timeout 120 ncu --clock-control none --profile-from-start off -k regex:"wy_kernel|recompute_w_u" \
  --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
  --section MemoryWorkloadAnalysis python3 bench/profile_kda_wy.py > $R/ncu_wy.log 2>&1
echo "== ncu rc=$?"; save
timeout -s INT -k 30 $(( $(left) - 40 )) python3 -m pytest -q -rfE -p no:cacheprovider -n 14 -m gpu tests \
  > $R/gpu_all.log 2>&1
echo "== gpu tests rc=$?"; save
save_caches
test_summary $R/gpu_all.log
grep -E "recompute_w_u|wy_kernel|Duration|Memory Throughput|DRAM Throughput|Achieved Occupancy|Registers Per|Stall|Theoretical Occ|Warp Cycles Per Issued|Block Limit" \
  $R/ncu_wy.log | cut -c1-150 | head -60
