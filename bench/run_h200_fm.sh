#!/usr/bin/env bash
# Sixth session of 2026-12-04, third call: the AttnRes mix stored with the streaming cache hint (".cs") against the
# defaults at 2 and 9 x 8192 x 2304 and 9 x 8192 x 7168 (each sweep checks every config against the reference before
# timing it), then the whole GPU suite at this commit.
# usage: bash bench/run_h200_fm.sh [SECONDS] (default 420). A record: the store hint was reverted after this run
# (bench/README.md).
. bench/h200.sh
. bench/h200_call.sh fm ${1:-420}
export OMP_NUM_THREADS=1
for c in 2,8192,2304 9,8192,2304 9,8192,7168; do
  timeout 75 python3 bench/bench_attnres.py --sweep-cases --case $c --out $R/sweep_$c > $R/attnres_$c.log 2>&1
  echo "== attnres $c rc=$? at $(( $(date +%s) - start )) s"; save
done
timeout -s INT -k 15 $(( $(left) )) python3 -m pytest -q -rfE -p no:cacheprovider -n 14 -m gpu tests \
  > $R/gpu_all.log 2>&1
echo "== gpu suite rc=$? at $(( $(date +%s) - start )) s"; save
test_summary $R/gpu_all.log
grep -hE "copy ceiling|^ *[0-9]" $R/attnres_*,*.log | grep -E "ceiling|default|store" | cut -c1-150
