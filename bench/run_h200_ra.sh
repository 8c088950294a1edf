#!/usr/bin/env bash
# Seventeenth session of 2026-12-05: issue 4's quick sparse MLA decode bench on the final Gluon defaults, then the
# whole GPU suite (run qb stopped at its limit beside 14 workers, two MXFP4 cases out of memory) on 10 workers; then
# the Triton cache comes back.
# usage: bash bench/run_h200_ra.sh [SECONDS] (default 560).
. bench/h200.sh
. bench/h200_call.sh ra ${1:-560}
export OMP_NUM_THREADS=1
timeout 100 python3 bench/bench_sparse_mla.py --quick-decode --gluon --out $R/mla_gluon > $R/mla_gluon.log 2>&1
echo "== sparse mla --gluon rc=$? at $(( $(date +%s) - start )) s"; save
sparse_mla_rows $R/mla_gluon/sparse_mla.json 2>/dev/null | grep -E "gluon" | cut -c1-160
# run rb's process mode gave other texts than the engine's and one first text after 9.7 s at 16 requests: which
# texts differ, from which token, and each request's first-text time (in the JSON)
timeout 130 python3 bench/bench_server.py --h200-slice --requests 16 --prompt-tokens 512 --max-tokens 128 --out $R \
  > $R/server_r16.log 2>&1
echo "== server r16 rc=$? at $(( $(date +%s) - start )) s"; save
tail -n 4 $R/server_r16.log | cut -c1-250
python3 -c "import json; [print(r['mode'], r.get('first_text_s')) for r in json.load(open('$R/bench_server_h200_slice_r16.json'))['rows']]"
timeout -s INT -k 15 $(( $(left) - 40 )) python3 -m pytest -q -rfE -p no:cacheprovider -n 10 -m gpu tests \
  > $R/gpu_all.log 2>&1
echo "== gpu suite rc=$? at $(( $(date +%s) - start )) s"; test_summary $R/gpu_all.log; save
grep -E "slowest|^[0-9.]+s " $R/gpu_all.log | head -5
save_caches
