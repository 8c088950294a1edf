#!/usr/bin/env bash
# Seventeenth session of 2026-12-05 (written after the device time ran out; for the next session): two split-combine
# candidates against main in one call, each run from its own copy of the tree:
#   cand1 = commit 6583d10: the combine loads up to 4 splits' rows at once, the first step with the log-sum-exps;
#   cand2 = commit 1a057e8 (reverted on main after it; branch cand/combine-pdl-late): cand1, launched under PDL, which the Gluon decode triggers
#           after its key loop (dependent_launch's LATE).
# Their combine and Gluon GPU tests, the decode kernel times (CUPTI, graph replay) of all three twice in turn, then
# the quick decode bench of each.
# Before the call:
#   for c in 6583d10:cand1 1a057e8:cand2; do rm -rf .snap/${c#*:} && mkdir -p .snap/${c#*:} &&
#     git archive ${c%:*} dayzero bench tests ':!bench/results' | tar -x -C .snap/${c#*:}; done
# (3.2 MB a tree without bench/results; with the checkout's 6 MB, .snap/head's 7 and .whl's 3, two 15 MiB parts of
# .tcache fit the 64 MiB carried, three do not: a cut archive seeds the cache with what it holds)
# usage: bash bench/run_h200_rf.sh [SECONDS] (default 560); carry .whl, .snap and .tcache.
. bench/h200.sh
rm -rf /tmp/cand1 /tmp/cand2 && cp -r .snap/cand1 /tmp/cand1 && cp -r .snap/cand2 /tmp/cand2
. bench/h200_call.sh rf ${1:-560}
export OMP_NUM_THREADS=1
in_tree() { local tree=$1; shift; (cd $tree && PYTHONPATH=/tmp/site:$tree "$@"); }
for c in cand1 cand2; do
  in_tree /tmp/$c timeout -s INT -k 15 100 python3 -m pytest -q -rfE -p no:cacheprovider -n 6 -m gpu \
    tests/plugins/test_sparse_mla_combine.py tests/plugins/test_sparse_mla_gluon.py > $R/gpu_tests_$c.log 2>&1
  echo "== $c gpu tests rc=$? at $(( $(date +%s) - start )) s"; test_summary $R/gpu_tests_$c.log; save
done
for pass in 1 2; do
  for tree in /tmp/head /tmp/cand1 /tmp/cand2; do
    echo "# $tree" >> $R/decode_kernels.log
    in_tree $tree timeout 40 python3 bench/sparse_mla_decode_kernels.py >> $R/decode_kernels.log 2>&1
  done
done
echo "== decode kernels at $(( $(date +%s) - start )) s"; save
for tree in /tmp/head /tmp/cand1 /tmp/cand2; do
  name=$(basename $tree)
  in_tree $tree timeout $(( $(left) / 2 < 80 ? $(left) / 2 : 80 )) python3 bench/bench_sparse_mla.py --quick-decode \
    --gluon --out $R/$name > $R/quick_$name.log 2>&1
  echo "== quick decode $name rc=$? at $(( $(date +%s) - start )) s"; save
done
grep -E "^#|H64" $R/decode_kernels.log | cut -c1-200
for name in head cand1 cand2; do
  echo "# $name"; sparse_mla_rows $R/$name/sparse_mla.json 2>/dev/null | grep -E "gluon " | cut -c1-160
done
