#!/usr/bin/env bash
# Next session's first device call (written 2026-12-03 night, not yet run): the candidates built without a GPU after
# run zz, each against the default on the same inputs, then the GPU tests that run z's deadline left unrun.
#   1. KDA prefill: the column_grid pair path (one program per column block) against the default column path and
#      fla, B1 T8192 H32 (bench/kda_pair_notes.md says why it may help; the fused path lost in run y);
#   2. indexer decode, MXFP8 keys: select-words / select-words-codes (scales, and codes, loaded as int32 words:
#      inside the software pipeline) against the default select, 8K-128K;
#   3. KDA pool decode (--quick) with the registers capped at 192 / 168 a thread next to the uncapped default (236 at
#      BV 32, one warp: 8 programs an SM), for B64 H32's 80% of copy against the 85% target;
#   4. the GPU tests of the KDA chunk / recurrent and indexer files, each named (-rA).
# Committed tree only (.snap/head, carried; carry .tcache too when a previous call left one).
# usage: bash bench/run_h200_aa.sh [SECONDS] (default 580).
. bench/h200.sh
. bench/h200_call.sh aa ${1:-580}
timeout 200 python3 bench/bench_kda_prefill.py --pairs column_grid,column --shapes 0 --no-reference-check \
  --out $R > $R/kda_prefill.log 2>&1
echo "== kda prefill rc=$?"; save
timeout 100 python3 bench/bench_indexer.py --decode-only --decode-kernels select,select-words,select-words-codes \
  --contexts 8192,32768,131072 --heads 64 --caches mxfp8 --out $R > $R/indexer.log 2>&1
echo "== indexer rc=$?"; save
timeout 90 python3 bench/bench_kda_decode.py --quick --out $R > $R/kda_decode.log 2>&1
echo "== kda decode rc=$?"; save
timeout -s INT -k 10 $(( $(left) - 20 )) python3 -m pytest -q -rA -p no:cacheprovider -n 12 -m gpu \
  tests/plugins/test_kda_chunk_kernel.py tests/plugins/test_kda_recurrent_kernel.py \
  tests/plugins/test_indexer_words_keys.py tests/plugins/test_indexer_select.py tests/plugins/test_indexer_kernel.py \
  tests/plugins/test_indexer_f16_keys.py > $R/gpu_tests.log 2>&1
echo "== gpu tests rc=$?"; save
save_caches
grep -E "passed|failed" $R/gpu_tests.log | tail -1 | cut -c1-200
grep -E "^FAILED|^ERROR" $R/gpu_tests.log | head -8 | cut -c1-200
python3 -c "import json; r = json.load(open('$R/kda_prefill.json'))['rows'][0]; print({k: v for k, v in r.items() if 'ms' in k or 'speedup' in k})" 2>&1 | cut -c1-900
grep -E "^decode" $R/indexer.log | cut -c1-150
grep -E "^B(64|256) H" $R/kda_decode.log | grep -E "pool|fla " | cut -c1-110
