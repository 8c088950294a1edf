#!/usr/bin/env bash
# Written in the eighteenth session of 2026-12-05 for the next one: its two candidates, neither run on a GPU yet, in
# one call, each from its own copy of the tree:
#   cand1 = branch cand/staged-partials (c048a9b): the Gluon sparse decode's bf16 partials staged through shared memory;
#   cand2 = branch cand/gluon-indexer (b598b53): the decode indexer's split kernel in Gluon (decode_kernel "gluon").
# 1. each candidate's GPU tests (the Gluon sparse suite for cand1, the indexer kernel suite's Gluon cases for cand2);
# 2. sparse decode kernel times (CUPTI, graph replay) of main and cand1, twice in turn, and cand1's quick decode bench
#    (its gluon and gluon-staged-partials configs, every case checked against the reference first);
# 3. cand2's indexer bench, select against gluon, B64 MXFP8, 8K / 32K / 128K keys, HI 32 / 64 (checked first too).
# Before the call:
#   for c in c048a9b:cand1 b598b53:cand2; do rm -rf .snap/${c#*:} && mkdir -p .snap/${c#*:} &&
#     git archive ${c%:*} dayzero bench tests ':!bench/results' | tar -x -C .snap/${c#*:}; done
#   rm -rf .snap/head && mkdir -p .snap/head && git archive HEAD dayzero bench tests pyproject.toml | tar -x -C .snap/head
# usage: bash bench/run_h200_sg.sh [SECONDS] (default 560); carry .whl, .snap and .tcache.
. bench/h200.sh
rm -rf /tmp/cand1 /tmp/cand2 && cp -r .snap/cand1 /tmp/cand1 && cp -r .snap/cand2 /tmp/cand2
. bench/h200_call.sh sg ${1:-560}
export OMP_NUM_THREADS=1
in_tree() { local tree=$1; shift; (cd $tree && PYTHONPATH=/tmp/site:$tree "$@"); }
in_tree /tmp/cand1 timeout -s INT -k 15 120 python3 -m pytest -q -rfE -p no:cacheprovider -n 6 -m gpu \
  tests/plugins/test_sparse_mla_gluon.py tests/plugins/test_sparse_mla_combine.py > $R/gpu_tests_cand1.log 2>&1
echo "== cand1 gpu tests rc=$? at $(( $(date +%s) - start )) s"; test_summary $R/gpu_tests_cand1.log; save
in_tree /tmp/cand2 timeout -s INT -k 15 120 python3 -m pytest -q -rfE -x -p no:cacheprovider -m gpu \
  tests/plugins/test_indexer_kernel.py -k gluon > $R/gpu_tests_cand2.log 2>&1
echo "== cand2 gpu tests rc=$? at $(( $(date +%s) - start )) s"; test_summary $R/gpu_tests_cand2.log; save
for pass in 1 2; do
  echo "# main" >> $R/decode_kernels.log
  in_tree /tmp/head timeout 40 python3 bench/sparse_mla_decode_kernels.py >> $R/decode_kernels.log 2>&1
  echo "# cand1 staged_partials" >> $R/decode_kernels.log
  in_tree /tmp/cand1 timeout 40 python3 bench/sparse_mla_decode_kernels.py --options '{"staged_partials": true}' \
    >> $R/decode_kernels.log 2>&1
done
echo "== decode kernels at $(( $(date +%s) - start )) s"; save
in_tree /tmp/cand1 timeout 90 python3 bench/bench_sparse_mla.py --quick-decode --gluon --out $R/cand1 \
  > $R/quick_cand1.log 2>&1
echo "== quick decode cand1 rc=$? at $(( $(date +%s) - start )) s"; save
in_tree /tmp/cand2 timeout $(( $(left) < 150 ? $(left) : 150 )) python3 bench/bench_indexer.py --decode-only \
  --decode-kernels select,gluon --caches mxfp8 --contexts 8192,32768,131072 --out $R/cand2 > $R/indexer_cand2.log 2>&1
echo "== indexer cand2 rc=$? at $(( $(date +%s) - start )) s"; save
grep -E "^#|H64" $R/decode_kernels.log | cut -c1-200
sparse_mla_rows $R/cand1/sparse_mla.json 2>/dev/null | grep -E "gluon" | cut -c1-160
indexer_rows $R/cand2/bench_indexer.json 2>/dev/null | cut -c1-190
