#!/usr/bin/env bash
# Thirteenth session of 2026-12-05: issue 4's bench in one run at the session's final code, every case checked
# against the reference before it is timed:
# 1. paged indexer decode, B64, 8K / 32K / 128K keys, HI 32 / 64, DI 128, MXFP8 and BF16 caches, and indexer prefill
#    T 32768, and the 2 / 4 query-token verify rows at 32K (bench_indexer.py, select kernel: the op's default);
# 2. sparse MLA decode, B64, H128 / H64, top-2048, FP8 and BF16 caches (bench_sparse_mla.py --quick-decode --gluon:
#    the Gluon kernel the op runs on Hopper beside the Triton kernel exported engines keep);
# 3. sparse MLA prefill T 32768, H128, top-2048 (the FP8 cache also through the op's BF16 copy).
# usage: bash bench/run_h200_oe.sh [SECONDS] (default 420).
. bench/h200.sh
. bench/h200_call.sh oe ${1:-420}
export OMP_NUM_THREADS=1
issue4_bench
save_caches
indexer_rows $R/indexer/bench_indexer.json 2>/dev/null | cut -c1-160
sparse_mla_rows $R/mla_decode/sparse_mla.json 2>/dev/null | grep -E "default|gluon" | cut -c1-160
sparse_mla_rows $R/mla_prefill/sparse_mla.json 2>/dev/null | grep "prefill T32768 H128" | cut -c1-160
