#!/usr/bin/env bash
# First device call of 2026-12-04's fifth session: the KDA decode kernels after the paired reduction (<S', k> and
# <S', q> as one pair; o = q^T S' + (q . k) delta), the state stored before the output, and the write slot picked in
# registers (commit 623e3f2). The KDA recurrent GPU tests; the quick bench on this commit and on the one before
# (.snap/old, carried), alternated twice, so the two builds meet the same machine; then --focus on this commit.
# usage: bash bench/run_h200_fa.sh [SECONDS] (default 420).
. bench/h200.sh
. bench/h200_call.sh fa ${1:-420}
export OMP_NUM_THREADS=1
timeout -s INT -k 15 150 python3 -m pytest -q -rfE -p no:cacheprovider -n 8 -m gpu tests/plugins/test_kda_recurrent_kernel.py > $R/gpu_kda.log 2>&1
echo "== gpu kda tests rc=$? at $(( $(date +%s) - start )) s"; save
OLD=$OLDPWD/.snap/old
for pass in 1 2; do
  timeout 100 python3 bench/bench_kda_decode.py --quick --out $R/new$pass > $R/kda_new$pass.log 2>&1
  echo "== new quick $pass rc=$? at $(( $(date +%s) - start )) s"; save
  (cd $OLD && PYTHONPATH=/tmp/site:$OLD timeout 100 python3 bench/bench_kda_decode.py --quick --out $R/old$pass > $R/kda_old$pass.log 2>&1)
  echo "== old quick $pass rc=$? at $(( $(date +%s) - start )) s"; save
done
timeout $(( $(left) - 5 )) python3 bench/bench_kda_decode.py --focus --out $R/focus > $R/kda_focus.log 2>&1
echo "== focus rc=$? at $(( $(date +%s) - start )) s"; save
save_caches
test_summary $R/gpu_kda.log
for f in new1 old1 new2 old2; do echo "-- $f"; grep -E "^B(1|64|256) " $R/kda_$f.log | grep -v bv16_w1 | cut -c1-120; done
grep -E "^B(64|256)" $R/kda_focus.log | cut -c1-110
