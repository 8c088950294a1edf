#!/usr/bin/env bash
# Written in the eighteenth session of 2026-12-05 for the next one (the device time had run out): the Gluon split
# kernel of the decode indexer (gluon_select_kernel.py, decode_kernel "gluon": MXFP8 query and keys, one token a
# sequence, Hopper) against the Triton select kernel, in one call:
# 1. the indexer kernel GPU tests, the Gluon cases first (never run on a GPU yet: expect to debug);
# 2. bench_indexer.py --decode-kernels select,gluon, B64, 8K / 32K / 128K keys, HI 32 / 64, MXFP8 (every case checked
#    against the reference first; a failed check shows as ok=False in the table).
# Offline (no GPU): `PYTHONPATH=/tmp/t36:. python bench/indexer_gluon_offline.py` (registers, key-loop instructions).
# The kernel is on branch cand/gluon-indexer (commit b598b53), not on main: run this script from that branch's tree
# (git checkout cand/gluon-indexer, or git archive b598b53 into .snap/head before the call).
# usage: bash bench/run_h200_sf.sh [SECONDS] (default 420); carry .whl, .snap and .tcache.
. bench/h200.sh
. bench/h200_call.sh sf ${1:-420}
export OMP_NUM_THREADS=1
timeout -s INT -k 15 150 python3 -m pytest -q -rfE -x -p no:cacheprovider -m gpu tests/plugins/test_indexer_kernel.py \
  -k gluon > $R/gpu_gluon.log 2>&1
echo "== gluon gpu tests rc=$? at $(( $(date +%s) - start )) s"; test_summary $R/gpu_gluon.log; save
timeout 150 python3 bench/bench_indexer.py --decode-only --decode-kernels select,gluon --caches mxfp8 \
  --contexts 8192,32768,131072 --out $R/both > $R/both.log 2>&1
echo "== select, gluon rc=$? at $(( $(date +%s) - start )) s"; save
timeout -s INT -k 15 $(left) python3 -m pytest -q -rfE -p no:cacheprovider -n 6 -m gpu tests/plugins/test_indexer_kernel.py \
  tests/plugins/test_indexer_select.py > $R/gpu_indexer.log 2>&1
echo "== indexer gpu tests rc=$? at $(( $(date +%s) - start )) s"; test_summary $R/gpu_indexer.log; save
indexer_rows $R/both/bench_indexer.json 2>/dev/null | cut -c1-190
