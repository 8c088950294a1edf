#!/usr/bin/env bash
# Nineteenth session of 2026-12-05: the staged bf16 partials (launcher option `staged_partials`) with the combine on
# the warps that keep its sum over splits in registers (run sg: 56.5 us attention but 22.0 us combine on 4 warps), then
# issue 4's bench in the same call (run oe's steps):
# 1. the Gluon sparse suite and the combine's GPU tests;
# 2. sparse decode kernel times (CUPTI, graph replay), the default against staged partials, twice in turn;
# 3. indexer decode and prefill (bench_indexer.py), the quick sparse decode bench with the gluon and
#    gluon-staged-partials configs, sparse MLA prefill T 32768 H128; every case checked against the reference first.
# usage: bash bench/run_h200_ta.sh [SECONDS] (default 580); carry .whl, .snap and .tcache.
. bench/h200.sh
. bench/h200_call.sh ta ${1:-580}
export OMP_NUM_THREADS=1
sparse_gpu_tests 120
decode_kernel_passes '{}' '{"staged_partials": true}'
quick_decode_bench mla_decode 110
timeout 170 python3 bench/bench_indexer.py --out $R/indexer > $R/indexer.log 2>&1
echo "== indexer rc=$? at $(( $(date +%s) - start )) s"; save
timeout $(left) python3 bench/bench_sparse_mla.py --prefill-only --no-sweep --out $R/mla_prefill > $R/mla_prefill.log 2>&1
echo "== sparse mla prefill rc=$? at $(( $(date +%s) - start )) s"; save
save_caches
grep -E "^#|H64" $R/decode_kernels.log | cut -c1-200
sparse_mla_rows $R/mla_decode/sparse_mla.json 2>/dev/null | grep -E "gluon" | cut -c1-160
indexer_rows $R/indexer/bench_indexer.json 2>/dev/null | cut -c1-160
sparse_mla_rows $R/mla_prefill/sparse_mla.json 2>/dev/null | grep "prefill T32768 H128" | cut -c1-160
