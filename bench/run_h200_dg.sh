#!/usr/bin/env bash
# A sweep after the session's final suite (run df): the select kernel's launch configurations with the FP8 dot, at
# 128K keys and HI 64, MXFP8 (the sweeps of runs bf / bg were on the bf16 dot).
# usage: bash bench/run_h200_dg.sh [SECONDS] (default 300).
. bench/h200.sh
. bench/h200_call.sh dg ${1:-300}
export OMP_NUM_THREADS=1
timeout $(( $(left) - 10 )) python3 bench/bench_indexer.py --decode-only --contexts 131072 --heads 64 --caches mxfp8 \
  --sweep --out $R > $R/indexer.log 2>&1
echo "== indexer rc=$? at $(( $(date +%s) - start )) s"; save
grep -E "^decode|ERROR" $R/indexer.log | cut -c1-150
python3 - <<'PY'
import json
for r in json.load(open("/tmp/results_dg/bench_indexer.json"))["results"]:
    if "kernels_us" in r:
        print(json.dumps(r["options"])[:60], {k[:18]: round(v) for k, v in r["kernels_us"].items()})
PY
