#!/usr/bin/env bash
# Fourth device call of 2026-12-04's third session: kth_key two bits a step, the FP8 dot up to 64 dot rows: the indexer
# GPU tests, decode at 8K / 32K / 128K for select and chunked (MXFP8 with an MXFP8 q, BF16), the select kernel's
# verify rows (2 / 4 tokens), and the chunked score kernel at 8 warps.
# usage: bash bench/run_h200_dd.sh [SECONDS] (default 540).
. bench/h200.sh
. bench/h200_call.sh dd ${1:-540}
export OMP_NUM_THREADS=1
timeout -s INT -k 15 200 python3 -m pytest -q -rfE -p no:cacheprovider -n 14 -m gpu tests/plugins -k indexer > $R/gpu_indexer.log 2>&1
echo "== gpu tests rc=$? at $(( $(date +%s) - start )) s"; save
mkdir -p $R/a $R/b
timeout $(( $(left) - 150 )) python3 bench/bench_indexer.py --decode-only --decode-kernels select,chunked \
  --contexts 8192,32768,131072 --caches mxfp8,bf16 --out $R/a > $R/indexer_a.log 2>&1
echo "== indexer a rc=$? at $(( $(date +%s) - start )) s"; save
timeout $(( $(left) - 30 )) python3 bench/bench_indexer.py --decode-only --decode-kernels select --heads 64 \
  --caches mxfp8 --out $R/b > $R/indexer_b.log 2>&1
echo "== indexer b rc=$? at $(( $(date +%s) - start )) s"; save
mkdir -p $R/c
timeout $(( $(left) - 30 )) python3 bench/bench_indexer.py --decode-only --decode-kernels chunked --contexts 131072 \
  --caches mxfp8 --decode-options '{"num_warps": 8}' --out $R/c > $R/indexer_c.log 2>&1
echo "== indexer c rc=$? at $(( $(date +%s) - start )) s"; save
save_caches
test_summary $R/gpu_indexer.log
grep -E "^decode|ERROR" $R/indexer_a.log $R/indexer_b.log | cut -c1-150
python3 - <<'PY'
import json, glob
for f in sorted(glob.glob("/tmp/results_dd/*/bench_indexer.json")):
    for r in json.load(open(f))["results"]:
        if "kernels_us" in r:
            print(r["shape"][:22], r["cache"], r["options"].get("decode_kernel"), {k[:18]: round(v) for k, v in r["kernels_us"].items()}, [round(c["worst_score_gap"], 7) for c in r["check"]])
PY
