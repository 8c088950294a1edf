#!/usr/bin/env bash
# Ninth session of 2026-12-04, fourth call: the KDA pool decode back to back for a second (B256 H96, B64 H96, B64
# H32) against a copy of the same bytes: kernel durations in launch order from idle and sustained, and nvidia-smi's
# clocks, power and throttle reasons every 50 ms (bench_kda_sustained.py).
# usage: bash bench/run_h200_md.sh [SECONDS] (default 200).
. bench/h200.sh
. bench/h200_call.sh md ${1:-200}
export OMP_NUM_THREADS=1
for case in 256x96 64x96 64x32; do
  timeout 60 python3 bench/bench_kda_sustained.py --case $case --calls 100 --out $R/$case > $R/sustained_$case.log 2>&1
  echo "== sustained $case rc=$? at $(( $(date +%s) - start )) s"; save
done
for case in 256x96 64x96 64x32; do
  echo "-- $case"; tail -n 8 $R/sustained_$case.log | cut -c1-200
  awk -F', ' 'NR % 5 == 1 {print $2, $3, $4, $5, $6}' $R/$case/smi.csv | uniq -c | head -40
done
