#!/usr/bin/env bash
# Seventeenth session of 2026-12-05: the Gluon decode's two program-start scans loading together (commit 3d2112d)
# against run ra's code (commit 01b504f, carried as .snap/prev): its GPU tests, kernel times of both twice in turn,
# issue 4's quick decode bench.
# usage: bash bench/run_h200_re.sh [SECONDS] (default 300).
. bench/h200.sh
rm -rf /tmp/prev && cp -r .snap/prev /tmp/prev
. bench/h200_call.sh re ${1:-300}
export OMP_NUM_THREADS=1
timeout -s INT -k 15 90 python3 -m pytest -q -rfE -p no:cacheprovider -n 8 -m gpu tests/plugins/test_sparse_mla_gluon.py \
  > $R/gpu_tests.log 2>&1
echo "== gluon gpu tests rc=$? at $(( $(date +%s) - start )) s"; test_summary $R/gpu_tests.log; save
for pass in 1 2; do
  timeout 40 python3 bench/sparse_mla_decode_kernels.py >> $R/decode_kernels.log 2>&1
  echo "# run ra's code (01b504f)" >> $R/decode_kernels.log
  (cd /tmp/prev && PYTHONPATH=/tmp/site:/tmp/prev timeout 40 python3 bench/sparse_mla_decode_kernels.py) \
    >> $R/decode_kernels.log 2>&1
done
echo "== decode kernels at $(( $(date +%s) - start )) s"; save
timeout $(left) python3 bench/bench_sparse_mla.py --quick-decode --gluon --out $R/mla_gluon > $R/mla_gluon.log 2>&1
echo "== sparse mla --gluon rc=$? at $(( $(date +%s) - start )) s"; save
grep "H64" $R/decode_kernels.log | cut -c1-200
sparse_mla_rows $R/mla_gluon/sparse_mla.json 2>/dev/null | grep -E "gluon" | cut -c1-160
