#!/usr/bin/env bash
# Tenth session of 2026-12-04 (no device machine was lent; written for the next one): the OpenAI server's cost on
# the H200. bench_server.py on the h200-slice (8 layers at full width, random bf16 weights built on the GPU, FP8
# latent + MXFP8 index caches, CUDA-graph decode): the same greedy requests through the engine and through the HTTP
# API (streamed), 16 and 64 requests of 512 + 128 tokens. Needs starlette, uvicorn, httpx and their dependencies
# in .whl/ (pip download --no-deps starlette uvicorn httpx httpcore h11 anyio idna certifi sniffio click
# prometheus_client).
# usage: bash bench/run_h200_na.sh [SECONDS] (default 580).
. bench/h200.sh
. bench/h200_call.sh na ${1:-580}
export OMP_NUM_THREADS=1
for requests in 16 64; do
  timeout $([ $requests = 16 ] && echo 120 || echo 150) python3 bench/bench_server.py --h200-slice --requests $requests --prompt-tokens 512 \
    --max-tokens 128 --out $R > $R/server_r$requests.log 2>&1
  echo "== server r$requests rc=$? at $(( $(date +%s) - start )) s"; save
done
# runtime decode rates at B 1 / 16 / 64 with and without CUDA graphs (the tenth session's engine takes one argmax a
# step for greedy rows, where each row synchronized on its own): against runs e / fe
timeout 150 python3 bench/bench_runtime.py --out $R/runtime --decode-steps 32 --ttft-tokens 8192 \
  > $R/runtime.log 2>&1
echo "== runtime rc=$? at $(( $(date +%s) - start )) s"; save
# prefix caching (eleventh session): TTFT of a 16K prompt cold, repeated, and sharing all but its last 256 tokens,
# with and without --prefix-caching (h200-slice, 4 layers, bf16)
timeout 120 python3 bench/bench_prefix_cache.py --out $R/prefix_cache > $R/prefix_cache.log 2>&1
echo "== prefix cache rc=$? at $(( $(date +%s) - start )) s"; save
# dayzero bench on the embedded tiny model (created on the fly): a smoke run of the command on the GPU
DAYZERO_CACHE_DIR=/tmp/dz_home timeout $(left) python3 -c "from dayzero.cli import main; main()" bench --device cuda \
  --dtype bfloat16 --batch 1 --batch 16 --prompt-tokens 256 --output-tokens 32 --json $R/dayzero_bench.json \
  > $R/dayzero_bench.log 2>&1
echo "== dayzero bench rc=$? at $(( $(date +%s) - start )) s"; save
save_caches
tail -n 4 $R/dayzero_bench.log | cut -c1-200
tail -n 4 $R/server_r16.log $R/server_r64.log | cut -c1-200
