#!/usr/bin/env bash
# Twentieth session of 2026-12-05, after the tree merge (run ti2): with three dependent merge steps for 64 splits as for
# 32, does a row below B8 gain from 64 splits at 128K keys (MAX_SPLITS is 32: the sequential merge outgrew the split
# kernel's saving in run ga)? B1 / B2 / B4 HI 64 MXFP8 at 128K keys, the default (32 splits) against num_splits 64,
# twice in turn. Any one-GPU card.
# usage: bash bench/run_h200_tj.sh [SECONDS] (default 150); carry .whl, .snap and .tcache.
. bench/h200.sh
. bench/h200_call.sh tj ${1:-150}
export OMP_NUM_THREADS=1
for pass in 1 2; do
  indexer_decode splits32_$pass 1,2,4 131072 64
  indexer_decode splits64_$pass 1,2,4 131072 64 '{"num_splits": 64}'
done
for f in $R/splits*/bench_indexer.json; do echo "# $f"; indexer_rows $f | cut -c1-250; done
