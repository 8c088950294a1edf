#!/usr/bin/env bash
# Eighth device call of 2026-12-04's fifth session: runs ff and fg saw one sparse MLA decode config move by up to
# 2.5x between and within processes, whatever the page and index order. Here nvidia-smi samples the SM clock, power
# and throttle reasons every 100 ms while bench_sparse_mla.py --quick-decode runs three times.
# usage: bash bench/run_h200_fh.sh [SECONDS] (default 200).
. bench/h200.sh
. bench/h200_call.sh fh ${1:-200}
export OMP_NUM_THREADS=1
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active,utilization.gpu --format=csv -lms 100 > $R/smi.csv 2>&1 &
smi=$!
for pass in 1 2 3; do
  echo "pass $pass start $(date +%H:%M:%S.%N)" >> $R/marks.txt
  timeout 55 python3 bench/bench_sparse_mla.py --quick-decode --out $R/pass$pass > $R/mla_pass$pass.log 2>&1
  echo "== pass $pass rc=$? at $(( $(date +%s) - start )) s"; save
done
kill $smi; save
for p in 1 2 3; do echo "-- pass $p"; grep -E "^decode" $R/mla_pass$p.log | grep default | cut -c1-100; done
python3 - $R/smi.csv <<'PY'
import csv, sys, collections
rows = list(csv.reader(open(sys.argv[1])))[1:]
sm = [int(r[1].split()[0]) for r in rows if len(r) > 6 and r[1].strip().split()[0].isdigit()]
print("samples", len(sm), "sm MHz min/median/max", min(sm), sorted(sm)[len(sm) // 2], max(sm))
print("throttle reasons", collections.Counter(r[5].strip() for r in rows if len(r) > 6).most_common(5))
print("power W max", max(float(r[3].split()[0]) for r in rows if len(r) > 6 and r[3].strip()[0].isdigit()))
PY
