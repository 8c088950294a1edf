#!/usr/bin/env bash
# After run dg: the FP8 dot with 128-key tiles (a page a key), checked (indexer GPU tests, bench checks) and timed
# against the default 64-key tiles, at 8K / 32K / 128K, HI 32 / 64, MXFP8 with an MXFP8 query, select.
# usage: bash bench/run_h200_dh.sh [SECONDS] (default 400).
. bench/h200.sh
. bench/h200_call.sh dh ${1:-400}
export OMP_NUM_THREADS=1
timeout -s INT -k 15 150 python3 -m pytest -q -rfE -p no:cacheprovider -n 14 -m gpu tests/plugins -k indexer > $R/gpu_indexer.log 2>&1
echo "== gpu tests rc=$? at $(( $(date +%s) - start )) s"; save
for cfg in a:'{}' b:'{"block_keys": 128}' c:'{"block_keys": 128, "union_keys": 8192}'; do
  name=${cfg%%:*}; mkdir -p $R/$name
  timeout $(( $(left) - 10 )) python3 bench/bench_indexer.py --decode-only --contexts 8192,32768,131072 --caches mxfp8 \
    --decode-options "${cfg#*:}" --out $R/$name > $R/indexer_$name.log 2>&1
  echo "== indexer $name rc=$? at $(( $(date +%s) - start )) s"; save
done
test_summary $R/gpu_indexer.log
grep -hE "^decode|ERROR" $R/indexer_*.log | cut -c1-150
python3 - <<'PY'
import json, glob
for f in sorted(glob.glob("/tmp/results_dh/*/bench_indexer.json")):
    for r in json.load(open(f))["results"]:
        if "kernels_us" in r:
            print(r["shape"][:22], json.dumps(r["options"])[26:70], {k[:18]: round(v) for k, v in r["kernels_us"].items()}, r["ok"])
PY
