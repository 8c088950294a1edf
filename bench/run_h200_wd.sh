#!/usr/bin/env bash
# Twenty-third session of 2026-12-06, after runs wa / wc on an H100 (the candidate buffer won from 16K-32K keys a
# split, lost below): the buffer chosen per split in the kernel (candidates N: splits of >= N keys, 32768 at HI 32,
# 16384 at HI 64; both paths compiled into one kernel, which spills more offline) against the buffer nowhere (the
# default) and everywhere, B64 MXFP8 HI 32 / 64 at 8K / 32K / 64K / 128K keys.
# usage: bash bench/run_h200_wd.sh [SECONDS] (default 240); carry .whl, .snap and .tcache.
. bench/h200.sh
. bench/h200_call.sh wd ${1:-240}
export OMP_NUM_THREADS=1
indexer_decode split32 64 8192,32768,65536,131072 32 '{"candidates": 32768}' select 60
indexer_decode split64 64 8192,32768,65536,131072 64 '{"candidates": 16384}' select 60
indexer_decode off 64 8192,32768,65536,131072 32,64 '{}' select 45
indexer_decode on 64 65536,131072 32,64 '{"candidates": true}' select 35
for f in $R/*/bench_indexer.json; do echo "# $f"; indexer_rows $f | cut -c1-250; done
