#!/usr/bin/env bash
# Eighteenth session of 2026-12-05: issue 4's sparse MLA bench on the machine lent (with run sa, issue 4's bench in two
# calls), every case checked against the reference first, then every GPU test on 6 workers for the time left:
# 1. sparse MLA decode, B64, H128 / H64, top-2048, FP8 and BF16 caches (--quick-decode --gluon: the Gluon kernel the
#    op runs on Hopper beside the Triton kernel exported engines keep);
# 2. sparse MLA prefill T 32768, H128, top-2048;
# 3. pytest -m gpu -n 6 (run ra's 10 workers ran five MXFP4 / Gluon tests out of memory).
# usage: bash bench/run_h200_sb.sh [SECONDS] (default 560); carry .whl, .snap and .tcache.
. bench/h200.sh
. bench/h200_call.sh sb ${1:-560}
export OMP_NUM_THREADS=1
timeout 110 python3 bench/bench_sparse_mla.py --quick-decode --gluon --out $R/mla_decode > $R/mla_decode.log 2>&1
echo "== sparse mla decode rc=$? at $(( $(date +%s) - start )) s"; save
timeout 120 python3 bench/bench_sparse_mla.py --prefill-only --no-sweep --out $R/mla_prefill > $R/mla_prefill.log 2>&1
echo "== sparse mla prefill rc=$? at $(( $(date +%s) - start )) s"; save
timeout -s INT -k 15 $(left) python3 -m pytest -q -rfE -p no:cacheprovider -n 6 -m gpu tests > $R/gpu_all.log 2>&1
echo "== gpu tests rc=$? at $(( $(date +%s) - start )) s"; test_summary $R/gpu_all.log; save
sparse_mla_rows $R/mla_decode/sparse_mla.json 2>/dev/null | grep -E "default|gluon" | cut -c1-160
sparse_mla_rows $R/mla_prefill/sparse_mla.json 2>/dev/null | grep "prefill T32768 H128" | cut -c1-160
