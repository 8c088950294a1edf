#!/usr/bin/env bash
# Twelfth session of 2026-12-05, second call: where the Gluon sparse MLA decode's time goes (B64 H128, 32K context,
# top-2048; one program a token, no splits): Nsight Compute's stall samples per SASS instruction
# (bench/ncu_source_hotspots.py) and warp-state sections, for the FP8 cache (5.2 us a key block in run oa) and the
# BF16 one (3.7 us) in turn.
# usage: bash bench/run_h200_ob.sh [SECONDS] (default 300).
. bench/h200.sh
. bench/h200_call.sh ob ${1:-300}
export OMP_NUM_THREADS=1
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
k=_sparse_mla_decode_kernel
for skip in 0 1; do
  name=$([ $skip = 0 ] && echo fp8 || echo bf16)
  timeout $(( $(left) / (2 - skip) )) "$NCU" --clock-control none --profile-from-start off -k "regex:$k" \
    --launch-skip $skip --launch-count 1 \
    --section WarpStateStats --section SourceCounters --section LaunchStats --section Occupancy \
    --section SpeedOfLight --section MemoryWorkloadAnalysis \
    --export $R/$name --force-overwrite python3 bench/profile_missed_targets.py sparse_mla_gluon > $R/ncu_$name.log 2>&1
  echo "== ncu $name rc=$? at $(( $(date +%s) - start )) s"
  "$NCU" --import $R/$name.ncu-rep --page source --print-source sass --csv > $R/source_$name.csv 2>$R/source_$name.err
  "$NCU" --import $R/$name.ncu-rep --page details > $R/details_$name.txt 2>&1
  python3 bench/ncu_source_hotspots.py $R/source_$name.csv 45 > $R/hotspots_$name.txt 2>&1
  rm -f $R/$name.ncu-rep; save
done
for name in fp8 bf16; do
  echo "-- $name"; grep -E "Duration|Registers Per|Warp Cycles Per Issued|Memory Throughput|Compute \(SM\)" \
    $R/details_$name.txt | head -8 | cut -c1-110
  head -c 2500 $R/hotspots_$name.txt | cut -c1-150
done
