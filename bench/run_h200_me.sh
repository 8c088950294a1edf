#!/usr/bin/env bash
# Ninth session of 2026-12-04, fifth call: bench_kda_sustained.py (graphs of 100 back-to-back calls; the pool kernel,
# the fused decode step and a copy of the same bytes timed alike) at every B >= 64 shape in a random slot order, and
# at B64 H32 in the sorted and pool orders too; the lowest SM clock, highest power and any throttle reason seen.
# usage: bash bench/run_h200_me.sh [SECONDS] (default 240).
. bench/h200.sh
. bench/h200_call.sh me ${1:-240}
export OMP_NUM_THREADS=1
for run in "64x32 random" "64x32 sorted" "64x32 pool" "64x96 random" "256x32 random" "256x96 random"; do
  set -- $run
  timeout 50 python3 bench/bench_kda_sustained.py --case $1 --slot-order $2 --calls 100 --out $R/$1_$2 \
    > $R/sustained_$1_$2.log 2>&1
  echo "== sustained $1 $2 rc=$? at $(( $(date +%s) - start )) s"; save
done
for run in 64x32_random 64x32_sorted 64x32_pool 64x96_random 256x32_random 256x96_random; do
  echo "-- $run"; grep "median" $R/sustained_$run.log | cut -c1-110
  awk -F', ' '{gsub(/ MHz| W/,""); if (min == "" || $2 < min) min = $2; if ($4 > max) max = $4; if ($6 !~ /0x0+$/) t = t " " $6}
    END {print "   sm clock min", min, "MHz, power max", max, "W, throttle:", (t == "" ? "none" : t)}' $R/$run/smi.csv
done
