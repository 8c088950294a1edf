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
# one line per result of the given JSON files (bench/result_rows.py): KDA prefill rows of $R/kda_prefill.json with
# the given extra key prefixes, sparse MLA records, indexer results
kda_prefill_rows() { python3 -m bench.result_rows kda_prefill "$R/kda_prefill.json" "$@"; }
sparse_mla_rows() { python3 -m bench.result_rows sparse_mla "$@"; }
indexer_rows() { python3 -m bench.result_rows indexer "$@"; }
# one indexer decode bench into $R/NAME (bench/bench_indexer.py, MXFP8 query and cache):
# indexer_decode NAME BATCHES CONTEXTS HEADS [OPTIONS_JSON] [DECODE_KERNELS] [SECONDS (120)]
indexer_decode() {
  timeout ${7:-120} python3 bench/bench_indexer.py --decode-only --batch $2 --contexts $3 --heads $4 --caches mxfp8 \
    --decode-options "${5:-{\}}" --decode-kernels ${6:-select} --out $R/$1 > $R/indexer_$1.log 2>&1
  echo "== indexer $1 rc=$? at $(( $(date +%s) - start )) s"; save
}
# the indexer kernels' GPU tests (the chunked path's too: it shares the merge and key loops) into $R/gpu_indexer.log,
# then their summary
indexer_gpu_tests() {
  timeout -s INT -k 15 120 python3 -m pytest -q -rfE -p no:cacheprovider -n 8 -m gpu \
    tests/plugins/test_indexer_select.py tests/plugins/test_indexer_kernel.py tests/plugins/test_indexer_words_keys.py \
    tests/plugins/test_indexer_chunked.py > $R/gpu_indexer.log 2>&1
  echo "== indexer gpu tests rc=$? at $(( $(date +%s) - start )) s"; test_summary $R/gpu_indexer.log; save
}
# one kernel launch under Nsight Compute, summarized into $R: details_NAME.txt (sections), source_NAME.csv (SASS with
# stall samples) and hotspots_NAME.txt (bench/ncu_source_hotspots.py); the report itself is not kept.
# ncu_profile NAME KERNEL_REGEX LAUNCH_SKIP SECONDS CASES (bench/profile_missed_targets.py's)
ncu_profile() {
  local NCU
  NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
  timeout $4 "$NCU" --clock-control none --profile-from-start off -k "regex:$2" --launch-skip $3 --launch-count 1 \
    --section WarpStateStats --section SourceCounters --section LaunchStats --section Occupancy \
    --section SpeedOfLight --section MemoryWorkloadAnalysis \
    --export $R/$1 --force-overwrite python3 bench/profile_missed_targets.py $5 > $R/ncu_$1.log 2>&1
  echo "== ncu $1 rc=$? at $(( $(date +%s) - start )) s"
  "$NCU" --import $R/$1.ncu-rep --page source --print-source sass --csv > $R/source_$1.csv 2>$R/source_$1.err
  "$NCU" --import $R/$1.ncu-rep --page details > $R/details_$1.txt 2>&1
  python3 bench/ncu_source_hotspots.py $R/source_$1.csv 45 > $R/hotspots_$1.txt 2>&1
  rm -f $R/$1.ncu-rep; save
}
# compute-sanitizer racecheck of the Gluon decode's GPU tests that `-k` EXPR selects (where the tool is installed)
gluon_racecheck() {
  command -v compute-sanitizer >/dev/null 2>&1 || return 0
  timeout -s INT -k 15 90 compute-sanitizer --tool racecheck --print-limit 20 python3 -m pytest -q -p no:cacheprovider \
    -m gpu tests/plugins/test_sparse_mla_gluon.py -k "$1" > $R/racecheck.log 2>&1
  echo "== racecheck rc=$? at $(( $(date +%s) - start )) s"; grep -E "RACECHECK SUMMARY|hazard|passed|failed" \
    $R/racecheck.log | head -8 | cut -c1-200; save
}
# the quick sparse MLA decode bench with the Gluon configs (bench_sparse_mla.py --quick-decode --gluon) into
# $R/mla_gluon for the seconds left, then the Triton cache saved and the default and Gluon rows printed
gluon_decode_bench() {
  quick_decode_bench mla_gluon $(left)
  save_caches
  sparse_mla_rows $R/mla_gluon/sparse_mla.json 2>/dev/null | grep -E "default|gluon" | cut -c1-160
}
# the kernels above 1.5 us of each case in $R/decode_kernels.log (bench/sparse_mla_decode_kernels.py's lines)
decode_kernel_rows() {
  python3 - $R/decode_kernels.log <<'PY'
import re, sys
for line in open(sys.argv[1]):
    if line.startswith("B64"):
        head, rest = line.split(": ", 1)
        kept = [p for p in rest.strip().split(", ") if re.search(r" ([\d.]+)$", p) and float(p.rsplit(" ", 1)[1]) > 1.5]
        print(head, "|", "; ".join(k[-40:] for k in kept))
PY
}
# the Gluon sparse suite and the combine's GPU tests into $R/gpu_tests.log (at most SECONDS), then their summary:
# sparse_gpu_tests SECONDS
sparse_gpu_tests() {
  timeout -s INT -k 15 $1 python3 -m pytest -q -rfE -p no:cacheprovider -n 6 -m gpu \
    tests/plugins/test_sparse_mla_gluon.py tests/plugins/test_sparse_mla_combine.py > $R/gpu_tests.log 2>&1
  echo "== gpu tests rc=$? at $(( $(date +%s) - start )) s"; test_summary $R/gpu_tests.log; save
}
# sparse decode kernel times (bench/sparse_mla_decode_kernels.py) for each options JSON given, twice in turn, into
# $R/decode_kernels.log: decode_kernel_passes '{}' '{"pdl": true}'
decode_kernel_passes() {
  local pass options
  for pass in 1 2; do
    for options in "$@"; do
      echo "# $options" >> $R/decode_kernels.log
      timeout 40 python3 bench/sparse_mla_decode_kernels.py --options "$options" >> $R/decode_kernels.log 2>&1
    done
  done
  echo "== decode kernels at $(( $(date +%s) - start )) s"; save
}
# issue 4's bench: indexer decode and prefill, the quick sparse decode with the Gluon configs, sparse MLA prefill
# T 32768 H128 (at most SECONDS, default the seconds left), into $R/{indexer,mla_decode,mla_prefill}: issue4_bench [SECONDS]
issue4_bench() {
  timeout 170 python3 bench/bench_indexer.py --out $R/indexer > $R/indexer.log 2>&1
  echo "== indexer rc=$? at $(( $(date +%s) - start )) s"; save
  quick_decode_bench mla_decode 110
  timeout ${1:-$(left)} python3 bench/bench_sparse_mla.py --prefill-only --no-sweep --out $R/mla_prefill \
    > $R/mla_prefill.log 2>&1
  echo "== sparse mla prefill rc=$? at $(( $(date +%s) - start )) s"; save
}
# the quick sparse MLA decode bench with the Gluon configs (bench_sparse_mla.py --quick-decode --gluon) into $R/NAME
# for at most SECONDS: quick_decode_bench NAME SECONDS
quick_decode_bench() {
  timeout $2 python3 bench/bench_sparse_mla.py --quick-decode --gluon --out $R/$1 > $R/$1.log 2>&1
  echo "== sparse mla quick decode rc=$? at $(( $(date +%s) - start )) s"; save
}
# the late-PDL combine against plain in 50-call graphs (bench/sparse_mla_pdl_replay.py) into $R/pdl_replay.log
pdl_replay() {
  timeout 60 python3 bench/sparse_mla_pdl_replay.py > $R/pdl_replay.log 2>&1
  echo "== pdl replay rc=$? at $(( $(date +%s) - start )) s"; save
}
# speculative decoding (3 drafts) on the whole h200-slice with --margins, for the seconds left, into $R/spec and
# $R/spec_decode.log (more than an H100's memory)
spec_decode_slice() {
  timeout $(left) python3 bench/bench_spec_decode.py --h200-slice --requests 16 --prompt-tokens 256 --max-tokens 64 \
    --num-draft 3 --margins --out $R/spec > $R/spec_decode.log 2>&1
  echo "== spec decode rc=$? at $(( $(date +%s) - start )) s"; save
}
# the indexer kernels' tests (GPU-marked or not) into $R/gpu_indexer_all.log, then the decode indexer's merge on 16
# warps against 8 (the default since run ti), B64 MXFP8 twice in turn, then B1 / B8 HI 64 at 32K and 128K keys (16-32
# splits a row) folded by one program in sequence (on 8 and on 16 warps) and in a tree of programs (merge_tree), into
# $R/{merge16,merge8,small}*. Run ti ran it at commit a4be4c2 with merge_compact instead of the tree (branch
# cand/merge-compact).
merge_candidates() {
  timeout -s INT -k 15 150 python3 -m pytest -q -rfE -p no:cacheprovider -n 8 -m "gpu or not gpu" \
    tests/plugins/test_indexer_select.py tests/plugins/test_indexer_kernel.py tests/plugins/test_indexer_chunked.py \
    > $R/gpu_indexer_all.log 2>&1
  echo "== indexer tests rc=$? at $(( $(date +%s) - start )) s"; test_summary $R/gpu_indexer_all.log; save
  local pass
  for pass in 1 2; do
    indexer_decode merge16_$pass 64 8192,32768 32,64 '{"merge_warps": 16}'
    indexer_decode merge8_$pass 64 8192,32768 32,64 '{"merge_warps": 8}'
  done
  indexer_decode small_sequence 1,8 32768,131072 64 '{"merge_tree": false}'
  indexer_decode small_tree 1,8 32768,131072 64 '{"merge_tree": true}'
  indexer_decode small_sequence16 1,8 32768,131072 64 '{"merge_tree": false, "merge_warps": 16}'
}
# one line per indexer result of the merge candidates' runs
merge_candidate_rows() {
  local f
  for f in $R/{merge,small}*/bench_indexer.json; do echo "# $f"; indexer_rows $f | cut -c1-260; done
}
