#!/usr/bin/env bash
# Nineteenth session of 2026-12-05, on the H200: run rf's late-PDL combine (the combine a dependent launch that may
# start once every attention program has left its key loop; on an H100, graph 0.080 against 0.081 ms) ported onto the
# staged bf16 partials, where graph replay is 3 us above kernel time at H64 BF16 (run ta); then speculative decoding on
# the whole h200-slice (too big for an H100, run tb).
# 1. the Gluon sparse suite and the combine's GPU tests (the bf16-pdl-combine loop among them);
# 2. kernel times (CUPTI, graph replay), default against {"pdl": true}, twice in turn;
# 3. the quick decode bench (gluon, gluon-pdl-combine), every case checked against the reference first;
# 4. bench_spec_decode.py --h200-slice --margins (run_h200_sh.sh's step) for the seconds left.
# usage: bash bench/run_h200_te.sh [SECONDS] (default 330); carry .whl, .snap and .tcache.
. bench/h200.sh
. bench/h200_call.sh te ${1:-330}
export OMP_NUM_THREADS=1
sparse_gpu_tests 90
decode_kernel_passes '{}' '{"pdl": true}'
quick_decode_bench mla_decode 80
timeout $(left) python3 bench/bench_spec_decode.py --h200-slice --requests 16 --prompt-tokens 256 --max-tokens 64 \
  --num-draft 3 --margins --out $R/spec > $R/spec_decode.log 2>&1
echo "== spec decode rc=$? at $(( $(date +%s) - start )) s"; save
grep -E "^#|H64" $R/decode_kernels.log | cut -c1-200
sparse_mla_rows $R/mla_decode/sparse_mla.json 2>/dev/null | grep -E "gluon" | cut -c1-160
grep -v "^\[" $R/spec_decode.log | tail -22 | cut -c1-200
