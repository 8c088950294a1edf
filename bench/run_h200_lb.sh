#!/usr/bin/env bash
# Eighth session of 2026-12-04, second call. PDL as a mode (off / early / late: the next kernel may start once every
# program has started, or has finished its main loop), on by default (early) for latency-bound launches only; FP8
# sparse MLA tiles three stages deep by default. The whole GPU suite, then bench_pdl.py in the three modes, then the
# sparse MLA decode (quick) and prefill (T 32K, FP8 three and two stages deep).
# usage: bash bench/run_h200_lb.sh [SECONDS] (default 560).
. bench/h200.sh
. bench/h200_call.sh lb ${1:-560}
export OMP_NUM_THREADS=1
timeout -s INT -k 15 150 python3 -m pytest -q -rfE -p no:cacheprovider -n 14 -m gpu tests > $R/gpu_all.log 2>&1
echo "== gpu suite rc=$? at $(( $(date +%s) - start )) s"; test_summary $R/gpu_all.log; save
timeout 150 python3 bench/bench_pdl.py --out $R/pdl > $R/pdl.log 2>&1
echo "== bench_pdl rc=$? at $(( $(date +%s) - start )) s"; save
timeout 90 python3 bench/bench_sparse_mla.py --quick-decode --out $R/mla > $R/mla.log 2>&1
echo "== sparse mla decode rc=$? at $(( $(date +%s) - start )) s"; save
timeout $(left) python3 bench/bench_sparse_mla.py --prefill-only --no-sweep --prefill-tokens 32768 --out $R/mla_prefill \
  > $R/mla_prefill.log 2>&1
echo "== sparse mla prefill rc=$? at $(( $(date +%s) - start )) s"; save
tail -n 58 $R/pdl.log | cut -c1-150
sparse_mla_rows $R/mla/sparse_mla.json $R/mla_prefill/sparse_mla.json 2>/dev/null | cut -c1-160
