#!/usr/bin/env bash
# Seventh session of 2026-12-04, fourth call: where the indexer split kernel's time goes at 128K keys (B64, HI 32,
# MXFP8): Nsight Compute's stall samples per SASS instruction (bench/ncu_source_hotspots.py), for the split and merge
# kernels, plus their warp-state sections.
# usage: bash bench/run_h200_gd.sh [SECONDS] (default 300).
. bench/h200.sh
. bench/h200_call.sh gd ${1:-300}
export OMP_NUM_THREADS=1
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
for k in _decode_select_kernel _merge_select_kernel; do
  timeout $(( $(left) / 2 )) "$NCU" --clock-control none --profile-from-start off -k "regex:$k" --launch-count 1 \
    --section WarpStateStats --section SourceCounters --section LaunchStats --section Occupancy \
    --export $R/$k --force-overwrite python3 bench/profile_missed_targets.py indexer_long > $R/ncu_$k.log 2>&1
  echo "== ncu $k rc=$? at $(( $(date +%s) - start )) s"
  "$NCU" --import $R/$k.ncu-rep --page source --print-source sass --csv > $R/source_$k.csv 2>$R/source_$k.err
  "$NCU" --import $R/$k.ncu-rep --page details > $R/details_$k.txt 2>&1
  python3 bench/ncu_source_hotspots.py $R/source_$k.csv 45 > $R/hotspots_$k.txt 2>&1
  rm -f $R/$k.ncu-rep; save
done
for k in _decode_select_kernel _merge_select_kernel; do
  echo "-- $k"; grep -E "Duration|Registers Per|Achieved Occupancy|Warp Cycles Per Issued|Theoretical Occ" $R/details_$k.txt | head -8 | cut -c1-110
  head -c 6000 $R/hotspots_$k.txt | cut -c1-150
done
