#!/usr/bin/env bash
# Sixth session of 2026-12-04, fourth call: the indexer decode at 8K and 32K keys (B64, MXFP8 query and cache, HI 32 /
# 64) with more splits at 8K (min_chunk 2048: 4 splits a row, 256 programs, where the default's 2 splits run 128
# programs on 132 SMs) and a 16-warp merge, against the defaults (every case checked against the reference first);
# then the whole GPU suite at this commit.
# usage: bash bench/run_h200_fn.sh [SECONDS] (default 480).
. bench/h200.sh
. bench/h200_call.sh fn ${1:-480}
export OMP_NUM_THREADS=1
run() {  # NAME OPTIONS_JSON
  timeout 100 python3 bench/bench_indexer.py --decode-only --contexts 8192,32768 --heads 32,64 --caches mxfp8 \
    --decode-options "$2" --out $R/$1 > $R/indexer_$1.log 2>&1
  echo "== indexer $1 rc=$? at $(( $(date +%s) - start )) s"; save
}
run default '{}'
run chunk2048 '{"min_chunk": 2048}'
run merge16 '{"merge_warps": 16}'
run chunk2048_merge16 '{"min_chunk": 2048, "merge_warps": 16}'
timeout -s INT -k 15 $(( $(left) )) python3 -m pytest -q -rfE -p no:cacheprovider -n 14 -m gpu tests \
  > $R/gpu_all.log 2>&1
echo "== gpu suite rc=$? at $(( $(date +%s) - start )) s"; save
test_summary $R/gpu_all.log
for n in default chunk2048 merge16 chunk2048_merge16; do
  echo "-- $n"; python3 -m bench.result_rows indexer $R/$n/*.json 2>/dev/null | cut -c1-150
done
