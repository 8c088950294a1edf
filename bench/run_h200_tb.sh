#!/usr/bin/env bash
# Nineteenth session of 2026-12-05: the staged bf16 partials are the Gluon sparse decode's default since run ta, so
# 1. every GPU test on 6 workers (run sb's count) at that default;
# 2. speculative decoding on the GPU for the first time (run_h200_sh.sh's step: the h200-slice, CUDA-graph decode,
#    16 requests of 256 + 64 tokens, without drafts and with 3 prompt-lookup drafts, tokens compared).
# 3. the split combine with 1 (the default), 2 and 4 (token, head) rows a program (launcher option `combine_rows`),
#    kernel times (CUPTI, graph replay), twice in turn.
# usage: bash bench/run_h200_tb.sh [SECONDS] (default 560); carry .whl, .snap and .tcache.
. bench/h200.sh
. bench/h200_call.sh tb ${1:-560}
export OMP_NUM_THREADS=1
timeout -s INT -k 15 $(( $(left) - 270 )) python3 -m pytest -q -rfE -p no:cacheprovider -n 6 -m gpu tests \
  > $R/gpu_all.log 2>&1
echo "== gpu tests rc=$? at $(( $(date +%s) - start )) s"; test_summary $R/gpu_all.log; save
for pass in 1 2; do
  for options in '{}' '{"combine_rows": 2}' '{"combine_rows": 4}'; do
    echo "# $options" >> $R/decode_kernels.log
    timeout 40 python3 bench/sparse_mla_decode_kernels.py --options "$options" >> $R/decode_kernels.log 2>&1
  done
  [ $(left) -lt 200 ] && break
done
echo "== decode kernels at $(( $(date +%s) - start )) s"; save
timeout $(left) python3 bench/bench_spec_decode.py --h200-slice --requests 16 --prompt-tokens 256 --max-tokens 64 \
  --num-draft 3 --out $R > $R/spec_decode.log 2>&1
echo "== spec decode rc=$? at $(( $(date +%s) - start )) s"; save
tail -6 $R/spec_decode.log | cut -c1-200
grep -E "^#|H64" $R/decode_kernels.log | cut -c1-200
