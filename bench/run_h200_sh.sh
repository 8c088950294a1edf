#!/usr/bin/env bash
# Written in the eighteenth session of 2026-12-05 for a later one: speculative decoding on the GPU, never run there
# (bench/README "Not yet run"). The h200-slice's eager engine with CUDA-graph decode, 16 requests of a repeated random
# phrase (256 prompt tokens, 64 generated), without drafts and with 3 prompt-lookup drafts a step
# (bench/bench_spec_decode.py): wall time, tokens/s, steps, drafted / accepted tokens, and whether each request's
# greedy tokens equal those decoded without drafts. Random weights rarely continue the phrase, so the acceptance
# (and any speed-up) says little about a trained model; what it checks is that verify steps of 1 + d rows a sequence
# run in the decode graphs and keep the tokens.
# usage: bash bench/run_h200_sh.sh [SECONDS] (default 300); carry .whl, .snap and .tcache.
. bench/h200.sh
. bench/h200_call.sh sh ${1:-300}
export OMP_NUM_THREADS=1
timeout $(left) python3 bench/bench_spec_decode.py --h200-slice --requests 16 --prompt-tokens 256 --max-tokens 64 \
  --num-draft 3 --margins --out $R > $R/spec_decode.log 2>&1
echo "== spec decode rc=$? at $(( $(date +%s) - start )) s"; save
grep -v "^\[" $R/spec_decode.log | tail -22 | cut -c1-200
