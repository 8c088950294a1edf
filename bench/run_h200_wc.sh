#!/usr/bin/env bash
# Twenty-third session of 2026-12-06, on run wa's still-warm H100 (run as this command line): the candidate buffer
# against the default at 64K and 128K keys, B64 MXFP8 HI 32 / 64 (splits of 16K and 32K keys).
# usage: bash bench/run_h200_wc.sh [SECONDS] (default 200); carry .whl, .snap and .tcache.
. bench/h200.sh >/dev/null
. bench/h200_call.sh wc ${1:-200}
indexer_decode def 64 65536,131072 32,64 '{}' select 60
indexer_decode cand 64 65536,131072 32,64 '{"candidates": true}' select 60
for f in $R/*/bench_indexer.json; do echo "# $f"; indexer_rows $f | cut -c1-250; done
