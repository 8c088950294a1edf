#!/usr/bin/env bash
# The prologue of a one-call device script, sourced after bench/h200.sh: `. bench/h200_call.sh NAME SECONDS`.
# Sets T (the call's seconds), left (seconds still left, less a margin), R (/tmp/results_NAME) and save (R packed into
# $OUT/results_NAME.tgz), then moves into a copy of the committed tree (.snap/head, carried) on PYTHONPATH.
NAME=$1
T=$2
start=$(date +%s)
left() { echo $(( T - ($(date +%s) - start) - 15 )); }
R=/tmp/results_$NAME
mkdir -p "$R"
rm -rf /tmp/head
cp -r .snap/head /tmp/head
cd /tmp/head || exit 1
export PYTHONPATH=/tmp/site:/tmp/head
save() { tar czf "$OUT/results_$NAME.tgz" -C "$R" . 2>/dev/null; }
# the end of a script's pytest step: its summary line and failures
test_summary() {
  grep -E "passed|failed" "$1" | tail -1 | cut -c1-200
  grep -E "^FAILED|^ERROR" "$1" | head -8 | cut -c1-200
}
# the KDA prefill rows of $R/kda_prefill.json: times, speedups, errors and the given extra key prefixes
kda_prefill_rows() {
  python3 - "$R/kda_prefill.json" "$@" <<'PY'
import json
import sys

for r in json.load(open(sys.argv[1]))['rows']:
    print(r['shape'], {k: v for k, v in r.items() if k.startswith(('ours', 'fla_ms', 'fla_graph', 'speedup', 'err',
                                                                   *sys.argv[2:]))
                       or k.endswith(('pairs_kernel_ms', 'wy_kernel_ms', '_state_kernel_ms')) or 'error' in k})
PY
}
# the sparse MLA records of the given sparse_mla.json files: case, tile config, check, ms, TFLOP/s, % of copy
sparse_mla_rows() {
  python3 - "$@" <<'PY'
import json
import sys

for path in sys.argv[1:]:
    try:
        records = json.load(open(path))["records"]
    except (OSError, ValueError) as error:
        print(path, "missing:", error)
        continue
    for r in records:
        c = r.get("config")
        cfg = c if not isinstance(c, dict) else f"n{c['block_n']} s{c['num_stages']} w{c['num_warps']} h{c['block_h']}"
        print(r["case"], cfg, r.get("correct"), round(r.get("ms", 0), 3), round(r.get("TFLOPs", 0), 1),
              f"{100 * r.get('frac_copy', 0):.1f}%", r.get("error", "")[:80])
PY
}
# the decode / prefill results of the given bench_indexer.json files: case, options, check, ms, % of the ceiling,
# per-kernel us
indexer_rows() {
  python3 - "$@" <<'PY'
import json
import sys

for path in sys.argv[1:]:
    try:
        results = json.load(open(path))["results"]
    except (OSError, ValueError) as error:
        print(path, "missing:", error)
        continue
    for r in results:
        print(r.get("shape"), r.get("cache"), r.get("options"), r.get("ok"), round(r.get("ms", 0), 3),
              f"{100 * r.get('fraction', 0):.1f}%", r.get("kernels_us"), r.get("error", "")[:80])
PY
}
