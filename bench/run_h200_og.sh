#!/usr/bin/env bash
# Fourteenth session of 2026-12-05 (no device machine was lent; written for the next one): `dayzero serve` with the
# HTTP server in a process of its own, on the H200. bench_server.py on the h200-slice (8 layers at full width, random
# bf16 weights, FP8 latent + MXFP8 index caches, CUDA-graph decode): the same greedy requests through the engine
# alone, through HTTP on a thread of the engine's process (what run na measured: 16-28% more wall time) and through
# HTTP in its own process; 16 and 64 requests of 512 + 128 tokens. Needs the server's wheels in .whl/ (run_h200_na.sh).
# usage: bash bench/run_h200_og.sh [SECONDS] (default 300).
. bench/h200.sh
. bench/h200_call.sh og ${1:-300}
export OMP_NUM_THREADS=1
for requests in 16 64; do
  timeout $([ $requests = 16 ] && echo 130 || echo 160) python3 bench/bench_server.py --h200-slice --requests $requests \
    --prompt-tokens 512 --max-tokens 128 --out $R > $R/server_r$requests.log 2>&1
  echo "== server r$requests rc=$? at $(( $(date +%s) - start )) s"; save
done
tail -n 5 $R/server_r16.log $R/server_r64.log | cut -c1-200
