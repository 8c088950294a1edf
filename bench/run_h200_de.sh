#!/usr/bin/env bash
# Fifth device call of 2026-12-04's third session: the whole GPU suite at the session's kernels (the FP8 dot reading
# its query scales per tile), indexer decode at 32K / 128K (select and chunked, MXFP8 with an MXFP8 q), then Nsight
# Compute over the kernels that miss their bandwidth targets (bench/profile_missed_targets.py), where ncu exists.
# usage: bash bench/run_h200_de.sh [SECONDS] (default 560).
. bench/h200.sh
. bench/h200_call.sh de ${1:-560}
export OMP_NUM_THREADS=1
timeout -s INT -k 15 170 python3 -m pytest -q -rfE -p no:cacheprovider -n 14 -m gpu tests > $R/gpu_all.log 2>&1
echo "== gpu tests rc=$? at $(( $(date +%s) - start )) s"; save
timeout 120 python3 bench/bench_indexer.py --decode-only --decode-kernels select,chunked \
  --contexts 32768,131072 --caches mxfp8 --out $R > $R/indexer.log 2>&1
echo "== indexer rc=$? at $(( $(date +%s) - start )) s"; save
save_caches
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
if [ -n "$NCU" ]; then
  timeout $(( $(left) - 10 )) "$NCU" --clock-control none --profile-from-start off --section SpeedOfLight \
    --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats \
    --section MemoryWorkloadAnalysis python3 bench/profile_missed_targets.py indexer,sparse_mla,kda,attnres \
    > $R/ncu.log 2>&1
  echo "== ncu rc=$? at $(( $(date +%s) - start )) s"; save
else
  echo "== no ncu on this machine"
fi
test_summary $R/gpu_all.log
grep -E "^decode|ERROR" $R/indexer.log | cut -c1-150
python3 - <<'PY'
import json
for r in json.load(open("/tmp/results_de/bench_indexer.json"))["results"]:
    if "kernels_us" in r:
        print(r["shape"][:22], r["options"].get("decode_kernel"), {k[:18]: round(v) for k, v in r["kernels_us"].items()})
PY
grep -E "^  [a-z_]+.*\(|Duration|Memory Throughput|DRAM Throughput|Achieved Occupancy|Registers Per|Theoretical Occ" $R/ncu.log 2>/dev/null | head -90 | cut -c1-120
