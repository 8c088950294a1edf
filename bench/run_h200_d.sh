#!/usr/bin/env bash
# One device call: the runtime bench (graphs vs eager decode, 32K TTFT), then the indexer and AttnRes benches.
. bench/h200.sh
R=/tmp/results; mkdir -p $R
for b in "bench_runtime 220" "bench_indexer 100" "bench_attnres 200"; do
  set -- $b
  timeout $2 python3 bench/$1.py --out $R > $R/$1.log 2>&1; echo "== $1 rc=$?"
  grep -v "^W1202\|^  \|^{" $R/$1.log | tail -24 | cut -c1-220
  tar czf $OUT/results_d.tgz -C $R .
done
